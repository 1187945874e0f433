//! What the HTTP tests share: a store of each kind on fresh names (cleaned up afterwards), an
//! axum app whose handlers count their runs, a server on a loopback port, and a raw client
//! for what `reqwest` will not send.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use rerun_core::testing::{Faulty, Op};
use rerun_core::{DynStore, Error};
use rerun_http::IdempotencyLayer;

/// The kinds of store every behaviour is checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Sqlite,
    Postgres,
    Redis,
}

/// A store of one kind on names of its own, removed when dropped.
pub struct Fixture {
    pub store: Arc<dyn DynStore>,
    /// The same store with a switch that makes every call fail as an unreachable store does.
    pub switch: Arc<AtomicBool>,
    pub url: String,
    cleanup: Cleanup,
    _dir: Option<tempfile::TempDir>,
}

enum Cleanup {
    None,
    Postgres { url: String, table: String },
    Redis { url: String, prefix: String },
}

impl Drop for Fixture {
    fn drop(&mut self) {
        match &self.cleanup {
            Cleanup::None => {}
            Cleanup::Postgres { url, table } => drop_table(url, table),
            Cleanup::Redis { url, prefix } => delete_prefix(url, prefix),
        }
    }
}

/// A unique name for this test run.
pub fn unique(tag: &str) -> String {
    rerun_core::testing::conformance::unique(&format!("http_{tag}"))
}

impl Fixture {
    /// A fresh store of `kind`, or `None` (the test is skipped, with a notice) when its server
    /// is not configured. Call it outside any async runtime.
    pub fn new(kind: Kind, tag: &str) -> Option<Fixture> {
        // PostgreSQL table names are at most 55 bytes here: a short tag.
        let name = unique(&tag[..tag.len().min(12)]);
        let (store, url, cleanup, dir): (Arc<dyn DynStore>, String, Cleanup, _) = match kind {
            Kind::Memory => (
                Arc::new(rerun_core::MemoryStore::new()),
                "memory:".into(),
                Cleanup::None,
                None,
            ),
            Kind::Sqlite => {
                let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temp dir: {e}"));
                let path = dir.path().join("rerun.sqlite3");
                let store = rerun_core::SqliteStore::open(&path)
                    .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
                (
                    Arc::new(store),
                    format!("sqlite:{}", path.display()),
                    Cleanup::None,
                    Some(dir),
                )
            }
            Kind::Postgres => {
                let url = rerun_core::testing::service_url("RERUN_TEST_POSTGRES_URL")?;
                let table = name.to_ascii_lowercase();
                let store = rerun_core::PostgresStore::builder(&url)
                    .table(&table)
                    .connect()
                    .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
                (
                    Arc::new(store),
                    url.clone(),
                    Cleanup::Postgres { url, table },
                    None,
                )
            }
            Kind::Redis => {
                let url = rerun_core::testing::service_url("RERUN_TEST_REDIS_URL")?;
                let prefix = format!("{name}:");
                let store = rerun_core::RedisStore::connect_with(
                    &url,
                    // No upgrade sweep: one that ended after the cleanup would leave its
                    // marker behind.
                    rerun_core::store::redis::RedisOptions::new()
                        .prefix(&prefix)
                        .upgrade_sweep(false),
                )
                .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
                (
                    Arc::new(store),
                    url.clone(),
                    Cleanup::Redis { url, prefix },
                    None,
                )
            }
        };
        Some(Fixture {
            store,
            switch: Arc::new(AtomicBool::new(false)),
            url,
            cleanup,
            _dir: dir,
        })
    }

    /// A layer on this store.
    pub fn layer(&self) -> IdempotencyLayer {
        IdempotencyLayer::new(self.store.clone())
    }

    /// A layer on this store behind [`Fixture::switch`].
    pub fn switched_layer(&self) -> IdempotencyLayer {
        // Every operation made for a call fails, as on an unreachable store, while the switch
        // is on; what an operator does (forget, inspect, scan) still reaches the store.
        let down = self.switch.clone();
        IdempotencyLayer::new(Faulty::around(self.store.clone()).before(move |op| {
            let for_a_call = op.is_fenced() || matches!(op, Op::Claim(_));
            if for_a_call && down.load(Ordering::SeqCst) {
                Err(Error::store_msg(
                    op.key(),
                    "connection refused by db-internal-7",
                ))
            } else {
                Ok(())
            }
        }))
    }

    /// For a store in a file or on a server: a description another process opens it by.
    pub fn tables(&self) -> (String, String) {
        match &self.cleanup {
            Cleanup::Postgres { table, .. } => ("postgres".into(), table.clone()),
            Cleanup::Redis { prefix, .. } => ("redis".into(), prefix.clone()),
            Cleanup::None => ("sqlite".into(), self.url.clone()),
        }
    }
}

pub fn drop_table(url: &str, table: &str) {
    let url = url.to_owned();
    let sql = format!(
        "DROP TABLE IF EXISTS \"{table}\"; DROP TABLE IF EXISTS \"{table}_meta\"; DROP SEQUENCE IF EXISTS \"{table}_fence\"; DROP FUNCTION IF EXISTS \"{table}_claim\";"
    );
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .ok()?;
            tokio::spawn(conn);
            client.batch_execute(&sql).await.ok()
        })
    })
    .join();
}

fn delete_prefix(url: &str, prefix: &str) {
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(5)) else {
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut conn)
        .unwrap_or_default();
    for key in keys {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(key).query(&mut conn);
    }
}

/// How many times each handler ran.
#[derive(Clone, Default)]
pub struct Runs(pub Arc<AtomicUsize>);

impl Runs {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
    fn bump(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

#[derive(serde::Deserialize)]
pub struct Params {
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    bytes: Option<usize>,
}

/// `POST /payments`: counts, sleeps `delay_ms`, answers 201 with a body naming its run, or
/// `status` when given. `POST /panic` panics; `POST /events` streams server-sent events;
/// `POST /big` answers `bytes` bytes; `POST /broken` answers a body that fails after its first
/// chunk; `GET /payments` counts and answers 200.
pub fn app(runs: Runs) -> Router {
    Router::new()
        .route("/payments", post(payment).get(read_payments).put(payment))
        .route("/payments/{id}", post(payment).patch(payment))
        .route("/panic", post(panics))
        .route("/events", post(events))
        .route("/big", post(big))
        .route("/broken", post(broken))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(runs)
}

async fn payment(
    State(runs): State<Runs>,
    Query(p): Query<Params>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let run = runs.bump();
    if p.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(p.delay_ms)).await;
    }
    let status = p
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::CREATED);
    let tenant = headers
        .get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_owned();
    (
        status,
        [
            ("content-type", "application/json"),
            ("x-run", &run.to_string()),
        ],
        axum::response::AppendHeaders([("set-cookie", "a=1"), ("set-cookie", "b=2")]),
        format!(
            "{{\"run\":{run},\"tenant\":\"{tenant}\",\"bytes\":{}}}",
            body.len()
        ),
    )
        .into_response()
}

async fn read_payments(State(runs): State<Runs>) -> String {
    format!("run {}", runs.bump())
}

async fn panics(State(runs): State<Runs>) -> String {
    runs.bump();
    if runs.get() > 0 {
        panic!("the handler failed");
    }
    String::new()
}

async fn events(State(runs): State<Runs>) -> Response {
    let run = runs.bump();
    let chunks = (0..3).map(move |i| Ok::<_, std::io::Error>(format!("data: {run}-{i}\n\n")));
    let body = axum::body::Body::from_stream(futures_util::stream::iter(chunks));
    ([("content-type", "text/event-stream")], body).into_response()
}

async fn big(State(runs): State<Runs>, Query(p): Query<Params>) -> Vec<u8> {
    let run = runs.bump();
    vec![b'0' + (run % 10) as u8; p.bytes.unwrap_or(0)]
}

async fn broken(State(runs): State<Runs>) -> Response {
    runs.bump();
    let chunks = [
        Ok("the first chunk".to_owned()),
        Err(std::io::Error::other("the rest of the body failed")),
    ];
    axum::body::Body::from_stream(futures_util::stream::iter(chunks)).into_response()
}

/// A server on a loopback port.
pub struct Server {
    pub addr: SocketAddr,
    pub runs: Runs,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    /// Serves [`app`] behind `layer`.
    pub async fn start(layer: IdempotencyLayer) -> Server {
        let runs = Runs::default();
        let router = app(runs.clone()).layer(layer);
        Server::serve(router, runs).await
    }

    pub async fn serve(router: Router, runs: Runs) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("binding: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local addr: {e}"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Server { addr, runs, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// A plain client (no retries of its own, no connection reuse surprises).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_else(|e| panic!("a client: {e}"))
}

/// What a response said, whole.
#[derive(Debug, Clone)]
pub struct Got {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

impl Got {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }
    /// The problem's `code` member (panics if the body is not a problem).
    pub fn code(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{self:?}"
        );
        let json: serde_json::Value =
            serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()));
        assert_eq!(json["status"].as_u64(), Some(u64::from(self.status)));
        json["code"].as_str().unwrap_or_default().to_owned()
    }
}

/// Sends `req` and reads the whole response.
pub async fn send(req: reqwest::RequestBuilder) -> Got {
    let response = req.send().await.unwrap_or_else(|e| panic!("sending: {e}"));
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("reading: {e}"))
        .to_vec();
    Got {
        status,
        headers,
        body,
    }
}

/// Writes `request` as it is on a new connection and reads the response until the server
/// closes it (the request should say `Connection: close`). Returns the raw response text.
pub fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting: {e}"));
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    // A server may answer and close before it read everything (a 413): read what it said.
    let _ = stream.write_all(request);
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of a raw response.
pub fn raw_status(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Runs `f` on a multi-threaded runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"))
        .block_on(f)
}

/// Defines `$name` once per store kind, in modules `memory`, `sqlite`, `postgres`, `redis`:
/// each builds a fixture (or skips) and runs `$body(fixture)` on a runtime.
#[macro_export]
macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        mod memory { $( #[test] fn $name() { super::run(super::Kind::Memory, stringify!($name), super::$name) } )* }
        mod sqlite { $( #[test] fn $name() { super::run(super::Kind::Sqlite, stringify!($name), super::$name) } )* }
        mod postgres { $( #[test] fn $name() { super::run(super::Kind::Postgres, stringify!($name), super::$name) } )* }
        mod redis { $( #[test] fn $name() { super::run(super::Kind::Redis, stringify!($name), super::$name) } )* }
    };
}

/// Runs one check on a fresh store of `kind`, skipping when its server is not configured.
pub fn run<F, Fut>(kind: Kind, tag: &str, check: F)
where
    F: FnOnce(Arc<Fixture>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(fixture) = Fixture::new(kind, tag) else {
        return;
    };
    let fixture = Arc::new(fixture);
    block_on(check(fixture.clone()));
    drop(fixture);
}
