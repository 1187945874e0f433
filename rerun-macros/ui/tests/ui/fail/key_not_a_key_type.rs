use rerun_core::{idempotent, Error};

#[derive(serde::Serialize)]
struct Order {
    id: String,
    amount: f64,
}

#[idempotent(key = order.amount)]
fn charge(order: &Order) -> Result<u64, Error> {
    Ok(order.id.len() as u64)
}

fn main() {}
