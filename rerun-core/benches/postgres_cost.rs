//! Where a PostgreSQL call's time goes: CPU per call on each side of the wire, for rerun, for
//! the raw client running rerun's statement, for shapes of that statement with pieces taken
//! away, and for the floor (the simplest client doing the same round trips, as in
//! `postgres_ratios`); for fresh calls also that floor on a table that keeps rerun's status and
//! expiry with their two indexes (what `recover` and purging read instead of every record), and
//! rerun's record written by a plain insert (a claim that reads nothing first), the claim
//! function's insert sent as a statement of its own, and the claim function called alone (the
//! claim without its read, with and without the function around its write). On a machine
//! where the client and the server share the cores, every microsecond of CPU on either side is
//! throughput lost, so these two figures say what a cell of `postgres_ratios` can reach.
//!
//! Repeated calls with 8 threads; fresh calls with 1 and 8. Every thread lives for the whole
//! window and keeps one connection (rerun's pool hands a thread the connection it used last).
//! Per call: calls/s; server CPU (user + system time of the `postgres` processes on this
//! machine, from `/proc`, including backends that exited); client CPU (this process); for fresh
//! calls, the WAL bytes and records written (`pg_stat_wal`, PostgreSQL 14 or later).
//!
//! `RERUN_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo bench -p rerun-core
//! --features postgres --bench postgres_cost`
//!
//! (`RERUN_TEST_POSTGRES_URL` is used when `RERUN_BENCH_POSTGRES_URL` is unset;
//! `RERUN_BENCH_MS` sets each shape's window, default 3000 ms, run in two rounds;
//! `RERUN_BENCH_CELLS=repeated-8,fresh-1` runs only the cells named, and
//! `RERUN_BENCH_SHAPES=statement,rerun` only the shapes named.) The server CPU column needs the
//! server on this machine; elsewhere it prints `-`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use rerun_core::store::postgres::PostgresStore;
use rerun_core::{Call, Error, Fingerprint, Key};
use tokio_postgres::{Client, NoTls, Statement};

mod postgres;
use postgres::receipt;

/// What one thread runs, call after call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    /// `SELECT result` by primary key from a three-column table / `INSERT .. ON CONFLICT DO
    /// NOTHING` + `UPDATE`.
    Floor,
    /// The floor's fresh call on a table that also has a status and an expiry with rerun's two
    /// partial indexes on them (`postgres::floor_indexed_table`): the insert enters the index
    /// of open records, the update moves the row to completed with an expiry. Fresh calls only.
    FloorIndexed,
    /// rerun's record written into rerun's table by a plain `INSERT .. ON CONFLICT DO NOTHING`
    /// (its fence from the table's sequence, fingerprint, holder, lease), then rerun's own
    /// completion: a claim that never reads the record first, so no takeover, steal, replay or
    /// compare-and-set. Fresh calls only.
    FloorRecord,
    /// The insert of rerun's claim function (`INSERT .. ON CONFLICT DO UPDATE .. WHERE`, the
    /// compare-and-set) sent as a statement of its own, then rerun's completion: the claim's
    /// write without the read before it and without the function around it. Fresh calls only.
    Upsert,
    /// rerun's claim function called by a statement of its own (`SELECT <table>_claim(..)`),
    /// then rerun's completion: the claim without the read before it. Fresh calls only.
    ClaimFn,
    /// `SELECT result` by primary key from rerun's table.
    ResultOnly,
    /// The columns a replay reads (status, fence, fingerprint check, holder, once, lease,
    /// expiry, result, `now()`) by primary key from rerun's table.
    Record,
    /// The same through the one-row join that makes an absent key return a row too.
    RecordJoined,
    /// rerun's claim-or-fetch statement (and its completion, for fresh calls) on a raw client.
    Statement,
    /// `Call::run` on a `PostgresStore`.
    Rerun,
}

impl Shape {
    /// The name `RERUN_BENCH_SHAPES` selects it by.
    fn name(self) -> &'static str {
        match self {
            Shape::Floor => "floor",
            Shape::FloorIndexed => "floor-indexed",
            Shape::FloorRecord => "floor-record",
            Shape::Upsert => "upsert",
            Shape::ClaimFn => "claim-fn",
            Shape::ResultOnly => "result-only",
            Shape::Record => "record",
            Shape::RecordJoined => "record-joined",
            Shape::Statement => "statement",
            Shape::Rerun => "rerun",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Shape::Floor => "floor",
            Shape::FloorIndexed => "floor, with rerun's status, expiry and their two indexes",
            Shape::FloorRecord => "rerun's record by a plain insert, rerun's completion",
            Shape::Upsert => "the claim function's insert as a statement, rerun's completion",
            Shape::ClaimFn => "rerun's claim function, called alone, rerun's completion",
            Shape::ResultOnly => "rerun's table, `SELECT result` by key",
            Shape::Record => "rerun's table, the columns a replay reads",
            Shape::RecordJoined => "the same through the one-row join",
            Shape::Statement => "rerun's statements, raw client",
            Shape::Rerun => "rerun `Call::run`",
        }
    }
}

/// One thread's raw connection and what it runs.
struct Raw {
    client: Client,
    /// The read of the read-only shapes.
    read: Option<Statement>,
    /// rerun's statements, for [`Shape::Statement`].
    statements: Option<postgres::Statements>,
    fingerprint: Vec<u8>,
    holder: String,
    result: Vec<u8>,
    shape: Shape,
}

impl Raw {
    async fn connect(url: &str, store: &PostgresStore, floor: &str, shape: Shape) -> Raw {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
        tokio::spawn(connection);
        let t = store.table();
        let columns =
            "status, fence, fingerprint = $3, holder, once, lease_until, expires_at, result, now()";
        let read = match shape {
            Shape::Floor => Some(format!(
                "SELECT result FROM {floor} WHERE scope = $1 AND id = $2"
            )),
            Shape::ResultOnly => Some(format!(
                "SELECT result FROM {t} WHERE scope = $1 AND id = $2"
            )),
            Shape::Record => Some(format!(
                "SELECT {columns} FROM {t} WHERE scope = $1 AND id = $2"
            )),
            Shape::RecordJoined => Some(format!(
                "SELECT {} FROM (SELECT 1) AS one LEFT JOIN (SELECT * FROM {t} WHERE scope = $1 AND id = $2) AS cur ON true",
                columns
                    .split(", ")
                    .map(|c| if c == "now()" { c.to_owned() } else { format!("cur.{c}") })
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Shape::FloorIndexed
            | Shape::FloorRecord
            | Shape::Upsert
            | Shape::ClaimFn
            | Shape::Statement
            | Shape::Rerun => None,
        };
        let read = match read {
            Some(sql) => Some(client.prepare(&sql).await.expect("prepare")),
            None => None,
        };
        let statements = match shape {
            Shape::Statement => Some(postgres::Statements::prepare(&client, store).await),
            _ => None,
        };
        Raw {
            client,
            read,
            statements,
            fingerprint: Fingerprint::EMPTY.0.to_vec(),
            holder: rerun_core::Holder::current().encode(),
            result: rerun_core::codec::encode(&receipt()).expect("encode"),
            shape,
        }
    }

    /// The floor's fresh call.
    async fn floor_fresh(&self, insert: &Statement, update: &Statement, key: &Key) {
        let (scope, id) = (key.scope(), key.id());
        let n = self
            .client
            .execute(insert, &[&scope, &id])
            .await
            .expect("insert");
        assert_eq!(n, 1, "the floor met a key twice");
        self.client
            .execute(update, &[&scope, &id, &self.result])
            .await
            .expect("update");
    }

    /// The two statements of a fresh call of the floor shapes (`None` for the others).
    async fn fresh_statements(
        &self,
        store: &PostgresStore,
        floor: &str,
    ) -> Option<(Statement, Statement)> {
        let t = store.table();
        let indexed = postgres::floor_indexed_table(t);
        let complete = || {
            store
                .statement_text("complete")
                .expect("rerun's completion")
                .to_owned()
        };
        let (insert, update) = match self.shape {
            Shape::Floor => (
                format!("INSERT INTO {floor} (scope, id) VALUES ($1, $2) ON CONFLICT DO NOTHING"),
                format!("UPDATE {floor} SET result = $3 WHERE scope = $1 AND id = $2"),
            ),
            Shape::FloorIndexed => (
                format!(
                    "INSERT INTO {indexed} (scope, id, status) VALUES ($1, $2, 'in_progress') \
                     ON CONFLICT DO NOTHING"
                ),
                format!(
                    "UPDATE {indexed} SET status = 'completed', result = $3, \
                     expires_at = now() + interval '1 day' WHERE scope = $1 AND id = $2"
                ),
            ),
            Shape::FloorRecord => (
                format!(
                    "INSERT INTO {t} (scope, id, status, fence, fingerprint, holder, once, \
                     lease_until, expires_at, result) VALUES ($1, $2, 'in_progress', \
                     nextval('{t}_fence'), $3, $4, false, \
                     now() + $5::float8 * interval '1 microsecond', NULL, NULL) \
                     ON CONFLICT DO NOTHING RETURNING fence"
                ),
                complete(),
            ),
            Shape::Upsert => (
                // The function's insert with its parameters: the seen fence and status NULL
                // (what a read of an absent key hands it), no fence to steal.
                format!(
                    "INSERT INTO {t} AS r (scope, id, status, fence, fingerprint, holder, once, \
                     lease_until, expires_at, result) VALUES ($1, $2, 'in_progress', \
                     nextval('{t}_fence'), $3, $4, false, \
                     now() + $5::float8 * interval '1 microsecond', NULL, NULL) \
                     ON CONFLICT (scope, id) DO UPDATE SET status = 'in_progress', \
                     fence = EXCLUDED.fence, fingerprint = EXCLUDED.fingerprint, \
                     holder = EXCLUDED.holder, once = EXCLUDED.once, \
                     lease_until = EXCLUDED.lease_until, expires_at = NULL, result = NULL, \
                     changed_at = now() \
                     WHERE r.fence = NULL::bigint AND r.status = NULL::text \
                     AND (r.status = 'released' \
                          OR (r.status = 'completed' AND r.expires_at <= now() AND NOT false) \
                          OR (r.fingerprint = $3 AND (r.status = 'unknown' \
                              OR (r.status = 'in_progress' AND (r.lease_until <= now() \
                                  OR r.fence = NULL::bigint))))) IS TRUE \
                     RETURNING fence"
                ),
                complete(),
            ),
            Shape::ClaimFn => (
                format!("SELECT {t}_claim($1, $2, $3, $4, false, $5, NULL, NULL, NULL)"),
                complete(),
            ),
            _ => return None,
        };
        Some((
            self.client.prepare(&insert).await.expect("prepare"),
            self.client.prepare(&update).await.expect("prepare"),
        ))
    }

    /// [`Shape::FloorRecord`]'s fresh call.
    async fn record_fresh(&self, insert: &Statement, complete: &Statement, key: &Key) {
        let (scope, id) = (key.scope(), key.id());
        let row = self
            .client
            .query_one(
                insert,
                &[
                    &scope,
                    &id,
                    &self.fingerprint,
                    &self.holder,
                    &postgres::LEASE_US,
                ],
            )
            .await
            .expect("insert");
        let fence: i64 = row.get(0);
        let n = self
            .client
            .execute(
                complete,
                &[&scope, &id, &fence, &self.result, &postgres::TTL_US],
            )
            .await
            .expect("complete");
        assert_eq!(n, 1, "the completion found no claim");
    }

    /// A repeated call of any shape but the floor's fresh one.
    async fn call(&self, key: &Key) {
        let (scope, id) = (key.scope(), key.id());
        let row = match self.shape {
            Shape::Floor | Shape::ResultOnly => self
                .client
                .query_one(self.read.as_ref().expect("a read"), &[&scope, &id])
                .await
                .expect("select"),
            Shape::Record | Shape::RecordJoined => self
                .client
                .query_one(
                    self.read.as_ref().expect("a read"),
                    &[&scope, &id, &self.fingerprint],
                )
                .await
                .expect("select"),
            Shape::FloorIndexed | Shape::FloorRecord | Shape::ClaimFn | Shape::Upsert => {
                unreachable!("fresh calls only")
            }
            Shape::Statement | Shape::Rerun => {
                let statements = self.statements.as_ref().expect("rerun's statements");
                statements.call(&self.client, key).await;
                return;
            }
        };
        let result: Option<Vec<u8>> = row.get(
            if self.shape == Shape::Floor || self.shape == Shape::ResultOnly {
                0
            } else {
                7
            },
        );
        assert!(result.is_some(), "a repeated call found no result");
    }
}

/// CPU time of every process named `postgres` on this machine, including the children it
/// waited for (exited backends); `None` when there are none (a remote server).
fn server_cpu() -> Option<Duration> {
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)? as u64;
    let mut ticks = 0u64;
    let mut found = false;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: the name may hold spaces, so split after its `)`.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if &stat[open + 1..close] != "postgres" {
            continue;
        }
        found = true;
        // Fields 14-17 (utime, stime, cutime, cstime) are 12-15 after `state`.
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        for f in rest.iter().skip(11).take(4) {
            ticks += f.parse::<u64>().unwrap_or(0);
        }
    }
    found.then(|| Duration::from_micros(ticks * 1_000_000 / tick))
}

/// This process's CPU time: user, system.
fn client_cpu() -> (Duration, Duration) {
    use nix::sys::resource::{getrusage, UsageWho};
    let time = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().max(0) as u64)
            + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    getrusage(UsageWho::RUSAGE_SELF)
        .map(|u| (time(u.user_time()), time(u.system_time())))
        .unwrap_or_default()
}

/// WAL bytes and records written so far (`pg_stat_wal`).
async fn wal(client: &Client) -> Option<(f64, f64)> {
    let row = client
        .query_one(
            "SELECT wal_bytes::float8, wal_records::float8 FROM pg_stat_wal",
            &[],
        )
        .await
        .ok()?;
    Some((row.get(0), row.get(1)))
}

/// What a shape cost over its windows.
#[derive(Default)]
struct Cost {
    windows: u32,
    calls: u64,
    took: Duration,
    server: Option<Duration>,
    /// User and system time.
    client: (Duration, Duration),
    wal: Option<(f64, f64)>,
}

impl Cost {
    /// Adds one window's cost; a figure missing from any window is missing from the sum.
    fn add(&mut self, c: Cost) {
        let first = self.windows == 0;
        self.windows += 1;
        self.calls += c.calls;
        self.took += c.took;
        self.client.0 += c.client.0;
        self.client.1 += c.client.1;
        self.server = if first {
            c.server
        } else {
            self.server.zip(c.server).map(|(a, b)| a + b)
        };
        self.wal = if first {
            c.wal
        } else {
            self.wal.zip(c.wal).map(|(a, b)| (a.0 + b.0, a.1 + b.1))
        };
    }
}

static RUN: AtomicU64 = AtomicU64::new(1);

#[allow(clippy::too_many_arguments)]
/// Runs `shape` on `threads` threads for `window`, each thread with its own connection (the
/// raw shapes) or the store's pool (rerun).
fn measure(
    url: &str,
    admin: (&tokio::runtime::Runtime, &Client),
    store: &PostgresStore,
    floor: &str,
    shape: Shape,
    fresh: bool,
    threads: usize,
    window: Duration,
) -> Cost {
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let value = |c: usize, i: u64| {
        if fresh {
            (run, c as u64, i)
        } else {
            (0, c as u64, 0)
        }
    };
    let key = |c: usize, i: u64| Key::new(SCOPE, &value(c, i));
    let stop = AtomicBool::new(false);
    let calls = AtomicU64::new(0);
    let ready = Barrier::new(threads + 1);
    let mut cost = Cost::default();
    std::thread::scope(|s| {
        for c in 0..threads {
            let (stop, calls, ready, key, value) = (&stop, &calls, &ready, &key, &value);
            s.spawn(move || {
                if shape == Shape::Rerun {
                    // The first call takes a connection from the pool; the thread keeps it.
                    if !fresh {
                        call_rerun(store, &value(c, 0));
                    }
                    ready.wait();
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        call_rerun(store, &value(c, i));
                        i += 1;
                        calls.fetch_add(1, Ordering::Relaxed);
                    }
                    return;
                }
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("rt");
                let raw = rt.block_on(Raw::connect(url, store, floor, shape));
                let floor_fresh = fresh
                    .then(|| rt.block_on(raw.fresh_statements(store, floor)))
                    .flatten();
                if !fresh {
                    // Warm: the first run of a prepared statement plans it.
                    rt.block_on(raw.call(&key(c, 0)));
                }
                ready.wait();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let k = key(c, i);
                    match &floor_fresh {
                        Some((insert, update))
                            if matches!(
                                shape,
                                Shape::FloorRecord | Shape::ClaimFn | Shape::Upsert
                            ) =>
                        {
                            rt.block_on(raw.record_fresh(insert, update, &k))
                        }
                        Some((insert, update)) => rt.block_on(raw.floor_fresh(insert, update, &k)),
                        None => rt.block_on(raw.call(&k)),
                    }
                    i += 1;
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        ready.wait();
        let (rt, admin) = admin;
        let wal_before = rt.block_on(wal(admin));
        let server_before = server_cpu();
        let client_before = client_cpu();
        let started = Instant::now();
        std::thread::sleep(window);
        stop.store(true, Ordering::Relaxed);
        // The calls and the clocks are read together; the calls still in flight (one a
        // thread) finish outside the window and are not counted.
        cost.calls = calls.load(Ordering::Relaxed);
        cost.took = started.elapsed();
        let client_after = client_cpu();
        cost.client = (
            client_after.0.saturating_sub(client_before.0),
            client_after.1.saturating_sub(client_before.1),
        );
        cost.server = server_cpu()
            .zip(server_before)
            .map(|(a, b)| a.saturating_sub(b));
        cost.wal = rt
            .block_on(wal(admin))
            .zip(wal_before)
            .map(|(a, b)| (a.0 - b.0, a.1 - b.1));
    });
    cost
}

/// The scope of every key.
const SCOPE: &str = "cost";
/// Threads of the repeated cells (and of the fresh cells' second row).
const THREADS: usize = 8;

fn call_rerun(store: &PostgresStore, value: &(u64, u64, u64)) {
    Call::new(SCOPE, value)
        .run(store, || Ok::<_, Error>(receipt()))
        .expect("rerun call");
}

fn main() {
    let Some(url) = postgres::url() else { return };
    let window = Duration::from_millis(
        std::env::var("RERUN_BENCH_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3000),
    ) / 2;
    let table = format!("bench_cost_{}", std::process::id());
    let floor = postgres::floor_table(&table);
    let store = PostgresStore::builder(&url)
        .table(&table)
        .pool_size(16)
        .connect()
        .expect("connect");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let admin = rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, NoTls).await.expect("connect");
        tokio::spawn(connection);
        client
            .batch_execute(&postgres::create_floor_sql(&table))
            .await
            .expect("floor table");
        client
            .batch_execute(&postgres::create_floor_indexed_sql(&table))
            .await
            .expect("indexed floor table");
        // The repeated keys, in both tables.
        for c in 0..THREADS as u64 {
            let key = Key::new(SCOPE, &(0u64, c, 0u64));
            client
                .execute(
                    &format!("INSERT INTO {floor} (scope, id, result) VALUES ($1, $2, $3)"),
                    &[
                        &key.scope(),
                        &key.id(),
                        &rerun_core::codec::encode(&receipt()).expect("encode"),
                    ],
                )
                .await
                .expect("floor key");
        }
        client
    });
    for c in 0..THREADS as u64 {
        call_rerun(&store, &(0, c, 0));
    }
    if server_cpu().is_none() {
        println!("(no `postgres` process on this machine: the server CPU column is left out)");
    }
    println!(
        "PostgreSQL, CPU per call on each side ({} ms per shape, two rounds)",
        window.as_millis() * 2
    );
    println!();
    println!("| call | threads | shape | calls/s | server cpu us | client cpu us (user + system) | total cpu us | WAL bytes | WAL records |");
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|");
    let repeated = [
        Shape::Floor,
        Shape::ResultOnly,
        Shape::Record,
        Shape::RecordJoined,
        Shape::Statement,
        Shape::Rerun,
    ];
    let fresh = [
        Shape::Floor,
        Shape::FloorIndexed,
        Shape::FloorRecord,
        Shape::Upsert,
        Shape::ClaimFn,
        Shape::Statement,
        Shape::Rerun,
    ];
    let cells: Vec<(bool, usize, &[Shape])> = vec![
        (false, THREADS, &repeated),
        (true, 1, &fresh),
        (true, THREADS, &fresh),
    ];
    let chosen = |var: &str, name: &str| {
        std::env::var(var)
            .map(|list| list.split(',').any(|n| n.trim() == name))
            .unwrap_or(true)
    };
    for (is_fresh, threads, shapes) in cells {
        let cell = format!("{}-{threads}", if is_fresh { "fresh" } else { "repeated" });
        if !chosen("RERUN_BENCH_CELLS", &cell) {
            continue;
        }
        let shapes: Vec<Shape> = shapes
            .iter()
            .copied()
            .filter(|s| chosen("RERUN_BENCH_SHAPES", s.name()))
            .collect();
        let mut totals: Vec<Cost> = shapes.iter().map(|_| Cost::default()).collect();
        for _round in 0..2 {
            for (shape, total) in shapes.iter().zip(totals.iter_mut()) {
                let cost = measure(
                    &url,
                    (&rt, &admin),
                    &store,
                    &floor,
                    *shape,
                    is_fresh,
                    threads,
                    window,
                );
                total.add(cost);
            }
        }
        for (shape, c) in shapes.iter().zip(&totals) {
            let n = c.calls.max(1) as f64;
            let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
            let server = c.server.map(us);
            let (user, system) = (us(c.client.0), us(c.client.1));
            let client = user + system;
            let show = |v: Option<f64>, digits: usize| {
                v.map_or("-".to_owned(), |v| format!("{v:.digits$}"))
            };
            println!(
                "| {} | {threads} | {} | {:.0} | {} | {client:.1} ({user:.1} + {system:.1}) | {} | {} | {} |",
                if is_fresh { "fresh" } else { "repeated" },
                shape.describe(),
                n / c.took.as_secs_f64(),
                show(server, 1),
                show(server.map(|s| s + client), 1),
                if is_fresh {
                    show(c.wal.map(|w| w.0 / n), 0)
                } else {
                    "".into()
                },
                if is_fresh {
                    show(c.wal.map(|w| w.1 / n), 1)
                } else {
                    "".into()
                },
            );
        }
    }
    drop(store);
    rt.block_on(async {
        let dropped = admin.batch_execute(&postgres::drop_sql(&table)).await;
        if let Err(e) = dropped {
            eprintln!("dropping the benchmark's tables: {e}");
        }
    });
}
