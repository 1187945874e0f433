use rerun_core::{idempotent, Error};

#[idempotent(key = order_id, lease = "500ms")]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

// One millisecond short of the minimum.
#[idempotent(key = order_id, lease = "999ms")]
fn refund(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

// Enough: no error here.
#[idempotent(key = order_id, lease = "1s", wait = "0s")]
fn void(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn main() {}
