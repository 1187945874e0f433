//! Prints, from one run, rerun's throughput on the local stores against hand-written baselines
//! doing the same work: a `Mutex<HashMap>` with the same key, fingerprint and result encoding,
//! and raw rusqlite doing the same statements; for SQLite also the floor, the simplest client
//! (`INSERT .. ON CONFLICT DO NOTHING` + `UPDATE`, a `SELECT` for a repeat) on a three-column
//! row. For fresh calls two more floors: that client on a table that keeps an index of its open
//! records, as rerun's does for `recover`; and that client writing rerun's whole record into
//! rerun's own table and index (`RecordSqlite`: the same writes, without the reads that make
//! rerun's claim atomic and its fence monotonic). Sequential and with 16 concurrent callers.
//!
//! Each cell runs its sides in interleaved rounds (`RERUN_BENCH_ROUNDS`, default 5, of
//! `RERUN_BENCH_MS` each, default 600) and prints each side's median round and the median of the
//! per-round ratios, the rule of every ratio program here (`rounds`), so that a stretch of noise
//! on a shared machine lands on every side rather than on whichever ran then.
//!
//! `cargo bench -p rerun-core --bench local_ratios`

mod local;
mod rounds;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use local::{rerun_call, Baseline, FloorSqlite, RawSqlite, RecordSqlite};
use rerun_core::{MemoryStore, SqliteStore};
use rounds::{interleave, Side, Window};

/// Calls of `f` over `threads` threads for about `window`.
fn rate(threads: usize, window: Duration, f: &(dyn Fn(usize, u64) + Sync)) -> Window {
    rounds::on_threads(threads, window, 64, f)
}

/// The floors a row can show, in the order of the header's columns.
const FLOORS: usize = 3;

/// One row: rerun against the same work, then against each of `floors` (the rest left empty).
fn row(name: &str, ours: &Side, theirs: &Side, floors: &[&Side]) {
    let mut line = format!(
        "| {name:<34} | {:>12.0} | {:>12.0} | {:>6.2}x | {:>8.2} us |",
        ours.rate(),
        theirs.rate(),
        ours.vs(theirs),
        ours.us_per_call(1)
    );
    for floor in floors {
        line.push_str(&format!(
            " {:>12.0} | {:>6.2}x |",
            floor.rate(),
            ours.vs(floor)
        ));
    }
    for _ in floors.len()..FLOORS {
        line.push_str(" | |");
    }
    println!("{line}");
}

fn main() {
    let window = Duration::from_millis(
        std::env::var("RERUN_BENCH_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(600),
    );
    let rounds = rounds::rounds(5);
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("| case | rerun calls/s | same work calls/s | ratio | rerun per call | floor calls/s | vs floor | floor + index calls/s | vs floor + index | floor + record calls/s | vs floor + record |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // A thread's ids are 10^12 apart from the next thread's; a round's 10^9 from the next round's.
    let id = |t: usize, i: u64| 1_000_000_000_000 * (t as u64 + 1) + i;

    // Each round of a fresh cell starts its ids past the previous round's.
    let next = AtomicU64::new(0);
    // One round of fresh calls: `f(caller, id)` with ids no round used before.
    let fresh = |callers: usize, f: &(dyn Fn(usize, u64) + Sync)| {
        let b = next.fetch_add(1_000_000_000, Ordering::Relaxed);
        rate(callers, window, &|t, i| f(t, b + id(t, i)))
    };
    // A fresh cell on a new store and a new baseline, each side's ids new in every round.
    let fresh_cell = |callers: usize| {
        let (store, base) = (MemoryStore::new(), Baseline::default());
        let rates = interleave(
            rounds,
            [
                &mut || fresh(callers, &|_, k| drop(rerun_call(&store, k, false))),
                &mut || fresh(callers, &|_, k| drop(base.call(k))),
            ],
        );
        (store, base, rates)
    };

    let (_, _, [ours, theirs]) = fresh_cell(1);
    row("memory fresh, 1 caller", &ours, &theirs, &[]);
    let (store, base, [ours, theirs]) = fresh_cell(16);
    row("memory fresh, 16 callers", &ours, &theirs, &[]);
    rerun_call(&store, 1, false);
    base.call(1);
    let [ours, theirs] = interleave(
        rounds,
        [
            &mut || rate(1, window, &|_, _| drop(rerun_call(&store, 1, false))),
            &mut || rate(1, window, &|_, _| drop(base.call(1))),
        ],
    );
    row("memory repeated, 1 caller", &ours, &theirs, &[]);
    let [ours, theirs] = interleave(
        rounds,
        [
            &mut || rate(16, window, &|_, _| drop(rerun_call(&store, 1, false))),
            &mut || rate(16, window, &|_, _| drop(base.call(1))),
        ],
    );
    row("memory repeated, 16 callers", &ours, &theirs, &[]);

    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store =
        SqliteStore::open(dir.path().join("rerun.sqlite3")).unwrap_or_else(|e| panic!("{e}"));
    let raw_path = dir.path().join("raw.sqlite3");
    let floor_path = dir.path().join("floor.sqlite3");
    // One connection per caller for the hand-written sides (rerun's store pools its own).
    let raws: Vec<RawSqlite> = (0..16).map(|_| RawSqlite::open(&raw_path)).collect();
    let floors: Vec<FloorSqlite> = (0..16).map(|_| FloorSqlite::open(&floor_path)).collect();
    let indexed_path = dir.path().join("floor_indexed.sqlite3");
    let indexed: Vec<FloorSqlite> = (0..16)
        .map(|_| FloorSqlite::open_indexed(&indexed_path))
        .collect();
    let record_path = dir.path().join("floor_record.sqlite3");
    let records: Vec<RecordSqlite> = (0..16).map(|_| RecordSqlite::open(&record_path)).collect();
    for callers in [1, 16] {
        let [ours, theirs, bare, bare_indexed, record] = interleave(
            rounds,
            [
                &mut || fresh(callers, &|_, k| drop(rerun_call(&store, k, false))),
                &mut || fresh(callers, &|t, k| drop(raws[t].call(k))),
                &mut || fresh(callers, &|t, k| drop(floors[t].call(k))),
                &mut || fresh(callers, &|t, k| drop(indexed[t].call(k))),
                &mut || fresh(callers, &|t, k| drop(records[t].call(k))),
            ],
        );
        let name = format!(
            "sqlite fresh (NORMAL), {callers} caller{}",
            if callers == 1 { "" } else { "s" }
        );
        row(&name, &ours, &theirs, &[&bare, &bare_indexed, &record]);
    }
    let [ours] = interleave(
        rounds,
        [&mut || fresh(1, &|_, k| drop(rerun_call(&store, k, true)))],
    );
    // No baseline: the hand-written layers have no at-most-once mode.
    println!(
        "| {:<34} | {:>12.0} | {:>12} | {:>7} | {:>8.2} us |{}",
        "sqlite fresh once (FULL syncs), 1",
        ours.rate(),
        "-",
        "-",
        ours.us_per_call(1),
        " | |".repeat(FLOORS)
    );
    rerun_call(&store, 1, false);
    raws[0].call(1);
    floors[0].call(1);
    for callers in [1, 16] {
        let [ours, theirs, bare] = interleave(
            rounds,
            [
                &mut || rate(callers, window, &|_, _| drop(rerun_call(&store, 1, false))),
                &mut || rate(callers, window, &|t, _| drop(raws[t].call(1))),
                &mut || rate(callers, window, &|t, _| drop(floors[t].call(1))),
            ],
        );
        let name = format!(
            "sqlite repeated, {callers} caller{}",
            if callers == 1 { "" } else { "s" }
        );
        row(&name, &ours, &theirs, &[&bare]);
    }
}
