//! The store traits and the stores rerun ships.
//!
//! A store keeps one record per `(scope, key)` and makes every transition of
//! [`crate::record`] atomic. Its costs are the costs of rerun: a repeated call is **one** store
//! operation ([`Store::claim`] returns the recorded result when there is one: claim-or-fetch in
//! one step), a fresh call is two (claim, then [`Store::complete`]).
//!
//! Every fenced operation (`complete`, `release`, `renew`, `mark_unknown`) succeeds only while the
//! claim's fence is the record's current in-progress fence, and otherwise fails with
//! [`Error::LeaseLost`]. The conformance suite (`rerun_core::testing::conformance`, feature
//! `testing`) checks all of this on any store.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{CorruptKind, Error};
use crate::key::Key;
use crate::record::{Claim, ClaimRequest, ClaimResponse, RecordView, Status};

pub mod memory;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;

/// One page of [`Store::scan`]. A store of one's own builds it from the default (it may gain
/// fields):
///
/// ```
/// use rerun_core::store::ScanPage;
/// let mut page = ScanPage::default();
/// page.next = Some("cursor-of-the-next-page".into());
/// assert!(page.records.is_empty() && page.unreadable.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanPage {
    /// The records of this page.
    pub records: Vec<RecordView>,
    /// The records of this page that could not be read (their call fails with
    /// [`Error::Corrupt`]): a scan reads past them, so that one damaged record does not hide
    /// every other from a listing or a recovery. A filtered scan returns those of its scopes
    /// that it read (a store that selects states in its query may not read one whose state is
    /// what is damaged).
    pub unreadable: Vec<Unreadable>,
    /// Where the next page starts; `None` when this was the last.
    pub next: Option<String>,
}

/// A record a scan found but could not read: its key and what is wrong with it. It is left as it
/// is; [`Store::forget`] removes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The record's key.
    pub key: Key,
    /// What is wrong with it.
    pub kind: CorruptKind,
}

impl Unreadable {
    /// The record of a store error, if the error says a record is corrupt: what a scan puts in
    /// [`ScanPage::unreadable`]; any other error ends the scan.
    ///
    /// ```
    /// use rerun_core::store::Unreadable;
    /// use rerun_core::{CorruptKind, Error, Key};
    /// let key = Key::new("s", "k");
    /// let bad = Error::corrupt(&key, CorruptKind::Checksum);
    /// assert_eq!(Unreadable::of(bad).ok().map(|u| u.key), Some(key));
    /// assert!(Unreadable::of(Error::config("no")).is_err());
    /// ```
    pub fn of(error: Error) -> Result<Unreadable, Error> {
        match error {
            Error::Corrupt { key, kind } => Ok(Unreadable { key, kind }),
            other => Err(other),
        }
    }
}

/// Which records a scan returns: see [`Store::scan_filtered`].
///
/// ```
/// use rerun_core::store::ScanFilter;
/// use rerun_core::Status;
/// let stuck = ScanFilter::new()
///     .scope_prefix("billing.")
///     .status(Status::InProgress)
///     .status(Status::Unknown)
///     .without_results();
/// # let _ = stuck;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanFilter {
    /// Only records whose scope starts with this.
    pub scope_prefix: Option<String>,
    /// Only records in one of these states; empty: every state.
    pub statuses: Vec<Status>,
    /// Leave results out of the records returned (`result` is `None`), so that a scan for
    /// counts or stuck claims does not read every recorded result.
    pub skip_results: bool,
}

impl ScanFilter {
    /// Every record.
    pub fn new() -> ScanFilter {
        ScanFilter::default()
    }
    /// Only records whose scope starts with `prefix`.
    pub fn scope_prefix(mut self, prefix: impl Into<String>) -> ScanFilter {
        self.scope_prefix = Some(prefix.into());
        self
    }
    /// Only records in `status` (call again to add more states).
    pub fn status(mut self, status: Status) -> ScanFilter {
        if !self.statuses.contains(&status) {
            self.statuses.push(status);
        }
        self
    }
    /// Leave results out.
    pub fn without_results(mut self) -> ScanFilter {
        self.skip_results = true;
        self
    }
    /// Whether `record` is one this filter selects.
    pub fn matches(&self, record: &RecordView) -> bool {
        self.holds_scope(record.key.scope())
            && (self.statuses.is_empty() || self.statuses.contains(&record.status))
    }
    /// Whether `scope` is one of the scopes this filter selects (the records a scan could not
    /// read are selected by scope alone: their state is unknown).
    pub fn holds_scope(&self, scope: &str) -> bool {
        self.scope_prefix
            .as_deref()
            .is_none_or(|p| scope.starts_with(p))
    }
    /// The smallest scope above every scope that starts with the prefix (`None`: no bound),
    /// for stores that page in byte order: the prefix with its last character incremented.
    pub fn scope_upper_bound(&self) -> Option<String> {
        upper_bound(self.scope_prefix.as_deref()?)
    }
}

/// The least string greater than every string that starts with `prefix`, or `None` when there
/// is none (a prefix of only `char::MAX`): the end of the range a prefix selects in an index
/// ordered by code point (or by UTF-8 bytes, the same order).
pub(crate) fn upper_bound(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = last as u32 + 1;
        if (0xD800..=0xDFFF).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// A synchronous store of idempotency records.
///
/// Implementations must be atomic per call and must decide leases and expiry on one clock: the
/// server's, or a monotonic clock of the one host that shares the store — never the caller's wall
/// clock.
///
/// Every call must return within a bounded time, whatever the backend does (a locked file, a
/// silent TCP peer): a store has an operation timeout, and a call made for a claim (`complete`,
/// `release`, `renew`, `mark_unknown`) gives up after [`call_deadline`] of the claim's lease
/// with a retryable [`Error::Store`]. rerun renews each lease on a worker of its own, so a store
/// that hangs anyway delays only its own claims; but only a store that keeps its deadlines lets
/// a holder learn in time that its lease could not be kept.
///
/// A store must also survive `fork()`: a child process must not use connections it inherited
/// (they belong to the parent's sessions), but open its own.
pub trait Store: Send + Sync {
    /// Claim-or-fetch, in one atomic step: see [`crate::record::decide`] for the table.
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error>;
    /// Records the result of a claim and ends it; kept for `ttl`. Fenced.
    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error>;
    /// Gives the key back after a failed attempt; the next claim runs afresh. Fenced.
    fn release(&self, claim: &Claim) -> Result<(), Error>;
    /// Extends the claim's lease to `lease` from now. Fenced.
    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error>;
    /// Marks the claim's outcome unknown: an at-most-once body may have run. Fenced.
    fn mark_unknown(&self, claim: &Claim) -> Result<(), Error>;
    /// Removes a key's record whatever its state (an operator's decision), keeping its fence so
    /// that later tokens still grow. Returns whether there was a record.
    fn forget(&self, key: &Key) -> Result<bool, Error>;
    /// [`Store::forget`], only while the record's latest fence is `fence`: an operator who
    /// looked at a record forgets that record, never a claim made since. Returns whether it
    /// forgot.
    ///
    /// The default reads, compares, then forgets, which a claim could slip between; the stores
    /// rerun ships do it in one step, as a store written for production should.
    fn forget_if(&self, key: &Key, fence: crate::record::Fence) -> Result<bool, Error> {
        match self.inspect(key)? {
            Some(r) if r.fence == fence => self.forget(key),
            _ => Ok(false),
        }
    }
    /// Reads a key's record without changing it.
    fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error>;
    /// Pages through every record: up to about `limit` records from `cursor` (`None` starts at
    /// the beginning), and the cursor of the next page (`None` after the last). A record may be
    /// returned again in a later page (as Redis `SCAN` may), never skipped if it existed during
    /// the whole scan; the stores rerun ships return it at most once in a page. A record that
    /// cannot be decoded goes in [`ScanPage::unreadable`] and the scan goes on past it; an error
    /// is for a scan that cannot go on.
    fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error>;
    /// [`Store::scan`], of only the records `filter` selects: up to about `limit` of them from
    /// `cursor`, and the cursor of the next page (`None` after the last). A page may hold fewer
    /// records than `limit` (even none) while a next page exists.
    ///
    /// The default scans every record and keeps the ones selected; stores that can select
    /// cheaply (an index on status, scopes in key order) override it, so that finding the
    /// few stuck claims among millions of completed records reads only those.
    fn scan_filtered(
        &self,
        filter: &ScanFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, Error> {
        let mut page = self.scan(cursor, limit)?;
        page.records.retain(|r| filter.matches(r));
        page.unreadable
            .retain(|u| filter.holds_scope(u.key.scope()));
        if filter.skip_results {
            for r in &mut page.records {
                r.result = None;
            }
        }
        Ok(page)
    }
    /// Deletes up to `limit` completed records past their ttl; returns how many.
    fn purge_expired(&self, limit: usize) -> Result<u64, Error>;
    /// A shared handle to this store, with which rerun renews leases and releases claims from
    /// its background thread.
    fn shared(&self) -> Arc<dyn Store>;
    /// A one-line description for logs, without secrets (`"sqlite:/var/lib/app/rerun.sqlite3"`).
    fn describe(&self) -> String;
    /// A short name of the kind of store (`"sqlite"`, `"postgres"`), for spans and metric
    /// labels.
    fn kind(&self) -> &'static str {
        "custom"
    }
}

/// A boxed future returned by [`AsyncStore`] methods.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// The async twin of [`Store`], for `async` functions.
///
/// The local stores implement it by calling their synchronous methods (they never wait on I/O
/// long enough to matter, and need no runtime); the network stores run their own async clients.
/// Renewal and background release go through the synchronous [`Store`] half.
pub trait AsyncStore: Store {
    /// Async [`Store::claim`].
    fn claim_async<'a>(&'a self, req: &'a ClaimRequest<'a>) -> StoreFuture<'a, ClaimResponse>;
    /// Async [`Store::complete`].
    fn complete_async<'a>(
        &'a self,
        claim: &'a Claim,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()>;
    /// Async [`Store::release`].
    fn release_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()>;
    /// Async [`Store::mark_unknown`].
    fn mark_unknown_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()>;
    /// Async [`Store::inspect`]. The default calls [`Store::inspect`] in place, which suits a
    /// store that never waits on I/O for long; the network stores rerun ships await their
    /// own clients.
    fn inspect_async<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Option<RecordView>> {
        Box::pin(std::future::ready(self.inspect(key)))
    }
}

/// A store usable by both sync and async functions, as the global store is.
pub trait DynStore: Store + AsyncStore {}
impl<S: Store + AsyncStore> DynStore for S {}

/// Implements [`AsyncStore`] for a store whose sync methods never block for long.
macro_rules! async_via_sync {
    ($ty:ty) => {
        impl $crate::store::AsyncStore for $ty {
            fn claim_async<'a>(
                &'a self,
                req: &'a $crate::record::ClaimRequest<'a>,
            ) -> $crate::store::StoreFuture<'a, $crate::record::ClaimResponse> {
                Box::pin(::std::future::ready($crate::store::Store::claim(self, req)))
            }
            fn complete_async<'a>(
                &'a self,
                claim: &'a $crate::record::Claim,
                result: &'a [u8],
                ttl: ::std::time::Duration,
            ) -> $crate::store::StoreFuture<'a, ()> {
                Box::pin(::std::future::ready($crate::store::Store::complete(
                    self, claim, result, ttl,
                )))
            }
            fn release_async<'a>(
                &'a self,
                claim: &'a $crate::record::Claim,
            ) -> $crate::store::StoreFuture<'a, ()> {
                Box::pin(::std::future::ready($crate::store::Store::release(
                    self, claim,
                )))
            }
            fn mark_unknown_async<'a>(
                &'a self,
                claim: &'a $crate::record::Claim,
            ) -> $crate::store::StoreFuture<'a, ()> {
                Box::pin(::std::future::ready($crate::store::Store::mark_unknown(
                    self, claim,
                )))
            }
        }
    };
}
pub(crate) use async_via_sync;

/// [`Store`] for a handle (`$ty`) whose state is its `inner: Arc<_>` field, itself a store: every
/// call goes to the state, and [`Store::shared`] hands out the state itself (a count, no
/// allocation: the lease keeper takes it on every claim).
macro_rules! forward_store_to_inner {
    ($ty:ty) => {
        impl $crate::store::Store for $ty {
            fn claim(
                &self,
                req: &$crate::record::ClaimRequest<'_>,
            ) -> Result<$crate::record::ClaimResponse, $crate::Error> {
                self.inner.claim(req)
            }
            fn complete(
                &self,
                claim: &$crate::record::Claim,
                result: &[u8],
                ttl: ::std::time::Duration,
            ) -> Result<(), $crate::Error> {
                self.inner.complete(claim, result, ttl)
            }
            fn release(&self, claim: &$crate::record::Claim) -> Result<(), $crate::Error> {
                self.inner.release(claim)
            }
            fn renew(
                &self,
                claim: &$crate::record::Claim,
                lease: ::std::time::Duration,
            ) -> Result<(), $crate::Error> {
                self.inner.renew(claim, lease)
            }
            fn mark_unknown(&self, claim: &$crate::record::Claim) -> Result<(), $crate::Error> {
                self.inner.mark_unknown(claim)
            }
            fn forget(&self, key: &$crate::Key) -> Result<bool, $crate::Error> {
                self.inner.forget(key)
            }
            fn forget_if(
                &self,
                key: &$crate::Key,
                fence: $crate::record::Fence,
            ) -> Result<bool, $crate::Error> {
                self.inner.forget_if(key, fence)
            }
            fn inspect(
                &self,
                key: &$crate::Key,
            ) -> Result<Option<$crate::record::RecordView>, $crate::Error> {
                self.inner.inspect(key)
            }
            fn scan(
                &self,
                cursor: Option<&str>,
                limit: usize,
            ) -> Result<$crate::store::ScanPage, $crate::Error> {
                self.inner.scan(cursor, limit)
            }
            fn scan_filtered(
                &self,
                filter: &$crate::store::ScanFilter,
                cursor: Option<&str>,
                limit: usize,
            ) -> Result<$crate::store::ScanPage, $crate::Error> {
                self.inner.scan_filtered(filter, cursor, limit)
            }
            fn purge_expired(&self, limit: usize) -> Result<u64, $crate::Error> {
                self.inner.purge_expired(limit)
            }
            fn shared(&self) -> ::std::sync::Arc<dyn $crate::store::Store> {
                self.inner.clone()
            }
            fn describe(&self) -> String {
                self.inner.describe()
            }
            fn kind(&self) -> &'static str {
                self.inner.kind()
            }
        }
    };
}
pub(crate) use forward_store_to_inner;

macro_rules! forward_store {
    ($($ptr:ty),*) => {$(
        impl<S: Store + ?Sized> Store for $ptr {
            fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> { (**self).claim(req) }
            fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> { (**self).complete(claim, result, ttl) }
            fn release(&self, claim: &Claim) -> Result<(), Error> { (**self).release(claim) }
            fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> { (**self).renew(claim, lease) }
            fn mark_unknown(&self, claim: &Claim) -> Result<(), Error> { (**self).mark_unknown(claim) }
            fn forget(&self, key: &Key) -> Result<bool, Error> { (**self).forget(key) }
            fn forget_if(&self, key: &Key, fence: crate::record::Fence) -> Result<bool, Error> { (**self).forget_if(key, fence) }
            fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> { (**self).inspect(key) }
            fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> { (**self).scan(cursor, limit) }
            fn scan_filtered(&self, filter: &ScanFilter, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> { (**self).scan_filtered(filter, cursor, limit) }
            fn purge_expired(&self, limit: usize) -> Result<u64, Error> { (**self).purge_expired(limit) }
            fn shared(&self) -> Arc<dyn Store> { (**self).shared() }
            fn describe(&self) -> String { (**self).describe() }
            fn kind(&self) -> &'static str { (**self).kind() }
        }
        impl<S: AsyncStore + ?Sized> AsyncStore for $ptr {
            fn claim_async<'a>(&'a self, req: &'a ClaimRequest<'a>) -> StoreFuture<'a, ClaimResponse> { (**self).claim_async(req) }
            fn complete_async<'a>(&'a self, claim: &'a Claim, result: &'a [u8], ttl: Duration) -> StoreFuture<'a, ()> { (**self).complete_async(claim, result, ttl) }
            fn release_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> { (**self).release_async(claim) }
            fn mark_unknown_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> { (**self).mark_unknown_async(claim) }
            fn inspect_async<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Option<RecordView>> { (**self).inspect_async(key) }
        }
    )*};
}
forward_store!(Arc<S>, Box<S>);

/// A scan cursor naming the last key of a page, for stores that page in key order:
/// `{scope length}:{scope}{id}`, unambiguous whatever bytes the scope and id hold.
pub fn encode_cursor(key: &Key) -> String {
    format!("{}:{}{}", key.scope().len(), key.scope(), key.id())
}

/// Parses [`encode_cursor`].
pub fn decode_cursor(cursor: &str) -> Result<Key, Error> {
    let bad = || Error::config(format!("{cursor:?} is not a scan cursor of this store"));
    let (len, rest) = cursor.split_once(':').ok_or_else(bad)?;
    let len: usize = len.parse().map_err(|_| bad())?;
    if !rest.is_char_boundary(len.min(rest.len())) || len > rest.len() {
        return Err(bad());
    }
    let (scope, id) = rest.split_at(len);
    Ok(Key::from_parts(scope.to_owned(), id.to_owned()))
}

/// The time limit of a store call made on behalf of a claim with `lease`: the store's own
/// operation timeout, and never more than a third of the lease, so that a renewal that cannot
/// get through still leaves time for another try before the lease ends (and a caller is never
/// held much past it).
///
/// ```
/// use std::time::Duration;
/// use rerun_core::store::call_deadline;
/// assert_eq!(call_deadline(Duration::from_secs(5), Duration::from_secs(30)), Duration::from_secs(5));
/// assert_eq!(call_deadline(Duration::from_secs(5), Duration::from_secs(3)), Duration::from_secs(1));
/// assert_eq!(call_deadline(Duration::from_secs(5), Duration::MAX), Duration::from_secs(5));
/// ```
pub fn call_deadline(op_timeout: Duration, lease: Duration) -> Duration {
    op_timeout
        .min(lease / 3)
        .max(Duration::from_millis(10).min(op_timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_any_text() {
        for (scope, id) in [
            ("a", "b"),
            ("a\tb", "c\td"),
            ("", ""),
            ("12:x", ":"),
            ("é", "ü"),
        ] {
            let key = Key::from_parts(scope, id);
            assert_eq!(decode_cursor(&encode_cursor(&key)).ok(), Some(key));
        }
        for bad in ["", "x", "3:ab", "a:b", "1:\u{e9}"] {
            assert!(decode_cursor(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scope_upper_bounds_close_the_prefix_range() {
        let bound = |p: &str| ScanFilter::new().scope_prefix(p).scope_upper_bound();
        assert_eq!(bound("billing."), Some("billing/".to_owned()));
        assert_eq!(bound("a\u{10FFFF}"), Some("b".to_owned()));
        assert_eq!(bound("\u{D7FF}"), Some("\u{E000}".to_owned()));
        assert_eq!(bound("\u{10FFFF}"), None);
        assert_eq!(ScanFilter::new().scope_upper_bound(), None);
        for (scope, inside) in [
            ("billing.charge", true),
            ("billing", false),
            ("billing/x", false),
        ] {
            let upper = bound("billing.").unwrap_or_default();
            assert_eq!(scope.starts_with("billing."), inside);
            assert_eq!(
                scope >= "billing." && scope < upper.as_str(),
                inside,
                "{scope}"
            );
        }
    }
}
