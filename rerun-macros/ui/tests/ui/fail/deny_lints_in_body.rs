#![deny(unused_variables, unused_mut)]

use rerun_core::{idempotent, Error};

#[idempotent(key = order_id, store = &rerun_core::MemoryStore::new())]
fn charge(order_id: &str) -> Result<u64, Error> {
    let mut unused = 1;
    Ok(order_id.len() as u64)
}

#[idempotent(key = order_id, store = &rerun_core::MemoryStore::new())]
async fn charge_async(order_id: &str) -> Result<u64, Error> {
    let forgotten = 2;
    Ok(order_id.len() as u64)
}

fn main() {}
