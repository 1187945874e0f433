//! A claim the store wrote but whose answer was lost (the connection died after the commit)
//! does not hold its key until its lease ends: the call that made it finds it held by itself
//! and gives it back at once, released, or for `once` marked unknown. A record of any other
//! holder is left alone.

#![cfg(all(feature = "testing", feature = "sqlite"))]

use std::time::Duration;

use rerun_core::record::{ClaimRequest, ClaimResponse, Status};
use rerun_core::testing::{Faulty, Op};
use rerun_core::{Call, Error, Fingerprint, Holder, Key, MemoryStore, SqliteStore, Store};

const LONG: Duration = Duration::from_secs(300);

/// `records`, whose claims are written but answered with a lost connection.
fn answers_lost(records: impl rerun_core::DynStore + 'static) -> Faulty {
    Faulty::new(records).after(|op, failed| match (op, failed) {
        (Op::Claim(req), None) => Err(Error::store_msg(
            Some(req.key),
            "the connection was reset after the claim was written",
        )),
        _ => Ok(()),
    })
}

fn status(store: &dyn Store, key: &Key) -> Option<Status> {
    store
        .inspect(key)
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|r| r.status)
}

fn check(records: &dyn Store, lossy: &Faulty, tag: &str) {
    for once in [false, true] {
        let key = Key::new("lost.answer", &format!("{tag}-{once}"));
        let call = Call::with_key(key.clone()).lease(LONG);
        let call = if once { call.once() } else { call };
        let mut ran = false;
        let out = call.run(lossy, || {
            ran = true;
            Ok::<_, Error>(1u32)
        });
        assert!(
            matches!(out, Err(Error::Store { .. })) && !ran,
            "{tag}: {out:?}"
        );
        // Not held for the 300 s lease: given back at once.
        let want = if once {
            Status::Unknown
        } else {
            Status::Released
        };
        assert_eq!(status(records, &key), Some(want), "{tag}, once = {once}");
        if !once {
            // The retry runs the body now, instead of waiting out the lease.
            let retry = Call::with_key(key.clone())
                .lease(LONG)
                .run(records, || Ok::<_, Error>(2u32));
            assert!(matches!(&retry, Ok(o) if o.value == 2), "{tag}: {retry:?}");
        }
    }
}

#[test]
fn a_claim_whose_answer_was_lost_is_given_back_at_once() {
    let memory = MemoryStore::new();
    check(&memory, &answers_lost(memory.clone()), "memory");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let sqlite =
        SqliteStore::open(dir.path().join("rerun.sqlite3")).unwrap_or_else(|e| panic!("{e}"));
    check(&sqlite, &answers_lost(sqlite.clone()), "sqlite");
}

#[test]
fn an_async_claim_whose_answer_was_lost_is_given_back_at_once() {
    let records = MemoryStore::new();
    let lossy = answers_lost(records.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let key = Key::new("lost.answer", "async");
    let out = rt.block_on(
        Call::with_key(key.clone())
            .lease(LONG)
            .run_async(&lossy, async { Ok::<_, Error>(1u32) }),
    );
    assert!(matches!(out, Err(Error::Store { .. })), "{out:?}");
    assert_eq!(status(&records, &key), Some(Status::Released));
}

/// A claim that failed before the store wrote anything finds another attempt's record, which
/// it leaves as it is.
#[test]
fn another_attempts_claim_is_left_alone() {
    let records = MemoryStore::new();
    let key = Key::new("lost.answer", "other");
    let other = Holder::current();
    let claimed = records.claim(&ClaimRequest {
        key: &key,
        fingerprint: &Fingerprint::EMPTY,
        holder: &other,
        lease: LONG,
        once: false,
        steal: None,
    });
    assert!(
        matches!(claimed, Ok(ClaimResponse::Claimed(_))),
        "{claimed:?}"
    );
    let refused = Faulty::new(records.clone()).before(|op| match op {
        Op::Claim(req) => Err(Error::store_msg(Some(req.key), "connection refused")),
        _ => Ok(()),
    });
    let out = Call::with_key(key.clone())
        .lease(LONG)
        .run(&refused, || Ok::<_, Error>(1u32));
    assert!(matches!(out, Err(Error::Store { .. })), "{out:?}");
    let record = records
        .inspect(&key)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("the record is gone"));
    assert_eq!(
        (record.status, record.holder),
        (Status::InProgress, Some(other))
    );
}
