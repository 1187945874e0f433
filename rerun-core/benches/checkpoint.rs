//! What a `checkpoint!` costs outside the harness: a hot function with and without one.
//!
//! `cargo bench -p rerun-core --features testing --bench checkpoint`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rerun_core::checkpoint::{self, Point};

const N: u64 = 4096;

/// A hot step: a little arithmetic, as in a parser or a pricing loop.
#[inline(never)]
fn step_plain(acc: u64, x: u64) -> u64 {
    acc.wrapping_mul(6364136223846793005)
        .wrapping_add(x ^ (acc >> 17))
}

/// The same step with a crash point in it.
#[inline(never)]
fn step_checked(acc: u64, x: u64) -> u64 {
    let out = acc
        .wrapping_mul(6364136223846793005)
        .wrapping_add(x ^ (acc >> 17));
    rerun_core::checkpoint!("step");
    out
}

fn hot(c: &mut Criterion) {
    let mut g = c.benchmark_group("hot_loop");
    g.throughput(Throughput::Elements(N));
    g.bench_function("without_checkpoints", |b| {
        b.iter(|| (0..N).fold(black_box(1u64), |acc, x| step_plain(acc, black_box(x))))
    });
    g.bench_function("with_checkpoints", |b| {
        b.iter(|| (0..N).fold(black_box(1u64), |acc, x| step_checked(acc, black_box(x))))
    });
    // While a harness runs on another thread, its hook is installed but ignores this thread.
    let previous = checkpoint::set_hook(Some(Arc::new(|_: Point| {})));
    g.bench_function("with_checkpoints_hook_installed", |b| {
        b.iter(|| (0..N).fold(black_box(1u64), |acc, x| step_checked(acc, black_box(x))))
    });
    checkpoint::set_hook(previous);
    g.finish();
}

criterion_group!(benches, hot);
criterion_main!(benches);
