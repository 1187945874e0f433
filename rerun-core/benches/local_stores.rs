//! Criterion benches of fresh and repeated calls on MemoryStore and SqliteStore, each beside a
//! hand-written baseline doing the same work in the same run.
//!
//! `cargo bench -p rerun-core --bench local_stores`

mod local;

use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};
use local::{rerun_call, Baseline, RawSqlite};
use rerun_core::{MemoryStore, SqliteStore};

fn memory(c: &mut Criterion) {
    let mut g = c.benchmark_group("memory");
    let store = MemoryStore::new();
    let baseline = Baseline::default();
    let next = AtomicU64::new(1_000_000);
    g.bench_function("rerun/fresh", |b| {
        b.iter(|| rerun_call(&store, next.fetch_add(1, Ordering::Relaxed), false))
    });
    g.bench_function("baseline/fresh", |b| {
        b.iter(|| baseline.call(next.fetch_add(1, Ordering::Relaxed)))
    });
    rerun_call(&store, 7, false);
    baseline.call(7);
    g.bench_function("rerun/repeated", |b| {
        b.iter(|| rerun_call(&store, 7, false))
    });
    g.bench_function("baseline/repeated", |b| b.iter(|| baseline.call(7)));
    g.finish();
}

fn sqlite(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut g = c.benchmark_group("sqlite");
    let store =
        SqliteStore::open(dir.path().join("rerun.sqlite3")).unwrap_or_else(|e| panic!("{e}"));
    let raw = RawSqlite::open(&dir.path().join("raw.sqlite3"));
    let next = AtomicU64::new(1);
    g.bench_function("rerun/fresh", |b| {
        b.iter(|| rerun_call(&store, next.fetch_add(1, Ordering::Relaxed), false))
    });
    g.bench_function("raw/fresh", |b| {
        b.iter(|| raw.call(next.fetch_add(1, Ordering::Relaxed)))
    });
    g.bench_function("rerun/fresh_once_full_sync", |b| {
        b.iter(|| rerun_call(&store, next.fetch_add(1, Ordering::Relaxed), true))
    });
    rerun_call(&store, 0, false);
    raw.call(0);
    g.bench_function("rerun/repeated", |b| {
        b.iter(|| rerun_call(&store, 0, false))
    });
    g.bench_function("raw/repeated", |b| b.iter(|| raw.call(0)));
    g.finish();
}

criterion_group!(benches, memory, sqlite);
criterion_main!(benches);
