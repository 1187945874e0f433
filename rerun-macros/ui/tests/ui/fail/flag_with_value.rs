use rerun_core::{idempotent, Error};

#[idempotent(key = order_id, once = true, skip = db)]
fn charge(order_id: &str, db: &str) -> Result<u64, Error> {
    Ok((order_id.len() + db.len()) as u64)
}

fn main() {}
