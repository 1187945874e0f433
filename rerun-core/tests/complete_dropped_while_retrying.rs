//! A call dropped while it waits to send a failed completion again (a timeout around it, an
//! aborted task) gives its claim back through the background worker, as a call dropped mid-body
//! does: the key is free again at once, not held until its lease runs out.

use std::future::ready;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rerun_core::record::{Claim, ClaimRequest, ClaimResponse, RecordView, Status};
use rerun_core::store::{ScanPage, StoreFuture};
use rerun_core::{AsyncStore, Call, Error, Key, MemoryStore, Store};

/// A memory store whose completions always fail at once, as on a connection that died.
#[derive(Clone, Default)]
struct CompletionsFail {
    inner: MemoryStore,
}

impl Store for CompletionsFail {
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        self.inner.claim(req)
    }
    fn complete(&self, claim: &Claim, _: &[u8], _: Duration) -> Result<(), Error> {
        Err(Error::store_msg(
            Some(&claim.key),
            "a completion that fails (on purpose)",
        ))
    }
    fn release(&self, claim: &Claim) -> Result<(), Error> {
        self.inner.release(claim)
    }
    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
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
        "a memory store whose completions fail".to_owned()
    }
}

impl AsyncStore for CompletionsFail {
    fn claim_async<'a>(&'a self, req: &'a ClaimRequest<'a>) -> StoreFuture<'a, ClaimResponse> {
        Box::pin(ready(self.claim(req)))
    }
    fn complete_async<'a>(
        &'a self,
        claim: &'a Claim,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(ready(self.complete(claim, result, ttl)))
    }
    fn release_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        Box::pin(ready(self.release(claim)))
    }
    fn mark_unknown_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        Box::pin(ready(self.mark_unknown(claim)))
    }
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
    let store = CompletionsFail::default();
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
            settled(&store.inner, &key, Duration::from_secs(10)),
            Some(want),
            "once = {once}"
        );
    }
}
