//! A tuple key borrows the values it names: a field of a borrowed argument cannot be moved out,
//! and an argument the fingerprint reads after the key must not be. The key is the one a tuple
//! of the values themselves gives.
#![deny(warnings, unused, rust_2018_idioms)]

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use rerun_core::{idempotent, Error, Key, MemoryStore, Store};

#[derive(serde::Serialize)]
struct Order {
    customer: String,
    seq: u64,
}

static RUNS: AtomicU32 = AtomicU32::new(0);

// Fields of a borrowed argument (`String` is not `Copy`).
#[idempotent(key = (order.customer, order.seq), scope = "ui.tuple_fields", store = store)]
fn by_fields(store: &MemoryStore, order: &Order) -> Result<u64, Error> {
    RUNS.fetch_add(1, SeqCst);
    Ok(order.seq)
}

// Arguments taken by value, fingerprinted after the key is built.
#[idempotent(key = (tenant, id), scope = "ui.tuple_args", store = store)]
fn by_value(store: &MemoryStore, tenant: String, id: u64) -> Result<String, Error> {
    RUNS.fetch_add(1, SeqCst);
    Ok(format!("{tenant}-{id}"))
}

// Nested and parenthesized tuples, in an async fn.
#[idempotent(key = ((tenant, (region, id))), scope = "ui.tuple_nested", store = store)]
async fn nested(
    store: &MemoryStore,
    tenant: String,
    region: String,
    id: u64,
) -> Result<u64, Error> {
    RUNS.fetch_add(1, SeqCst);
    Ok(id + tenant.len() as u64 + region.len() as u64)
}

// A trailing-comma tuple of one, and a computed part.
#[idempotent(key = (name.to_uppercase(), (name,)), scope = "ui.tuple_computed", store = store)]
fn computed(store: &MemoryStore, name: String) -> Result<usize, Error> {
    RUNS.fetch_add(1, SeqCst);
    Ok(name.len())
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

fn recorded(store: &MemoryStore, key: Key) {
    let view = store.inspect(&key).unwrap();
    assert!(view.is_some(), "no record under {key:?}");
}

fn main() {
    let store = MemoryStore::new();
    let order = Order {
        customer: "cus_1".to_owned(),
        seq: 7,
    };
    assert_eq!(by_fields(&store, &order).unwrap(), 7);
    assert_eq!(by_fields(&store, &order).unwrap(), 7);
    assert_eq!(RUNS.load(SeqCst), 1, "the second call replays");
    recorded(
        &store,
        Key::new("ui.tuple_fields", &("cus_1".to_owned(), 7u64)),
    );

    assert_eq!(by_value(&store, "t1".to_owned(), 9).unwrap(), "t1-9");
    assert_eq!(by_value(&store, "t1".to_owned(), 9).unwrap(), "t1-9");
    assert_eq!(RUNS.load(SeqCst), 2, "the second call replays");
    recorded(&store, Key::new("ui.tuple_args", &("t1".to_owned(), 9u64)));

    let call = || nested(&store, "t".to_owned(), "eu".to_owned(), 1);
    assert_eq!(block_on(call()).unwrap(), 4);
    assert_eq!(block_on(call()).unwrap(), 4);
    assert_eq!(RUNS.load(SeqCst), 3, "the second call replays");
    recorded(
        &store,
        Key::new(
            "ui.tuple_nested",
            &("t".to_owned(), ("eu".to_owned(), 1u64)),
        ),
    );

    assert_eq!(computed(&store, "ab".to_owned()).unwrap(), 2);
    assert_eq!(computed(&store, "ab".to_owned()).unwrap(), 2);
    assert_eq!(RUNS.load(SeqCst), 4, "the second call replays");
    recorded(
        &store,
        Key::new("ui.tuple_computed", &("AB".to_owned(), ("ab".to_owned(),))),
    );
}
