//! `SqliteStore`: the embedded default. One file shared by every process of one host.
//!
//! Shape of the costs: a repeated call is one read (no write lock); a fresh call is that read,
//! one `BEGIN IMMEDIATE` transaction that re-reads and claims, and one `UPDATE` that completes.
//! The journal is WAL. Replayable claims commit with `synchronous=NORMAL` (durable against a
//! crash of the process, which is what a replayable function needs); claims of `once` functions
//! commit with `synchronous=FULL`, so a power loss cannot forget that the body may have started.
//! Leases and expiry use the host's `CLOCK_BOOTTIME`, shared by all its processes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Row};

use crate::clock::{Clock, HostClock};
use crate::error::{CorruptKind, Error};
use crate::fingerprint::Fingerprint;
use crate::holder::{this_boot, Holder};
use crate::key::Key;
use crate::record::{
    decide, Busy, Claim, ClaimRequest, ClaimResponse, Decision, LocalRecord, RecordView, Replay,
    Status,
};
use crate::store::{async_via_sync, decode_cursor, encode_cursor, ScanPage, Store};

/// The schema version this build writes; a database with a newer one is refused.
pub const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rerun_meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO rerun_meta (name, value) VALUES ('schema_version', 1), ('fence', 0);
CREATE TABLE IF NOT EXISTS rerun_records (
    scope        TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    fence        INTEGER NOT NULL,
    fingerprint  BLOB    NOT NULL,
    holder       TEXT,
    once         INTEGER NOT NULL,
    boot_id      TEXT    NOT NULL,
    lease_until  INTEGER NOT NULL,
    expires_mono INTEGER NOT NULL,
    expires_wall INTEGER NOT NULL,
    result       BLOB,
    PRIMARY KEY (scope, id)
) WITHOUT ROWID;
";

/// The columns every read selects, in the order `record_of` reads them.
macro_rules! columns {
    () => {
        "status, fence, fingerprint, holder, once, boot_id, lease_until, \
         expires_mono, expires_wall, result, scope, id"
    };
}

/// The read of one record: a constant, so the statement cache is hit without building the text.
const READ_ONE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM rerun_records WHERE scope = ?1 AND id = ?2"
);

/// One page of a scan, in key order.
const READ_PAGE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM rerun_records WHERE (scope, id) > (?1, ?2) ORDER BY scope, id LIMIT ?3"
);

/// How many shards the connection pool has.
const SHARDS: usize = 8;

/// This thread's pool shard.
fn this_shard() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS);
    SHARD.with(|s| *s)
}

/// The embedded store: a SQLite file shared by every process on one host.
///
/// Cloning shares the connection pool.
///
/// ```
/// use rerun_core::{Call, SqliteStore};
/// let dir = tempfile::tempdir().unwrap();
/// let store = SqliteStore::open(dir.path().join("rerun.sqlite3"))?;
/// let out = Call::new("demo", &1u64).run(&store, || Ok::<_, rerun_core::Error>(String::from("done")))?;
/// assert!(!out.replayed);
/// # Ok::<(), rerun_core::Error>(())
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    /// Idle connections, in shards picked by thread so concurrent callers rarely share a lock.
    pool: [Mutex<Vec<Connection>>; SHARDS],
    clock: Arc<dyn Clock>,
    busy_timeout: Duration,
}

/// Options for [`SqliteStore::open_with`].
#[derive(Clone)]
pub struct SqliteOptions {
    clock: Arc<dyn Clock>,
    busy_timeout: Duration,
}

impl SqliteOptions {
    /// Defaults: the host clock, a 30 s busy timeout.
    pub fn new() -> SqliteOptions {
        SqliteOptions {
            clock: Arc::new(HostClock),
            busy_timeout: Duration::from_secs(30),
        }
    }
    /// Decide leases and expiry on this clock (tests use [`crate::clock::ManualClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }
    /// How long a statement waits for another process's write lock before failing with a
    /// retryable [`Error::Store`].
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions::new()
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Retries `op` while SQLite reports the database busy, up to `timeout`. Switching a new file to
/// WAL needs an exclusive lock and may fail at once with `SQLITE_BUSY` without consulting the
/// busy handler when several processes open the file together.
fn retry_busy<T>(
    timeout: Duration,
    mut op: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match op() {
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

fn sql_err(key: Option<&Key>, what: &str, e: rusqlite::Error) -> Error {
    let message = if is_busy(&e) {
        format!("{what}: the database stayed locked by another writer past the busy timeout")
    } else {
        format!("{what}: {e}")
    };
    Error::store(key, message, e)
}

impl SqliteStore {
    /// Opens (creating if needed, with its parent folders) the store at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, Error> {
        SqliteStore::open_with(path, SqliteOptions::new())
    }

    /// Opens the store at `path` with options.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore, Error> {
        let path = path.as_ref().to_path_buf();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::store(None, format!("creating {}", parent.display()), e))?;
        }
        let store = SqliteStore {
            inner: Arc::new(Inner {
                path,
                pool: std::array::from_fn(|_| Mutex::new(Vec::new())),
                clock: options.clock,
                busy_timeout: options.busy_timeout,
            }),
        };
        let conn = store.connect()?;
        store.migrate(&conn)?;
        store.put_back(conn);
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn connect(&self) -> Result<Connection, Error> {
        let what = format!("opening {}", self.inner.path.display());
        let conn = Connection::open(&self.inner.path).map_err(|e| sql_err(None, &what, e))?;
        conn.busy_timeout(self.inner.busy_timeout)
            .map_err(|e| sql_err(None, &what, e))?;
        // WAL lets readers (every replay) run beside the one writer.
        retry_busy(self.inner.busy_timeout, || {
            conn.pragma_update(None, "journal_mode", "WAL")
        })
        .map_err(|e| sql_err(None, &what, e))?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| sql_err(None, &what, e))?;
        Ok(conn)
    }

    /// Creates the schema if missing, in one immediate transaction so that many processes
    /// opening a new file at once create it exactly once; refuses a newer schema.
    fn migrate(&self, conn: &Connection) -> Result<(), Error> {
        let what = "creating the rerun schema";
        retry_busy(self.inner.busy_timeout, || {
            conn.execute_batch(&format!("BEGIN IMMEDIATE;{SCHEMA}COMMIT;"))
                .inspect_err(|_| {
                    let _ = conn.execute_batch("ROLLBACK");
                })
        })
        .map_err(|e| sql_err(None, what, e))?;
        let version: i64 = conn
            .query_row(
                "SELECT value FROM rerun_meta WHERE name = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| sql_err(None, what, e))?;
        if version > SCHEMA_VERSION {
            return Err(Error::config(format!(
                "{} has rerun schema version {version}, newer than this build's {SCHEMA_VERSION}; upgrade rerun",
                self.inner.path.display()
            )));
        }
        Ok(())
    }

    fn shard(&self, i: usize) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.inner.pool[i % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection: from this thread's shard, else any other, else a new one.
    fn take(&self) -> Result<Connection, Error> {
        let home = this_shard();
        for i in home..home + SHARDS {
            if let Some(conn) = self.shard(i).pop() {
                return Ok(conn);
            }
        }
        self.connect()
    }

    fn put_back(&self, conn: Connection) {
        if conn.is_autocommit() {
            self.shard(this_shard()).push(conn);
        }
        // A connection left inside a transaction is dropped (which rolls it back).
    }

    /// Runs `f` on a pooled connection.
    fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T, Error>) -> Result<T, Error> {
        let conn = self.take()?;
        let out = f(&conn);
        if out.is_err() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        self.put_back(conn);
        out
    }

    fn read(&self, conn: &Connection, key: &Key) -> Result<Option<LocalRecord>, Error> {
        let mut stmt = conn
            .prepare_cached(READ_ONE)
            .map_err(|e| sql_err(Some(key), "reading the record", e))?;
        let row = stmt
            .query_row(params![key.scope(), key.id()], |r| Ok(record_of(r)))
            .optional()
            .map_err(|e| sql_err(Some(key), "reading the record", e))?;
        match row {
            None => Ok(None),
            Some(rec) => rec.map(Some).map_err(|kind| Error::corrupt(key, kind)),
        }
    }

    fn answer(
        &self,
        req: &ClaimRequest<'_>,
        decision: Decision,
        current: Option<&mut LocalRecord>,
    ) -> Option<ClaimResponse> {
        match (decision, current) {
            // The record was read for this answer alone: its result moves out, uncopied.
            (Decision::Replay, Some(rec)) => Some(ClaimResponse::Replay(Replay {
                fence: rec.fence,
                result: rec.result.take().unwrap_or_default(),
            })),
            (Decision::Mismatch, _) => Some(ClaimResponse::Mismatch),
            (Decision::Busy { lease_remaining }, Some(rec)) => Some(ClaimResponse::Busy(Busy {
                fence: rec.fence,
                holder: rec.holder.clone().unwrap_or_else(|| req.holder.clone()),
                lease_remaining,
            })),
            _ => None,
        }
    }

    fn fenced(
        &self,
        claim: &Claim,
        what: &str,
        sql: &str,
        extra: &[&dyn rusqlite::ToSql],
    ) -> Result<(), Error> {
        let key = &claim.key;
        let changed = self.with(|conn| {
            let mut stmt = conn
                .prepare_cached(sql)
                .map_err(|e| sql_err(Some(key), what, e))?;
            let fence = claim.fence as i64;
            let (scope, id) = (key.scope(), key.id());
            let mut args: Vec<&dyn rusqlite::ToSql> = vec![&scope, &id, &fence];
            args.extend_from_slice(extra);
            stmt.execute(args.as_slice())
                .map_err(|e| sql_err(Some(key), what, e))
        })?;
        if changed == 1 {
            Ok(())
        } else {
            Err(Error::LeaseLost { key: key.clone() })
        }
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// Reads a row's record columns (0..=9) without allocating for the columns it only inspects.
fn record_of(r: &Row<'_>) -> Result<LocalRecord, CorruptKind> {
    use rusqlite::types::ValueRef;
    let bad = |what: &str| CorruptKind::Record(format!("the {what} column is malformed"));
    let text = |i: usize, what: &str| match r.get_ref(i) {
        Ok(ValueRef::Text(t)) => std::str::from_utf8(t).map_err(|_| bad(what)),
        _ => Err(bad(what)),
    };
    let int = |i: usize, what: &str| r.get::<_, i64>(i).map_err(|_| bad(what));
    let status_text = text(0, "status")?;
    let status = Status::parse(status_text)
        .ok_or_else(|| CorruptKind::Record(format!("unknown status {status_text:?}")))?;
    let fingerprint = match r.get_ref(2) {
        Ok(ValueRef::Blob(b)) => Fingerprint::from_slice(b),
        _ => None,
    }
    .ok_or_else(|| CorruptKind::Record("the fingerprint is not 32 bytes".into()))?;
    let holder = match r.get_ref(3) {
        Ok(ValueRef::Null) => None,
        Ok(ValueRef::Text(t)) => Some(
            std::str::from_utf8(t)
                .ok()
                .and_then(Holder::decode)
                .ok_or_else(|| bad("holder"))?,
        ),
        _ => return Err(bad("holder")),
    };
    let boot = text(5, "boot_id")?;
    let boot_id = if boot == this_boot() {
        std::borrow::Cow::Borrowed(this_boot())
    } else {
        std::borrow::Cow::Owned(boot.to_owned())
    };
    let result = match r.get_ref(9) {
        Ok(ValueRef::Null) => None,
        Ok(ValueRef::Blob(b)) => Some(b.to_vec()),
        _ => return Err(bad("result")),
    };
    if status == Status::Completed && result.is_none() {
        return Err(CorruptKind::Record(
            "a completed record has no result".into(),
        ));
    }
    Ok(LocalRecord {
        status,
        fence: int(1, "fence")? as u64,
        fingerprint,
        holder,
        once: int(4, "once")? != 0,
        boot_id,
        lease_until_ns: int(6, "lease_until")? as u64,
        expires_mono_ns: int(7, "expires_mono")? as u64,
        expires_wall_ms: int(8, "expires_wall")?,
        result,
    })
}

impl Store for SqliteStore {
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        let key = req.key;
        let boot = this_boot();
        self.with(|conn| {
            // Optimistic read first: a replay, a mismatch or a live holder needs no write lock.
            let mut current = self.read(conn, key)?;
            let now = self.inner.clock.now();
            let decision = decide(current.as_ref(), req, now, boot);
            if let Some(answer) = self.answer(req, decision, current.as_mut()) {
                return Ok(answer);
            }
            if req.once {
                conn.pragma_update(None, "synchronous", "FULL")
                    .map_err(|e| sql_err(Some(key), "raising durability", e))?;
            }
            let result = (|| {
                // BEGIN IMMEDIATE takes the write lock before reading, so the re-read and the
                // write below are one atomic step: two processes cannot both see "absent".
                conn.execute_batch("BEGIN IMMEDIATE")
                    .map_err(|e| sql_err(Some(key), "claiming", e))?;
                let mut current = self.read(conn, key)?;
                let now = self.inner.clock.now();
                let decision = decide(current.as_ref(), req, now, boot);
                if let Some(answer) = self.answer(req, decision.clone(), current.as_mut()) {
                    conn.execute_batch("COMMIT")
                        .map_err(|e| sql_err(Some(key), "claiming", e))?;
                    return Ok(answer);
                }
                let Decision::Claim { abandoned } = decision else {
                    return Err(Error::store_msg(Some(key), "inconsistent claim decision"));
                };
                let fence: i64 = conn
                    .prepare_cached(
                        "UPDATE rerun_meta SET value = value + 1 WHERE name = 'fence' RETURNING value",
                    )
                    .and_then(|mut s| s.query_row([], |r| r.get(0)))
                    .map_err(|e| sql_err(Some(key), "drawing a fence", e))?;
                let rec = LocalRecord::claimed(req, fence as u64, now);
                conn.prepare_cached(
                    "INSERT OR REPLACE INTO rerun_records (scope, id, status, fence, fingerprint, \
                     holder, once, boot_id, lease_until, expires_mono, expires_wall, result) \
                     VALUES (?1, ?2, 'in_progress', ?3, ?4, ?5, ?6, ?7, ?8, 0, 0, NULL)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        key.scope(),
                        key.id(),
                        fence,
                        &rec.fingerprint.0[..],
                        req.holder.encode(),
                        req.once,
                        &*rec.boot_id,
                        rec.lease_until_ns as i64,
                    ])
                })
                .map_err(|e| sql_err(Some(key), "claiming", e))?;
                conn.execute_batch("COMMIT")
                    .map_err(|e| sql_err(Some(key), "committing the claim", e))?;
                Ok(ClaimResponse::Claimed(Claim {
                    key: key.clone(),
                    fence: fence as u64,
                    holder: req.holder.clone(),
                    once: req.once,
                    abandoned,
                }))
            })();
            if req.once {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                conn.pragma_update(None, "synchronous", "NORMAL")
                    .map_err(|e| sql_err(Some(key), "restoring durability", e))?;
            }
            result
        })
    }

    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        let now = self.inner.clock.now();
        let boot: &str = this_boot();
        let exp_mono = now.mono_ns.saturating_add(crate::clock::nanos(ttl)) as i64;
        let exp_wall = now.wall_ms.saturating_add(crate::clock::millis(ttl));
        self.fenced(
            claim,
            "recording the result",
            "UPDATE rerun_records SET status = 'completed', holder = NULL, boot_id = ?4, \
             expires_mono = ?5, expires_wall = ?6, result = ?7 \
             WHERE scope = ?1 AND id = ?2 AND fence = ?3 AND status = 'in_progress'",
            &[&boot, &exp_mono, &exp_wall, &result],
        )
    }

    fn release(&self, claim: &Claim) -> Result<(), Error> {
        self.fenced(
            claim,
            "releasing the claim",
            "UPDATE rerun_records SET status = 'released', holder = NULL \
             WHERE scope = ?1 AND id = ?2 AND fence = ?3 AND status = 'in_progress'",
            &[],
        )
    }

    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        let now = self.inner.clock.now();
        let boot: &str = this_boot();
        let until = now.mono_ns.saturating_add(crate::clock::nanos(lease)) as i64;
        self.fenced(
            claim,
            "renewing the lease",
            "UPDATE rerun_records SET boot_id = ?4, lease_until = ?5 \
             WHERE scope = ?1 AND id = ?2 AND fence = ?3 AND status = 'in_progress'",
            &[&boot, &until],
        )
    }

    fn mark_unknown(&self, claim: &Claim) -> Result<(), Error> {
        self.fenced(
            claim,
            "marking the outcome unknown",
            "UPDATE rerun_records SET status = 'unknown' \
             WHERE scope = ?1 AND id = ?2 AND fence = ?3 AND status = 'in_progress'",
            &[],
        )
    }

    fn forget(&self, key: &Key) -> Result<bool, Error> {
        // Fences come from the rerun_meta counter, so deleting the row cannot make a later
        // token repeat an earlier one.
        self.with(|conn| {
            conn.prepare_cached("DELETE FROM rerun_records WHERE scope = ?1 AND id = ?2")
                .and_then(|mut s| s.execute(params![key.scope(), key.id()]))
                .map(|n| n > 0)
                .map_err(|e| sql_err(Some(key), "forgetting the key", e))
        })
    }

    fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> {
        self.with(|conn| {
            let rec = self.read(conn, key)?;
            let now = self.inner.clock.now();
            Ok(rec.map(|r| r.view(key, now, this_boot())))
        })
    }

    fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> {
        let after = cursor.map(decode_cursor).transpose()?;
        let limit = limit.max(1);
        self.with(|conn| {
            let (scope, id) = after
                .as_ref()
                .map(|k| (k.scope(), k.id()))
                .unwrap_or(("", ""));
            let mut stmt = conn
                .prepare_cached(READ_PAGE)
                .map_err(|e| sql_err(None, "scanning records", e))?;
            let rows = stmt
                .query_map(params![scope, id, limit as i64], |r| {
                    let key = Key::from_parts(r.get::<_, String>(10)?, r.get::<_, String>(11)?);
                    Ok((record_of(r), key))
                })
                .map_err(|e| sql_err(None, "scanning records", e))?;
            let now = self.inner.clock.now();
            let mut out = Vec::new();
            for row in rows {
                let (rec, key) = row.map_err(|e| sql_err(None, "scanning records", e))?;
                let rec = rec.map_err(|kind| Error::corrupt(&key, kind))?;
                out.push(rec.view(&key, now, this_boot()));
            }
            let next = (out.len() == limit)
                .then(|| out.last().map(|r| encode_cursor(&r.key)))
                .flatten();
            Ok(ScanPage { records: out, next })
        })
    }

    fn purge_expired(&self, limit: usize) -> Result<u64, Error> {
        let now = self.inner.clock.now();
        let boot: &str = this_boot();
        self.with(|conn| {
            conn.prepare_cached(
                "DELETE FROM rerun_records WHERE (scope, id) IN (
                    SELECT scope, id FROM rerun_records WHERE status = 'completed' AND (
                        (boot_id = ?1 AND expires_mono <= ?2) OR (boot_id <> ?1 AND expires_wall <= ?3))
                    LIMIT ?4)",
            )
            .and_then(|mut s| {
                s.execute(params![boot, now.mono_ns as i64, now.wall_ms, limit as i64])
            })
            .map(|n| n as u64)
            .map_err(|e| sql_err(None, "purging expired records", e))
        })
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    fn describe(&self) -> String {
        format!("sqlite:{}", self.inner.path.display())
    }
}

async_via_sync!(SqliteStore);
