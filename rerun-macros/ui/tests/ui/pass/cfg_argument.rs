//! An argument under `#[cfg(…)]`: configured away, it is neither passed nor fingerprinted; kept,
//! it is fingerprinted like the others.
use rerun_core::{idempotent, Error, MemoryStore};

#[idempotent(key = id, store = store)]
fn audit(
    store: &MemoryStore,
    id: u64,
    #[cfg(any())] never: &str,
    #[cfg(all())] always: u8,
) -> Result<u64, Error> {
    Ok(id + u64::from(always))
}

fn main() {
    let store = MemoryStore::new();
    assert_eq!(audit(&store, 1, 2).unwrap(), 3);
    // The kept argument is fingerprinted: another value is another payload.
    assert!(audit(&store, 1, 5).is_err());
}
