use rerun_core::{idempotent, Error};

const TENANT: &str = "acme";

#[idempotent(key = TENANT)]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn main() {}
