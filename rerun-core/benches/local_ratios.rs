//! Prints, from one run, rerun's throughput on the local stores against hand-written baselines
//! doing the same work: a `Mutex<HashMap>` with the same key, fingerprint and result encoding,
//! and raw rusqlite doing the same statements; for SQLite also the simplest client doing the
//! same writes (`INSERT .. ON CONFLICT DO NOTHING` + `UPDATE`, a `SELECT` for a repeat).
//! Sequential and with 16 concurrent callers.
//!
//! `cargo bench -p rerun-core --bench local_ratios`

mod local;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use local::{rerun_call, Baseline, FloorSqlite, RawSqlite};
use rerun_core::{MemoryStore, SqliteStore};

/// Calls per second of `f` over `threads` threads for about `window`.
fn rate(threads: usize, window: Duration, f: &(dyn Fn(usize, u64) + Sync)) -> f64 {
    let calls = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (calls, f) = (&calls, &f);
            s.spawn(move || {
                let mut i = 0;
                while start.elapsed() < window {
                    for _ in 0..64 {
                        f(t, i);
                        i += 1;
                    }
                    calls.fetch_add(64, Ordering::Relaxed);
                }
            });
        }
    });
    calls.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn row(name: &str, ours: f64, theirs: f64) {
    println!(
        "| {name:<34} | {:>12.0} | {:>12.0} | {:>6.2}x | {:>8.2} us | | |",
        ours,
        theirs,
        ours / theirs,
        1e6 / ours
    );
}

fn row3(name: &str, ours: f64, theirs: f64, floor: f64) {
    println!(
        "| {name:<34} | {:>12.0} | {:>12.0} | {:>6.2}x | {:>8.2} us | {:>12.0} | {:>6.2}x |",
        ours,
        theirs,
        ours / theirs,
        1e6 / ours,
        floor,
        ours / floor
    );
}

fn main() {
    let window = Duration::from_millis(
        std::env::var("RERUN_BENCH_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1500),
    );
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("| case | rerun calls/s | same work calls/s | ratio | rerun per call | floor calls/s | vs floor |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let id = |t: usize, i: u64| 1_000_000_000 * (t as u64 + 1) + i;

    let fresh = || (MemoryStore::new(), Baseline::default());
    let (store, base) = fresh();
    let ours = rate(1, window, &|t, i| drop(rerun_call(&store, id(t, i), false)));
    let theirs = rate(1, window, &|t, i| drop(base.call(id(t, i))));
    row("memory fresh, 1 caller", ours, theirs);
    let (store, base) = fresh();
    let ours = rate(16, window, &|t, i| {
        drop(rerun_call(&store, id(t, i), false))
    });
    let theirs = rate(16, window, &|t, i| drop(base.call(id(t, i))));
    row("memory fresh, 16 callers", ours, theirs);
    rerun_call(&store, 1, false);
    base.call(1);
    let ours = rate(1, window, &|_, _| drop(rerun_call(&store, 1, false)));
    let theirs = rate(1, window, &|_, _| drop(base.call(1)));
    row("memory repeated, 1 caller", ours, theirs);
    let ours = rate(16, window, &|_, _| drop(rerun_call(&store, 1, false)));
    let theirs = rate(16, window, &|_, _| drop(base.call(1)));
    row("memory repeated, 16 callers", ours, theirs);

    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store =
        SqliteStore::open(dir.path().join("rerun.sqlite3")).unwrap_or_else(|e| panic!("{e}"));
    let raw_path = dir.path().join("raw.sqlite3");
    let raw = RawSqlite::open(&raw_path);
    let floor_path = dir.path().join("floor.sqlite3");
    let floor = FloorSqlite::open(&floor_path);
    let ours = rate(1, window, &|t, i| drop(rerun_call(&store, id(t, i), false)));
    let theirs = rate(1, window, &|t, i| drop(raw.call(id(t, i))));
    let bare = rate(1, window, &|t, i| drop(floor.call(id(t, i))));
    row3("sqlite fresh (NORMAL), 1 caller", ours, theirs, bare);
    let raws: Vec<RawSqlite> = (0..16).map(|_| RawSqlite::open(&raw_path)).collect();
    let ours = rate(16, window, &|t, i| {
        drop(rerun_call(&store, id(t, i) + 500_000_000, false))
    });
    let theirs = rate(16, window, &|t, i| {
        drop(raws[t].call(id(t, i) + 500_000_000))
    });
    let floors: Vec<FloorSqlite> = (0..16).map(|_| FloorSqlite::open(&floor_path)).collect();
    let bare = rate(16, window, &|t, i| {
        drop(floors[t].call(id(t, i) + 500_000_000))
    });
    row3("sqlite fresh (NORMAL), 16 callers", ours, theirs, bare);
    let ours = rate(1, window, &|t, i| {
        drop(rerun_call(&store, id(t, i) + 700_000_000, true))
    });
    // No baseline: the hand-written layers have no at-most-once mode.
    println!(
        "| {:<34} | {:>12.0} | {:>12} | {:>7} | {:>8.2} us | | |",
        "sqlite fresh once (FULL claim), 1",
        ours,
        "-",
        "-",
        1e6 / ours
    );
    rerun_call(&store, 1, false);
    raw.call(1);
    floor.call(1);
    let ours = rate(1, window, &|_, _| drop(rerun_call(&store, 1, false)));
    let theirs = rate(1, window, &|_, _| drop(raw.call(1)));
    let bare = rate(1, window, &|_, _| drop(floor.call(1)));
    row3("sqlite repeated, 1 caller", ours, theirs, bare);
    let ours = rate(16, window, &|_, _| drop(rerun_call(&store, 1, false)));
    let theirs = rate(16, window, &|t, _| drop(raws[t].call(1)));
    let bare = rate(16, window, &|t, _| drop(floors[t].call(1)));
    row3("sqlite repeated, 16 callers", ours, theirs, bare);
}
