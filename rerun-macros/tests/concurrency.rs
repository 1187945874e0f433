//! One winner under contention: many threads and many async tasks calling one key run the
//! body once, on `MemoryStore` and `SqliteStore`; async futures stay `Send`.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;

use rerun_core::{idempotent, AsyncStore, Error, MemoryStore, SqliteStore, Store};

#[idempotent(key = key, scope = "c.hit", store = store, skip(runs), wait = "60s")]
fn hit<S: Store>(store: &S, key: &str, runs: &AtomicU32) -> Result<u64, Error> {
    let n = runs.fetch_add(1, SeqCst);
    // Long enough that the other threads find the claim in progress and wait for it.
    std::thread::sleep(std::time::Duration::from_millis(20));
    Ok(u64::from(n) + 1000)
}

#[idempotent(key = key, scope = "c.hit_async", store = &*store, skip(runs), wait = "60s")]
async fn hit_async<S: AsyncStore>(
    store: Arc<S>,
    key: String,
    runs: Arc<AtomicU32>,
) -> Result<u64, Error> {
    let n = runs.fetch_add(1, SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    Ok(u64::from(n) + 2000)
}

fn sixteen_threads_one_key<S: Store>(store: &S) {
    let runs = AtomicU32::new(0);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..16)
            .map(|_| {
                scope.spawn(|| {
                    for _ in 0..1000 {
                        assert_eq!(hit(store, "the-key", &runs).unwrap(), 1000);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    });
    assert_eq!(runs.load(SeqCst), 1, "the body ran more than once");
}

#[test]
fn sixteen_threads_times_a_thousand_calls_memory() {
    sixteen_threads_one_key(&MemoryStore::new());
}

#[test]
fn sixteen_threads_times_a_thousand_calls_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    sixteen_threads_one_key(&SqliteStore::open(dir.path().join("c.sqlite3")).unwrap());
}

fn many_tasks_one_key<S: AsyncStore + 'static>(store: Arc<S>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (store, runs) = (store.clone(), runs.clone());
                // `tokio::spawn` needs the annotated function's future to be `Send`.
                tokio::spawn(async move {
                    for _ in 0..50 {
                        let v = hit_async(store.clone(), "the-key".into(), runs.clone()).await;
                        assert_eq!(v.unwrap(), 2000);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(runs.load(SeqCst), 1, "the body ran more than once");
}

#[test]
fn async_tasks_on_a_multi_threaded_runtime_memory() {
    many_tasks_one_key(Arc::new(MemoryStore::new()));
}

#[test]
fn async_tasks_on_a_multi_threaded_runtime_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    many_tasks_one_key(Arc::new(
        SqliteStore::open(dir.path().join("c.sqlite3")).unwrap(),
    ));
}

#[async_trait::async_trait]
trait Notify {
    async fn notify(&self, user: u64) -> Result<String, Error>;
}

struct Notifier {
    store: SqliteStore,
    sent: AtomicU32,
}

#[async_trait::async_trait]
impl Notify for Notifier {
    #[idempotent(key = user, scope = "c.notify", store = &self.store, wait = "60s")]
    async fn notify(&self, user: u64) -> Result<String, Error> {
        self.sent.fetch_add(1, SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        Ok(format!("notified {user}"))
    }
}

/// `#[async_trait]` methods keep their `Send` futures: spawned from many tasks at once.
#[test]
fn async_trait_methods_spawned_on_a_multi_threaded_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let notifier = Arc::new(Notifier {
        store: SqliteStore::open(dir.path().join("n.sqlite3")).unwrap(),
        sent: AtomicU32::new(0),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let notifier = notifier.clone();
                tokio::spawn(async move {
                    for _ in 0..10 {
                        assert_eq!(notifier.notify(1).await.unwrap(), "notified 1");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(notifier.sent.load(SeqCst), 1);
}
