use rerun_core::{idempotent, Error, MemoryStore};

const TENANT: &str = "acme";

#[idempotent(key = TENANT)]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn main() {}

// Braces escaped, or a positional argument that is a constant: still no argument.
#[idempotent(key = format!("order-{{id}}-{}", 1), store = store)]
fn escaped(store: &MemoryStore, id: u64) -> Result<u64, Error> {
    Ok(id)
}
