//! A function may return `Result` through an alias: `T` and `E` are inferred from it. Sync and
//! async, each runs once and replays.
#![deny(warnings, unused, rust_2018_idioms)]

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use rerun_core::{idempotent, MemoryStore};

#[derive(Debug)]
enum MyError {
    Rerun(rerun_core::Error),
}

impl From<rerun_core::Error> for MyError {
    fn from(e: rerun_core::Error) -> Self {
        MyError::Rerun(e)
    }
}

impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MyError::Rerun(e) => write!(f, "{e}"),
        }
    }
}

static RUNS: AtomicU32 = AtomicU32::new(0);

/// `anyhow`-style: a `Result` of one parameter, named `Result`, in a module of its own.
mod errors {
    pub type Result<T> = std::result::Result<T, super::MyError>;
}

/// A one-parameter alias of another name.
type Fallible<T> = Result<T, MyError>;
/// A two-parameter alias.
type Outcome<T, E> = Result<T, E>;
/// An alias without parameters (`rerun_core::Error` as the error type).
type Answer = Result<u64, rerun_core::Error>;

#[idempotent(key = id, scope = "ui.alias.module_result", store = store)]
fn module_result(store: &MemoryStore, id: u64) -> errors::Result<u64> {
    RUNS.fetch_add(1, SeqCst);
    Ok(id)
}

#[idempotent(key = id, scope = "ui.alias.module_result_async", store = store)]
async fn module_result_async(store: &MemoryStore, id: u64) -> errors::Result<u64> {
    RUNS.fetch_add(1, SeqCst);
    Ok(id)
}

mod local {
    use super::*;

    /// The alias shadows `Result` where the function is written.
    type Result<T> = std::result::Result<T, MyError>;

    #[idempotent(key = id, scope = "ui.alias.local_result", store = store)]
    pub fn local_result(store: &MemoryStore, id: u64) -> Result<String> {
        RUNS.fetch_add(1, SeqCst);
        Ok(id.to_string())
    }

    #[idempotent(key = id, scope = "ui.alias.local_result_async", store = store)]
    pub async fn local_result_async(store: &MemoryStore, id: u64) -> Result<String> {
        RUNS.fetch_add(1, SeqCst);
        Ok(id.to_string())
    }
}

#[idempotent(key = id, scope = "ui.alias.fallible", store = store)]
fn fallible(store: &MemoryStore, id: u64) -> Fallible<u64> {
    RUNS.fetch_add(1, SeqCst);
    if id == 0 {
        // `?` converts into the alias's error type, as in the function without the macro.
        Err(rerun_core::Error::config("zero"))?;
    }
    Ok(id)
}

#[idempotent(key = id, scope = "ui.alias.fallible_async", store = store)]
async fn fallible_async(store: &MemoryStore, id: u64) -> Fallible<u64> {
    RUNS.fetch_add(1, SeqCst);
    Ok(id)
}

#[idempotent(key = id, scope = "ui.alias.outcome", store = store)]
fn outcome(store: &MemoryStore, id: u64) -> Outcome<u64, MyError> {
    RUNS.fetch_add(1, SeqCst);
    Ok(id)
}

#[idempotent(key = id, scope = "ui.alias.outcome_async", store = store)]
async fn outcome_async(store: &MemoryStore, id: u64) -> Outcome<u64, rerun_core::Error> {
    RUNS.fetch_add(1, SeqCst);
    Ok(id)
}

#[idempotent(key = id, scope = "ui.alias.answer", store = store)]
fn answer(store: &MemoryStore, id: u64) -> Answer {
    RUNS.fetch_add(1, SeqCst);
    Ok(id)
}

#[idempotent(key = id, scope = "ui.alias.answer_async", store = store)]
async fn answer_async(store: &MemoryStore, id: u64) -> Answer {
    RUNS.fetch_add(1, SeqCst);
    Ok(id)
}

fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// Calls `f` twice: the body runs once, the second call replays its value.
fn twice<T: PartialEq + std::fmt::Debug, E: std::fmt::Display>(
    name: &str,
    expected: T,
    mut f: impl FnMut() -> Result<T, E>,
) {
    let before = RUNS.load(SeqCst);
    for _ in 0..2 {
        match f() {
            Ok(t) => assert_eq!(t, expected, "{name}"),
            Err(e) => panic!("{name}: {e}"),
        }
    }
    assert_eq!(
        RUNS.load(SeqCst),
        before + 1,
        "{name}: the second call replays"
    );
}

fn main() {
    let store = MemoryStore::new();
    twice("module_result", 1, || module_result(&store, 1));
    twice("module_result_async", 2, || {
        block_on(module_result_async(&store, 2))
    });
    twice("local_result", "3".to_owned(), || {
        local::local_result(&store, 3)
    });
    twice("local_result_async", "4".to_owned(), || {
        block_on(local::local_result_async(&store, 4))
    });
    twice("fallible", 5, || fallible(&store, 5));
    twice("fallible_async", 6, || block_on(fallible_async(&store, 6)));
    twice("outcome", 7, || outcome(&store, 7));
    twice("outcome_async", 8, || block_on(outcome_async(&store, 8)));
    twice("answer", 9, || answer(&store, 9));
    twice("answer_async", 10, || block_on(answer_async(&store, 10)));

    // An `Err` is returned through the alias and not recorded: the next call runs again.
    let before = RUNS.load(SeqCst);
    assert!(matches!(fallible(&store, 0), Err(MyError::Rerun(_))));
    assert!(matches!(fallible(&store, 0), Err(MyError::Rerun(_))));
    assert_eq!(RUNS.load(SeqCst), before + 2);
}
