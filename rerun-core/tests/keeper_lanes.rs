//! One store that hangs with many claims in flight does not hold up the lease renewals of
//! another (contract 6.7): the renewals of one store run on a share of the keeper's workers,
//! and the rest stay free for the others.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rerun_core::record::{Claim, ClaimRequest, ClaimResponse, RecordView};
use rerun_core::store::ScanPage;
use rerun_core::{Call, Error, Fingerprint, Holder, Key, MemoryStore, Store};

/// A memory store whose renewals hang until the gate opens.
#[derive(Clone)]
struct Hanging {
    inner: MemoryStore,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl Hanging {
    fn open(&self) {
        let (open, cv) = &*self.gate;
        *open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
    }
}

impl Store for Hanging {
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        self.inner.claim(req)
    }
    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        self.inner.complete(claim, result, ttl)
    }
    fn release(&self, claim: &Claim) -> Result<(), Error> {
        self.inner.release(claim)
    }
    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        let (open, cv) = &*self.gate;
        let mut open = open.lock().unwrap_or_else(|p| p.into_inner());
        while !*open {
            open = cv.wait(open).unwrap_or_else(|p| p.into_inner());
        }
        drop(open);
        self.inner.renew(claim, lease)
    }
    fn mark_unknown(&self, claim: &Claim) -> Result<(), Error> {
        self.inner.mark_unknown(claim)
    }
    fn forget(&self, key: &Key) -> Result<bool, Error> {
        self.inner.forget(key)
    }
    fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> {
        self.inner.inspect(key)
    }
    fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> {
        self.inner.scan(cursor, limit)
    }
    fn purge_expired(&self, limit: usize) -> Result<u64, Error> {
        self.inner.purge_expired(limit)
    }
    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }
    fn describe(&self) -> String {
        "a memory store whose renewals hang".to_owned()
    }
}

#[test]
fn a_store_hanging_with_many_claims_leaves_workers_to_another() {
    let hanging = Hanging {
        inner: MemoryStore::new(),
        gate: Arc::new((Mutex::new(false), Condvar::new())),
    };
    let healthy = MemoryStore::new();
    let lease = Duration::from_secs(1);
    std::thread::scope(|s| {
        // More claims in flight on the hanging store than the keeper has workers: each one's
        // first renewal (a third of the lease in) hangs.
        for i in 0..80u32 {
            let hanging = &hanging;
            s.spawn(move || {
                Call::new("lanes.hanging", &i)
                    .lease(lease)
                    .run(hanging, || {
                        std::thread::sleep(Duration::from_millis(2_500));
                        Ok::<_, Error>(i)
                    })
            });
        }
        // Queued behind them: the healthy store's renewals, due a little later.
        std::thread::sleep(Duration::from_millis(200));
        let healthy = &healthy;
        let held = s.spawn(move || {
            Call::new("lanes.healthy", "k")
                .lease(lease)
                .run(healthy, || {
                    std::thread::sleep(Duration::from_millis(2_500));
                    Ok::<_, Error>(1u32)
                })
        });
        // Past the first lease: only renewals keep the healthy claim. A contender must find
        // it busy, every time it looks.
        std::thread::sleep(Duration::from_millis(1_300));
        let key = Key::new("lanes.healthy", "k");
        let contender = Holder::current();
        let until = Instant::now() + Duration::from_millis(800);
        while Instant::now() < until {
            let answer = healthy.claim(&ClaimRequest {
                key: &key,
                fingerprint: &Fingerprint::EMPTY,
                holder: &contender,
                lease,
                once: false,
                steal: None,
            });
            assert!(
                matches!(answer, Ok(ClaimResponse::Busy(_))),
                "the healthy claim was not renewed: {answer:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = held
            .join()
            .unwrap_or_else(|_| panic!("the healthy call panicked"));
        assert!(matches!(&out, Ok(o) if o.value == 1), "{out:?}");
        hanging.open();
    });
}
