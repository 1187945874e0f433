//! A subscriber whose code panics on the lease keeper's warnings (a bug in an application's
//! log sink) costs those log events and nothing else: every lease is still renewed, the
//! scheduler and its timers go on. A binary of its own: the subscriber is the process's.

#![cfg(feature = "testing")]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rerun_core::testing::{Faulty, Op};
use rerun_core::{Call, Error, MemoryStore};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Panics on every warning and error logged on the keeper's threads.
struct PanicsOnKeeperWarnings;

impl Subscriber for PanicsOnKeeperWarnings {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let keeper = std::thread::current()
            .name()
            .is_some_and(|name| name.starts_with("rerun-lease-"));
        if keeper && *event.metadata().level() <= Level::WARN {
            panic!("a subscriber that panics on the keeper's warnings (on purpose)");
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// A memory store whose first `failures` renewals fail, each after half a lease, then renew;
/// `renewed` counts the renewals it made.
fn fails_at_first(failures: u32, renewed: Arc<AtomicU32>) -> Faulty {
    let failures_left = AtomicU32::new(failures);
    Faulty::new(MemoryStore::new())
        .before(move |op| {
            let Op::Renew { claim, .. } = op else {
                return Ok(());
            };
            let failing = failures_left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if failing {
                std::thread::sleep(Duration::from_millis(500));
                return Err(Error::store_msg(Some(&claim.key), "a renewal that fails"));
            }
            Ok(())
        })
        .after(move |op, failed| {
            if matches!(op, Op::Renew { .. }) && failed.is_none() {
                renewed.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })
}

/// Two slow renewals fail (each warned about, each warning a panic on the keeper's thread), and
/// the lease runs out while the second is on its way (warned about by the scheduler, another
/// panic): the keeper still retries, renews the lapsed lease, keeps renewing it for the rest of
/// the body, and serves a later call.
#[test]
fn a_subscriber_that_panics_stops_no_renewal() {
    if tracing::subscriber::set_global_default(PanicsOnKeeperWarnings).is_err() {
        panic!("this binary's subscriber was already set");
    }
    let lease = Duration::from_secs(1);
    let renewals = Arc::new(AtomicU32::new(0));
    let store = fails_at_first(2, renewals.clone());
    let ran = Call::new("keeper.panicking", "first")
        .lease(lease)
        .run(&store, || {
            std::thread::sleep(Duration::from_millis(4_000));
            Ok::<_, Error>(1u32)
        });
    assert!(matches!(ran, Ok(ref o) if !o.replayed), "{ran:?}");
    // A renewal every third of a lease once the failures are behind (about 1.5 s in): the rest
    // of the 4 s body leaves room for seven.
    let renewed = renewals.load(Ordering::SeqCst);
    assert!(renewed >= 5, "only {renewed} renewals after the failures");

    // The scheduler still runs: a later call's lease is renewed too.
    let before = renewals.load(Ordering::SeqCst);
    let ran = Call::new("keeper.panicking", "second")
        .lease(lease)
        .run(&store, || {
            std::thread::sleep(Duration::from_millis(2_000));
            Ok::<_, Error>(2u32)
        });
    assert!(matches!(ran, Ok(ref o) if !o.replayed), "{ran:?}");
    let renewed = renewals.load(Ordering::SeqCst) - before;
    assert!(renewed >= 3, "only {renewed} renewals of the second call");
}
