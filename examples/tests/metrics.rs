//! The metrics example's endpoint, scraped over HTTP: rerun's series are there, with the calls
//! the example made.

#[test]
fn the_prometheus_endpoint_shows_rerun_s_series() {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let body =
        rerun_examples::metrics::run(dir.path(), &mut out, ([127, 0, 0, 1], 0).into()).unwrap();
    let line = |prefix: &str| {
        body.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{body}"))
            .to_owned()
    };
    assert!(line(r#"rerun_calls_total{scope="jobs.resize",outcome="ran"}"#).ends_with(" 3"));
    assert!(line(r#"rerun_calls_total{scope="jobs.resize",outcome="replayed"}"#).ends_with(" 1"));
    assert!(line(r#"rerun_calls_total{scope="jobs.resize",outcome="mismatch"}"#).ends_with(" 1"));
    line("rerun_call_duration_seconds");
    line(r#"rerun_store_op_duration_seconds"#);
}
