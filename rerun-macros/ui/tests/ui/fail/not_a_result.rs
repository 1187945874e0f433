use rerun_core::idempotent;

#[idempotent(key = id)]
fn charge(id: u64) -> u64 {
    id
}

fn main() {}

// A future written by hand.
#[idempotent(key = id)]
fn by_hand(id: u64) -> impl std::future::Future<Output = Result<u64, rerun_core::Error>> {
    async move { Ok(id) }
}

// Standard types, with arguments and without: no alias of `Result`.
#[idempotent(key = id)]
fn optional(id: u64) -> Option<u64> {
    Some(id)
}

#[idempotent(key = id)]
fn unit(id: u64) -> () {
    let _ = id;
}

#[idempotent(key = id)]
fn text(id: u64) -> String {
    id.to_string()
}
