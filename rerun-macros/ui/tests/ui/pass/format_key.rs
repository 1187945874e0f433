//! A key built with `format!` from an argument captured in the string (`"{id}"`) uses that
//! argument: accepted, and each id has its own record.
use rerun_core::{idempotent, Error, MemoryStore};

#[idempotent(key = format!("order-{id}"), store = store)]
fn ship(store: &MemoryStore, id: u64) -> Result<String, Error> {
    Ok(format!("shipped {id}"))
}

#[idempotent(key = format!("{tenant:>4}/{{literal}}/{}", id), store = store)]
fn bill(store: &MemoryStore, tenant: &str, id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {
    let store = MemoryStore::new();
    assert_eq!(ship(&store, 1).unwrap(), "shipped 1");
    assert_eq!(ship(&store, 2).unwrap(), "shipped 2");
    assert_eq!(bill(&store, "acme", 7).unwrap(), 7);
}
