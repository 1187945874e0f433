//! [`Faulty`]: a real store with hooks around its operations, for tests of what a caller does
//! when the store fails, hangs, or answers late.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::key::Key;
use crate::record::{Claim, ClaimRequest, ClaimResponse, Fence, RecordView};
use crate::store::{AsyncStore, DynStore, ScanFilter, ScanPage, Store, StoreFuture};

/// One operation a [`Faulty`] store was asked for, as its hooks see it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Op<'a> {
    /// [`Store::claim`].
    Claim(&'a ClaimRequest<'a>),
    /// [`Store::complete`].
    Complete {
        /// The claim being completed.
        claim: &'a Claim,
        /// The encoded result.
        result: &'a [u8],
        /// How long the record is to be kept.
        ttl: Duration,
    },
    /// [`Store::release`].
    Release(&'a Claim),
    /// [`Store::renew`].
    Renew {
        /// The claim being renewed.
        claim: &'a Claim,
        /// The new lease, from now.
        lease: Duration,
    },
    /// [`Store::mark_unknown`].
    MarkUnknown(&'a Claim),
    /// [`Store::forget`].
    Forget(&'a Key),
    /// [`Store::forget_if`].
    ForgetIf {
        /// The key to forget.
        key: &'a Key,
        /// The fence the record must still have.
        fence: Fence,
    },
    /// [`Store::inspect`].
    Inspect(&'a Key),
    /// [`Store::scan`] (`filter` is `None`) or [`Store::scan_filtered`].
    Scan {
        /// The filter of a filtered scan.
        filter: Option<&'a ScanFilter>,
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// About how many records the page may hold.
        limit: usize,
    },
    /// [`Store::purge_expired`].
    PurgeExpired {
        /// At most how many records to delete.
        limit: usize,
    },
    /// [`Store::describe`], which cannot fail: a hook's error is ignored, but a hook may hang
    /// in it, as a store whose description needs a lock can.
    Describe,
}

impl Op<'_> {
    /// The key the operation is about, if it is about one.
    pub fn key(&self) -> Option<&Key> {
        match self {
            Op::Claim(req) => Some(req.key),
            Op::Complete { claim, .. }
            | Op::Release(claim)
            | Op::Renew { claim, .. }
            | Op::MarkUnknown(claim) => Some(&claim.key),
            Op::Forget(key) | Op::ForgetIf { key, .. } | Op::Inspect(key) => Some(key),
            Op::Scan { .. } | Op::PurgeExpired { .. } | Op::Describe => None,
        }
    }

    /// Whether the operation is made for a claim a caller holds (`complete`, `release`,
    /// `renew`, `mark_unknown`): the fenced ones.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            Op::Complete { .. } | Op::Release(_) | Op::Renew { .. } | Op::MarkUnknown(_)
        )
    }
}

type Before = dyn Fn(&Op<'_>) -> Result<(), Error> + Send + Sync;
type After = dyn Fn(&Op<'_>, Option<&Error>) -> Result<(), Error> + Send + Sync;

/// A store that sends every operation to a real one, with hooks a test uses to fail, delay or
/// watch chosen operations: the connection that dies before a completion, the reply lost after
/// a write landed, the renewal that hangs.
///
/// [`Faulty::before`] runs before the operation reaches the store; an error from it is the
/// operation's answer, and the store is not asked. [`Faulty::after`] runs once the store has
/// answered, with the store's error if it failed; an error from it replaces the answer (a write
/// that landed but whose reply was lost). Both run for the async operations too, on the task
/// that polls them, so one hook covers sync and async callers alike.
///
/// ```
/// use rerun_core::testing::{Faulty, Op};
/// use rerun_core::{Call, Error, MemoryStore, Status, Store};
///
/// let records = MemoryStore::new();
/// // Every completion is written, but its reply is lost.
/// let store = Faulty::new(records.clone()).after(|op, failed| match (op, failed) {
///     (Op::Complete { claim, .. }, None) => {
///         Err(Error::store_msg(Some(&claim.key), "connection reset after the write"))
///     }
///     _ => Ok(()),
/// });
///
/// // The completion is sent again; refused, it reads the record, which is this claim's.
/// let first = Call::new("email.send", "user-42").run(&store, || Ok::<_, Error>(1))?;
/// assert_eq!((first.value, first.replayed), (1, false));
/// let key = rerun_core::Key::new("email.send", "user-42");
/// let status = records.inspect(&key)?.map(|r| r.status);
/// assert_eq!(status, Some(Status::Completed));
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone)]
pub struct Faulty {
    inner: Arc<dyn DynStore>,
    before: Option<Arc<Before>>,
    after: Option<Arc<After>>,
    name: Option<Arc<str>>,
}

impl Faulty {
    /// Wraps `store`, with no hooks yet: every operation goes through unchanged.
    pub fn new(store: impl DynStore + 'static) -> Faulty {
        Faulty::around(Arc::new(store))
    }

    /// Wraps a store already shared.
    pub fn around(store: Arc<dyn DynStore>) -> Faulty {
        Faulty {
            inner: store,
            before: None,
            after: None,
            name: None,
        }
    }

    /// Runs `hook` before every operation; an error from it is the operation's answer, and the
    /// store is not asked. A hook that sleeps or blocks delays the operation (on an async
    /// caller's task too). Replaces an earlier `before` hook.
    pub fn before(
        mut self,
        hook: impl Fn(&Op<'_>) -> Result<(), Error> + Send + Sync + 'static,
    ) -> Faulty {
        self.before = Some(Arc::new(hook));
        self
    }

    /// Runs `hook` after every operation the store answered, with the store's error if it
    /// failed (`None` when it succeeded); an error from the hook replaces the answer. Not run
    /// when the `before` hook failed the operation. Replaces an earlier `after` hook.
    pub fn after(
        mut self,
        hook: impl Fn(&Op<'_>, Option<&Error>) -> Result<(), Error> + Send + Sync + 'static,
    ) -> Faulty {
        self.after = Some(Arc::new(hook));
        self
    }

    /// What [`Store::describe`] says of the store (by default, what the wrapped store says).
    pub fn describe_as(mut self, name: impl Into<String>) -> Faulty {
        self.name = Some(Arc::from(name.into()));
        self
    }

    /// The wrapped store, to look at records behind the hooks' back.
    pub fn inner(&self) -> &Arc<dyn DynStore> {
        &self.inner
    }

    fn run_before(&self, op: &Op<'_>) -> Result<(), Error> {
        match &self.before {
            Some(hook) => hook(op),
            None => Ok(()),
        }
    }

    fn run_after<T>(&self, op: &Op<'_>, answer: Result<T, Error>) -> Result<T, Error> {
        let Some(hook) = &self.after else {
            return answer;
        };
        match answer {
            Ok(value) => hook(op, None).map(|()| value),
            Err(e) => match hook(op, Some(&e)) {
                Ok(()) => Err(e),
                Err(replaced) => Err(replaced),
            },
        }
    }

    /// Runs `op` through both hooks, asking the store with `ask`.
    fn hooked<T>(&self, op: Op<'_>, ask: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        self.run_before(&op)?;
        let answer = ask();
        self.run_after(&op, answer)
    }

    /// The async [`Faulty::hooked`].
    fn hooked_async<'a, T: Send + 'a>(
        &'a self,
        op: Op<'a>,
        ask: impl FnOnce() -> StoreFuture<'a, T> + Send + 'a,
    ) -> StoreFuture<'a, T> {
        Box::pin(async move {
            self.run_before(&op)?;
            let answer = ask().await;
            self.run_after(&op, answer)
        })
    }
}

impl fmt::Debug for Faulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faulty")
            .field("store", &self.inner.describe())
            .field("before", &self.before.is_some())
            .field("after", &self.after.is_some())
            .finish()
    }
}

impl Store for Faulty {
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        self.hooked(Op::Claim(req), || self.inner.claim(req))
    }
    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        let op = Op::Complete { claim, result, ttl };
        self.hooked(op, || self.inner.complete(claim, result, ttl))
    }
    fn release(&self, claim: &Claim) -> Result<(), Error> {
        self.hooked(Op::Release(claim), || self.inner.release(claim))
    }
    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        let op = Op::Renew { claim, lease };
        self.hooked(op, || self.inner.renew(claim, lease))
    }
    fn mark_unknown(&self, claim: &Claim) -> Result<(), Error> {
        self.hooked(Op::MarkUnknown(claim), || self.inner.mark_unknown(claim))
    }
    fn forget(&self, key: &Key) -> Result<bool, Error> {
        self.hooked(Op::Forget(key), || self.inner.forget(key))
    }
    fn forget_if(&self, key: &Key, fence: Fence) -> Result<bool, Error> {
        let op = Op::ForgetIf { key, fence };
        self.hooked(op, || self.inner.forget_if(key, fence))
    }
    fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> {
        self.hooked(Op::Inspect(key), || self.inner.inspect(key))
    }
    fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> {
        let op = Op::Scan {
            filter: None,
            cursor,
            limit,
        };
        self.hooked(op, || self.inner.scan(cursor, limit))
    }
    fn scan_filtered(
        &self,
        filter: &ScanFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, Error> {
        let op = Op::Scan {
            filter: Some(filter),
            cursor,
            limit,
        };
        self.hooked(op, || self.inner.scan_filtered(filter, cursor, limit))
    }
    fn purge_expired(&self, limit: usize) -> Result<u64, Error> {
        let op = Op::PurgeExpired { limit };
        self.hooked(op, || self.inner.purge_expired(limit))
    }
    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }
    fn describe(&self) -> String {
        // `describe` cannot fail: a hook's error is dropped; its delay is not.
        let _ = self.run_before(&Op::Describe);
        match &self.name {
            Some(name) => name.to_string(),
            None => self.inner.describe(),
        }
    }
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
}

impl AsyncStore for Faulty {
    fn claim_async<'a>(&'a self, req: &'a ClaimRequest<'a>) -> StoreFuture<'a, ClaimResponse> {
        self.hooked_async(Op::Claim(req), move || self.inner.claim_async(req))
    }
    fn complete_async<'a>(
        &'a self,
        claim: &'a Claim,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        let op = Op::Complete { claim, result, ttl };
        self.hooked_async(op, move || self.inner.complete_async(claim, result, ttl))
    }
    fn release_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        self.hooked_async(Op::Release(claim), move || self.inner.release_async(claim))
    }
    fn mark_unknown_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        let op = Op::MarkUnknown(claim);
        self.hooked_async(op, move || self.inner.mark_unknown_async(claim))
    }
    fn inspect_async<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Option<RecordView>> {
        self.hooked_async(Op::Inspect(key), move || self.inner.inspect_async(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::Fingerprint;
    use crate::holder::Holder;
    use crate::store::memory::MemoryStore;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn claim(store: &Faulty, key: &Key) -> Result<ClaimResponse, Error> {
        store.claim(&ClaimRequest {
            key,
            fingerprint: &Fingerprint::EMPTY,
            holder: &Holder::current(),
            lease: Duration::from_secs(30),
            once: false,
            steal: None,
        })
    }

    #[test]
    fn a_failing_before_hook_keeps_the_operation_from_the_store() {
        let records = MemoryStore::new();
        let store = Faulty::new(records.clone()).before(|op| match op {
            Op::Claim(req) => Err(Error::store_msg(Some(req.key), "refused")),
            _ => Ok(()),
        });
        let key = Key::new("s", "k");
        assert!(matches!(claim(&store, &key), Err(Error::Store { .. })));
        assert!(matches!(records.inspect(&key), Ok(None)));
    }

    #[test]
    fn an_after_hook_sees_the_store_answer_and_may_replace_it() {
        let seen = Arc::new(AtomicUsize::new(0));
        let counted = seen.clone();
        let records = MemoryStore::new();
        let store = Faulty::new(records.clone()).after(move |op, failed| {
            counted.fetch_add(1, Ordering::SeqCst);
            match (op, failed) {
                (Op::Claim(req), None) => Err(Error::store_msg(Some(req.key), "reply lost")),
                _ => Ok(()),
            }
        });
        let key = Key::new("s", "k");
        assert!(matches!(claim(&store, &key), Err(Error::Store { .. })));
        // The write landed behind the lost reply.
        assert!(matches!(records.inspect(&key), Ok(Some(_))));
        assert!(matches!(store.inspect(&key), Ok(Some(_))));
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn async_operations_run_the_same_hooks() {
        let store = Faulty::new(MemoryStore::new()).before(|op| match op {
            Op::Inspect(key) => Err(Error::store_msg(Some(key), "down")),
            _ => Ok(()),
        });
        let key = Key::new("s", "k");
        let answer = block_on(store.inspect_async(&key));
        assert!(matches!(answer, Err(Error::Store { .. })));
    }

    #[test]
    fn describe_is_the_store_s_unless_named() {
        let store = Faulty::new(MemoryStore::new());
        assert_eq!(store.describe(), MemoryStore::new().describe());
        assert_eq!(store.describe_as("flaky").describe(), "flaky");
    }

    /// Polls a future that never waits to its end.
    fn block_on<T>(fut: StoreFuture<'_, T>) -> Result<T, Error> {
        let mut fut = fut;
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        loop {
            if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }
}
