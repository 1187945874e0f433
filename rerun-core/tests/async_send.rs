//! Futures of async calls are `Send` whatever the store's type: a concrete store, a reference
//! to a trait object, or an `Arc` of one — so they can be spawned on a multi-threaded runtime.

use std::sync::Arc;

use rerun_core::{Call, DynStore, Error, MemoryStore};

fn spawnable<F: std::future::Future + Send>(f: F) -> F {
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_calls_are_send_for_every_store_type() {
    let concrete = MemoryStore::new();
    let shared: Arc<dyn DynStore> = Arc::new(MemoryStore::new());
    let object: &dyn DynStore = &*shared;
    let a = spawnable(Call::new("s", "a").run_async(&concrete, async { Ok::<_, Error>(1u8) }));
    let b = spawnable(Call::new("s", "b").run_async(object, async { Ok::<_, Error>(2u8) }));
    let shared2 = shared.clone();
    let c = tokio::spawn(async move {
        Call::new("s", "c")
            .run_async(&*shared2, async { Ok::<_, Error>(3u8) })
            .await
            .map(|o| o.value)
    });
    assert_eq!(a.await.unwrap().value, 1);
    assert_eq!(b.await.unwrap().value, 2);
    assert_eq!(c.await.unwrap().unwrap(), 3);
}
