//! Requests per second through `IdempotencyLayer` against the same axum handler without it,
//! in one run, over real HTTP on loopback (one keep-alive connection, requests one after
//! another, so each figure is a latency): fresh keys (claim, handler, record) and replayed
//! keys (one claim that finds the record), on the memory store (what the layer itself costs),
//! SQLite and, with `RERUN_BENCH_REDIS_URL` set, Redis. Two lines per store also time one replayed call straight on the store (a round
//! trip), through the blocking client and through the async one the layer uses, to compare
//! with what the layer adds.
//!
//! ```text
//! RERUN_BENCH_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p rerun-http --bench http_ratios
//! ```
//!
//! `RERUN_BENCH_REQUESTS` sets the requests per case (default 3000).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use rerun_core::{Call, DynStore, Error};
use rerun_http::IdempotencyLayer;

const WARMUP: usize = 200;

fn requests() -> usize {
    std::env::var("RERUN_BENCH_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3000)
}

async fn handler(body: axum::body::Bytes) -> (http::StatusCode, String) {
    (
        http::StatusCode::CREATED,
        format!("{{\"paid\":{}}}", body.len()),
    )
}

async fn serve(router: Router) -> String {
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => panic!("binding: {e}"),
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => panic!("{e}"),
    };
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{addr}/payments")
}

/// Microseconds per request: `n` requests, the key of request `i` from `key(i)`.
async fn time(
    http: &reqwest::Client,
    url: &str,
    n: usize,
    key: impl Fn(usize) -> Option<String>,
) -> f64 {
    let started = Instant::now();
    for i in 0..n {
        let mut req = http.post(url).body("{\"amount_cents\":4200}");
        if let Some(k) = key(i) {
            req = req.header("idempotency-key", k);
        }
        match req.send().await {
            Ok(r) if r.status().as_u16() == 201 => {
                let _ = r.bytes().await;
            }
            Ok(r) => panic!("status {}", r.status()),
            Err(e) => panic!("{e}"),
        }
    }
    started.elapsed().as_secs_f64() * 1e6 / n as f64
}

/// Microseconds per replayed call straight on the store.
fn round_trip(store: &dyn DynStore, tag: &str, n: usize) -> f64 {
    let call = || Call::new("bench.round_trip", tag).run(store, || Ok::<_, Error>(1u32));
    if let Err(e) = call() {
        panic!("{e}");
    }
    let started = Instant::now();
    for _ in 0..n {
        if let Err(e) = call() {
            panic!("{e}");
        }
    }
    started.elapsed().as_secs_f64() * 1e6 / n as f64
}

/// Microseconds per replayed call through the async client, on the runtime serving the layer:
/// the store round trip the layer itself makes.
async fn round_trip_async(store: &dyn DynStore, tag: &str, n: usize) -> f64 {
    let call = || async {
        Call::new("bench.round_trip", tag)
            .run_async(store, async { Ok::<_, Error>(1u32) })
            .await
    };
    if let Err(e) = call().await {
        panic!("{e}");
    }
    let started = Instant::now();
    for _ in 0..n {
        if let Err(e) = call().await {
            panic!("{e}");
        }
    }
    started.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn row(case: &str, us: f64, bare: f64) {
    println!(
        "| {case:<28} | {:>8.0} | {:>7.0} | {:>11.2}x |",
        1e6 / us,
        us,
        us / bare
    );
}

fn main() {
    let n = requests();
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    };
    let mut stores: Vec<(&str, Arc<dyn DynStore>)> = Vec::new();
    let mut redis_prefix = None;
    // The memory store's round trip is a map lookup: its rows show what the layer itself costs.
    stores.push(("Memory", Arc::new(rerun_core::MemoryStore::new())));
    match rerun_core::SqliteStore::open(dir.path().join("bench.sqlite3")) {
        Ok(s) => stores.push(("SQLite", Arc::new(s))),
        Err(e) => panic!("{e}"),
    }
    match std::env::var("RERUN_BENCH_REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            let prefix = format!("rerun-bench-http-{}:", std::process::id());
            match rerun_core::RedisStore::connect_with(
                &url,
                rerun_core::store::redis::RedisOptions::new().prefix(&prefix),
            ) {
                Ok(s) => {
                    stores.push(("Redis", Arc::new(s)));
                    redis_prefix = Some((url.clone(), prefix));
                }
                Err(e) => panic!("{e}"),
            }
        }
        _ => eprintln!("note: RERUN_BENCH_REDIS_URL is not set; Redis is left out"),
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("{e}"),
    };
    rt.block_on(async {
        let http = match reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .timeout(Duration::from_secs(30))
            .build()
        {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        let bare_url = serve(Router::new().route("/payments", post(handler))).await;
        time(&http, &bare_url, WARMUP, |_| None).await;
        let bare = time(&http, &bare_url, n, |_| None).await;
        println!("{n} sequential POSTs per case over one loopback connection\n");
        println!("| case                         |   req/s  | us/req  | time vs bare |");
        println!("|------------------------------|---------:|--------:|-------------:|");
        row("axum handler, no layer", bare, bare);
        for (name, store) in &stores {
            let url = serve(Router::new().route("/payments", post(handler)).layer(
                IdempotencyLayer::new(store.clone()).scope(format!("bench-{}", std::process::id())),
            ))
            .await;
            time(&http, &url, WARMUP, |i| Some(format!("warm-{i}"))).await;
            let fresh = time(&http, &url, n, |i| Some(format!("fresh-{i}"))).await;
            row(&format!("{name}: fresh key"), fresh, bare);
            time(&http, &url, 1, |_| Some("replayed".into())).await;
            let replayed = time(&http, &url, n, |_| Some("replayed".into())).await;
            row(&format!("{name}: replayed key"), replayed, bare);
            let trip_async = round_trip_async(&**store, "rt-async", n).await;
            let store = store.clone();
            let trip = tokio::task::spawn_blocking(move || round_trip(&*store, "rt", n))
                .await
                .unwrap_or(f64::NAN);
            for (what, us) in [
                ("round trip, sync", trip),
                ("round trip, async", trip_async),
            ] {
                println!(
                    "| {:<28} |          | {:>7.0} |              |",
                    format!("{name}: {what}"),
                    us
                );
            }
        }
    });
    // The bench's Redis keys go now (the SQLite file goes with its directory).
    if let Some((url, prefix)) = redis_prefix {
        if let Ok(mut conn) = redis::Client::open(url.as_str()).and_then(|c| c.get_connection()) {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{prefix}*"))
                .query(&mut conn)
                .unwrap_or_default();
            for key in keys {
                let _: redis::RedisResult<()> = redis::cmd("DEL").arg(key).query(&mut conn);
            }
        }
    }
}
