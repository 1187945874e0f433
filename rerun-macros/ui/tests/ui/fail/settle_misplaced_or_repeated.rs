use rerun_core::{idempotent, Error, Idempotent, Reconciled};

fn check(_order_id: &&str) -> Result<Reconciled<u64>, Error> {
    Ok(Reconciled::NotDone)
}

// A settle time is given once.
#[idempotent(key = order_id, once, reconcile = check, settle = "1s", settle = "5s")]
fn charge(order_id: &str) -> Result<u64, Error> {
    Ok(order_id.len() as u64)
}

fn check_event(_event: &ChargeSucceeded) -> Result<Reconciled<()>, Error> {
    Ok(Reconciled::NotDone)
}

#[derive(serde::Serialize, Idempotent)]
#[rerun(once, reconcile = check_event, settle = "1s", settle = "5s")]
struct ChargeSucceeded {
    #[rerun(key)]
    event_id: String,
}

// `reconcile` and `settle` belong to the type; the advice names what they need there.
#[derive(serde::Serialize, Idempotent)]
struct RefundRequested {
    #[rerun(key, reconcile = check_event, settle = "5s")]
    refund_id: String,
}

fn main() {}
