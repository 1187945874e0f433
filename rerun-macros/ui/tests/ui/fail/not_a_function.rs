use rerun_core::idempotent;

#[idempotent(key = id)]
struct Charge {
    id: u64,
}

fn main() {}
