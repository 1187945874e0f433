use rerun_core::{idempotent, Error};

struct Db;

#[idempotent(key = order_id)]
fn charge(order_id: &str, db: &mut Db) -> Result<u64, Error> {
    let _ = db;
    Ok(order_id.len() as u64)
}

fn main() {}
