//! Prints, from one run, rerun's throughput on `RedisStore` against three baselines on the raw
//! `redis` client: the same Lua with the same arguments, called as the store calls it (its
//! functions with `FCALL` on Redis 7, else its scripts with `EVALSHA`: what rerun's own client
//! code costs); the simplest client doing the same round trips (the floor of the protocol:
//! `SET NX PX` + `SET PX` for a fresh call, `GET` for a repeated one); and the atomic floor,
//! one function per round trip that reads the record and the server's clock and writes, with
//! nothing else (the floor of any design that judges leases on the server's clock). Fresh calls (claim +
//! complete, two round trips) and repeated calls (one round trip), with 1 and 16 concurrent
//! callers, sync (threads, one connection each) and async (tasks on one multiplexed
//! connection, on a 2-worker tokio runtime). Also counts `EVALSHA`s or `FCALL`s per call and the server's
//! own microseconds per script (`INFO commandstats`), rerun's and the atomic floor's: over
//! [`SEQUENTIAL`] sequential calls (cold: the server idles between them), over pipelines of
//! fresh claims, their completions and their replays (hot: the server busy, the client's CPU
//! idle, so this is the scripts' own cost; [`HOT_PAIRS`] pairs of the two sides, alternating
//! which goes first, and the medians), and over a window of 16 sync callers (warm).
//!
//! `RERUN_BENCH_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p rerun-core --features redis --bench redis_ratios`
//!
//! (`RERUN_TEST_REDIS_URL` is used when `RERUN_BENCH_REDIS_URL` is unset; `RERUN_BENCH_MS`
//! sets the measuring window of each side of a cell, default 3000 ms, split in
//! `RERUN_BENCH_ROUNDS` interleaved rounds, default 10; each cell prints each side's median
//! round and the median of the per-round ratios, the rule of every ratio program here
//! (`rounds`).)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Script;
use rerun_core::store::redis::{RedisOptions, RedisStore, SCHEMA_VERSION};
use rerun_core::{Call, Error, Fingerprint, Holder};
use serde::{Deserialize, Serialize};

mod rounds;
use rounds::{interleave, Side, Window};

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

/// One of the store's transitions as the store calls it: its function (`FCALL`) where the
/// store uses functions, else its script (`EVALSHA`).
enum Code {
    Function(String),
    Script(Script),
}

impl Code {
    fn of(store: &RedisStore, name: &str) -> Code {
        match store.function_name(name) {
            Some(function) => Code::Function(function.to_owned()),
            None => Code::Script(script(
                store.script_source(name).expect("a script of the store"),
            )),
        }
    }
    /// `args` as the driver sends them (numbers in decimal).
    fn invocation(&self, key: String, args: &[&[u8]]) -> Invocation<'_> {
        match self {
            Code::Function(name) => {
                let mut cmd = redis::cmd("FCALL");
                cmd.arg(name).arg(1).arg(key);
                for arg in args {
                    cmd.arg(*arg);
                }
                Invocation::Function(cmd)
            }
            Code::Script(script) => {
                let mut inv = script.key(key);
                for arg in args {
                    inv.arg(*arg);
                }
                Invocation::Script(inv)
            }
        }
    }
}

/// A call of a [`Code`].
enum Invocation<'a> {
    Function(redis::Cmd),
    Script(redis::ScriptInvocation<'a>),
}

impl Invocation<'_> {
    /// Adds the call to `pipe` (a script as `EVALSHA`: it is loaded by then, the sequential
    /// calls before having run it).
    fn queue(&self, pipe: &mut redis::Pipeline) {
        match self {
            Invocation::Function(cmd) => {
                pipe.add_command(cmd.clone());
            }
            Invocation::Script(inv) => {
                pipe.invoke_script(inv);
            }
        }
    }
    fn invoke(&self, conn: &mut redis::Connection) -> redis::RedisResult<redis::Value> {
        match self {
            Invocation::Function(cmd) => cmd.query(conn),
            Invocation::Script(inv) => inv.invoke(conn),
        }
    }
    async fn invoke_async(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
    ) -> redis::RedisResult<redis::Value> {
        match self {
            Invocation::Function(cmd) => cmd.query_async(conn).await,
            Invocation::Script(inv) => inv.invoke_async(conn).await,
        }
    }
}

/// What a [`Scripted`] client runs on the server.
#[derive(Clone, Copy)]
enum Steps {
    /// rerun's own functions or scripts: the raw client doing what rerun does on the wire, and
    /// nothing more.
    Rerun,
    /// The floor of what rerun's guarantees need on Redis, with none of rerun's own code: each
    /// round trip one atomic step on the server that reads the record and writes, the claim
    /// reading the server's clock too, as any claim-or-fetch that judges leases on the server's
    /// clock must. A fresh call is a claim (`GET`; absent, so `TIME` and a `SET` of the clock as
    /// the fence, the fingerprint and the holder) and a fenced completion (`GET`, the fence
    /// compared, `SET PX` of the fence, the fingerprint and the result: Redis' expiry, not a
    /// clock read, keeps its time); a repeated call is the claim finding the record and
    /// returning it, the fingerprint compared on the client. No parsing, no number formatting, no
    /// state table: what is left between this and rerun is rerun's transitions themselves.
    Atomic,
}

/// A client calling two server-side steps per fresh call and one per repeated call: rerun's
/// own, or the atomic floor's.
struct Scripted {
    steps: Steps,
    claim: Code,
    complete: Code,
    prefix: String,
    fingerprint: Vec<u8>,
    holder: Vec<u8>,
    result: Vec<u8>,
    /// rerun's claim argument, packed once: the once flag (`0`), the lease (30 s) in 16
    /// digits, the fingerprint, the holder's length in 4 digits and the holder, as the store
    /// packs it on every call.
    packed: Vec<u8>,
}

/// Sequential calls over which the server's time per script is counted (cold): enough that
/// the first calls after a pause, slower on a server that idled, do not decide the figure.
const SEQUENTIAL: u64 = 2000;

/// The function library the atomic floor's steps are loaded as (Redis 7), deleted at the end.
const ATOMIC_LIBRARY: &str = "rerun_bench_atomic_floor";
/// The atomic floor's two steps, as one library of functions (Redis 7) or two scripts.
const ATOMIC_CLAIM: &str = "local got = redis.call('GET', KEYS[1]) \
     if got then return got end \
     local t = redis.call('TIME') \
     local fence = t[1] .. t[2] \
     redis.call('SET', KEYS[1], fence .. ARGV[1] .. ARGV[2]) \
     return fence";
const ATOMIC_COMPLETE: &str = "local got = redis.call('GET', KEYS[1]) \
     if not got or string.sub(got, 1, #ARGV[1]) ~= ARGV[1] then return 0 end \
     redis.call('SET', KEYS[1], ARGV[1] .. ARGV[2] .. ARGV[3], 'PX', ARGV[4]) \
     return 1";

impl Scripted {
    /// rerun's steps: the store's own functions or scripts, whichever it calls.
    fn rerun(prefix: &str, store: &RedisStore) -> Scripted {
        let fingerprint = Fingerprint::of(&1u64)
            .map(|f| f.0.to_vec())
            .unwrap_or_default();
        let holder = Holder::current().encode().into_bytes();
        Scripted {
            steps: Steps::Rerun,
            claim: Code::of(store, "claim"),
            complete: Code::of(store, "complete"),
            prefix: prefix.to_owned(),
            packed: [
                &b"0"[..],
                b"0000000030000000",
                &fingerprint[..],
                format!("{:04}", holder.len()).as_bytes(),
                &holder[..],
            ]
            .concat(),
            fingerprint,
            holder,
            result: rerun_core::codec::encode(&Receipt {
                id: 1,
                amount_cents: 500,
                status: "paid".to_owned(),
            })
            .unwrap_or_default(),
        }
    }
    /// The atomic floor's steps with `raw`'s payload, loaded as functions where the store uses
    /// functions, else as scripts.
    fn atomic(
        prefix: &str,
        raw: &Scripted,
        conn: &mut redis::Connection,
        functions: bool,
    ) -> Scripted {
        let as_function = |name: &str, body: &str| {
            format!("redis.register_function('{name}', function(KEYS, ARGV) {body} end)\n")
        };
        let library = format!(
            "#!lua name={ATOMIC_LIBRARY}\n{}{}",
            as_function("rerun_bench_atomic_claim", ATOMIC_CLAIM),
            as_function("rerun_bench_atomic_complete", ATOMIC_COMPLETE)
        );
        let loaded = functions
            && redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("REPLACE")
                .arg(library)
                .query::<String>(conn)
                .is_ok();
        let (claim, complete) = if loaded {
            (
                Code::Function("rerun_bench_atomic_claim".to_owned()),
                Code::Function("rerun_bench_atomic_complete".to_owned()),
            )
        } else {
            (
                Code::Script(Script::new(ATOMIC_CLAIM)),
                Code::Script(Script::new(ATOMIC_COMPLETE)),
            )
        };
        Scripted {
            steps: Steps::Atomic,
            claim,
            complete,
            prefix: prefix.to_owned(),
            packed: Vec::new(),
            fingerprint: raw.fingerprint.clone(),
            holder: raw.holder.clone(),
            result: raw.result.clone(),
        }
    }
    fn key(&self, i: u64) -> String {
        format!("{}{{bench:{i}}}", self.prefix)
    }
    fn claim_cmd(&self, i: u64) -> Invocation<'_> {
        let (fingerprint, holder) = (&self.fingerprint[..], &self.holder[..]);
        match self.steps {
            // As the store sends a claim that is neither once nor a steal: one argument.
            Steps::Rerun => self.claim.invocation(self.key(i), &[&self.packed[..]]),
            Steps::Atomic => self.claim.invocation(self.key(i), &[fingerprint, holder]),
        }
    }
    /// The fence of a claim, or `None` when there is nothing to complete.
    fn fence(&self, reply: redis::Value) -> Option<Vec<u8>> {
        match (self.steps, reply) {
            // rerun: an integer, or a table when a claim was abandoned.
            (Steps::Rerun, redis::Value::Int(f)) => Some(format!("{f:016}").into_bytes()),
            (Steps::Rerun, redis::Value::Array(items)) if items.len() >= 2 => {
                match (&items[0], &items[1]) {
                    (redis::Value::BulkString(tag), redis::Value::BulkString(f))
                        if tag == b"claimed" =>
                    {
                        Some(f.clone())
                    }
                    _ => None,
                }
            }
            (Steps::Rerun, _) => None,
            // The atomic floor: the record when it was there (its fingerprint checked here),
            // else the fence.
            (Steps::Atomic, redis::Value::BulkString(got)) if got.len() >= 16 + 32 => {
                // The fingerprint is after the fence, whose digits the client knows to be 15
                // or 16 (seconds and microseconds of this century).
                let matches =
                    (11..=16).any(|at| got.get(at..at + 32) == Some(&self.fingerprint[..]));
                assert!(matches, "a record of the atomic floor with another payload");
                None
            }
            (Steps::Atomic, redis::Value::BulkString(fence)) => Some(fence),
            (Steps::Atomic, other) => panic!("the atomic floor's claim replied {other:?}"),
        }
    }
    fn complete_cmd(&self, i: u64, fence: &[u8]) -> Invocation<'_> {
        match self.steps {
            Steps::Rerun => self.complete.invocation(
                self.key(i),
                &[fence, &self.result[..], b"3600000", b"0000003600000000"],
            ),
            Steps::Atomic => self.complete.invocation(
                self.key(i),
                &[fence, &self.fingerprint[..], &self.result[..], b"3600000"],
            ),
        }
    }
    // A script error fails the benchmark: a baseline whose calls fail would look fast.
    fn sync(&self, conn: &mut redis::Connection, i: u64) {
        let reply = self.claim_cmd(i).invoke(conn).expect("a claim");
        if let Some(fence) = self.fence(reply) {
            let _: redis::Value = self
                .complete_cmd(i, &fence)
                .invoke(conn)
                .expect("a completion");
        }
    }
    async fn run_async(&self, conn: &mut redis::aio::MultiplexedConnection, i: u64) {
        let reply = self.claim_cmd(i).invoke_async(conn).await.expect("a claim");
        if let Some(fence) = self.fence(reply) {
            let _: redis::Value = self
                .complete_cmd(i, &fence)
                .invoke_async(conn)
                .await
                .expect("a completion");
        }
    }
}

/// The simplest client doing the same round trips as rerun, with none of its guarantees: no
/// lease judged on the server's clock, no fence, no payload check. A fresh call is
/// `SET NX PX` then `SET PX`; a repeated call is a `GET`.
struct Floor {
    prefix: String,
    claim: Vec<u8>,
    result: Vec<u8>,
}

impl Floor {
    fn new(prefix: &str, result: &[u8]) -> Floor {
        Floor {
            prefix: prefix.to_owned(),
            claim: b"p".to_vec(),
            result: result.to_vec(),
        }
    }
    fn key(&self, i: u64) -> String {
        format!("{}{{bench:{i}}}", self.prefix)
    }
    fn claim_cmd(&self, i: u64) -> redis::Cmd {
        let mut c = redis::cmd("SET");
        c.arg(self.key(i))
            .arg(&self.claim[..])
            .arg("NX")
            .arg("PX")
            .arg(30_000u64);
        c
    }
    fn complete_cmd(&self, i: u64) -> redis::Cmd {
        let mut c = redis::cmd("SET");
        c.arg(self.key(i))
            .arg(&self.result[..])
            .arg("PX")
            .arg(3_600_000u64);
        c
    }
    fn get_cmd(&self, i: u64) -> redis::Cmd {
        let mut c = redis::cmd("GET");
        c.arg(self.key(i));
        c
    }
    fn sync(&self, conn: &mut redis::Connection, i: u64, repeated: bool) {
        if repeated {
            let got: Option<Vec<u8>> = self.get_cmd(i).query(conn).unwrap_or(None);
            if got.is_some() {
                return;
            }
        }
        let claimed: Option<String> = self.claim_cmd(i).query(conn).unwrap_or(None);
        if claimed.is_some() {
            let _: redis::Value = self
                .complete_cmd(i)
                .query(conn)
                .unwrap_or(redis::Value::Nil);
        }
    }
    async fn run_async(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
        i: u64,
        repeated: bool,
    ) {
        if repeated {
            let got: Option<Vec<u8>> = self.get_cmd(i).query_async(conn).await.unwrap_or(None);
            if got.is_some() {
                return;
            }
        }
        let claimed: Option<String> = self.claim_cmd(i).query_async(conn).await.unwrap_or(None);
        if claimed.is_some() {
            let _: redis::Value = self
                .complete_cmd(i)
                .query_async(conn)
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

/// Calls of `f` over `threads` threads for about `window`; `f(thread, i)`.
fn rate(threads: usize, window: Duration, f: &(dyn Fn(usize, u64) + Sync)) -> Window {
    rounds::on_threads(threads, window, 16, f)
}

/// The async twin of [`rate`]: `tasks` tasks on `rt`.
fn rate_async<F, Fut>(rt: &tokio::runtime::Runtime, tasks: usize, window: Duration, f: F) -> Window
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
    Window {
        calls: calls.load(Ordering::Relaxed),
        took: start.elapsed(),
    }
}

/// One row: rerun against the same Lua on the raw client, the floor and the atomic floor.
fn row(name: &str, [ours, same, floor, atomic]: &[Side; 4]) {
    println!(
        "| {name:<26} | {:>9.0} | {:>9.0} | {:>5.2}x | {:>9.0} | {:>5.2}x | {:>9.0} | {:>5.2}x | {:>5.2}x | {:>7.1} | {:>7.1} |",
        ours.rate(),
        same.rate(),
        ours.vs(same),
        floor.rate(),
        ours.vs(floor),
        atomic.rate(),
        ours.vs(atomic),
        atomic.vs(floor),
        ours.us_per_call(1),
        floor.us_per_call(1)
    );
}

/// Keys the pipelined measure claims, completes and replays, in pipelines of [`PIPELINE`].
const HOT_KEYS: u64 = 20_000;
const PIPELINE: u64 = 500;
/// Pipelined measures of each side, rerun's and the atomic floor's, in pairs whose first side
/// alternates; each figure printed is the median of its side's.
const HOT_PAIRS: u64 = 3;

/// Each of the three figures of [`hot`], the median over `runs`.
fn medians(runs: &[[f64; 3]]) -> [f64; 3] {
    std::array::from_fn(|i| rounds::median(runs.iter().map(|r| r[i]).collect()))
}

/// The server's own microseconds per script when it is busy and the client's CPU is not (hot):
/// [`HOT_KEYS`] fresh claims sent in pipelines, then their completions, then the same claims
/// again, now replays. Returns the three, in that order.
fn hot(
    steps: &Scripted,
    conn: &mut redis::Connection,
    admin: &mut redis::Connection,
    base: u64,
) -> [f64; 3] {
    let mut measure = |batch: &mut dyn FnMut(u64, &mut redis::Pipeline)| {
        let (calls0, usec0) = script_stats(admin);
        let mut replies = Vec::new();
        for start in (0..HOT_KEYS).step_by(PIPELINE as usize) {
            let mut pipe = redis::pipe();
            for i in start..start + PIPELINE {
                batch(base + i, &mut pipe);
            }
            let got: Vec<redis::Value> = pipe.query(conn).expect("a pipeline of scripts");
            replies.extend(got);
        }
        let (calls1, usec1) = script_stats(admin);
        ((usec1 - usec0) / (calls1 - calls0).max(1) as f64, replies)
    };
    let (claim, replies) = measure(&mut |i, pipe| steps.claim_cmd(i).queue(pipe));
    let fences: Vec<Vec<u8>> = replies
        .into_iter()
        .map(|r| steps.fence(r).expect("a fresh key is claimed"))
        .collect();
    let (complete, _) = measure(&mut |i, pipe| {
        steps
            .complete_cmd(i, &fences[(i - base) as usize])
            .queue(pipe)
    });
    let (replay, _) = measure(&mut |i, pipe| steps.claim_cmd(i).queue(pipe));
    [claim, complete, replay]
}

/// Calls and microseconds on the server of rerun's transitions (`INFO commandstats`): scripts
/// (`EVALSHA`) and functions (`FCALL`) together.
fn script_stats(conn: &mut redis::Connection) -> (u64, f64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .unwrap_or_default();
    let (a, b) = (
        command_stats(&info, "evalsha"),
        command_stats(&info, "fcall"),
    );
    (a.0 + b.0, a.1 + b.1)
}

/// Calls and microseconds on the server of `command`, from `INFO commandstats`.
fn command_stats(info: &str, command: &str) -> (u64, f64) {
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find_map(|l| l.strip_prefix(prefix.as_str())) else {
        return (0, 0.0);
    };
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("calls=") as u64, field("usec="))
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
    let rounds = rounds::rounds(10);
    let window = window / rounds as u32;
    let run = std::process::id();
    let store_prefix = format!("rerun-bench-{run}:ours:");
    let raw_prefix = format!("rerun-bench-{run}:raw:");
    let store = RedisStore::connect_with(&url, RedisOptions::new().prefix(&store_prefix))
        .expect("connecting");
    let raw = Scripted::rerun(&raw_prefix, &store);
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

    let floor_prefix = format!("rerun-bench-{run}:floor:");
    let floor = Floor::new(&floor_prefix, &raw.result);
    let atomic_prefix = format!("rerun-bench-{run}:atomic:");
    let atomic = Scripted::atomic(
        &atomic_prefix,
        &raw,
        &mut admin,
        store.function_name("claim").is_some(),
    );
    for k in 0..64u64 {
        let key = (1u64 << 62) + k;
        let mut c = conns[0].lock().unwrap_or_else(|p| p.into_inner());
        floor.sync(&mut c, key, false);
        atomic.sync(&mut c, key);
    }

    // Round trips and the server's time per script, counted by the server.
    let (calls0, usec0) = script_stats(&mut admin);
    for i in 0..SEQUENTIAL {
        let key = (1u64 << 61) + i;
        let _ = rerun_call(key).run(&store, || receipt(key));
    }
    let (calls1, usec1) = script_stats(&mut admin);
    for i in 0..SEQUENTIAL {
        let key = repeated(0, i);
        let _ = rerun_call(key).run(&store, || receipt(key));
    }
    let (calls2, usec2) = script_stats(&mut admin);
    {
        let mut c = conns[0].lock().unwrap_or_else(|p| p.into_inner());
        for i in 0..SEQUENTIAL {
            atomic.sync(&mut c, (1u64 << 61) + i);
        }
    }
    let (calls3, usec3) = script_stats(&mut admin);
    {
        let mut c = conns[0].lock().unwrap_or_else(|p| p.into_inner());
        for i in 0..SEQUENTIAL {
            atomic.sync(&mut c, repeated(0, i));
        }
    }
    let (calls4, usec4) = script_stats(&mut admin);
    let (fresh_rt, repeat_rt) = (
        (calls1 - calls0) as f64 / SEQUENTIAL as f64,
        (calls2 - calls1) as f64 / SEQUENTIAL as f64,
    );
    let per = |usec: f64, calls: u64| usec / calls.max(1) as f64;
    println!(
        "Redis: rerun RedisStore vs the raw redis client ({} ms per side per cell)",
        (window * rounds as u32).as_millis()
    );
    println!("  same:  the raw client calling rerun's own functions or scripts, as the store does (client overhead)");
    println!("  floor: the simplest client doing the same round trips (SET NX PX + SET PX; GET)");
    println!("  atomic: the floor of one atomic step per round trip that reads the record and writes, the claim reading the server's clock (GET, TIME, SET; GET, SET PX, in functions; no parsing, no formatting)");
    let form = if store.function_name("claim").is_some() {
        "functions, FCALL"
    } else {
        "scripts, EVALSHA"
    };
    println!("round trips per call, counted by the server ({form}): fresh {fresh_rt:.2}, repeated {repeat_rt:.2}");
    println!(
        "server time per script: fresh calls {:.1} us, repeated calls {:.1} us; the atomic floor's {:.1} us and {:.1} us",
        per(usec1 - usec0, calls1 - calls0),
        per(usec2 - usec1, calls2 - calls1),
        per(usec3 - usec2, calls3 - calls2),
        per(usec4 - usec3, calls4 - calls3)
    );
    let ([claim, complete, replay], [a_claim, a_complete, a_replay]) = {
        let mut c = conns[0].lock().unwrap_or_else(|p| p.into_inner());
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for pair in 0..HOT_PAIRS {
            // Keys no earlier measure used; the side that goes first alternates, so that
            // neither always meets the database the other has just grown.
            let base = (1 << 60) + pair * HOT_KEYS;
            if pair % 2 == 0 {
                ours.push(hot(&raw, &mut c, &mut admin, base));
                theirs.push(hot(&atomic, &mut c, &mut admin, base));
            } else {
                theirs.push(hot(&atomic, &mut c, &mut admin, base));
                ours.push(hot(&raw, &mut c, &mut admin, base));
            }
        }
        (medians(&ours), medians(&theirs))
    };
    println!(
        "server time per script, pipelined (hot, medians of {HOT_PAIRS} alternating pairs): a fresh key's claim {claim:.2} us and completion {complete:.2} us, a replay {replay:.2} us; the atomic floor's {a_claim:.2}, {a_complete:.2} and {a_replay:.2} us"
    );
    println!();
    println!("| case | rerun/s | same/s | vs same | floor/s | vs floor | atomic/s | vs atomic | atomic vs floor | rerun us | floor us |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");

    for threads in [1usize, 16] {
        bump(&next);
        let cell = interleave(
            rounds,
            [
                &mut || {
                    bump(&next);
                    rate(threads, window, &|t, i| {
                        let key = fresh_key(t, i);
                        let _ = rerun_call(key).run(&store, || receipt(key));
                    })
                },
                &mut || {
                    bump(&next);
                    rate(threads, window, &|t, i| {
                        let mut c = conns[t].lock().unwrap_or_else(|p| p.into_inner());
                        raw.sync(&mut c, fresh_key(t, i));
                    })
                },
                &mut || {
                    bump(&next);
                    rate(threads, window, &|t, i| {
                        let mut c = conns[t].lock().unwrap_or_else(|p| p.into_inner());
                        floor.sync(&mut c, fresh_key(t, i), false);
                    })
                },
                &mut || {
                    bump(&next);
                    rate(threads, window, &|t, i| {
                        let mut c = conns[t].lock().unwrap_or_else(|p| p.into_inner());
                        atomic.sync(&mut c, fresh_key(t, i));
                    })
                },
            ],
        );
        row(&format!("sync fresh, {threads} caller(s)"), &cell);
        let cell = interleave(
            rounds,
            [
                &mut || {
                    rate(threads, window, &|t, i| {
                        let key = repeated(t, i);
                        let _ = rerun_call(key).run(&store, || receipt(key));
                    })
                },
                &mut || {
                    rate(threads, window, &|t, i| {
                        let mut c = conns[t].lock().unwrap_or_else(|p| p.into_inner());
                        raw.sync(&mut c, repeated(t, i));
                    })
                },
                &mut || {
                    rate(threads, window, &|t, i| {
                        let mut c = conns[t].lock().unwrap_or_else(|p| p.into_inner());
                        floor.sync(&mut c, repeated(t, i), true);
                    })
                },
                &mut || {
                    rate(threads, window, &|t, i| {
                        let mut c = conns[t].lock().unwrap_or_else(|p| p.into_inner());
                        atomic.sync(&mut c, repeated(t, i));
                    })
                },
            ],
        );
        row(&format!("sync repeated, {threads} caller(s)"), &cell);
    }

    // The server's time per script under load, warm: 16 sync callers of one side at a time, for
    // one round's window each (the script statistics are per command, not per function).
    let mut under_load = |f: &(dyn Fn(usize, u64) + Sync)| {
        let before = script_stats(&mut admin);
        rate(16, window, f);
        let after = script_stats(&mut admin);
        per(after.1 - before.1, after.0 - before.0)
    };
    bump(&next);
    let loaded = [
        under_load(&|t, i| {
            let key = fresh_key(t, i);
            let _ = rerun_call(key).run(&store, || receipt(key));
        }),
        under_load(&|t, i| {
            let key = repeated(t, i);
            let _ = rerun_call(key).run(&store, || receipt(key));
        }),
        under_load(&|t, i| {
            let mut c = conns[t].lock().unwrap_or_else(|p| p.into_inner());
            atomic.sync(&mut c, fresh_key(t, i));
        }),
        under_load(&|t, i| {
            let mut c = conns[t].lock().unwrap_or_else(|p| p.into_inner());
            atomic.sync(&mut c, repeated(t, i));
        }),
    ];

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
    let floor = Arc::new(floor);
    let atomic = Arc::new(atomic);
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
            let cell = interleave(
                rounds,
                [
                    &mut || {
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
                    &mut || {
                        let b = base.fetch_add(1 << 48, Ordering::Relaxed);
                        let (raw, mux) = (raw.clone(), mux.clone());
                        rate_async(&rt, tasks, window, move |t, i| {
                            let (raw, mut mux) = (raw.clone(), mux.clone());
                            async move { raw.run_async(&mut mux, key_of(b, t, i)).await }
                        })
                    },
                    &mut || {
                        let b = base.fetch_add(1 << 48, Ordering::Relaxed);
                        let (floor, mux) = (floor.clone(), mux.clone());
                        rate_async(&rt, tasks, window, move |t, i| {
                            let (floor, mut mux) = (floor.clone(), mux.clone());
                            async move {
                                floor
                                    .run_async(&mut mux, key_of(b, t, i), repeated_calls)
                                    .await
                            }
                        })
                    },
                    &mut || {
                        let b = base.fetch_add(1 << 48, Ordering::Relaxed);
                        let (atomic, mux) = (atomic.clone(), mux.clone());
                        rate_async(&rt, tasks, window, move |t, i| {
                            let (atomic, mut mux) = (atomic.clone(), mux.clone());
                            async move { atomic.run_async(&mut mux, key_of(b, t, i)).await }
                        })
                    },
                ],
            );
            let what = if repeated_calls { "repeated" } else { "fresh" };
            row(&format!("async {what}, {tasks} task(s)"), &cell);
        }
    }

    let [fresh, repeat, atomic_fresh, atomic_repeat] = loaded;
    println!();
    println!(
        "server time per script under load (16 sync callers, warm): fresh calls {fresh:.1} us, repeated calls {repeat:.1} us; the atomic floor's {atomic_fresh:.1} us and {atomic_repeat:.1} us"
    );

    // Leave nothing behind.
    for prefix in [&store_prefix, &raw_prefix, &floor_prefix, &atomic_prefix] {
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
    // The atomic floor's library is the program's own (the store's stays, as any user's does).
    let _: redis::RedisResult<()> = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg(ATOMIC_LIBRARY)
        .query(&mut admin);
}
