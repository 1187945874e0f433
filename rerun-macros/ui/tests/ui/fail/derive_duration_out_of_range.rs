use rerun_core::Idempotent;
use serde::Serialize;

#[derive(Serialize, Idempotent)]
#[rerun(ttl = "300y", lease = "1ms", wait = "0s")]
struct ChargeSucceeded {
    #[rerun(key)]
    event_id: String,
}

fn main() {}
