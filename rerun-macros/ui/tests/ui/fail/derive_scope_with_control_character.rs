use rerun_core::Idempotent;
use serde::Serialize;

#[derive(Serialize, Idempotent)]
#[rerun(scope = "stripe\0charge")]
struct ChargeSucceeded {
    #[rerun(key)]
    event_id: String,
}

fn main() {}
