use rerun_core::{idempotent, Error};

struct Receipt {
    cents: u64,
}

#[idempotent(key = order_id, store = &rerun_core::MemoryStore::new())]
fn charge(order_id: &str) -> Result<Receipt, Error> {
    Ok(Receipt { cents: order_id.len() as u64 })
}

fn main() {}
