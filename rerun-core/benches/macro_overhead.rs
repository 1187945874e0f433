//! `#[idempotent]` costs what the hand-written `Call` costs: the same store operations, the same
//! fingerprint bytes. Compared on `MemoryStore` and `SqliteStore`, for a fresh key (claim, body,
//! complete) and a repeated one (one claim-or-fetch that replays).
//!
//! `cargo bench -p rerun-core --bench macro_overhead`

// The functions return `rerun_core::Error` itself, as a user's function may.
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use rerun_core::{idempotent, Call, Error, MemoryStore, Options, SqliteStore, Store};
use serde::Serialize;

#[derive(Serialize)]
struct Order {
    customer: String,
    cents: u64,
}

#[idempotent(key = id, scope = "bench.macro", store = store)]
fn with_macro<S: Store>(store: &S, id: u64, order: &Order) -> Result<u64, Error> {
    Ok(id + order.cents)
}

fn by_hand<S: Store>(store: &S, id: u64, order: &Order) -> Result<u64, Error> {
    Call::new("bench.hand", &id)
        .payload(&(&id, order))
        .options(Options::new())
        .run(store, || Ok(id + order.cents))
        .map(|outcome| outcome.value)
}

type Op<S> = fn(&S, u64, &Order) -> Result<u64, Error>;

/// Each variant gets a store of its own, so neither pays for records the other wrote.
fn compare<S: Store>(c: &mut Criterion, store_name: &str, make: impl Fn(&str) -> Option<S>) {
    let order = Order {
        customer: "cus_1".into(),
        cents: 500,
    };
    let ops: [(&str, Op<S>); 2] = [("macro", with_macro::<S>), ("hand", by_hand::<S>)];

    let mut fresh = c.benchmark_group(format!("{store_name}/fresh"));
    for (name, op) in ops {
        let Some(store) = make(&format!("fresh-{name}")) else {
            return;
        };
        // Keys never repeat: every call claims, runs the body and records.
        let next = AtomicU64::new(0);
        fresh.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let id = next.fetch_add(1, Ordering::Relaxed);
                black_box(op(&store, id, &order))
            })
        });
    }
    fresh.finish();

    let mut repeated = c.benchmark_group(format!("{store_name}/repeated"));
    for (name, op) in ops {
        let Some(store) = make(&format!("repeated-{name}")) else {
            return;
        };
        // One key: after the first call, every call replays the recorded result.
        let _ = op(&store, 7, &order);
        repeated.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| black_box(op(&store, 7, &order)))
        });
    }
    repeated.finish();
}

fn memory(c: &mut Criterion) {
    compare(c, "memory", |_| Some(MemoryStore::new()));
}

fn sqlite(c: &mut Criterion) {
    let Ok(dir) = tempfile::tempdir() else {
        eprintln!("no temporary directory: skipping the SQLite benchmarks");
        return;
    };
    compare(c, "sqlite", |name| {
        SqliteStore::open(dir.path().join(format!("{name}.sqlite3")))
            .map_err(|e| eprintln!("cannot open SQLite ({e}): skipping the SQLite benchmarks"))
            .ok()
    });
}

criterion_group!(benches, memory, sqlite);
criterion_main!(benches);
