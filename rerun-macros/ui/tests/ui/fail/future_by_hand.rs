//! Futures written by hand, boxed or not: the macro needs an `async fn` to wrap. However the body
//! is shaped (`Box::pin(async move { … })` is also what `#[async_trait]` writes), the message
//! is about the return type, never that the function "returns nothing".
use std::future::Future;
use std::pin::Pin;

use rerun_core::{idempotent, Error};

// As `futures::future::BoxFuture`.
type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

#[idempotent(key = id)]
fn boxed(id: u64) -> BoxFuture<'static, Result<u64, Error>> {
    Box::pin(async move { Ok(id) })
}

#[idempotent(key = id)]
fn opaque(id: u64) -> impl Future<Output = Result<u64, Error>> {
    Box::pin(async move { Ok(id) })
}

#[idempotent(key = id)]
fn boxed_later(id: u64) -> BoxFuture<'static, Result<u64, Error>> {
    let future = async move { Ok(id) };
    Box::pin(future)
}

fn main() {}
