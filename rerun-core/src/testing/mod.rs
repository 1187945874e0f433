//! Testing tools (feature `testing`): the store conformance suite and helpers for tests that
//! need a real server.

pub mod conformance;
pub mod harness;
pub mod proxy;

pub use harness::{
    check_converges, recovery_check, Check, Divergence, Duplicate, Effects, Mode, PointId,
    RecoveryCheck, Report, SafeToRerun, Verdict, WorldDir,
};

/// The URL of a test server from the environment variable `var`
/// (`RERUN_TEST_POSTGRES_URL`, `RERUN_TEST_REDIS_URL`).
///
/// When it is unset, prints a notice and returns `None`, so the test can return early as
/// skipped; with `RERUN_REQUIRE_SERVICES=1` a missing URL fails the test instead.
///
/// ```no_run
/// if let Some(url) = rerun_core::testing::service_url("RERUN_TEST_POSTGRES_URL") {
///     // … run against the server at `url`
/// # let _ = url;
/// }
/// ```
pub fn service_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url.trim().to_owned()),
        _ => {
            if services_required() {
                panic!("{var} is not set, and RERUN_REQUIRE_SERVICES=1 makes a missing server a failure");
            }
            eprintln!(
                "note: {var} is not set; skipping this test (set it, e.g. {var}=…, to run it)"
            );
            None
        }
    }
}

/// Whether `RERUN_REQUIRE_SERVICES=1` is set: tests fail instead of skipping when a server is
/// missing or unreachable.
pub fn services_required() -> bool {
    std::env::var("RERUN_REQUIRE_SERVICES").is_ok_and(|v| v == "1" || v == "true")
}
