use rerun_core::{idempotent, Error, MemoryStore, Reconciled};

struct Billing {
    store: MemoryStore,
}

impl Billing {
    fn check(&self, _order_id: &&str) -> Result<Reconciled<u64>, Error> {
        Ok(Reconciled::NotDone)
    }

    #[idempotent(key = order_id, store = &self.store, once, reconcile = Self::check)]
    fn charge(&mut self, order_id: &str) -> Result<u64, Error> {
        Ok(order_id.len() as u64)
    }
}

fn main() {}
