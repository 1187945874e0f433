//! A call dropped while it waits to send a failed completion again (a timeout around it, an
//! aborted task) gives its claim back through the background worker, as a call dropped mid-body
//! does: the key is free again at once, not held until its lease runs out.

#![cfg(feature = "testing")]

use std::time::{Duration, Instant};

use rerun_core::record::Status;
use rerun_core::testing::{Faulty, Op};
use rerun_core::{Call, Error, Key, MemoryStore, Store};

/// A store whose completions always fail at once, as on a connection that died.
fn completions_fail(records: &MemoryStore) -> Faulty {
    Faulty::new(records.clone()).before(|op| match op {
        Op::Complete { claim, .. } => Err(Error::store_msg(
            Some(&claim.key),
            "a completion that fails (on purpose)",
        )),
        _ => Ok(()),
    })
}

/// The status of `key`'s record once it is no longer in progress, within `within`.
fn settled(store: &MemoryStore, key: &Key, within: Duration) -> Option<Status> {
    let until = Instant::now() + within;
    loop {
        let status = store.inspect(key).expect("inspect").map(|r| r.status);
        if status != Some(Status::InProgress) || Instant::now() > until {
            return status;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_call_dropped_between_completion_attempts_gives_its_claim_back() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let records = MemoryStore::new();
    let store = completions_fail(&records);
    for once in [false, true] {
        let key = Key::new("complete.dropped", if once { "once" } else { "replayable" });
        let call = Call::with_key(key.clone()).lease(Duration::from_secs(60));
        let call = if once { call.once() } else { call };
        // Everything up to the first pause runs in the first poll (the memory store never
        // waits); the timeout fires in the pause before the second attempt.
        let out = rt.block_on(async {
            tokio::time::timeout(
                Duration::from_millis(20),
                call.run_async(&store, async { Ok::<_, Error>(1u32) }),
            )
            .await
        });
        assert!(out.is_err(), "the call finished: {out:?}");
        // Released (its result was never recorded), or, for `once`, marked unknown (its body
        // ran): within moments, not the lease's 60 s.
        let want = if once {
            Status::Unknown
        } else {
            Status::Released
        };
        assert_eq!(
            settled(&records, &key, Duration::from_secs(10)),
            Some(want),
            "once = {once}"
        );
    }
}
