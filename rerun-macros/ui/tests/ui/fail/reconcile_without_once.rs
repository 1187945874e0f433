use rerun_core::{idempotent, Error, Reconciled};

fn check(_order_id: &&str) -> Result<Reconciled<u64>, Error> {
    Ok(Reconciled::NotDone)
}

#[idempotent(key = order_id, reconcile = check)]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn main() {}
