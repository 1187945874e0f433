//! A server SIGKILLed mid-handler, then restarted: the retry takes the dead server's claim
//! over and runs the handler once; on a `once` route it gets 500 "outcome unknown" and the
//! handler never runs twice. Real processes: this test binary re-runs itself as the server
//! (`RERUN_HTTP_CHILD`), on SQLite, PostgreSQL and Redis.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use rerun_core::DynStore;
use rerun_http::IdempotencyLayer;
use support::{block_on, client, send, Fixture, Kind};

const CHILD: &str = "RERUN_HTTP_CHILD";
const MARK: &str = "HTTP-CHILD-LISTENING ";

#[test]
fn sqlite() {
    killed_and_restarted(Kind::Sqlite);
}

#[test]
fn postgres() {
    killed_and_restarted(Kind::Postgres);
}

#[test]
fn redis() {
    killed_and_restarted(Kind::Redis);
}

/// The server process: serves `/work` (replayable) and `/once` (at-most-once) on the store
/// the environment names, appending a line to the runs file each time a handler starts, and
/// answering after `RERUN_HTTP_DELAY_MS`.
#[test]
fn child_server() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let runs = PathBuf::from(std::env::var("RERUN_HTTP_RUNS").unwrap_or_default());
    let store = open(&spec);
    let delay = Duration::from_millis(
        std::env::var("RERUN_HTTP_DELAY_MS")
            .ok()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0),
    );
    block_on(async move {
        let layer = IdempotencyLayer::new(store);
        let handler = move |route: &'static str| {
            let runs = runs.clone();
            move || {
                let runs = runs.clone();
                async move {
                    append(&runs, route);
                    tokio::time::sleep(delay).await;
                    (http::StatusCode::CREATED, format!("{route} done"))
                }
            }
        };
        let app = Router::new()
            .route("/work", post(handler("work")).layer(layer.clone()))
            .route("/once", post(handler("once")).layer(layer.once()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        println!("{MARK}{addr}");
        let _ = axum::serve(listener, app).await;
    });
}

fn append(path: &Path, line: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // One write of the whole line: two handlers append at once, and `writeln!` would write
    // the text and its newline separately, interleaving them ("workonce\n\n").
    let _ = file.write_all(format!("{line}\n").as_bytes());
    let _ = file.sync_all();
}

fn lines(path: &Path, route: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == route)
        .count()
}

/// Opens the store `spec` names: `sqlite PATH`, `postgres URL TABLE`, `redis URL PREFIX`.
fn open(spec: &str) -> Arc<dyn DynStore> {
    let parts: Vec<&str> = spec.split(' ').collect();
    match parts.as_slice() {
        ["sqlite", path] => {
            Arc::new(rerun_core::SqliteStore::open(path).unwrap_or_else(|e| panic!("{e}")))
        }
        ["postgres", url, table] => Arc::new(
            rerun_core::PostgresStore::builder(url)
                .table(*table)
                .connect()
                .unwrap_or_else(|e| panic!("{e}")),
        ),
        ["redis", url, prefix] => Arc::new(
            rerun_core::RedisStore::connect_with(
                url,
                rerun_core::store::redis::RedisOptions::new().prefix(*prefix),
            )
            .unwrap_or_else(|e| panic!("{e}")),
        ),
        _ => panic!("unknown store spec {spec:?}"),
    }
}

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(spec: &str, runs: &Path, delay_ms: u64) -> Server {
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
        let mut child = Command::new(exe)
            .args(["child_server", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, spec)
            .env("RERUN_HTTP_RUNS", runs)
            .env("RERUN_HTTP_DELAY_MS", delay_ms.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning the server: {e}"));
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("piped stdout"));
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(at) = line.find(MARK) {
                        break line[at + MARK.len()..]
                            .trim()
                            .parse()
                            .unwrap_or_else(|e| panic!("{line}: {e}"));
                    }
                }
                _ => panic!("the server exited before listening"),
            }
        };
        // Keep draining its stdout so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, addr }
    }

    /// SIGKILL: no destructor, no release; its claims stay in progress.
    fn kill(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

fn killed_and_restarted(kind: Kind) {
    let Some(fixture) = Fixture::new(kind, "crash") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let runs = dir.path().join("runs");
    let spec = match fixture.tables() {
        (k, name) if k == "sqlite" => format!("sqlite {}", name.trim_start_matches("sqlite:")),
        (k, name) => format!("{k} {} {name}", fixture.url),
    };
    // The first server's handlers take a minute: it dies in the middle of them.
    let first = Server::start(&spec, &runs, 60_000);
    let addr = first.addr;
    // Both requests start their handlers, which sleep for a minute; then the server dies.
    let started = runs.clone();
    block_on(async move {
        let http = client();
        for route in ["work", "once"] {
            let req = http
                .post(format!("http://{addr}/{route}"))
                .header("idempotency-key", "crash-1");
            tokio::spawn(async move {
                let _ = req.send().await;
            });
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while lines(&started, "work") + lines(&started, "once") < 2 {
            assert!(Instant::now() < deadline, "the handlers did not start");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    first.kill();

    assert_eq!((lines(&runs, "work"), lines(&runs, "once")), (1, 1));

    // The restarted server: its handlers answer at once.
    let second = Server::start(&spec, &runs, 0);
    let addr = second.addr;
    block_on(async move {
        let http = client();
        let post = |route: &str| {
            http.post(format!("http://{addr}/{route}"))
                .header("idempotency-key", "crash-1")
        };
        // Replayable: the dead server's claim is taken over at once (its process is provably
        // gone) and the handler runs, once.
        let retried = send(post("work")).await;
        assert_eq!(retried.status, 201, "{}", retried.text());
        assert!(!retried.replayed());
        let again = send(post("work")).await;
        assert!(again.replayed() && again.body == retried.body);
        // At-most-once: the outcome is unknown, said so, and the handler is never run again.
        for _ in 0..2 {
            let unknown = send(post("once")).await;
            assert_eq!(unknown.status, 500, "{}", unknown.text());
            assert_eq!(unknown.code(), "outcome_unknown");
            assert!(unknown.text().contains("unknown"));
        }
    });
    assert_eq!((lines(&runs, "work"), lines(&runs, "once")), (2, 1));
    drop(second);
    drop(fixture);
}
