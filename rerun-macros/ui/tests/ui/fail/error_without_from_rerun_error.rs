use rerun_core::idempotent;

#[derive(Debug)]
enum PayError {
    Declined,
}

#[idempotent(key = order_id, store = &rerun_core::MemoryStore::new())]
fn charge(order_id: &str) -> Result<u64, PayError> {
    if order_id.is_empty() {
        return Err(PayError::Declined);
    }
    Ok(1)
}

fn main() {}
