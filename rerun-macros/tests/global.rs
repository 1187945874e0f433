//! Functions without `store = …` use the process-wide store (`rerun_core::init`), and their
//! async futures are `Send`.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use rerun_core::{idempotent, Error, MemoryStore};

static RUNS: AtomicU32 = AtomicU32::new(0);

#[derive(Debug)]
#[allow(dead_code)] // the message is read through `Debug` when a test fails
struct AppError(String);
impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError(e.to_string())
    }
}

#[idempotent(key = user)]
fn welcome(user: u64) -> Result<String, AppError> {
    RUNS.fetch_add(1, SeqCst);
    Ok(format!("welcome {user}"))
}

#[idempotent(key = user, scope = "g.welcome_async")]
async fn welcome_async(user: u64) -> Result<String, AppError> {
    RUNS.fetch_add(1, SeqCst);
    tokio::task::yield_now().await;
    Ok(format!("hello {user}"))
}

#[test]
fn the_global_store() {
    rerun_core::init(MemoryStore::new()).unwrap();
    assert_eq!(welcome(7).unwrap(), "welcome 7");
    assert_eq!(welcome(7).unwrap(), "welcome 7");
    assert_eq!(RUNS.load(SeqCst), 1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let a = rt
        .block_on(async { tokio::spawn(welcome_async(7)).await })
        .unwrap()
        .unwrap();
    let b = rt
        .block_on(async { tokio::spawn(welcome_async(7)).await })
        .unwrap()
        .unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("hello 7", "hello 7"));
    assert_eq!(RUNS.load(SeqCst), 2);
    // The default scope is the module path and the function name.
    let key = rerun_core::Key::new("global::welcome", &7u64);
    let view = rerun_core::global().unwrap().inspect(&key).unwrap();
    assert!(view.is_some(), "no record under {key}");
}
