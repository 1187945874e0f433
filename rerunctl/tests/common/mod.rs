//! Helpers of the end-to-end tests: the built binary, stores of every kind with raw access
//! to their rows, and holder processes to kill.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rerun_core::{DynStore, Key};
use serde_json::Value;

/// What a run of `rerunctl` did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Stdout as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {self:?}"))
    }
    /// Asserts the exit code, showing the run otherwise.
    #[track_caller]
    pub fn expect(self, code: i32) -> Run {
        assert_eq!(self.code, code, "{self:#?}");
        self
    }
}

/// A command line of the built binary: no `RERUN_STORE` unless given, no terminal, and a
/// working directory of its own unless given.
pub struct Ctl {
    cmd: Command,
}

pub fn ctl<I, S>(args: I) -> Ctl
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rerunctl"));
    cmd.args(args)
        .env_remove("RERUN_STORE")
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null());
    Ctl { cmd }
}

impl Ctl {
    pub fn env(mut self, name: &str, value: &str) -> Ctl {
        self.cmd.env(name, value);
        self
    }
    pub fn dir(mut self, dir: &Path) -> Ctl {
        self.cmd.current_dir(dir);
        self
    }
    pub fn run(mut self) -> Run {
        let out = self.cmd.output().expect("rerunctl runs");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// `rerunctl --store URL ARGS… [--json]`.
pub fn on(store: &Backend, args: &[&str]) -> Run {
    let mut all = vec!["--store", store.url()];
    all.extend_from_slice(args);
    ctl(all).run()
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A name no other test (or test run) uses.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A store of one kind, emptied and removed when dropped.
pub enum Backend {
    Sqlite {
        _dir: tempfile::TempDir,
        path: PathBuf,
        url: String,
    },
    Postgres {
        base: String,
        table: String,
        url: String,
    },
    Redis {
        base: String,
        prefix: String,
        url: String,
    },
}

impl Backend {
    pub fn sqlite() -> Backend {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("rerun.sqlite3");
        // Created up front: rerunctl opens existing stores only.
        drop(rerun_core::SqliteStore::open(&path).expect("a SQLite store"));
        let url = format!("sqlite:{}", path.display());
        Backend::Sqlite {
            _dir: dir,
            path,
            url,
        }
    }

    /// A PostgreSQL store in a table of its own; `None` (skipped) without a server URL.
    pub fn postgres() -> Option<Backend> {
        let base = rerun_core::testing::service_url("RERUN_TEST_POSTGRES_URL")?;
        let table = unique("ctl");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}rerun_table={table}");
        drop(rerun_core::open_url(&url).expect("a PostgreSQL store"));
        Some(Backend::Postgres { base, table, url })
    }

    /// A Redis store under a key prefix of its own; `None` (skipped) without a server URL.
    pub fn redis() -> Option<Backend> {
        let base = rerun_core::testing::service_url("RERUN_TEST_REDIS_URL")?;
        let prefix = format!("{}:", unique("ctl"));
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}prefix={prefix}");
        Some(Backend::Redis { base, prefix, url })
    }

    /// Every kind whose server is set up (SQLite always).
    pub fn all() -> Vec<Backend> {
        let mut all = vec![Backend::sqlite()];
        all.extend(Backend::postgres());
        all.extend(Backend::redis());
        all
    }

    pub fn url(&self) -> &str {
        match self {
            Backend::Sqlite { url, .. }
            | Backend::Postgres { url, .. }
            | Backend::Redis { url, .. } => url,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite { .. } => "sqlite",
            Backend::Postgres { .. } => "postgres",
            Backend::Redis { .. } => "redis",
        }
    }

    pub fn open(&self) -> Arc<dyn DynStore> {
        rerun_core::open_url(self.url()).expect("the store opens")
    }

    /// Replaces a record's stored result with `bytes`, behind the store's back.
    pub fn set_result(&self, key: &Key, bytes: &[u8]) {
        match self {
            Backend::Sqlite { path, .. } => {
                let db = rusqlite::Connection::open(path).expect("raw SQLite");
                let n = db
                    .execute(
                        "UPDATE rerun_records SET result = ?1 WHERE scope = ?2 AND id = ?3",
                        rusqlite::params![bytes, key.scope(), key.id()],
                    )
                    .expect("update");
                assert_eq!(n, 1);
            }
            Backend::Postgres { base, table, .. } => {
                let sql =
                    format!("UPDATE \"{table}\" SET result = $1 WHERE scope = $2 AND id = $3");
                let n = pg(base, |c| async move {
                    c.execute(&sql, &[&bytes, &key.scope(), &key.id()]).await
                });
                assert_eq!(n, 1);
            }
            Backend::Redis { .. } => self.redis_edit(key, |raw| {
                // The record's string: a 103-byte header whose last 4 digits are the holder's
                // length, the holder, then the result.
                let holder: usize = std::str::from_utf8(&raw[99..103])
                    .ok()
                    .and_then(|d| d.parse().ok())
                    .expect("a holder length");
                raw.truncate(103 + holder);
                raw.extend_from_slice(bytes);
            }),
        }
    }

    /// Rewrites the string of a Redis record behind the store's back, keeping its expiry.
    pub fn redis_edit(&self, key: &Key, edit: impl FnOnce(&mut Vec<u8>)) {
        if let Backend::Redis { base, .. } = self {
            let mut con = redis_con(base);
            let name = self.redis_name(key);
            let mut raw: Vec<u8> = redis::cmd("GET").arg(&name).query(&mut con).expect("GET");
            edit(&mut raw);
            let _: () = redis::cmd("SET")
                .arg(&name)
                .arg(raw)
                .arg("KEEPTTL")
                .query(&mut con)
                .expect("SET");
        }
    }

    /// The Redis key name of a record.
    pub fn redis_name(&self, key: &Key) -> String {
        match self {
            Backend::Redis { prefix, .. } => format!("{prefix}{{{}:{}}}", key.scope(), key.id()),
            _ => String::new(),
        }
    }

    /// Copies the record of `template` to the keys `k1`…`k{n}` of its scope, in bulk, behind
    /// the store's back: a big store made in a moment.
    pub fn clone_record(&self, template: &Key, n: u32) {
        match self {
            Backend::Sqlite { path, .. } => {
                let db = rusqlite::Connection::open(path).expect("raw SQLite");
                db.execute(
                    "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?3)
                     INSERT INTO rerun_records (scope, id, status, fence, fingerprint, holder, once,
                         boot_id, lease_until, expires_mono, expires_wall, result, lease_wall,
                         changed_wall)
                     SELECT r.scope, 's' || length('k' || n) || ':k' || n, r.status, r.fence,
                         r.fingerprint, r.holder, r.once, r.boot_id, r.lease_until,
                         r.expires_mono, r.expires_wall, r.result, r.lease_wall, r.changed_wall
                     FROM rerun_records r, g WHERE r.scope = ?1 AND r.id = ?2",
                    rusqlite::params![template.scope(), template.id(), n],
                )
                .expect("bulk insert");
            }
            Backend::Postgres { base, table, .. } => {
                let sql = format!(
                    "INSERT INTO \"{table}\" (scope, id, status, fence, fingerprint, holder, once,
                         lease_until, expires_at, result, changed_at)
                     SELECT r.scope, 's' || length('k' || g) || ':k' || g,
                         r.status, r.fence, r.fingerprint, r.holder, r.once, r.lease_until,
                         r.expires_at, r.result, r.changed_at
                     FROM \"{table}\" r, generate_series(1, $3::int) g
                     WHERE r.scope = $1 AND r.id = $2"
                );
                let n = i32::try_from(n).expect("n");
                pg(base, |c| async move {
                    c.execute(&sql, &[&template.scope(), &template.id(), &n])
                        .await
                });
            }
            Backend::Redis { base, .. } => {
                let mut con = redis_con(base);
                let raw: Vec<u8> = redis::cmd("GET")
                    .arg(self.redis_name(template))
                    .query(&mut con)
                    .expect("GET");
                let mut pipe = redis::pipe();
                for i in 1..=n {
                    let key = Key::new(template.scope().to_owned(), &format!("k{i}"));
                    pipe.cmd("SET")
                        .arg(self.redis_name(&key))
                        .arg(raw.as_slice())
                        .arg("PX")
                        .arg(3_600_000)
                        .ignore();
                }
                let _: () = pipe.query(&mut con).expect("pipeline");
            }
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        match self {
            Backend::Sqlite { .. } => {}
            Backend::Postgres { base, table, .. } => {
                let sql = format!(
                    "DROP TABLE IF EXISTS \"{table}\", \"{table}_meta\"; DROP SEQUENCE IF EXISTS \"{table}_fence\"; DROP FUNCTION IF EXISTS \"{table}_claim\""
                );
                pg(
                    base,
                    |c| async move { c.batch_execute(&sql).await.map(|()| 0) },
                );
            }
            Backend::Redis { base, prefix, .. } => {
                let mut con = redis_con(base);
                let names: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{prefix}*"))
                    .query(&mut con)
                    .unwrap_or_default();
                if !names.is_empty() {
                    let _: Result<(), _> = redis::cmd("DEL").arg(names).query(&mut con);
                }
            }
        }
    }
}

/// Runs `f` with a raw PostgreSQL client.
pub fn pg<F, Fut>(base: &str, f: F) -> u64
where
    F: FnOnce(Arc<tokio_postgres::Client>) -> Fut,
    Fut: std::future::Future<Output = Result<u64, tokio_postgres::Error>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
            .await
            .expect("raw PostgreSQL");
        let task = tokio::spawn(conn);
        let n = f(Arc::new(client)).await.expect("raw SQL");
        task.abort();
        n
    })
}

pub fn redis_con(base: &str) -> redis::Connection {
    redis::Client::open(base)
        .and_then(|c| c.get_connection())
        .expect("raw Redis")
}

/// The environment of a holder process (see `spawn_holder`).
pub const CHILD_STORE: &str = "RERUNCTL_TEST_HOLDER_STORE";
pub const CHILD_SCOPE: &str = "RERUNCTL_TEST_HOLDER_SCOPE";
pub const CHILD_KEY: &str = "RERUNCTL_TEST_HOLDER_KEY";
pub const CHILD_ONCE: &str = "RERUNCTL_TEST_HOLDER_ONCE";

/// The body of a holder process: claims a key through `rerun_core::Call` with a long lease,
/// says `holding`, and blocks in the body until it is killed. Does nothing in a normal run.
pub fn holder_body() {
    let (Ok(url), Ok(scope), Ok(key)) = (
        std::env::var(CHILD_STORE),
        std::env::var(CHILD_SCOPE),
        std::env::var(CHILD_KEY),
    ) else {
        return;
    };
    let store = rerun_core::open_url(&url).expect("the holder opens the store");
    let mut call = rerun_core::Call::new(scope, key.as_str()).lease(Duration::from_secs(300));
    if std::env::var(CHILD_ONCE).is_ok() {
        call = call.once();
    }
    let _ = call.run(&*store, || -> Result<u32, rerun_core::Error> {
        println!("holding");
        std::thread::sleep(Duration::from_secs(600));
        Ok(1)
    });
}

/// A holder process, SIGKILLed when dropped (a failing test leaves none behind).
pub struct HolderProcess(Option<Child>);

impl Drop for HolderProcess {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            kill_child(child);
        }
    }
}

/// A process that holds `scope`/`key` in `store` (the test binary re-run as `test_name`,
/// which must call [`holder_body`]), once it said so.
pub fn spawn_holder(
    test_name: &str,
    store: &Backend,
    scope: &str,
    key: &str,
    once: bool,
) -> HolderProcess {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = Command::new(exe);
    cmd.args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_STORE, store.url())
        .env(CHILD_SCOPE, scope)
        .env(CHILD_KEY, key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if once {
        cmd.env(CHILD_ONCE, "1");
    }
    let mut child = cmd.spawn().expect("the holder starts");
    let out = child.stdout.take().expect("its stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("holding") => break,
            Ok(_) => continue,
            Err(_) => {
                let _ = child.kill();
                panic!("the holder never said it holds the key");
            }
        }
    }
    HolderProcess(Some(child))
}

/// SIGKILLs a holder process and reaps it.
pub fn kill(mut holder: HolderProcess) {
    if let Some(child) = holder.0.take() {
        kill_child(child);
    }
}

fn kill_child(mut child: Child) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("SIGKILL");
    let _ = child.wait();
}
