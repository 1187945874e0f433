//! Every example program exits 0 and tells the same story each time it runs.

use std::process::Command;

fn run(bin: &str) -> String {
    output_of(&mut Command::new(bin), bin)
}

/// What `cmd` (running `bin`) printed; it must exit 0.
fn output_of(cmd: &mut Command, bin: &str) -> String {
    let out = cmd.output().expect("the example starts");
    assert!(
        out.status.success(),
        "{bin} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn deterministic(bin: &str) -> String {
    let first = run(bin);
    assert_eq!(
        first,
        run(bin),
        "{bin} printed something else on its second run"
    );
    first
}

#[test]
fn quickstart() {
    let out = deterministic(env!("CARGO_BIN_EXE_quickstart"));
    assert!(out.contains("emails in ada's inbox: 1"), "{out}");
    assert!(out.contains("charges the bank made: 1"), "{out}");
    assert!(out.contains("refused:"), "{out}");
}

#[test]
fn webhook() {
    let out = deterministic(env!("CARGO_BIN_EXE_webhook"));
    assert!(
        out.contains("final balance of cus_ada: 3000 cents"),
        "{out}"
    );
    assert!(out.contains("-> 409"), "{out}");
}

#[test]
fn payment() {
    let out = deterministic(env!("CARGO_BIN_EXE_payment"));
    assert_eq!(
        out.matches("the card was charged 1 time(s)").count(),
        3,
        "{out}"
    );
}

#[test]
fn worker() {
    let out = deterministic(env!("CARGO_BIN_EXE_worker"));
    assert!(out.contains("worker 1 died halfway"), "{out}");
    assert!(
        out.contains("job 3: invoice #3 sent to alan (already sent before: replayed)"),
        "{out}"
    );
    for job in 1..=6 {
        assert!(out.contains(&format!("  job {job}: 1\n")), "{out}");
    }
}

#[test]
fn startup() {
    let out = deterministic(env!("CARGO_BIN_EXE_startup"));
    assert!(out.contains("the migration ran 1 time(s) in all"), "{out}");
}

#[cfg(feature = "http")]
#[test]
fn http() {
    let out = deterministic(env!("CARGO_BIN_EXE_http"));
    assert!(out.contains("charges the bank made: 2"), "{out}");
    assert!(out.contains("(Idempotent-Replayed: true)"), "{out}");
    assert!(
        out.contains("-> 409") && out.contains("-> 422") && out.contains("-> 400"),
        "{out}"
    );
}

/// The values of the services' URL variables `vars`, all set, for `what`; when one is unset,
/// a notice and `None` (the caller skips), or a failure under `RERUN_REQUIRE_SERVICES=1`.
#[cfg(feature = "orders")]
fn service_urls<const N: usize>(vars: [&str; N], what: &str) -> Option<[String; N]> {
    let urls = vars.map(|var| std::env::var(var).ok());
    if urls.iter().all(Option::is_some) {
        return Some(urls.map(Option::unwrap_or_default));
    }
    let unset: Vec<&str> = vars
        .iter()
        .zip(&urls)
        .filter(|(_, url)| url.is_none())
        .map(|(var, _)| *var)
        .collect();
    assert!(
        !matches!(
            std::env::var("RERUN_REQUIRE_SERVICES").as_deref(),
            Ok("1" | "true")
        ),
        "RERUN_REQUIRE_SERVICES=1 but {} unset (needed by {what})",
        unset.join(" and ")
    );
    eprintln!("note: set {} to run {what}; skipped", vars.join(" and "));
    None
}

/// The order-events examples need PostgreSQL and their broker: they run when the tests' URLs
/// are set (and are handed to the example), and skip with a notice otherwise, unless
/// `RERUN_REQUIRE_SERVICES=1`.
#[cfg(feature = "orders")]
fn orders(bin: &str, broker_var: &str, example_var: &str) {
    let Some([pg, broker]) = service_urls(["RERUN_TEST_POSTGRES_URL", broker_var], bin) else {
        return;
    };
    let run_with = || {
        output_of(
            Command::new(bin)
                .env("RERUN_EXAMPLE_POSTGRES_URL", &pg)
                .env(example_var, &broker),
            bin,
        )
    };
    let out = run_with();
    assert_eq!(
        out,
        run_with(),
        "{bin} printed something else on its second run"
    );
    assert!(out.contains("4 handled, 1 replayed"), "{out}");
    for order in ["o-1", "o-2", "o-3", "o-4"] {
        assert!(out.contains(order), "{out}");
    }
    assert_eq!(out.matches(": 1 receipt(s)").count(), 4, "{out}");
}

#[cfg(feature = "orders")]
#[test]
fn orders_nats() {
    orders(
        env!("CARGO_BIN_EXE_orders_nats"),
        "RERUN_TEST_NATS_URL",
        "RERUN_EXAMPLE_NATS_URL",
    );
}

#[cfg(feature = "orders")]
#[test]
fn orders_amqp() {
    orders(
        env!("CARGO_BIN_EXE_orders_amqp"),
        "RERUN_TEST_AMQP_URL",
        "RERUN_EXAMPLE_AMQP_URL",
    );
}

/// An `amqps://` URL takes the example into TLS: against the test broker, which speaks plain
/// AMQP, it fails with the client's error, and neither panics nor hangs. (With lapin's default
/// TLS, aws-lc, beside async-nats' ring, rustls refused to choose between two crypto libraries:
/// a panic in the client's I/O thread, and the connection waited for ever.)
#[cfg(feature = "orders")]
#[test]
fn orders_amqp_over_tls_fails_with_an_error() {
    let Some([broker]) = service_urls(["RERUN_TEST_AMQP_URL"], "the amqps:// check") else {
        return;
    };
    let Some(rest) = broker.strip_prefix("amqp://") else {
        panic!("RERUN_TEST_AMQP_URL is not an amqp:// URL: {broker}");
    };
    let url = format!("amqps://{rest}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_orders_amqp"))
        .env("RERUN_EXAMPLE_AMQP_URL", &url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the example starts");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child
        .try_wait()
        .expect("the example can be waited for")
        .is_none()
    {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("the example is reaped");
            panic!(
                "orders_amqp still connecting to {url} after 60 s:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("the example is reaped");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "orders_amqp connected over TLS to a plain broker?\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains(&format!("RabbitMQ: connecting to {url}")),
        "{stderr}"
    );
}
