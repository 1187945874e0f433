use rerun_core::{idempotent, Error};

#[idempotent(key = order_id, ttl = "24h", ttl = "7d")]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn main() {}
