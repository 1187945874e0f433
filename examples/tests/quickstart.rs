//! The quickstart sets the process-wide store, so it runs in its own test binary.

use rerun_examples::quickstart;

#[test]
fn quickstart_runs_each_body_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let report = quickstart::run(dir.path(), &mut out).unwrap();
    assert_eq!(
        report,
        quickstart::Report {
            emails_sent: 1,
            charges: 1,
            forged_refused: true
        },
        "{}",
        String::from_utf8_lossy(&out)
    );
}
