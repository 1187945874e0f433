//! The expansion itself adds no warnings under strict lints.
#![deny(warnings, unused, rust_2018_idioms, unreachable_pub, missing_docs)]

use rerun_core::{idempotent, state_changing, Error, MemoryStore, Reconciled};

fn check(_store: &MemoryStore, _n: &u64, _label: &String) -> Result<Reconciled<u64>, Error> {
    Ok(Reconciled::NotDone)
}

#[idempotent(key = n, store = store, once, reconcile = check, ttl = "1d")]
fn once(store: &MemoryStore, mut n: u64, label: String) -> Result<u64, Error> {
    n += label.len() as u64;
    Ok(n)
}

// `#[state_changing]` below `#[idempotent]`: satisfied, and its import still counts as used.
#[idempotent(key = n, store = store)]
#[state_changing]
async fn later(store: &MemoryStore, n: u64) -> Result<u64, Error> {
    if n == 0 {
        return Err(Error::config("zero"));
    }
    Ok(n)
}

fn main() {
    let store = MemoryStore::new();
    assert_eq!(once(&store, 1, "ab".into()).unwrap(), 3);
    drop(later(&store, 1));
}
