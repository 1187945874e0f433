use rerun_core::idempotent;

#[idempotent(key = id)]
fn charge(id: u64) -> u64 {
    id
}

fn main() {}
