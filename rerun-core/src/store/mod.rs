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

use crate::error::Error;
use crate::key::Key;
use crate::record::{Claim, ClaimRequest, ClaimResponse, RecordView};

pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "sqlite")]
pub mod sqlite;

/// One page of [`Store::scan`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanPage {
    /// The records of this page.
    pub records: Vec<RecordView>,
    /// Where the next page starts; `None` when this was the last.
    pub next: Option<String>,
}

/// A synchronous store of idempotency records.
///
/// Implementations must be atomic per call and must decide leases and expiry on one clock: the
/// server's, or a monotonic clock of the one host that shares the store — never the caller's wall
/// clock.
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
    /// Reads a key's record without changing it.
    fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error>;
    /// Pages through every record: up to about `limit` records from `cursor` (`None` starts at
    /// the beginning), and the cursor of the next page (`None` after the last). A record may be
    /// returned twice across pages (as Redis `SCAN` may), never skipped if it existed during the
    /// whole scan.
    fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error>;
    /// Deletes up to `limit` completed records past their ttl; returns how many.
    fn purge_expired(&self, limit: usize) -> Result<u64, Error>;
    /// A shared handle to this store, with which rerun renews leases and releases claims from
    /// its background thread.
    fn shared(&self) -> Arc<dyn Store>;
    /// A one-line description for logs, without secrets (`"sqlite:/var/lib/app/rerun.sqlite3"`).
    fn describe(&self) -> String;
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

macro_rules! forward_store {
    ($($ptr:ty),*) => {$(
        impl<S: Store + ?Sized> Store for $ptr {
            fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> { (**self).claim(req) }
            fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> { (**self).complete(claim, result, ttl) }
            fn release(&self, claim: &Claim) -> Result<(), Error> { (**self).release(claim) }
            fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> { (**self).renew(claim, lease) }
            fn mark_unknown(&self, claim: &Claim) -> Result<(), Error> { (**self).mark_unknown(claim) }
            fn forget(&self, key: &Key) -> Result<bool, Error> { (**self).forget(key) }
            fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> { (**self).inspect(key) }
            fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> { (**self).scan(cursor, limit) }
            fn purge_expired(&self, limit: usize) -> Result<u64, Error> { (**self).purge_expired(limit) }
            fn shared(&self) -> Arc<dyn Store> { (**self).shared() }
            fn describe(&self) -> String { (**self).describe() }
        }
        impl<S: AsyncStore + ?Sized> AsyncStore for $ptr {
            fn claim_async<'a>(&'a self, req: &'a ClaimRequest<'a>) -> StoreFuture<'a, ClaimResponse> { (**self).claim_async(req) }
            fn complete_async<'a>(&'a self, claim: &'a Claim, result: &'a [u8], ttl: Duration) -> StoreFuture<'a, ()> { (**self).complete_async(claim, result, ttl) }
            fn release_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> { (**self).release_async(claim) }
            fn mark_unknown_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> { (**self).mark_unknown_async(claim) }
        }
    )*};
}
forward_store!(Arc<S>, Box<S>);

/// A scan cursor naming the last key of a page (`scope`, a tab, the id), for stores that page
/// in key order.
pub fn encode_cursor(key: &Key) -> String {
    format!("{}\t{}", key.scope(), key.id())
}

/// Parses [`encode_cursor`].
pub fn decode_cursor(cursor: &str) -> Result<Key, Error> {
    cursor
        .split_once('\t')
        .map(|(scope, id)| Key::from_parts(scope.to_owned(), id.to_owned()))
        .ok_or_else(|| Error::config(format!("{cursor:?} is not a scan cursor of this store")))
}
