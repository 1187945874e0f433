//! Clock faults (reliability 17) and expiry edges (18) on the local stores: the caller's wall
//! clock an hour off, or jumping back, changes nothing; exactly at expiry is expired.

use std::time::Duration;

use rerun_core::clock::ManualClock;
use rerun_core::record::{ClaimRequest, ClaimResponse};
use rerun_core::store::sqlite::SqliteOptions;
use rerun_core::{Call, DynStore, Error, Fingerprint, Holder, Key, MemoryStore, SqliteStore};

fn stores(clock: &ManualClock, dir: &tempfile::TempDir) -> Vec<Box<dyn DynStore>> {
    vec![
        Box::new(MemoryStore::with_clock(clock.clone())),
        Box::new(
            SqliteStore::open_with(
                dir.path().join("clock.sqlite3"),
                SqliteOptions::new().clock(clock.clone()),
            )
            .unwrap(),
        ),
    ]
}

fn remote() -> Holder {
    let mut h = Holder::current();
    h.host = "clock.remote.invalid".into();
    h
}

#[test]
fn wall_clock_jumps_neither_steal_nor_strand_a_claim() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    for store in stores(&clock, &dir) {
        let key = Key::new(store.describe(), "leased");
        let holder = remote();
        let req = ClaimRequest {
            key: &key,
            fingerprint: &Fingerprint::EMPTY,
            holder: &holder,
            lease: Duration::from_secs(10),
            once: false,
            steal: None,
        };
        assert!(matches!(
            store.claim(&req).unwrap(),
            ClaimResponse::Claimed(_)
        ));
        clock.skew_wall(3_600_000); // an hour ahead: no early takeover
        assert!(matches!(store.claim(&req).unwrap(), ClaimResponse::Busy(_)));
        clock.skew_wall(-7_200_000); // an hour behind: no stuck claim once the lease is out
        clock.advance(Duration::from_secs(10));
        let out = Call::new(store.describe(), "leased")
            .run(&*store, || Ok::<_, Error>(1))
            .unwrap();
        assert!(!out.replayed);
        clock.skew_wall(3_600_000);
    }
}

#[test]
fn exactly_at_expiry_is_expired() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    for store in stores(&clock, &dir) {
        let scope = store.describe();
        let ttl = Duration::from_secs(60);
        let run = |v: u32| {
            Call::new(scope.clone(), "k")
                .ttl(ttl)
                .run(&*store, || Ok::<_, Error>(v))
                .unwrap()
        };
        assert_eq!(run(1).value, 1);
        clock.advance(ttl - Duration::from_nanos(1));
        assert!(
            run(2).replayed,
            "one nanosecond before expiry the record replays"
        );
        clock.advance(Duration::from_nanos(1));
        let at = run(3);
        assert!(
            !at.replayed && at.value == 3,
            "at expiry the key runs again"
        );
        clock.skew_wall(-3_600_000);
        clock.advance(ttl);
        assert!(
            !run(4).replayed,
            "a wall clock behind does not keep a record alive"
        );
        assert_eq!(
            store.purge_expired(100).unwrap(),
            0,
            "a rerun replaced the record"
        );
    }
}
