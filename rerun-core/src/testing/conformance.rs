//! The store conformance suite: every guarantee of a store, checked on any store.
//!
//! A store author implements [`Factory`] and calls [`run`] from a `#[test]`.

use crate::error::Error;
use crate::store::DynStore;

/// Makes fresh, isolated stores for the suite, and reopens them in child processes.
pub trait Factory: Send + Sync + 'static {
    /// The store under test.
    type Store: DynStore;
    /// A short name for reports (`"sqlite"`).
    fn name(&self) -> &str;
    /// A store with no records, isolated from every other fresh store (its own file, table or
    /// key prefix), and a locator string with which [`Factory::reopen`] opens the same store.
    fn fresh(&self) -> Result<(Self::Store, String), Error>;
    /// Opens the store that `fresh` returned `locator` for, possibly in another process.
    fn reopen(&self, locator: &str) -> Result<Self::Store, Error>;
    /// Whether several processes can share one store (`false` for an in-process store); the
    /// multi-process checks run only when it is `true`.
    fn shared_between_processes(&self) -> bool {
        true
    }
}
