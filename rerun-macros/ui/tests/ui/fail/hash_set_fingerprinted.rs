use std::collections::{BTreeSet, HashSet};

use rerun_core::{idempotent, Error, Idempotent, MemoryStore};
use serde::Serialize;

// A fingerprinted `HashSet` argument, also inside another type.
#[idempotent(key = order_id, store = store)]
fn tag(store: &MemoryStore, order_id: u64, tags: &HashSet<String>) -> Result<u32, Error> {
    Ok(tags.len() as u32)
}

#[idempotent(key = order_id, store = store)]
fn tag_many(
    store: &MemoryStore,
    order_id: u64,
    batches: Vec<std::collections::HashSet<u8>>,
) -> Result<u32, Error> {
    Ok(batches.len() as u32)
}

// Skipped, or ordered: fine.
#[idempotent(key = order_id, store = store, skip(tags))]
fn tag_skipped(store: &MemoryStore, order_id: u64, tags: &HashSet<String>) -> Result<u32, Error> {
    Ok(tags.len() as u32)
}

#[idempotent(key = order_id, store = store)]
fn tag_sorted(store: &MemoryStore, order_id: u64, tags: &BTreeSet<String>) -> Result<u32, Error> {
    Ok(tags.len() as u32)
}

#[derive(Serialize, Idempotent)]
struct Tagged {
    #[rerun(key)]
    event_id: String,
    labels: HashSet<String>,
    #[rerun(skip)]
    seen_by: HashSet<String>,
    // `#[serde(skip)]` changes the type's serialization, not its fingerprint.
    #[serde(skip)]
    cache: HashSet<u8>,
}

fn main() {}
