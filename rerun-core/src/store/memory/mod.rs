//! `MemoryStore`: records in a `HashMap` behind a mutex, for tests and single-process programs.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

// Built with `--cfg rerun_shuttle`, the lock and the fence counter are shuttle's, so a test can
// explore every interleaving of concurrent claims (see tests/shuttle_claim.rs).
#[cfg(rerun_shuttle)]
use shuttle::sync::{
    atomic::{AtomicU64, Ordering},
    Mutex, MutexGuard,
};
#[cfg(not(rerun_shuttle))]
use std::sync::{
    atomic::{AtomicU64, Ordering},
    Mutex, MutexGuard,
};

use crate::clock::{Clock, HostClock};
use crate::error::Error;
use crate::key::Key;
use crate::record::{
    decide_on, Busy, Claim, ClaimRequest, ClaimResponse, Current, Decision, RecordView, Replay,
};
use crate::store::{
    async_via_sync, decode_cursor, encode_cursor, forward_store_to_inner, ScanPage, Store,
};

mod stored;

use stored::Stored;

/// An in-process store: fast, and gone when the process ends.
///
/// Cloning it is cheap and shares the records. Leases and expiry use the host's monotonic clock
/// (or a [`crate::clock::ManualClock`] in tests).
///
/// ```
/// use rerun_core::{Call, MemoryStore};
/// let store = MemoryStore::new();
/// let first = Call::new("demo", "k").run(&store, || Ok::<_, rerun_core::Error>(7)).unwrap();
/// let again = Call::new("demo", "k").run(&store, || Ok::<_, rerun_core::Error>(8)).unwrap();
/// assert_eq!((first.value, first.replayed), (7, false));
/// assert_eq!((again.value, again.replayed), (7, true));
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

/// The records. Boxed, so that the map's buckets (of which a map holds up to twice as many as
/// records, just after it grows) are a key and a pointer, and growing it moves no record; hashed
/// with a per-store random seed (foldhash's quality hasher), so keys a caller chooses cannot be
/// made to collide.
type Records = HashMap<Key, Box<Stored>, foldhash::quality::RandomState>;

/// The store itself, shared by the clones of a [`MemoryStore`]. It is what a call hands the
/// lease keeper ([`Store::shared`]): a counted reference, no allocation.
struct Inner {
    /// This very value, for [`Store::shared`].
    me: Weak<Inner>,
    records: Mutex<Records>,
    fences: AtomicU64,
    clock: Arc<dyn Clock>,
}

impl MemoryStore {
    /// An empty store on the host clock.
    pub fn new() -> MemoryStore {
        MemoryStore::with_clock(HostClock)
    }

    /// An empty store on the given clock.
    pub fn with_clock(clock: impl Clock) -> MemoryStore {
        MemoryStore {
            inner: Arc::new_cyclic(|me| Inner {
                me: me.clone(),
                records: Mutex::new(Records::default()),
                fences: AtomicU64::new(0),
                clock: Arc::new(clock),
            }),
        }
    }

    /// How many records the store holds, in any state.
    pub fn len(&self) -> usize {
        self.inner.records().len()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    fn records(&self) -> MutexGuard<'_, Records> {
        // A panic while the lock is held cannot leave a record half-written (nothing between an
        // update's assignments can unwind), so a poisoned lock is still consistent.
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies a fenced update to the claim's record.
    fn fenced(&self, claim: &Claim, f: impl FnOnce(&mut Stored)) -> Result<(), Error> {
        let mut records = self.records();
        match records.get_mut(&claim.key) {
            Some(rec) if rec.held_by(claim) => {
                f(rec);
                Ok(())
            }
            _ => Err(Error::LeaseLost {
                key: claim.key.clone(),
            }),
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

forward_store_to_inner!(MemoryStore);

impl Store for Inner {
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        let now = self.clock.mono_ns();
        let boot = crate::holder::this_boot();
        let mut records = self.records();
        let current = records.get(req.key).map(|r| &**r);
        let existed = current.is_some();
        match decide_on(current, req, now, boot) {
            Decision::Replay => {
                let rec =
                    current.ok_or_else(|| Error::store_msg(Some(req.key), "record vanished"))?;
                Ok(ClaimResponse::Replay(Replay {
                    fence: rec.fence(),
                    result: rec.result(),
                }))
            }
            Decision::Mismatch => Ok(ClaimResponse::Mismatch),
            Decision::Busy { lease_remaining } => {
                let rec =
                    current.ok_or_else(|| Error::store_msg(Some(req.key), "record vanished"))?;
                Ok(ClaimResponse::Busy(Busy {
                    fence: rec.fence(),
                    holder: rec.holder().unwrap_or_else(crate::holder::Holder::current),
                    lease_remaining,
                }))
            }
            Decision::Claim { abandoned } => {
                let req = &req.taking_over(abandoned.as_ref());
                let fence = self.fences.fetch_add(1, Ordering::Relaxed) + 1;
                let claimed = Stored::claimed(req, fence, now);
                // A record that was there is overwritten in place (no allocation); a new key
                // is hashed once more, by the insert.
                let slot = if existed {
                    records.get_mut(req.key)
                } else {
                    None
                };
                match slot {
                    Some(rec) => **rec = claimed,
                    None => {
                        records.insert(req.key.clone(), Box::new(claimed));
                    }
                }
                Ok(ClaimResponse::Claimed(Claim::granted(
                    req, fence, abandoned,
                )))
            }
        }
    }

    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        let now = self.clock.mono_ns();
        self.fenced(claim, |rec| rec.complete(result, ttl, now))
    }

    fn release(&self, claim: &Claim) -> Result<(), Error> {
        let now = self.clock.mono_ns();
        self.fenced(claim, |rec| rec.release(now))
    }

    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        let now = self.clock.mono_ns();
        self.fenced(claim, |rec| rec.renew(lease, now))
    }

    fn mark_unknown(&self, claim: &Claim) -> Result<(), Error> {
        let now = self.clock.mono_ns();
        self.fenced(claim, |rec| rec.mark_unknown(now))
    }

    fn forget(&self, key: &Key) -> Result<bool, Error> {
        // Fences come from one store-wide counter, so removing the record cannot make a later
        // token repeat an earlier one.
        Ok(self.records().remove(key).is_some())
    }

    fn forget_if(&self, key: &Key, fence: crate::record::Fence) -> Result<bool, Error> {
        let mut records = self.records();
        if records.get(key).is_some_and(|r| r.fence() == fence) {
            records.remove(key);
            return Ok(true);
        }
        Ok(false)
    }

    fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> {
        let now = self.clock.mono_ns();
        Ok(self.records().get(key).map(|r| r.view(key, now)))
    }

    fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> {
        let after = cursor.map(decode_cursor).transpose()?;
        let now = self.clock.mono_ns();
        let records = self.records();
        let mut keys: Vec<&Key> = records
            .keys()
            .filter(|k| after.as_ref().is_none_or(|a| *k > a))
            .collect();
        keys.sort_unstable();
        let more = keys.len() > limit;
        keys.truncate(limit.max(1));
        let next = if more {
            keys.last().map(|k| encode_cursor(k))
        } else {
            None
        };
        Ok(ScanPage {
            records: keys
                .into_iter()
                .filter_map(|k| records.get(k).map(|r| r.view(k, now)))
                .collect(),
            unreadable: Vec::new(),
            next,
        })
    }

    fn purge_expired(&self, limit: usize) -> Result<u64, Error> {
        let now = self.clock.mono_ns();
        let mut records = self.records();
        let expired: Vec<Key> = records
            .iter()
            .filter(|(_, r)| r.completed_and_expired(now))
            .map(|(k, _)| k.clone())
            .take(limit)
            .collect();
        for k in &expired {
            records.remove(k);
        }
        Ok(expired.len() as u64)
    }

    fn shared(&self) -> Arc<dyn Store> {
        // `self` is borrowed from an `Arc<Inner>` (a `MemoryStore`'s, or one this handed out),
        // so the count is above zero and the upgrade succeeds.
        match self.me.upgrade() {
            Some(me) => me,
            None => unreachable!("a MemoryStore's records are borrowed, so they are alive"),
        }
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    fn describe(&self) -> String {
        "memory:".to_owned()
    }
}

async_via_sync!(MemoryStore);
