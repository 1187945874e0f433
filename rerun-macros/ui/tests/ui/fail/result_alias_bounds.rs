use rerun_core::idempotent;

struct Unrecorded;

#[derive(Debug)]
struct PayError;

type Fallible<T> = Result<T, PayError>;
type Recorded<E> = Result<u64, E>;
type Plain<T> = Result<T, rerun_core::Error>;

// Through an alias, what `T` and `E` lack is reported at the return type, as for `Result<T, E>`.
#[idempotent(key = id)]
fn unrecorded(id: u64) -> Plain<Unrecorded> {
    let _ = id;
    Ok(Unrecorded)
}

#[idempotent(key = id)]
fn no_from(id: u64) -> Fallible<u64> {
    Ok(id)
}

#[idempotent(key = id)]
async fn no_from_async(id: u64) -> Recorded<Unrecorded> {
    Ok(id)
}

fn main() {}
