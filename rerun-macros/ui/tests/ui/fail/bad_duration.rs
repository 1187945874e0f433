use rerun_core::{idempotent, Error};

#[idempotent(key = order_id, ttl = "3 fortnights")]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

#[idempotent(key = order_id, lease = 30)]
fn refund(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

#[idempotent(key = order_id, lease = "0s")]
fn void(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn main() {}
