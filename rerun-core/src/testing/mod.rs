//! Testing tools (feature `testing`): the store conformance suite and helpers for tests that
//! need a real server.

pub mod conformance;
mod faulty;
pub mod harness;
pub mod proxy;

pub use faulty::{Faulty, Op};
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

/// Leaves `key` as an at-most-once attempt that died mid-body leaves it: an unknown outcome,
/// for a payload of `fingerprint`. It claims the key `once` as this process and marks the claim
/// unknown, so that the next call of the key finds the outcome unknown (and runs its
/// `reconcile`, or returns [`Error::OutcomeUnknown`]). For tests of reconcile functions and of
/// what a rerun does with an unknown outcome; a key that is not free is [`Error::Config`].
///
/// ```
/// use rerun_core::testing::leave_unknown;
/// use rerun_core::{Call, Error, Fingerprint, Key, MemoryStore};
///
/// let store = MemoryStore::new();
/// leave_unknown(&store, &Key::new("mail.send", "u1"), &Fingerprint::EMPTY)?;
/// let rerun = Call::new("mail.send", "u1").once().run(&store, || Ok::<_, Error>(()));
/// assert!(matches!(rerun, Err(Error::OutcomeUnknown { .. })));
/// # Ok::<(), Error>(())
/// ```
pub fn leave_unknown<S: crate::Store + ?Sized>(
    store: &S,
    key: &crate::Key,
    fingerprint: &crate::Fingerprint,
) -> Result<(), crate::Error> {
    use crate::record::{ClaimRequest, ClaimResponse};
    let claimed = store.claim(&ClaimRequest {
        key,
        fingerprint,
        holder: &crate::Holder::current(),
        lease: std::time::Duration::from_secs(30),
        once: true,
        steal: None,
    })?;
    let found = match claimed {
        ClaimResponse::Claimed(claim) => return store.mark_unknown(&claim),
        ClaimResponse::Replay(_) => "a completed record",
        ClaimResponse::Mismatch => "a completed record of another payload",
        ClaimResponse::Busy(_) => "a claim in progress",
    };
    Err(crate::Error::config(format!(
        "{key}: cannot leave an unknown outcome on a key that holds {found}"
    )))
}
