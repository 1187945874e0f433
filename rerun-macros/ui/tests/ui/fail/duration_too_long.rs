use rerun_core::{idempotent, Error};

#[idempotent(key = order_id, ttl = "300y")]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

// humantime's years have 365.25 days: "100y" is longer than the maximum of 36500 days.
#[idempotent(key = order_id, wait = "100y", lease = "36501d")]
fn refund(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

// The maximum itself: no error here.
#[idempotent(key = order_id, ttl = "36500d")]
fn void(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn main() {}
