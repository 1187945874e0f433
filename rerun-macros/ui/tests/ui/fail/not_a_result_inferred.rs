use rerun_core::idempotent;

#[derive(serde::Serialize, serde::Deserialize)]
struct Receipt {
    id: u64,
}

// A type of the user's that is no `Result`: the macro cannot tell it from an alias of `Result`,
// the compiler can.
#[idempotent(key = id)]
fn charge(id: u64) -> Receipt {
    Receipt { id }
}

type Count = u64;

#[idempotent(key = id)]
async fn count(id: u64) -> Count {
    id
}

fn main() {}
