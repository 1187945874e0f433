use rerun_core::idempotent;

#[idempotent(key = id)]
fn charge(id: u64) -> u64 {
    id
}

fn main() {}

type Fallible<T> = Result<T, rerun_core::Error>;

// An alias of `Result`: the macro cannot see through it.
#[idempotent(key = id)]
fn aliased(id: u64) -> Fallible<u64> {
    Ok(id)
}

// A future written by hand.
#[idempotent(key = id)]
fn by_hand(id: u64) -> impl std::future::Future<Output = Result<u64, rerun_core::Error>> {
    async move { Ok(id) }
}

type Answer = Result<u64, rerun_core::Error>;

// An alias without arguments, and a standard type with them.
#[idempotent(key = id)]
fn plain_alias(id: u64) -> Answer {
    Ok(id)
}

#[idempotent(key = id)]
fn optional(id: u64) -> Option<u64> {
    Some(id)
}
