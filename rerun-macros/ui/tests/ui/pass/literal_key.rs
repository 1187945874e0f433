//! A literal key is a one-time step: every call shares its one record, on purpose.
use rerun_core::{idempotent, Error, MemoryStore};

#[idempotent(key = "migrate-v3", store = store)]
fn migrate(store: &MemoryStore, tables: &[&str]) -> Result<usize, Error> {
    Ok(tables.len())
}

fn main() {
    let store = MemoryStore::new();
    assert_eq!(migrate(&store, &["a", "b"]).unwrap(), 2);
    assert_eq!(migrate(&store, &["a", "b"]).unwrap(), 2);
}
