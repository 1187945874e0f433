use rerun_core::{idempotent, Error};

#[idempotent(key = id)]
const fn charge(id: u64) -> Result<u64, Error> {
    Ok(id)
}

fn main() {}
