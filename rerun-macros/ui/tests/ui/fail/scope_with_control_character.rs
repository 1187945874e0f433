use rerun_core::{idempotent, Error};

#[idempotent(key = order_id, scope = "billing\ncharge")]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

#[idempotent(key = order_id, scope = "billing.refund\t")]
fn refund(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn main() {}
