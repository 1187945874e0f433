//! Prints, from one run, rerun's throughput on `RedisStore` against the raw `redis` client
//! running the same Lua scripts with the same arguments: fresh calls (claim + complete, two
//! round trips) and repeated calls (one claim-or-fetch round trip), with 1 and 16 concurrent
//! callers, sync (threads, one connection each) and async (tasks on one multiplexed
//! connection, on a 2-worker tokio runtime). Also counts `EVALSHA`s per call on the server.
//!
//! `RERUN_BENCH_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p rerun-core --features redis --bench redis_ratios`
//!
//! (`RERUN_TEST_REDIS_URL` is used when `RERUN_BENCH_REDIS_URL` is unset; `RERUN_BENCH_MS`
//! sets the measuring window of each side of a cell, default 3000 ms, split in 10 interleaved
//! rounds; each cell reports the medians.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Script;
use rerun_core::store::redis::{RedisOptions, RedisStore, SCHEMA_VERSION};
use rerun_core::{Call, Error, Fingerprint, Holder};
use serde::{Deserialize, Serialize};

/// A small result, as a typical idempotent function returns.
#[derive(Serialize, Deserialize)]
struct Receipt {
    id: u64,
    amount_cents: u64,
    status: String,
}

fn script(source: &str) -> Script {
    Script::new(&source.replace("@SCHEMA@", &SCHEMA_VERSION.to_string()))
}

/// The raw client doing what rerun does on the wire, and nothing more.
struct Raw {
    claim: Script,
    complete: Script,
    prefix: String,
    fingerprint: Vec<u8>,
    holder: Vec<u8>,
    result: Vec<u8>,
}

impl Raw {
    fn new(prefix: &str) -> Raw {
        Raw {
            claim: script(include_str!("../src/store/redis/claim.lua")),
            complete: script(include_str!("../src/store/redis/complete.lua")),
            prefix: prefix.to_owned(),
            fingerprint: Fingerprint::of(&1u64)
                .map(|f| f.0.to_vec())
                .unwrap_or_default(),
            holder: Holder::current().encode().into_bytes(),
            result: rerun_core::codec::encode(&Receipt {
                id: 1,
                amount_cents: 500,
                status: "paid".to_owned(),
            })
            .unwrap_or_default(),
        }
    }
    fn key(&self, i: u64) -> String {
        format!("{}{{bench:{i}}}", self.prefix)
    }
    fn claim_cmd(&self, i: u64) -> redis::ScriptInvocation<'_> {
        let mut inv = self.claim.key(self.key(i));
        inv.arg(&self.fingerprint[..])
            .arg(&self.holder[..])
            .arg(30_000_000u64)
            .arg("0")
            .arg("");
        inv
    }
    /// The fence of a `claimed` reply.
    fn fence(reply: &redis::Value) -> Option<Vec<u8>> {
        match reply {
            redis::Value::Array(items) if items.len() >= 2 => match (&items[0], &items[1]) {
                (redis::Value::BulkString(tag), redis::Value::BulkString(f))
                    if tag == b"claimed" =>
                {
                    Some(f.clone())
                }
                _ => None,
            },
            _ => None,
        }
    }
    fn complete_cmd(&self, i: u64, fence: &[u8]) -> redis::ScriptInvocation<'_> {
        let mut inv = self.complete.key(self.key(i));
        inv.arg(fence).arg(&self.result[..]).arg(3_600_000_000u64);
        inv
    }
    fn sync(&self, conn: &mut redis::Connection, i: u64) {
        let reply: redis::Value = self.claim_cmd(i).invoke(conn).unwrap_or(redis::Value::Nil);
        if let Some(fence) = Raw::fence(&reply) {
            let _: redis::Value = self
                .complete_cmd(i, &fence)
                .invoke(conn)
                .unwrap_or(redis::Value::Nil);
        }
    }
    async fn run_async(&self, conn: &mut redis::aio::MultiplexedConnection, i: u64) {
        let reply: redis::Value = self
            .claim_cmd(i)
            .invoke_async(conn)
            .await
            .unwrap_or(redis::Value::Nil);
        if let Some(fence) = Raw::fence(&reply) {
            let _: redis::Value = self
                .complete_cmd(i, &fence)
                .invoke_async(conn)
                .await
                .unwrap_or(redis::Value::Nil);
        }
    }
}

fn rerun_call(i: u64) -> Call {
    Call::new("bench", &i)
        .payload(&1u64)
        .ttl(Duration::from_secs(3600))
}

fn receipt(i: u64) -> Result<Receipt, Error> {
    Ok(Receipt {
        id: i,
        amount_cents: 500,
        status: "paid".to_owned(),
    })
}

/// Calls per second of `f` over `threads` threads for about `window`; `f(thread, i)`.
fn rate(threads: usize, window: Duration, f: &(dyn Fn(usize, u64) + Sync)) -> f64 {
    let calls = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (calls, f) = (&calls, &f);
            s.spawn(move || {
                let mut i = 0;
                while start.elapsed() < window {
                    for _ in 0..16 {
                        f(t, i);
                        i += 1;
                    }
                    calls.fetch_add(16, Ordering::Relaxed);
                }
            });
        }
    });
    calls.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// The async twin of [`rate`]: `tasks` tasks on `rt`.
fn rate_async<F, Fut>(rt: &tokio::runtime::Runtime, tasks: usize, window: Duration, f: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let calls = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    rt.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let (f, calls) = (f.clone(), calls.clone());
                tokio::spawn(async move {
                    let mut i = 0;
                    while start.elapsed() < window {
                        for _ in 0..16 {
                            f(t, i).await;
                            i += 1;
                        }
                        calls.fetch_add(16, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for h in handles {
            let _ = h.await;
        }
    });
    calls.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// Measures both sides in short interleaved rounds (so that load from elsewhere on the
/// machine hits both alike), and returns the median rate of each side and the median of the
/// per-round ratios.
fn pair(
    rounds: u32,
    mut ours: impl FnMut() -> f64,
    mut raw: impl FnMut() -> f64,
) -> (f64, f64, f64) {
    let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which side goes first.
        let (x, y) = if round % 2 == 0 {
            let x = ours();
            (x, raw())
        } else {
            let y = raw();
            (ours(), y)
        };
        a.push(x);
        b.push(y);
        r.push(x / y);
    }
    (median(a), median(b), median(r))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn row(name: &str, (ours, raw, ratio): (f64, f64, f64)) {
    println!(
        "| {name:<30} | {:>10.0} | {:>10.0} | {:>6.2}x | {:>8.1} us | {:>8.1} us |",
        ours,
        raw,
        ratio,
        1e6 / ours,
        1e6 / raw
    );
}

fn evalsha_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let Some(url) = std::env::var("RERUN_BENCH_REDIS_URL")
        .or_else(|_| std::env::var("RERUN_TEST_REDIS_URL"))
        .ok()
    else {
        eprintln!(
            "note: set RERUN_BENCH_REDIS_URL (e.g. redis://127.0.0.1:6379) to run the Redis ratios"
        );
        return;
    };
    let window = Duration::from_millis(
        std::env::var("RERUN_BENCH_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3000),
    );
    let rounds = 10;
    let window = window / rounds;
    let run = std::process::id();
    let store_prefix = format!("rerun-bench-{run}:ours:");
    let raw_prefix = format!("rerun-bench-{run}:raw:");
    let store = RedisStore::connect_with(&url, RedisOptions::new().prefix(&store_prefix))
        .expect("connecting");
    let raw = Raw::new(&raw_prefix);
    let client = redis::Client::open(url.as_str()).expect("a Redis URL");
    let conns: Vec<std::sync::Mutex<redis::Connection>> = (0..16)
        .map(|_| std::sync::Mutex::new(client.get_connection().expect("a raw connection")))
        .collect();
    let mut admin = client.get_connection().expect("a raw connection");

    // Fresh keys never repeat: each cell draws from its own range.
    let next = AtomicU64::new(0);
    let fresh_key = |t: usize, i: u64| ((t as u64) << 40) + i + next.load(Ordering::Relaxed);
    let bump = |next: &AtomicU64| next.fetch_add(1 << 48, Ordering::Relaxed);
    // Repeated keys: 64 keys recorded up front on both sides.
    let repeated = |t: usize, i: u64| (1u64 << 62) + (t as u64 * 4 + i) % 64;
    for k in 0..64u64 {
        let key = (1u64 << 62) + k;
        let _ = rerun_call(key).run(&store, || receipt(key));
        let mut c = conns[0].lock().unwrap_or_else(|p| p.into_inner());
        raw.sync(&mut c, key);
    }

    // Round trips, counted by the server.
    let before = evalsha_calls(&mut admin);
    for i in 0..200 {
        let key = (1u64 << 61) + i;
        let _ = rerun_call(key).run(&store, || receipt(key));
    }
    let fresh_rt = (evalsha_calls(&mut admin) - before) as f64 / 200.0;
    let before = evalsha_calls(&mut admin);
    for i in 0..200 {
        let key = repeated(0, i);
        let _ = rerun_call(key).run(&store, || receipt(key));
    }
    let repeat_rt = (evalsha_calls(&mut admin) - before) as f64 / 200.0;
    println!("round trips per call, counted by the server (EVALSHA): fresh {fresh_rt:.2}, repeated {repeat_rt:.2}");
    println!();
    println!("| case | rerun calls/s | raw calls/s | ratio | rerun per call | raw per call |");
    println!("|---|---:|---:|---:|---:|---:|");

    for threads in [1usize, 16] {
        bump(&next);
        let cell = pair(
            rounds,
            || {
                bump(&next);
                rate(threads, window, &|t, i| {
                    let key = fresh_key(t, i);
                    let _ = rerun_call(key).run(&store, || receipt(key));
                })
            },
            || {
                bump(&next);
                rate(threads, window, &|t, i| {
                    let mut c = conns[t].lock().unwrap_or_else(|p| p.into_inner());
                    raw.sync(&mut c, fresh_key(t, i));
                })
            },
        );
        row(&format!("sync fresh, {threads} caller(s)"), cell);
        let cell = pair(
            rounds,
            || {
                rate(threads, window, &|t, i| {
                    let key = repeated(t, i);
                    let _ = rerun_call(key).run(&store, || receipt(key));
                })
            },
            || {
                rate(threads, window, &|t, i| {
                    let mut c = conns[t].lock().unwrap_or_else(|p| p.into_inner());
                    raw.sync(&mut c, repeated(t, i));
                })
            },
        );
        row(&format!("sync repeated, {threads} caller(s)"), cell);
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mux = rt
        .block_on(client.get_multiplexed_async_connection())
        .expect("a multiplexed connection");
    let store = Arc::new(store);
    let raw = Arc::new(raw);
    let base = Arc::new(AtomicU64::new(1 << 58));
    for tasks in [1usize, 16] {
        for repeated_calls in [false, true] {
            let key_of = move |base: u64, t: usize, i: u64| {
                if repeated_calls {
                    (1u64 << 62) + (t as u64 * 4 + i) % 64
                } else {
                    base + ((t as u64) << 40) + i
                }
            };
            let cell = pair(
                rounds,
                || {
                    let b = base.fetch_add(1 << 48, Ordering::Relaxed);
                    let store = store.clone();
                    rate_async(&rt, tasks, window, move |t, i| {
                        let store = store.clone();
                        async move {
                            let key = key_of(b, t, i);
                            let _ = rerun_call(key)
                                .run_async(&*store, async move { receipt(key) })
                                .await;
                        }
                    })
                },
                || {
                    let b = base.fetch_add(1 << 48, Ordering::Relaxed);
                    let (raw, mux) = (raw.clone(), mux.clone());
                    rate_async(&rt, tasks, window, move |t, i| {
                        let (raw, mut mux) = (raw.clone(), mux.clone());
                        async move { raw.run_async(&mut mux, key_of(b, t, i)).await }
                    })
                },
            );
            let what = if repeated_calls { "repeated" } else { "fresh" };
            row(&format!("async {what}, {tasks} task(s)"), cell);
        }
    }

    // Leave nothing behind.
    for prefix in [&store_prefix, &raw_prefix] {
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}*"))
                .arg("COUNT")
                .arg(1000)
                .query(&mut admin)
                .unwrap_or_default();
            if !keys.is_empty() {
                let _: redis::RedisResult<()> = redis::cmd("UNLINK").arg(keys).query(&mut admin);
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
}
