//! `observe` reports what the observed call did; when that call failed, nothing, not what a
//! call made inside it did.

use rerun_core::{idempotent, observe, Error, MemoryStore};

#[idempotent(key = id, store = store)]
fn inner(store: &MemoryStore, id: u64) -> Result<u64, Error> {
    Ok(id * 100)
}

#[idempotent(key = id, store = store)]
fn outer(store: &MemoryStore, id: u64) -> Result<u64, Error> {
    inner(store, id)?;
    Err(Error::config("the outer body's own failure"))
}

#[test]
fn a_call_that_failed_reports_nothing_not_a_call_inside_it() {
    let store = MemoryStore::new();
    let (out, seen) = observe(|| outer(&store, 7));
    assert!(out.is_err());
    assert_eq!(
        seen, None,
        "the inner call's result was reported for the failed outer one"
    );
    // The inner call itself, observed alone, replays what it recorded inside the outer one.
    let (out, seen) = observe(|| inner(&store, 7));
    assert_eq!(out.ok(), Some(700));
    assert_eq!(seen.map(|s| s.replayed), Some(true));
}
