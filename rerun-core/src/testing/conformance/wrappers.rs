//! Stores that misbehave on purpose, wrapped around a real one: for checking that one store's
//! trouble never spreads to the claims of another.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::error::Error;
use crate::key::Key;
use crate::record::{Claim, ClaimRequest, ClaimResponse, RecordView};
use crate::store::{ScanPage, Store};

/// Forwards every method except `claim`, `renew`, `release` and `complete` to `$inner`.
macro_rules! forward_the_rest {
    ($inner:ident) => {
        fn mark_unknown(&self, claim: &Claim) -> Result<(), Error> {
            self.$inner.mark_unknown(claim)
        }
        fn forget(&self, key: &Key) -> Result<bool, Error> {
            self.$inner.forget(key)
        }
        fn forget_if(&self, key: &Key, fence: crate::record::Fence) -> Result<bool, Error> {
            self.$inner.forget_if(key, fence)
        }
        fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> {
            self.$inner.inspect(key)
        }
        fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> {
            self.$inner.scan(cursor, limit)
        }
        fn purge_expired(&self, limit: usize) -> Result<u64, Error> {
            self.$inner.purge_expired(limit)
        }
        fn describe(&self) -> String {
            self.$inner.describe()
        }
        fn kind(&self) -> &'static str {
            self.$inner.kind()
        }
    };
}

/// A store whose `renew` hangs, ignoring every deadline, until [`Stalling::release`]: the
/// worst a store a user wrote can do.
#[derive(Clone)]
pub(super) struct Stalling {
    inner: Arc<dyn Store>,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl Stalling {
    pub(super) fn new(inner: Arc<dyn Store>) -> Stalling {
        Stalling {
            inner,
            gate: Arc::new((Mutex::new(false), Condvar::new())),
        }
    }

    /// Lets every stalled and later renewal through.
    pub(super) fn release(&self) {
        let (open, cv) = &*self.gate;
        *open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
    }
}

impl Store for Stalling {
    forward_the_rest!(inner);
    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        self.inner.complete(claim, result, ttl)
    }
    fn release(&self, claim: &Claim) -> Result<(), Error> {
        self.inner.release(claim)
    }
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        self.inner.claim(req)
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
    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }
}

/// A store whose first `renew` panics.
#[derive(Clone)]
pub(super) struct PanicsOnce {
    inner: Arc<dyn Store>,
    armed: Arc<AtomicBool>,
}

impl PanicsOnce {
    pub(super) fn new(inner: Arc<dyn Store>) -> PanicsOnce {
        PanicsOnce {
            inner,
            armed: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Whether the panic happened.
    pub(super) fn fired(&self) -> bool {
        !self.armed.load(Ordering::SeqCst)
    }
}

impl Store for PanicsOnce {
    forward_the_rest!(inner);
    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        self.inner.complete(claim, result, ttl)
    }
    fn release(&self, claim: &Claim) -> Result<(), Error> {
        self.inner.release(claim)
    }
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        self.inner.claim(req)
    }
    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        if self.armed.swap(false, Ordering::SeqCst) {
            panic!("a store whose renew panics (on purpose, once)");
        }
        self.inner.renew(claim, lease)
    }
    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }
}

/// A store that answers every claim `delay` after the store it wraps granted it: a lock wait,
/// a lagging replica or a stalled connection between the commit and the answer.
#[derive(Clone)]
pub(super) struct LateClaims {
    inner: Arc<dyn Store>,
    delay: Duration,
}

impl LateClaims {
    pub(super) fn new(inner: Arc<dyn Store>, delay: Duration) -> LateClaims {
        LateClaims { inner, delay }
    }
}

impl Store for LateClaims {
    forward_the_rest!(inner);
    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        self.inner.complete(claim, result, ttl)
    }
    fn release(&self, claim: &Claim) -> Result<(), Error> {
        self.inner.release(claim)
    }
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        let answer = self.inner.claim(req);
        std::thread::sleep(self.delay);
        answer
    }
    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        self.inner.renew(claim, lease)
    }
    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }
}

/// A store whose first `release` fails with a retryable error, as a dropped connection or a
/// lock held past the deadline would make it; every later one goes through.
#[derive(Clone)]
pub(super) struct FailsFirstRelease {
    inner: Arc<dyn Store>,
    armed: Arc<AtomicBool>,
}

impl FailsFirstRelease {
    pub(super) fn new(inner: Arc<dyn Store>) -> FailsFirstRelease {
        FailsFirstRelease {
            inner,
            armed: Arc::new(AtomicBool::new(true)),
        }
    }
}

impl Store for FailsFirstRelease {
    forward_the_rest!(inner);
    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        self.inner.complete(claim, result, ttl)
    }
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        self.inner.claim(req)
    }
    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        self.inner.renew(claim, lease)
    }
    fn release(&self, claim: &Claim) -> Result<(), Error> {
        if self.armed.swap(false, Ordering::SeqCst) {
            return Err(Error::store_msg(
                Some(&claim.key),
                "a release that fails (on purpose, once)",
            ));
        }
        self.inner.release(claim)
    }
    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }
}

/// How long a store may take to record the result that [`FailsFirstComplete`] then fails,
/// for the failure to still be one the runtime tries again (see `runtime::steps`).
pub(super) const SLOW_LANDING: Duration = Duration::from_millis(400);

/// A store whose first `complete` fails with a retryable error, as a connection that died
/// while the body ran would make it; every later one goes through. With `lands`, that first
/// completion is recorded before it fails: its answer was what got lost.
#[derive(Clone)]
pub(super) struct FailsFirstComplete {
    inner: Arc<dyn Store>,
    armed: Arc<AtomicBool>,
    lands: bool,
    slow: Arc<AtomicBool>,
}

impl FailsFirstComplete {
    pub(super) fn new(inner: Arc<dyn Store>, lands: bool) -> FailsFirstComplete {
        FailsFirstComplete {
            inner,
            armed: Arc::new(AtomicBool::new(true)),
            lands,
            slow: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether recording the result that then failed took longer than [`SLOW_LANDING`] (a
    /// loaded machine's sync to disk), so that the runtime need not have tried again.
    pub(super) fn landed_slowly(&self) -> bool {
        self.slow.load(Ordering::SeqCst)
    }
}

crate::store::async_via_sync!(FailsFirstComplete);

impl Store for FailsFirstComplete {
    forward_the_rest!(inner);
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        self.inner.claim(req)
    }
    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        self.inner.renew(claim, lease)
    }
    fn release(&self, claim: &Claim) -> Result<(), Error> {
        self.inner.release(claim)
    }
    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        if self.armed.swap(false, Ordering::SeqCst) {
            if self.lands {
                let started = std::time::Instant::now();
                self.inner.complete(claim, result, ttl)?;
                if started.elapsed() > SLOW_LANDING {
                    self.slow.store(true, Ordering::SeqCst);
                }
            }
            return Err(Error::store_msg(
                Some(&claim.key),
                "a completion that fails (on purpose, once)",
            ));
        }
        self.inner.complete(claim, result, ttl)
    }
    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }
}
