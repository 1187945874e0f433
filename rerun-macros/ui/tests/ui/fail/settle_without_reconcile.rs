use rerun_core::{idempotent, Error, Idempotent, Reconciled};

// `settle` is the wait before a reconcile function: without one it would do nothing.
#[idempotent(key = order_id, once, settle = "5s")]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

#[derive(serde::Serialize, Idempotent)]
#[rerun(once, settle = "5s")]
struct ChargeSucceeded {
    #[rerun(key)]
    event_id: String,
}

fn check(_order_id: &&str) -> Result<Reconciled<u64>, Error> {
    Ok(Reconciled::NotDone)
}

// A settle time is a duration like the others, with the same limits.
#[idempotent(key = order_id, once, reconcile = check, settle = "a while")]
fn refund(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

#[idempotent(key = order_id, once, reconcile = check, settle = "36501d")]
fn void(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn main() {}
