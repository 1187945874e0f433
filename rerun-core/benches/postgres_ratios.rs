//! Prints, from one run, rerun's throughput on `PostgresStore` against two baselines on the raw
//! `tokio-postgres` client: the same prepared statements with the same arguments (what rerun's
//! own client code costs), and the simplest client doing the same round trips (the floor of the
//! protocol: `INSERT .. ON CONFLICT DO NOTHING` + `UPDATE` for a fresh call, a prepared
//! `SELECT` by primary key for a repeated one). Fresh calls (claim + complete, two round trips)
//! and repeated calls (one round trip), with 1, 8 and 16 concurrent callers, sync (threads) and
//! async (tasks on a 2-worker tokio runtime). The raw sides give every caller its own
//! connection, the best case for them, and keep it from window to window, as rerun's pool does.
//! Also prints each side's client CPU per call (this process's CPU time over the side's
//! windows, every thread included, divided by its calls), rerun with 8 callers against 1, and
//! the statements per call counted by the server.
//!
//! `RERUN_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p rerun-core
//! --features postgres --bench postgres_ratios`
//!
//! (`RERUN_TEST_POSTGRES_URL` is used when `RERUN_BENCH_POSTGRES_URL` is unset;
//! `RERUN_BENCH_MS` sets the measuring window of each side of a cell, default 1500 ms, split in
//! `RERUN_BENCH_ROUNDS` interleaved rounds, default 6; `RERUN_BENCH_CELLS=sync-repeated-1,...`
//! runs only the cells named. Each cell prints each side's median round and the median of the
//! per-round ratios, the rule of every ratio program here (`rounds`).)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rerun_core::store::postgres::PostgresStore;
use rerun_core::{Call, Error, Key};
use tokio_postgres::{Client, NoTls, Statement};

mod postgres;
mod rounds;
use postgres::receipt;
use rounds::{interleave, Window};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Fresh,
    Repeated,
}

/// The raw client doing what rerun does on the wire, and nothing more.
struct Raw {
    client: Client,
    statements: postgres::Statements,
}

impl Raw {
    async fn connect(url: &str, store: &PostgresStore) -> Raw {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .expect("raw connect");
        tokio::spawn(connection);
        let statements = postgres::Statements::prepare(&client, store).await;
        Raw { client, statements }
    }

    /// One call: claim-or-fetch, then (if claimed) complete.
    async fn call(&self, key: &Key) {
        let row = self.statements.call(&self.client, key).await;
        if row.get::<_, Option<i64>>(0).is_none() {
            let result: Option<Vec<u8>> = row.get(8);
            assert!(result.is_some(), "the raw repeated call found no result");
        }
    }
}

/// The simplest client doing the same round trips as rerun, with none of its guarantees: no
/// lease, no fence, no payload check. A fresh call inserts a row (`ON CONFLICT DO NOTHING`)
/// and then stores the result; a repeated call is a prepared `SELECT` by primary key.
struct Floor {
    client: Client,
    insert: Statement,
    update: Statement,
    select: Statement,
    result: Vec<u8>,
}

impl Floor {
    /// Creates the floor's table beside rerun's `table`, once, before any caller connects.
    async fn create(url: &str, table: &str) {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .expect("floor connect");
        tokio::spawn(connection);
        client
            .batch_execute(&postgres::create_floor_sql(table))
            .await
            .expect("floor table");
    }

    async fn connect(url: &str, table: &str) -> Floor {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .expect("floor connect");
        tokio::spawn(connection);
        let insert = client
            .prepare(&format!(
                "INSERT INTO \"{table}\" (scope, id) VALUES ($1, $2) ON CONFLICT DO NOTHING"
            ))
            .await
            .expect("prepare");
        let update = client
            .prepare(&format!(
                "UPDATE \"{table}\" SET result = $3 WHERE scope = $1 AND id = $2"
            ))
            .await
            .expect("prepare");
        let select = client
            .prepare(&format!(
                "SELECT result FROM \"{table}\" WHERE scope = $1 AND id = $2"
            ))
            .await
            .expect("prepare");
        Floor {
            client,
            insert,
            update,
            select,
            result: rerun_core::codec::encode(&receipt()).expect("encode"),
        }
    }

    async fn call(&self, kind: Kind, key: &Key) {
        let (scope, id) = (key.scope(), key.id());
        if kind == Kind::Repeated {
            let row = self
                .client
                .query_opt(&self.select, &[&scope, &id])
                .await
                .expect("floor select");
            if row.and_then(|r| r.get::<_, Option<Vec<u8>>>(0)).is_some() {
                return;
            }
        }
        let n = self
            .client
            .execute(&self.insert, &[&scope, &id])
            .await
            .expect("floor insert");
        if n == 1 {
            self.client
                .execute(&self.update, &[&scope, &id, &self.result])
                .await
                .expect("floor update");
        }
    }
}

/// Which raw client a baseline side runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Baseline {
    /// rerun's own statements.
    Same,
    /// The simplest statements doing the same round trips.
    Floor,
}

/// A connected raw client of either baseline.
enum Bare {
    Same(Raw),
    Floor(Floor),
}

impl Bare {
    async fn connect(url: &str, store: &PostgresStore, table: &str, baseline: Baseline) -> Bare {
        match baseline {
            Baseline::Same => Bare::Same(Raw::connect(url, store).await),
            Baseline::Floor => {
                Bare::Floor(Floor::connect(url, &postgres::floor_table(table)).await)
            }
        }
    }

    async fn call(&self, kind: Kind, key: &Key) {
        match self {
            Bare::Same(raw) => raw.call(key).await,
            Bare::Floor(floor) => floor.call(kind, key).await,
        }
    }

    fn scope(baseline: Baseline) -> &'static str {
        match baseline {
            Baseline::Same => "raw",
            Baseline::Floor => "floor",
        }
    }
}

/// The key value of caller `c`'s `i`th call; repeated calls reuse one key per caller.
fn key_value(run: u64, kind: Kind, c: usize, i: u64) -> (u64, u64, u64) {
    match kind {
        Kind::Fresh => (run, c as u64, i),
        Kind::Repeated => (0, c as u64, 0),
    }
}

fn key(scope: &'static str, run: u64, kind: Kind, c: usize, i: u64) -> Key {
    Key::new(scope, &key_value(run, kind, c, i))
}

/// The callers of one window: the flag that ends it and the calls they made.
struct Counter {
    stop: AtomicBool,
    ops: AtomicU64,
}

fn counter() -> Arc<Counter> {
    Arc::new(Counter {
        stop: AtomicBool::new(false),
        ops: AtomicU64::new(0),
    })
}

static RUN: AtomicU64 = AtomicU64::new(1);

/// rerun's sync half: `callers` threads calling `Call::run`.
fn rerun_sync(store: &PostgresStore, kind: Kind, callers: usize, dur: Duration) -> Window {
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let w = counter();
    let started = Instant::now();
    std::thread::scope(|s| {
        for c in 0..callers {
            let w = w.clone();
            s.spawn(move || {
                let mut i = 0;
                while !w.stop.load(Ordering::Relaxed) {
                    Call::new("rerun", &key_value(run, kind, c, i))
                        .run(store, || Ok::<_, Error>(receipt()))
                        .expect("rerun call");
                    i += 1;
                    w.ops.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(dur);
        w.stop.store(true, Ordering::Relaxed);
    });
    Window {
        calls: w.ops.load(Ordering::Relaxed),
        took: started.elapsed(),
    }
}

/// Raw connections kept from window to window, as rerun's pool keeps its own. A raw side that
/// opened its connections in each window and closed them at its end would leave the next window
/// the exits of as many server processes; rerun, the only side that is not raw, would always
/// come after one.
struct Kept<C> {
    baseline: Baseline,
    conns: Vec<C>,
}

/// A sync caller's connection, driven on its own current-thread runtime by whichever thread
/// uses it (what the blocking `postgres` crate does).
type SyncRaw = (tokio::runtime::Runtime, Bare);

impl<C> Kept<C> {
    fn new(baseline: Baseline) -> Kept<C> {
        Kept {
            baseline,
            conns: Vec::new(),
        }
    }

    /// At least `n` connections, opened outside any window by `open`.
    fn ensure(&mut self, n: usize, mut open: impl FnMut(Baseline) -> C) {
        while self.conns.len() < n {
            self.conns.push(open(self.baseline));
        }
    }
}

/// A sync caller's connection on a current-thread runtime of its own.
fn sync_raw(url: &str, store: &PostgresStore, table: &str, baseline: Baseline) -> SyncRaw {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let raw = rt.block_on(Bare::connect(url, store, table, baseline));
    (rt, raw)
}

/// The raw client, sync: each thread drives a connection of its own (`raws`, at least
/// `callers` of them) on that connection's current-thread runtime.
fn raw_sync(raws: &Kept<SyncRaw>, kind: Kind, callers: usize, dur: Duration) -> Window {
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let baseline = raws.baseline;
    let w = counter();
    // `ensure` opened `callers` connections; the barrier counts the threads actually started.
    let threads = raws.conns.len().min(callers);
    let ready = Arc::new(std::sync::Barrier::new(threads + 1));
    let mut started = Instant::now();
    std::thread::scope(|s| {
        for (c, (rt, raw)) in raws.conns.iter().take(threads).enumerate() {
            let (w, ready) = (w.clone(), ready.clone());
            s.spawn(move || {
                ready.wait();
                let mut i = 0;
                while !w.stop.load(Ordering::Relaxed) {
                    rt.block_on(raw.call(kind, &key(Bare::scope(baseline), run, kind, c, i)));
                    i += 1;
                    w.ops.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        ready.wait();
        started = Instant::now();
        std::thread::sleep(dur);
        w.stop.store(true, Ordering::Relaxed);
    });
    Window {
        calls: w.ops.load(Ordering::Relaxed),
        took: started.elapsed(),
    }
}

/// rerun's async half: `callers` tasks calling `Call::run_async`.
fn rerun_async(
    rt: &tokio::runtime::Runtime,
    store: &PostgresStore,
    kind: Kind,
    callers: usize,
    dur: Duration,
) -> Window {
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let w = counter();
    rt.block_on(async {
        let started = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|c| {
                let (w, store) = (w.clone(), store.clone());
                tokio::spawn(async move {
                    let mut i = 0;
                    while !w.stop.load(Ordering::Relaxed) {
                        Call::new("rerun", &key_value(run, kind, c, i))
                            .run_async(&store, async { Ok::<_, Error>(receipt()) })
                            .await
                            .expect("rerun call");
                        i += 1;
                        w.ops.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        tokio::time::sleep(dur).await;
        w.stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.expect("task");
        }
        Window {
            calls: w.ops.load(Ordering::Relaxed),
            took: started.elapsed(),
        }
    })
}

/// The raw client, async: one connection per task (`raws`, at least `callers` of them), driven
/// on the same runtime.
fn raw_async(
    rt: &tokio::runtime::Runtime,
    raws: &Kept<Arc<Bare>>,
    kind: Kind,
    callers: usize,
    dur: Duration,
) -> Window {
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let baseline = raws.baseline;
    let w = counter();
    rt.block_on(async {
        let started = Instant::now();
        let tasks: Vec<_> = raws
            .conns
            .iter()
            .take(callers)
            .enumerate()
            .map(|(c, raw)| {
                let (w, raw) = (w.clone(), raw.clone());
                tokio::spawn(async move {
                    let mut i = 0;
                    while !w.stop.load(Ordering::Relaxed) {
                        raw.call(kind, &key(Bare::scope(baseline), run, kind, c, i))
                            .await;
                        i += 1;
                        w.ops.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        tokio::time::sleep(dur).await;
        w.stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.expect("task");
        }
        Window {
            calls: w.ops.load(Ordering::Relaxed),
            took: started.elapsed(),
        }
    })
}

/// Transactions the server has counted (`pg_stat_database`), read on a new connection.
fn server_xacts(url: &str) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
        tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .await
            .expect("stats");
        row.get::<_, i64>(0) as u64
    })
}

/// Server transactions (each statement of rerun is one) spent on `n` calls through a store
/// of its own. Backends report their statistics when they exit, so the store is dropped
/// before counting; the constant cost of connecting is removed by the caller.
fn xacts_for(url: &str, table: &str, n: u64, scope: &'static str, fresh: bool) -> u64 {
    static TAG: AtomicU64 = AtomicU64::new(0);
    let tag = TAG.fetch_add(1, Ordering::Relaxed);
    let before = server_xacts(url);
    let store = PostgresStore::builder(url)
        .table(table)
        .pool_size(1)
        .connect()
        .expect("connect");
    for i in 0..n {
        let id = if fresh { (tag, i) } else { (0, 0) };
        Call::new(scope, &id)
            .run(&store, || Ok::<_, Error>(receipt()))
            .expect("call");
    }
    drop(store);
    std::thread::sleep(Duration::from_millis(500));
    server_xacts(url) - before
}

/// Statements per call: the difference between 400 and 100 calls, over 300.
fn statements_per_call(url: &str, table: &str, fresh: bool) -> f64 {
    let scope = if fresh { "rt_fresh" } else { "rt_repeat" };
    if !fresh {
        let _ = xacts_for(url, table, 1, scope, false);
    }
    let small = xacts_for(url, table, 100, scope, fresh);
    let large = xacts_for(url, table, 400, scope, fresh);
    large.saturating_sub(small) as f64 / 300.0
}

fn main() {
    let Some(url) = postgres::url() else { return };
    let window_ms: u64 = std::env::var("RERUN_BENCH_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    // Many short interleaved windows: on a shared 2-core machine the noise between windows is
    // larger than the difference being measured, and interleaving spreads it over both sides.
    let rounds = rounds::rounds(6);
    let per_round = Duration::from_millis(window_ms / rounds as u64);
    let table = format!("bench_ratios_{}", std::process::id());
    let store = PostgresStore::builder(&url)
        .table(&table)
        .pool_size(16)
        .connect()
        .expect("connect");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");

    rt.block_on(Floor::create(&url, &table));
    // Warm up: connections, prepared statements, the repeated keys of every caller.
    let _ = rerun_sync(&store, Kind::Repeated, 16, Duration::from_millis(300));
    let sync_open = |b| sync_raw(&url, &store, &table, b);
    let async_open = |b| Arc::new(rt.block_on(Bare::connect(&url, &store, &table, b)));
    let mut same_sync = Kept::<SyncRaw>::new(Baseline::Same);
    let mut floor_sync = Kept::<SyncRaw>::new(Baseline::Floor);
    let mut same_async = Kept::<Arc<Bare>>::new(Baseline::Same);
    let mut floor_async = Kept::<Arc<Bare>>::new(Baseline::Floor);
    for raws in [&mut same_sync, &mut floor_sync] {
        raws.ensure(16, sync_open);
        let _ = raw_sync(raws, Kind::Repeated, 16, Duration::from_millis(300));
    }
    let _ = rerun_async(&rt, &store, Kind::Repeated, 16, Duration::from_millis(300));

    // `RERUN_BENCH_CELLS=sync-repeated-1,async-fresh-16` runs only those cells.
    let only = std::env::var("RERUN_BENCH_CELLS").ok();
    // Round trips: statements the server ran per call (each statement is its own transaction).
    let per_fresh = statements_per_call(&url, &table, true);
    let per_repeat = statements_per_call(&url, &table, false);

    println!("PostgreSQL: rerun PostgresStore vs the raw tokio-postgres client ({window_ms} ms per side per cell)");
    println!("  same:  the raw client running rerun's own prepared statements (client overhead)");
    println!("  floor: the simplest client doing the same round trips (INSERT .. ON CONFLICT DO NOTHING + UPDATE; SELECT by primary key)");
    println!("statements (= round trips) per call, counted by the server: fresh {per_fresh:.2}, repeated {per_repeat:.2}");
    println!();
    println!(
        "| api | call | callers | rerun/s | same/s | vs same | floor/s | vs floor | rerun us | floor us | rerun cpu us | same cpu us | floor cpu us |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for api in ["sync", "async"] {
        for kind in [Kind::Fresh, Kind::Repeated] {
            for callers in [1usize, 8, 16] {
                let name = format!("{api}-{}-{callers}", format!("{kind:?}").to_lowercase());
                if only
                    .as_ref()
                    .is_some_and(|o| !o.split(',').any(|c| c == name))
                {
                    continue;
                }
                let [a, b, f] = match api {
                    "sync" => {
                        same_sync.ensure(callers, sync_open);
                        floor_sync.ensure(callers, sync_open);
                        interleave(
                            rounds,
                            [
                                &mut || rerun_sync(&store, kind, callers, per_round),
                                &mut || raw_sync(&same_sync, kind, callers, per_round),
                                &mut || raw_sync(&floor_sync, kind, callers, per_round),
                            ],
                        )
                    }
                    _ => {
                        // The sync cells' connections are closed first: the server's
                        // `max_connections` is often 100.
                        same_sync.conns.clear();
                        floor_sync.conns.clear();
                        same_async.ensure(callers, async_open);
                        floor_async.ensure(callers, async_open);
                        interleave(
                            rounds,
                            [
                                &mut || rerun_async(&rt, &store, kind, callers, per_round),
                                &mut || raw_async(&rt, &same_async, kind, callers, per_round),
                                &mut || raw_async(&rt, &floor_async, kind, callers, per_round),
                            ],
                        )
                    }
                };
                println!(
                    "| {} | {} | {} | {:.0} | {:.0} | {:.2}x | {:.0} | {:.2}x | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                    api,
                    format!("{kind:?}").to_lowercase(),
                    callers,
                    a.rate(),
                    b.rate(),
                    a.vs(&b),
                    f.rate(),
                    a.vs(&f),
                    a.us_per_call(callers),
                    f.us_per_call(callers),
                    a.cpu_us(),
                    b.cpu_us(),
                    f.cpu_us()
                );
            }
        }
    }
    println!();
    println!(
        "scaling, sync: 8 callers against 1 (interleaved windows), rerun and the floor client"
    );
    drop((same_sync, same_async, floor_async));
    floor_sync.ensure(8, sync_open);
    for kind in [Kind::Fresh, Kind::Repeated] {
        let [eight, one, raw_eight, raw_one] = interleave(
            rounds,
            [
                &mut || rerun_sync(&store, kind, 8, per_round),
                &mut || rerun_sync(&store, kind, 1, per_round),
                &mut || raw_sync(&floor_sync, kind, 8, per_round),
                &mut || raw_sync(&floor_sync, kind, 1, per_round),
            ],
        );
        println!(
            "{:<9} rerun: 1 caller {:>6.0}/s, 8 callers {:>6.0}/s, {:>5.2}x   floor: 1 caller {:>6.0}/s, 8 callers {:>6.0}/s, {:>5.2}x",
            format!("{kind:?}").to_lowercase(),
            one.rate(),
            eight.rate(),
            eight.vs(&one),
            raw_one.rate(),
            raw_eight.rate(),
            raw_eight.vs(&raw_one),
        );
    }
    drop(floor_sync);
    drop(store);
    let _ = rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, NoTls).await.ok()?;
        tokio::spawn(connection);
        client.batch_execute(&postgres::drop_sql(&table)).await.ok()
    });
}
