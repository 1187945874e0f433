use rerun_core::{Handle, Idempotent};

#[derive(serde::Serialize, Idempotent)]
#[rerun(scope = "stripe.charge_succeeded")]
struct ChargeSucceeded {
    event_id: String,
    amount_cents: u64,
}

impl Handle for ChargeSucceeded {
    type Output = u64;
    type Error = rerun_core::Error;
    fn handle(&self) -> Result<u64, rerun_core::Error> {
        Ok(self.amount_cents)
    }
}

fn main() {
    let store = rerun_core::MemoryStore::new();
    let _ = ChargeSucceeded { event_id: String::new(), amount_cents: 1 }.run(&store);
}
