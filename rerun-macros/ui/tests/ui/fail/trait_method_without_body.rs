use rerun_core::{idempotent, Error};

trait Billing {
    #[idempotent(key = order_id)]
    fn charge(&self, order_id: &str) -> Result<u64, Error>;
}

fn main() {}
