use rerun_core::{idempotent, Error};

#[idempotent(key = order_id, lease = "50ms")]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

// One millisecond short of the minimum.
#[idempotent(key = order_id, lease = "99ms")]
fn refund(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

// Enough: no error here.
#[idempotent(key = order_id, lease = "100ms", wait = "0s")]
fn void(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn main() {}
