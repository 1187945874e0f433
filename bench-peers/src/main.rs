//! Prints, from one run, rerun's `RedisStore` against the `idempotent` crate's `ValkeyStore`
//! (version 0.3) on the same Redis server: fresh calls (a new key each time: claim, run the
//! body, record its result) and repeated calls (a completed key: replay the result), with 1
//! and 16 concurrent callers (tasks on a 2-worker tokio runtime; `idempotent` is async only).
//! Both sides record the same small serde result with the same payload and a one-hour ttl,
//! at their default durability. A third side is the floor of the protocol, with none of either
//! library's guarantees: `SET NX PX` then `SET PX` for a fresh call, a `GET` (and decoding the
//! result) for a repeated one, on one multiplexed connection: how far above `idempotent` any
//! client making the same round trips can get on this server.
//!
//! `cargo run --release --manifest-path bench-peers/Cargo.toml`
//!
//! `RERUN_BENCH_REDIS_URL` names the server (default `redis://127.0.0.1:6379`);
//! `RERUN_BENCH_MS` sets the measuring window of each side of a cell (default 3000 ms), split
//! in 10 interleaved rounds (rerun, peer, floor, rerun, ...); each cell reports the medians.
//! Every key the run writes is under one prefix of its own and deleted at the end.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idempotent::entry::ExistingEntry;
use idempotent::fingerprint::{DefaultFingerprintStrategy, FingerprintStrategy};
use idempotent::store::valkey::ValkeyStore;
use idempotent::store::{IdempotencyStore, InsertResult};
use idempotent::{CachedResponse, IdempotencyEntry, IdempotencyKey, Metadata};
use rerun_core::store::redis::{RedisOptions, RedisStore};
use rerun_core::{Call, Error};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

/// The scope (rerun) and key namespace (`idempotent`) of every call.
const SCOPE: &str = "bench";
/// How long a completed record is kept, on both sides.
const TTL: Duration = Duration::from_secs(3600);
/// The payload of every call, fingerprinted by both sides.
const PAYLOAD: u64 = 1;
/// Interleaved rounds per side of a cell.
const ROUNDS: u32 = 10;
/// Keys recorded up front for the repeated calls, cycled through by every caller.
const REPEATED_KEYS: u64 = 64;
/// Where the repeated keys start; fresh keys stay below it.
const REPEATED_BASE: u64 = 1 << 62;

/// A small result, as a typical idempotent function returns.
#[derive(Serialize, Deserialize)]
struct Receipt {
    id: u64,
    amount_cents: u64,
    status: String,
}

/// The body of every call.
fn receipt(id: u64) -> Receipt {
    Receipt {
        id,
        amount_cents: 500,
        status: "paid".to_owned(),
    }
}

/// One call through rerun: claim, run and record, or replay.
async fn rerun_call(store: &RedisStore, id: u64, repeated: bool) {
    let outcome = Call::new(SCOPE, &id)
        .payload(&PAYLOAD)
        .ttl(TTL)
        .run_async(store, async move { Ok::<_, Error>(receipt(id)) })
        .await
        .expect("a rerun call");
    assert_eq!(outcome.replayed, repeated, "rerun replayed the wrong calls");
}

/// One call through `idempotent`: its store API driven the way its README shows (claim; run
/// the body and complete with the encoded result, or decode the cached one).
async fn peer_call(store: &ValkeyStore, id: u64, repeated: bool) {
    let key = IdempotencyKey::new(format!("{SCOPE}:{id}")).expect("a valid key");
    let payload = serde_json::to_vec(&PAYLOAD).expect("encoding the payload");
    let fingerprint = DefaultFingerprintStrategy.compute(SCOPE, &payload);
    let entry = IdempotencyEntry::new(fingerprint, TTL);
    match store.try_insert(&key, entry.clone()).await {
        Ok(InsertResult::Claimed { fencing_token }) if !repeated => {
            let body = serde_json::to_vec(&receipt(id)).expect("encoding the result");
            let response = CachedResponse {
                status_code: 200,
                metadata: Metadata::default(),
                body: body.into(),
            };
            store
                .complete(&key, entry.complete(response), fencing_token)
                .await
                .expect("an idempotent completion");
        }
        Ok(InsertResult::Exists(ExistingEntry::Completed(done)))
            if repeated && done.fingerprint_matches(fingerprint) =>
        {
            let _: Receipt =
                serde_json::from_slice(&done.response().body).expect("a recorded result");
        }
        other => panic!("idempotent: unexpected claim reply {other:?}"),
    }
}

/// One call of the floor: `SET NX PX` (the claim) then `SET PX` (the result), or a `GET` and
/// decoding what it returns. No lease, no fence, no payload check.
async fn floor_call(
    conn: &redis::aio::MultiplexedConnection,
    key: String,
    id: u64,
    repeated: bool,
) {
    let mut conn = conn.clone();
    if repeated {
        let got: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("the floor's GET");
        let _: Receipt =
            serde_json::from_slice(&got.expect("a recorded result")).expect("a recorded result");
        return;
    }
    let claimed: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg("p")
        .arg("NX")
        .arg("PX")
        .arg(30_000u64)
        .query_async(&mut conn)
        .await
        .expect("the floor's claim");
    assert!(
        claimed.is_some(),
        "the floor met a key it had claimed before"
    );
    let body = serde_json::to_vec(&receipt(id)).expect("encoding the result");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(body)
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query_async(&mut conn)
        .await
        .expect("the floor's completion");
}

/// Calls per second of `f(task, i)` over `tasks` tasks on `rt` for about `window`.
fn rate<F, Fut>(rt: &Runtime, tasks: usize, window: Duration, f: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let start = Instant::now();
    let calls: u64 = rt.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let f = f.clone();
                tokio::spawn(async move {
                    let mut i = 0;
                    while start.elapsed() < window {
                        f(t, i).await;
                        i += 1;
                    }
                    i
                })
            })
            .collect();
        let mut total = 0;
        for h in handles {
            total += h.await.expect("a caller task");
        }
        total
    });
    calls as f64 / start.elapsed().as_secs_f64()
}

/// Runs the three sides in alternating rounds (rerun, peer, floor, rerun, ...) so that load
/// from elsewhere on the machine hits all alike; returns their median rates and the medians of
/// the per-round ratios rerun/peer and floor/peer.
fn cell(
    mut ours: impl FnMut(usize) -> f64,
    mut peer: impl FnMut(usize) -> f64,
    mut floor: impl FnMut(usize) -> f64,
) -> [f64; 5] {
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ours_vs_peer, mut floor_vs_peer) = (Vec::new(), Vec::new());
    for at in 0..ROUNDS as usize {
        let (x, y, z) = (ours(at), peer(at), floor(at));
        a.push(x);
        b.push(y);
        c.push(z);
        ours_vs_peer.push(x / y);
        floor_vs_peer.push(z / y);
    }
    [
        median(a),
        median(b),
        median(c),
        median(ours_vs_peer),
        median(floor_vs_peer),
    ]
}

/// The median (upper of the two middle values for an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The key of call `i` of caller `t`: a new one per call (`base` is new per round), or one of
/// the repeated keys.
fn key_of(repeated: bool, base: u64, t: usize, i: u64) -> u64 {
    if repeated {
        REPEATED_BASE + (t as u64 * 4 + i) % REPEATED_KEYS
    } else {
        base + ((t as u64) << 32) + i
    }
}

/// Calls and microseconds per command, from `INFO commandstats`.
fn command_stats(conn: &mut redis::Connection) -> HashMap<String, (f64, f64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    let field = |line: &str, name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .map(|(name, rest)| {
            (
                name.to_owned(),
                (field(rest, "calls="), field(rest, "usec=")),
            )
        })
        .collect()
}

/// The commands the server ran per call (with their microseconds on the server) while `run`
/// made `calls` calls; commands run inside a script count too.
fn per_call(conn: &mut redis::Connection, calls: u64, run: impl FnOnce()) -> String {
    let before = command_stats(conn);
    run();
    let after = command_stats(conn);
    let mut rows: Vec<_> = after
        .into_iter()
        .filter(|(name, _)| name != "info")
        .filter_map(|(name, (c, us))| {
            let (c0, us0) = before.get(&name).copied().unwrap_or_default();
            let n = calls as f64;
            (c > c0).then(|| format!("{name} {:.2} ({:.1} us)", (c - c0) / n, (us - us0) / n))
        })
        .collect();
    rows.sort();
    rows.join(", ")
}

/// Deletes every key under `prefix` (`SCAN` + `DEL`); returns how many.
fn delete_prefix(conn: &mut redis::Connection, prefix: &str) -> usize {
    let (mut cursor, mut deleted) = (0u64, 0);
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query(conn)
            .expect("SCAN");
        if !keys.is_empty() {
            deleted += keys.len();
            redis::cmd("DEL")
                .arg(keys)
                .exec(conn)
                .expect("DEL of the run's keys");
        }
        cursor = next;
        if cursor == 0 {
            return deleted;
        }
    }
}

/// Connects both stores, counts their commands per call, measures the four cells, and
/// deletes the run's keys.
fn main() {
    let url = std::env::var("RERUN_BENCH_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let window = Duration::from_millis(
        std::env::var("RERUN_BENCH_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3000),
    );
    let round = window / ROUNDS;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let run = format!("rerun-bench-peers-{}-{nanos}:", std::process::id());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let client = redis::Client::open(url.as_str()).expect("a Redis URL");
    let mut admin = client.get_connection().expect("a Redis connection");
    let ours = Arc::new(
        RedisStore::connect_with(&url, RedisOptions::new().prefix(format!("{run}rerun:")))
            .expect("connecting rerun's store"),
    );
    let peer = Arc::new(
        rt.block_on(ValkeyStore::with_prefix(
            client.clone(),
            Some(&format!("{run}idempotent")),
        ))
        .expect("connecting idempotent's store"),
    );

    let mux = rt
        .block_on(client.get_multiplexed_async_connection())
        .expect("a multiplexed connection for the floor");
    let floor_key = {
        let prefix = format!("{run}floor:");
        move |id: u64| format!("{prefix}{id}")
    };

    // The repeated keys, recorded up front on every side (this also loads the scripts).
    rt.block_on(async {
        for id in REPEATED_BASE..REPEATED_BASE + REPEATED_KEYS {
            rerun_call(&ours, id, false).await;
            peer_call(&peer, id, false).await;
            floor_call(&mux, floor_key(id), id, false).await;
        }
    });

    // What each side sends, counted by the server.
    let n = 200;
    let fresh = |rt: &Runtime, base: u64, rerun: bool| {
        rt.block_on(async {
            for id in base..base + n {
                if rerun {
                    rerun_call(&ours, id, false).await;
                } else {
                    peer_call(&peer, id, false).await;
                }
            }
        })
    };
    let repeated = |rt: &Runtime, rerun: bool| {
        rt.block_on(async {
            for i in 0..n {
                let id = key_of(true, 0, 0, i);
                if rerun {
                    rerun_call(&ours, id, true).await;
                } else {
                    peer_call(&peer, id, true).await;
                }
            }
        })
    };
    println!(
        "rerun RedisStore vs idempotent 0.3 ValkeyStore on {url}: {} ms per side per cell, \
         {ROUNDS} interleaved rounds, tasks on a 2-worker tokio runtime",
        window.as_millis()
    );
    println!(
        "commands per call on the server (INFO commandstats; those run by scripts count too):"
    );
    let stats = [
        (
            "rerun fresh",
            per_call(&mut admin, n, || fresh(&rt, 1 << 60, true)),
        ),
        (
            "idempotent fresh",
            per_call(&mut admin, n, || fresh(&rt, 1 << 60, false)),
        ),
        (
            "rerun repeated",
            per_call(&mut admin, n, || repeated(&rt, true)),
        ),
        (
            "idempotent repeated",
            per_call(&mut admin, n, || repeated(&rt, false)),
        ),
    ];
    for (what, line) in stats {
        println!("  {what}: {line}");
    }
    println!();
    println!(
        "| case | rerun/s | idempotent/s | floor/s | rerun/idempotent | floor/idempotent | rerun us/call | idempotent us/call |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");

    let mut next_base = 0u64;
    for repeated_calls in [false, true] {
        for tasks in [1usize, 16] {
            let mut fresh_base = || {
                next_base += 1 << 40;
                next_base
            };
            let bases: Vec<(u64, u64, u64)> = (0..ROUNDS)
                .map(|_| (fresh_base(), fresh_base(), fresh_base()))
                .collect();
            let [r, p, f, ratio, floor_ratio] = cell(
                |at| {
                    let (store, base) = (ours.clone(), bases[at].0);
                    rate(&rt, tasks, round, move |t, i| {
                        let store = store.clone();
                        async move {
                            let id = key_of(repeated_calls, base, t, i);
                            rerun_call(&store, id, repeated_calls).await
                        }
                    })
                },
                |at| {
                    let (store, base) = (peer.clone(), bases[at].1);
                    rate(&rt, tasks, round, move |t, i| {
                        let store = store.clone();
                        async move {
                            let id = key_of(repeated_calls, base, t, i);
                            peer_call(&store, id, repeated_calls).await
                        }
                    })
                },
                |at| {
                    let (mux, base, floor_key) = (mux.clone(), bases[at].2, floor_key.clone());
                    rate(&rt, tasks, round, move |t, i| {
                        let (mux, floor_key) = (mux.clone(), floor_key.clone());
                        async move {
                            let id = key_of(repeated_calls, base, t, i);
                            floor_call(&mux, floor_key(id), id, repeated_calls).await
                        }
                    })
                },
            );
            let what = if repeated_calls { "repeated" } else { "fresh" };
            println!(
                "| {what}, {tasks} caller(s) | {r:.0} | {p:.0} | {f:.0} | {ratio:.2}x | {floor_ratio:.2}x | {:.1} | {:.1} |",
                1e6 / r,
                1e6 / p
            );
        }
    }
    let deleted = delete_prefix(&mut admin, &run);
    println!();
    println!("deleted the run's {deleted} keys (prefix {run})");
}
