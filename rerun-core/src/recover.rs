//! Converge on startup: find the claims whose holder is gone and bring them to a known state.
//!
//! A process that dies mid-body leaves its claim in progress. The next call of the same key
//! heals it anyway (it takes the claim over), but a key that is never called again keeps a
//! stale record, and an operator wants to know what the crash left behind. [`recover`] scans
//! every record once, at startup or from a periodic job:
//!
//! | record | recover does |
//! |---|---|
//! | in progress, holder provably dead or lease run out, replayable | releases it: the next call runs afresh |
//! | in progress, holder provably dead or lease run out, `once` | marks its outcome unknown: the next call reconciles or refuses |
//! | in progress, holder alive and lease live | nothing (a running holder is never stolen from) |
//! | completed past its ttl | deletes it |
//!
//! Every change is fenced on the record's current fence, so two recoveries at once, a recovery
//! racing a takeover, or a recovery run twice all end in the same state: whoever moves a record
//! first wins, the others see [`Error::LeaseLost`] and leave it.

use std::fmt;

use crate::error::{CorruptKind, Error};
use crate::holder::Liveness;
use crate::record::{Claim, RecordView, Status};
use crate::store::{ScanFilter, Store};

/// Records read per page of the scan.
const PAGE: usize = 500;
/// Expired records deleted per call of [`Store::purge_expired`].
const PURGE_BATCH: usize = 1000;

/// What [`recover`] did (or, for a dry run, would do); its `Display` is the line it logs.
///
/// ```
/// use rerun_core::{recover, MemoryStore};
/// let done = recover(&MemoryStore::new())?;
/// assert!(done.changed_nothing());
/// assert!(done.to_string().starts_with("scanned 0 records"));
/// # Ok::<(), rerun_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recovery {
    /// Records read.
    pub scanned: u64,
    /// Stale replayable claims released (their next call runs the body afresh).
    pub released: u64,
    /// Stale at-most-once claims marked outcome-unknown (their next call reconciles or refuses).
    pub marked_unknown: u64,
    /// Records already in the unknown state, waiting for a `reconcile` function or an
    /// operator's `forget`.
    pub unknown: u64,
    /// Live claims left alone: their holder runs and renews its lease.
    pub live: u64,
    /// Stale claims another process moved first (a concurrent recovery or a takeover).
    pub moved_meanwhile: u64,
    /// Completed records past their ttl, deleted.
    pub purged: u64,
    /// Records that could not be read (each logged at `warn`; on Redis, whose scan may return a
    /// record twice, perhaps counted twice), left as they are: damaged ones fail their calls
    /// with `Corrupt` until an operator forgets them; ones a newer rerun wrote are that
    /// version's to read. The others are recovered anyway.
    pub unreadable: u64,
}

impl Recovery {
    /// Whether this recovery changed nothing: a second run right after a first one.
    pub fn changed_nothing(&self) -> bool {
        self.released == 0 && self.marked_unknown == 0 && self.purged == 0
    }
}

impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scanned {} records: released {} stale claims, marked {} unknown, purged {} expired; \
             {} live claims left alone, {} moved by another process meanwhile, {} unknown outcomes await a decision",
            self.scanned,
            self.released,
            self.marked_unknown,
            self.purged,
            self.live,
            self.moved_meanwhile,
            self.unknown
        )?;
        if self.unreadable > 0 {
            write!(
                f,
                "; {} unreadable records left as they are (`rerunctl ls` names them and `rerunctl show` says why)",
                self.unreadable
            )?;
        }
        Ok(())
    }
}

/// Whether an in-progress record's holder is gone: provably dead, or its lease ran out.
fn is_stale(record: &RecordView) -> bool {
    record.lease_remaining.is_none()
        || record
            .holder
            .as_ref()
            .is_some_and(|h| h.liveness() == Liveness::Dead)
}

/// Scans every record of `store` and brings the ones a crash left behind to a known state.
///
/// Run it when a service starts, or from a periodic job:
///
/// | record | recover does |
/// |---|---|
/// | in progress, holder provably dead or lease run out, replayable | releases it: the next call runs afresh |
/// | in progress, holder provably dead or lease run out, `once` | marks its outcome unknown: the next call reconciles or refuses |
/// | in progress, holder alive and lease live | nothing (a running holder is never stolen from) |
/// | completed past its ttl | deletes it |
///
/// Every change is fenced on the record's current fence, so two recoveries at once, a recovery
/// racing a takeover, or a recovery run twice all end in the same state: whoever moves a record
/// first wins, the others see [`Error::LeaseLost`] and leave it (counted in
/// [`Recovery::moved_meanwhile`]).
///
/// ```
/// use std::time::Duration;
/// use rerun_core::record::{ClaimRequest, Status};
/// use rerun_core::{recover, Fingerprint, Holder, Key, MemoryStore, Store};
///
/// let store = MemoryStore::new();
/// // A claim whose holder died: same pid as ours, but another process start time.
/// let mut dead = Holder::current();
/// dead.start_time += 2;
/// let key = Key::new("jobs.resize", "img-7");
/// store.claim(&ClaimRequest {
///     key: &key,
///     fingerprint: &Fingerprint::EMPTY,
///     holder: &dead,
///     lease: Duration::from_secs(30),
///     once: false,
///     steal: None,
/// })?;
///
/// let first = recover(&store)?;
/// assert_eq!(first.released, 1);
/// assert_eq!(store.inspect(&key)?.map(|r| r.status), Some(Status::Released));
/// assert!(recover(&store)?.changed_nothing());
/// # Ok::<(), rerun_core::Error>(())
/// ```
pub fn recover<S: Store + ?Sized>(store: &S) -> Result<Recovery, Error> {
    Recover::new(store).run()
}

/// [`recover`] with options: a dry run, a scope prefix, and a report after every page (for a
/// progress bar).
///
/// ```
/// use rerun_core::{MemoryStore, Recover};
/// let store = MemoryStore::new();
/// let mut pages = 0;
/// let planned = Recover::new(&store)
///     .dry_run(true)
///     .scope_prefix("billing.")
///     .on_page(|so_far| pages += 1)
///     .run()?;
/// assert!(planned.changed_nothing());
/// # Ok::<(), rerun_core::Error>(())
/// ```
#[must_use = "a Recover does nothing until it is run"]
pub struct Recover<'s, 'p, S: ?Sized> {
    store: &'s S,
    dry_run: bool,
    scope_prefix: Option<String>,
    on_page: Option<OnPage<'p>>,
}

/// The callback of [`Recover::on_page`].
type OnPage<'p> = Box<dyn FnMut(&Recovery) + 'p>;

impl<'s, 'p, S: Store + ?Sized> Recover<'s, 'p, S> {
    /// A recovery of `store`.
    pub fn new(store: &'s S) -> Self {
        Recover {
            store,
            dry_run: false,
            scope_prefix: None,
            on_page: None,
        }
    }
    /// Only count what would change: nothing is written. The counts are those a real run
    /// would start from (records may move meanwhile).
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }
    /// Only records whose scope starts with `prefix`.
    pub fn scope_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.scope_prefix = Some(prefix.into());
        self
    }
    /// Called with the counts so far after every page of records, and once more when an error
    /// stops the run, with what it changed before the error.
    pub fn on_page(mut self, f: impl FnMut(&Recovery) + 'p) -> Self {
        self.on_page = Some(Box::new(f));
        self
    }

    /// Runs it: reads only the in-progress and unknown records (where the store can select
    /// them cheaply), settles the stale claims, then purges expired records.
    pub fn run(mut self) -> Result<Recovery, Error> {
        let store = self.store;
        let mut done = Recovery::default();
        let mut filter = ScanFilter::new()
            .status(Status::InProgress)
            .status(Status::Unknown)
            .without_results();
        if let Some(p) = &self.scope_prefix {
            filter = filter.scope_prefix(p.clone());
        }
        let mut cursor: Option<String> = None;
        loop {
            let page = match store.scan_filtered(&filter, cursor.as_deref(), PAGE) {
                Ok(page) => page,
                Err(e) => return Err(self.stopped(&done, e)),
            };
            for bad in page
                .unreadable
                .iter()
                .filter(|u| filter.holds_scope(u.key.scope()))
            {
                done.unreadable += 1;
                if matches!(bad.kind, CorruptKind::UnknownVersion { .. }) {
                    tracing::warn!(key = %crate::runtime::telemetry::key_field(&bad.key), problem = %bad.kind, "rerun recovery: a record written by a newer rerun cannot be read here; it is left as it is (a process of that version recovers it)");
                } else if matches!(bad.kind, CorruptKind::ForeignKey(_)) {
                    tracing::warn!(key = %crate::runtime::telemetry::key_field(&bad.key), problem = %bad.kind, "rerun recovery: a key rerun never writes is among the records; it is left as it is (no call reaches it: delete it with the store's own client)");
                } else {
                    tracing::warn!(key = %crate::runtime::telemetry::key_field(&bad.key), problem = %bad.kind, "rerun recovery: a record cannot be read; it is left as it is, and its calls fail with Corrupt until an operator forgets it");
                }
            }
            for record in page.records.iter().filter(|r| filter.matches(r)) {
                done.scanned += 1;
                match record.status {
                    // An in-progress record always names its holder; one that does not (a
                    // damaged or hand-written row) cannot be settled, and is left for the next
                    // call of its key, which takes it over once its lease is out.
                    Status::InProgress if record.holder.is_none() => {
                        tracing::warn!(key = %crate::runtime::telemetry::key_field(&record.key), "rerun recovery: a claim in progress names no holder; it is left as it is");
                        done.unreadable += 1;
                    }
                    Status::InProgress if is_stale(record) => {
                        if self.dry_run {
                            if record.once {
                                done.marked_unknown += 1;
                            } else {
                                done.released += 1;
                            }
                        } else if let Err(e) = settle(store, record, &mut done) {
                            return Err(self.stopped(&done, e));
                        }
                    }
                    Status::InProgress => done.live += 1,
                    Status::Unknown => done.unknown += 1,
                    Status::Completed | Status::Released => {}
                }
            }
            if let Some(f) = self.on_page.as_mut() {
                f(&done);
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        if !self.dry_run && self.scope_prefix.is_none() {
            loop {
                let purged = match store.purge_expired(PURGE_BATCH) {
                    Ok(purged) => purged,
                    Err(e) => return Err(self.stopped(&done, e)),
                };
                done.purged += purged;
                if purged < PURGE_BATCH as u64 {
                    break;
                }
            }
        }
        if !self.dry_run {
            tracing::info!(store = %store.describe(), "rerun recovery: {done}");
        }
        Ok(done)
    }
}

impl<S: Store + ?Sized> Recover<'_, '_, S> {
    /// The error that stopped a run, after telling what the run changed before it: to the
    /// page callback, and in the log.
    fn stopped(&mut self, done: &Recovery, e: Error) -> Error {
        if let Some(f) = self.on_page.as_mut() {
            f(done);
        }
        if !self.dry_run {
            tracing::warn!(store = %self.store.describe(), error = %crate::runtime::telemetry::error_field(&e), "rerun recovery stopped by an error; before it: {done}");
        }
        e
    }
}

/// Releases (replayable) or marks unknown (`once`) one stale claim, fenced on its fence.
///
/// The record is read again first: a store's release and mark-unknown are fenced on the fence
/// and the state, not on the lease, and a holder whose lease lapsed may have renewed it since
/// the page was read (a renewal after a lapse stands). A claim found live again, or moved, is
/// left. What remains is the time between this read and the write, one round trip, as for an
/// operator's `forget`.
fn settle<S: Store + ?Sized>(
    store: &S,
    record: &RecordView,
    done: &mut Recovery,
) -> Result<(), Error> {
    let now = match store.inspect(&record.key) {
        Ok(Some(now)) => now,
        // Forgotten or purged meanwhile.
        Ok(None) => {
            done.moved_meanwhile += 1;
            return Ok(());
        }
        Err(Error::Corrupt { key, kind }) => {
            tracing::warn!(key = %crate::runtime::telemetry::key_field(&key), problem = %kind, "rerun recovery: a stale claim was rewritten meanwhile into a record this build cannot read; it is left as it is");
            done.unreadable += 1;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    if now.status != Status::InProgress || now.fence != record.fence {
        done.moved_meanwhile += 1;
        return Ok(());
    }
    if !is_stale(&now) {
        done.live += 1;
        return Ok(());
    }
    let Some(holder) = now.holder.clone() else {
        done.unreadable += 1;
        return Ok(());
    };
    let claim = Claim {
        key: record.key.clone(),
        fence: record.fence,
        holder,
        once: now.once,
        // Not known from the record: the default, which bounds the store call by the store's
        // own timeout.
        lease: crate::runtime::Options::new().lease_duration(),
        abandoned: None,
    };
    let moved = if now.once {
        store.mark_unknown(&claim)
    } else {
        store.release(&claim)
    };
    match moved {
        Ok(()) if now.once => done.marked_unknown += 1,
        Ok(()) => done.released += 1,
        Err(Error::LeaseLost { .. }) => done.moved_meanwhile += 1,
        // Rewritten meanwhile into what this build cannot read (by a newer rerun that took
        // it over, say): left as it is, as the scan leaves such records, and the run goes on.
        Err(Error::Corrupt { key, kind }) => {
            tracing::warn!(key = %crate::runtime::telemetry::key_field(&key), problem = %kind, "rerun recovery: a stale claim was rewritten meanwhile into a record this build cannot read; it is left as it is");
            done.unreadable += 1;
        }
        Err(e) => return Err(e),
    }
    Ok(())
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::error::CorruptKind;
    use crate::record::{Claim, ClaimRequest, ClaimResponse};
    use crate::store::memory::MemoryStore;
    use crate::testing::{Faulty, Op};
    use crate::{Fingerprint, Holder, Key};
    use std::time::Duration;

    /// A memory store in which every stale claim was rewritten, just before recovery settles
    /// it, by a newer rerun: its fenced release and mark-unknown meet a record they cannot
    /// read.
    fn rewritten_by_newer() -> Faulty {
        Faulty::new(MemoryStore::new()).before(|op| match op {
            Op::Release(claim) | Op::MarkUnknown(claim) => Err(Error::corrupt(
                &claim.key,
                CorruptKind::UnknownVersion {
                    found: 9,
                    supported: 2,
                },
            )),
            _ => Ok(()),
        })
    }

    /// `store`, whose holder of `claim` renews it right after each page of the scan is read,
    /// before recovery settles it.
    fn renewed_after_scan(store: MemoryStore, claim: Claim) -> Faulty {
        let records = store.clone();
        Faulty::new(store).after(move |op, failed| match (op, failed) {
            (Op::Scan { .. }, None) => records.renew(&claim, Duration::from_secs(300)),
            _ => Ok(()),
        })
    }

    /// A claim whose lease lapsed when the page was read and that its holder renewed before
    /// recovery reached it is live again: left alone, not released from under its holder.
    #[test]
    fn a_lapsed_claim_renewed_after_the_scan_is_left_alone() {
        let store = MemoryStore::new();
        let key = Key::new("s", "renewed");
        let holder = Holder::current();
        let claimed = store.claim(&ClaimRequest {
            key: &key,
            fingerprint: &Fingerprint::EMPTY,
            holder: &holder,
            lease: Duration::from_millis(20),
            once: false,
            steal: None,
        });
        let Ok(ClaimResponse::Claimed(claim)) = claimed else {
            panic!("{claimed:?}")
        };
        std::thread::sleep(Duration::from_millis(60));
        let store = renewed_after_scan(store, claim);
        let done = recover(&store).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (done.scanned, done.released, done.live),
            (1, 0, 1),
            "{done}"
        );
        let record = store.inspect(&key).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(record.map(|r| r.status), Some(Status::InProgress));
    }

    /// A stale claim rewritten meanwhile into a record this build cannot read is left as it
    /// is and counted unreadable; the run goes on to the other records.
    #[test]
    fn a_claim_rewritten_by_a_newer_rerun_meanwhile_does_not_end_the_run() {
        let store = rewritten_by_newer();
        let mut dead = Holder::current();
        dead.start_time += 2;
        for (id, once) in [("a", false), ("b", true)] {
            let key = Key::new("s", id);
            let claimed = store.claim(&ClaimRequest {
                key: &key,
                fingerprint: &Fingerprint::EMPTY,
                holder: &dead,
                lease: Duration::from_secs(300),
                once,
                steal: None,
            });
            assert!(
                matches!(claimed, Ok(ClaimResponse::Claimed(_))),
                "{claimed:?}"
            );
        }
        let done = recover(&store).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (
                done.scanned,
                done.unreadable,
                done.released,
                done.marked_unknown
            ),
            (2, 2, 0, 0),
            "{done}"
        );
    }
}
