use rerun_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[rerun(key, ttl = "7 days and a bit", scpoe = "x")]
struct ChargeSucceeded {
    #[rerun(key, ttl = "7d")]
    event_id: String,
    #[rerun(skip, skip)]
    received_at: u64,
}

fn main() {}
