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

#[rerun_core::idempotent(key = id, store = store)]
async fn inner_async(store: &MemoryStore, id: u64) -> Result<u64, Error> {
    Ok(id * 100)
}

#[rerun_core::idempotent(key = id, store = store)]
async fn outer_async(store: &MemoryStore, id: u64) -> Result<u64, Error> {
    inner_async(store, id).await?;
    // The outer call fails in a later poll than the one the inner call finished in.
    tokio::task::yield_now().await;
    Err(Error::config("the outer body's own failure"))
}

#[test]
fn an_async_call_that_failed_in_a_later_poll_reports_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let store = MemoryStore::new();
    let (out, seen) = rt.block_on(rerun_core::observe_async(outer_async(&store, 8)));
    assert!(out.is_err());
    assert_eq!(
        seen, None,
        "the inner call's result was reported for the failed outer one"
    );
    let (out, seen) = rt.block_on(rerun_core::observe_async(inner_async(&store, 8)));
    assert_eq!(out.ok(), Some(800));
    assert_eq!(seen.map(|s| s.replayed), Some(true));
}
