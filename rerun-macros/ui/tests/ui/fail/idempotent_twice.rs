use rerun_core::{idempotent, Error, MemoryStore};

#[idempotent(key = id, store = store)]
#[idempotent(key = id, store = store)]
fn charge(store: &MemoryStore, id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {}
