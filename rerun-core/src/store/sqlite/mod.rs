//! `SqliteStore`: the embedded default. One file shared by every process of one host.
//!
//! Shape of the costs: a repeated call is one read, a statement in no transaction but the one
//! SQLite makes for it (no write lock, no `BEGIN` or `COMMIT`); a fresh call is two writes, the
//! claim and one `UPDATE` that completes. The claim is written while the read that found the key
//! free is still open, which makes it one transaction with the read, upgraded to a write; when
//! another connection wrote in between, the claim runs again under `BEGIN IMMEDIATE`, which
//! waits for the write lock.
//! The journal is WAL. Replayable claims commit with `synchronous=NORMAL` (durable against a
//! crash of the process, which is what a replayable function needs); claims of `once` functions
//! commit with `synchronous=FULL`, so a power loss cannot forget that the body may have started,
//! and so do their results and unknown outcomes, so that one cannot forget that it ended either.
//! Leases and expiry use the host's `CLOCK_BOOTTIME`, shared by all its processes.
//!
//! Every call has a deadline: a statement waits for another connection's write lock at most the
//! store's busy timeout (default 5 s), and a call made for a claim at most a third of its lease
//! (see [`crate::store::call_deadline`]); then it fails with a retryable [`Error::Store`].
//!
//! The file must be on a local filesystem: WAL shares its index through memory mapped by every
//! process, which a network filesystem (NFS, SMB, 9p, FUSE…) cannot give to processes on two
//! machines, so the store refuses one unless told otherwise
//! ([`SqliteOptions::allow_network_filesystem`]).
//!
//! The schema and statements are in `sql`, the connection pool (capped, shrinking, fork-aware)
//! in `pool`.

mod cursor;
mod forked;
mod pool;
mod row;
mod sql;

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension};
use smallvec::SmallVec;

use crate::clock::{Clock, HostClock, Now};
use crate::error::Error;
use crate::holder::this_boot;
use crate::key::Key;
use crate::record::{
    decide, Abandoned, Busy, Claim, ClaimRequest, ClaimResponse, Decision, LocalRecord, RecordView,
    Replay, Status,
};
use crate::store::{
    async_via_sync, call_deadline, forward_store_to_inner, ScanFilter, ScanPage, Store, Unreadable,
};

use cursor::RowKey;
use pool::{Conn, Pool};
use row::{claim_record_of, record_of, record_of_shape, to_sql_ns};
pub use sql::SCHEMA_VERSION;

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

/// The store itself, shared by every clone of a [`SqliteStore`] and by the lease keeper, which
/// holds it as the `Arc<dyn Store>` of [`Store::shared`]: handing it out costs a count, not an
/// allocation per claim.
struct Inner {
    /// This store, as the keeper holds it.
    me: Weak<Inner>,
    /// The database file, absolute.
    path: PathBuf,
    pool: Pool,
    clock: Arc<dyn Clock>,
    busy_timeout: Duration,
    /// Opened with [`SqliteOptions::existing_only`]: nothing is created, migrated or switched.
    existing_only: bool,
}

/// The longest [`SqliteOptions::busy_timeout`]: what SQLite's busy handler can wait
/// (`i32::MAX` milliseconds, about 24.8 days).
pub const MAX_BUSY_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// Options for [`SqliteStore::open_with`].
///
/// ```
/// use std::time::Duration;
/// use rerun_core::store::sqlite::SqliteOptions;
/// let options = SqliteOptions::new()
///     .busy_timeout(Duration::from_secs(2))
///     .max_connections(8);
/// # let _ = options;
/// ```
#[derive(Clone)]
pub struct SqliteOptions {
    clock: Arc<dyn Clock>,
    busy_timeout: Duration,
    max_connections: usize,
    max_idle: usize,
    allow_network_filesystem: bool,
    existing_only: bool,
}

impl SqliteOptions {
    /// Defaults: the host clock, a 5 s busy timeout, at most 32 connections of which 8 stay
    /// open when idle, local filesystems only.
    pub fn new() -> SqliteOptions {
        SqliteOptions {
            clock: Arc::new(HostClock),
            busy_timeout: Duration::from_secs(5),
            max_connections: 32,
            max_idle: 8,
            allow_network_filesystem: false,
            existing_only: false,
        }
    }
    /// Decide leases and expiry on this clock (tests use [`crate::clock::ManualClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }
    /// How long a call waits for another connection's write lock (or for a free connection)
    /// before failing with a retryable [`Error::Store`]. Calls made for a claim wait at most a
    /// third of its lease, if that is shorter. At most [`MAX_BUSY_TIMEOUT`] (what SQLite's
    /// busy handler can wait, `i32::MAX` milliseconds, about 24.8 days); a longer one, such as
    /// `Duration::MAX`, is that.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout.min(MAX_BUSY_TIMEOUT);
        self
    }
    /// The most connections open at once (default 32); further callers wait for one.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }
    /// The most connections kept open while idle (default 8); more are closed when handed back.
    pub fn max_idle(mut self, n: usize) -> Self {
        self.max_idle = n;
        self
    }
    /// Open a file on a network filesystem anyway. WAL needs memory shared by every process
    /// using the file, so this is only safe when every such process runs on one machine.
    pub fn allow_network_filesystem(mut self, allow: bool) -> Self {
        self.allow_network_filesystem = allow;
        self
    }
    /// Open the file only if it holds a rerun store of this build's schema, as it is (default
    /// `false`): for tools that look at a store the services own, such as `rerunctl`.
    ///
    /// [`SqliteStore::open_with`] then creates no file or folder, creates or migrates no
    /// schema, and leaves the journal mode alone (a store is switched to WAL, for good, by the
    /// first process that opens it normally). It fails with [`Error::Config`] when the file does
    /// not exist, holds no rerun store (another program's database), holds one of an older
    /// schema (start a service of this release first, which migrates it, or use the rerun of
    /// the release the services run) or a newer one, or is not in WAL mode (no rerun service
    /// opened it, or another program switched it back). A file that is not a database at all is
    /// a non-retryable [`Error::Store`], as without this option.
    ///
    /// ```
    /// use rerun_core::store::sqlite::{SqliteOptions, SqliteStore};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("rerun.sqlite3");
    /// let existing = || SqliteStore::open_with(&path, SqliteOptions::new().existing_only(true));
    /// assert!(matches!(existing(), Err(rerun_core::Error::Config { .. })));
    /// assert!(!path.exists());
    /// SqliteStore::open(&path)?; // a service creates it
    /// existing()?;
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn existing_only(mut self, on: bool) -> Self {
        self.existing_only = on;
        self
    }
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions::new()
    }
}

/// What a claim does with the record it read ([`Inner::judge`]).
enum Judged {
    /// Answer from the record: nothing is written.
    Answer(ClaimResponse),
    /// Claim the key, at the clock reading `now`, taking it over from `abandoned` if any.
    Claim {
        abandoned: Option<Abandoned>,
        now: Now,
    },
}

/// What the claim on an open read found ([`Inner::claim_open`]). Returned once per claim and
/// never stored, so the answer is not boxed.
#[allow(clippy::large_enum_variant)]
enum Opened {
    /// The answer: a replay, a refusal, or the claim made.
    Answer(ClaimResponse),
    /// The claim is to be made under the write lock, committed with a full sync if `full_sync`.
    Locked { full_sync: bool },
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
    let deadline = crate::clock::deadline_in(timeout);
    let mut pause = Duration::from_millis(1);
    loop {
        match op() {
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// A driver error as a store error, with its cause in the message, and not retryable when no
/// retry can fix it (a file we may not open or write, a file that is not a database).
fn sql_err(key: Option<&Key>, what: &str, e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::DatabaseBusy | C::DatabaseLocked) => Error::store(
            key,
            format!("{what}: the database stayed locked by another connection past the deadline"),
            e,
        ),
        Some(
            C::CannotOpen
            | C::PermissionDenied
            | C::ReadOnly
            | C::NotADatabase
            | C::DatabaseCorrupt
            | C::AuthorizationForStatementDenied,
        ) => Error::store_permanent(key, what, e),
        _ => Error::store(key, what, e),
    }
}

/// Lowers a connection's durability back to `synchronous=NORMAL` after a statement that
/// committed with a full sync. A failure here changes nothing of what the statement did, which
/// is what the call reports: the connection stays at the full sync, slower but no less durable.
fn restore_durability(conn: &Connection, key: &Key) {
    if let Err(e) = conn.pragma_update(None, "synchronous", "NORMAL") {
        tracing::warn!(
            key = %crate::runtime::telemetry::key_field(key),
            error = %e,
            "rerun: SQLite: restoring synchronous=NORMAL after a full-sync commit failed; the connection keeps synchronous=FULL"
        );
    }
}

/// The error of a connection SQLite could not open for writing (`SQLITE_CANTOPEN`, or a
/// connection it opened read-only instead). SQLite says the same of a file closed to writing
/// and of a process out of file descriptors or memory; the OS tells them apart. A shortage a
/// later call may outlast is retryable, a file that stays closed to writing is not (as
/// [`io_err`] judges).
///
/// Asked with `access(2)`, which opens nothing: closing a descriptor of the database file would
/// drop every POSIX lock this process's connections hold on it. A file that may be read and
/// written (or, missing, a folder that may be written) was not opened for a shortage: retryable.
fn unwritable(path: &Path, what: &str, cause: &dyn std::fmt::Display) -> Error {
    use nix::errno::Errno;
    use nix::unistd::{access, AccessFlags};
    let checked = match access(path, AccessFlags::R_OK | AccessFlags::W_OK) {
        Err(Errno::ENOENT) => match path.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(folder) => access(folder, AccessFlags::W_OK | AccessFlags::X_OK),
            None => Err(Errno::ENOENT),
        },
        other => other,
    };
    match checked {
        Ok(()) => Error::store_msg(
            None,
            format!("{what}: {cause} (it may be opened for writing: out of file descriptors or memory, a passing shortage)"),
        ),
        Err(e @ (Errno::EMFILE | Errno::ENFILE | Errno::ENOMEM)) => {
            Error::store(None, format!("{what}: {cause}"), std::io::Error::from(e))
        }
        Err(e) => io_err(format!("{what}: {cause}"), std::io::Error::from(e)),
    }
}

/// An I/O error on the way to the file, with the absolute path.
fn io_err(what: String, e: std::io::Error) -> Error {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::PermissionDenied | K::ReadOnlyFilesystem | K::NotADirectory | K::InvalidInput => {
            Error::store_permanent(None, what, e)
        }
        _ => Error::store(None, what, e),
    }
}

impl SqliteStore {
    /// Opens (creating if needed, with its parent folders) the store at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, Error> {
        SqliteStore::open_with(path, SqliteOptions::new())
    }

    /// Opens the store at `path` with options.
    ///
    /// Fails with a non-retryable [`Error::Store`] naming the absolute path and the cause when
    /// the folder cannot be created or the file cannot be opened (permission denied, read-only
    /// filesystem, not a database), and with [`Error::Config`] for a file on a network
    /// filesystem or of a newer schema. With [`SqliteOptions::existing_only`] it creates and
    /// changes nothing, and refuses what is not a rerun store of this build's schema.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore, Error> {
        let given = path.as_ref();
        let path = std::path::absolute(given)
            .map_err(|e| io_err(format!("resolving the path {}", given.display()), e))?;
        if path.is_dir() {
            // SQLite cannot open it (SQLITE_CANTOPEN), which would read as a passing shortage.
            return Err(Error::config(format!(
                "{} is a folder, not a database file: give the file's path, such as {}",
                path.display(),
                path.join("rerun.sqlite3").display()
            )));
        }
        if options.existing_only && !path.is_file() {
            return Err(Error::config(format!(
                "{} {}, and this store opens existing stores only: check the path; a service of rerun creates the store when it first starts",
                path.display(),
                if path.exists() { "is not a file" } else { "does not exist" }
            )));
        }
        if let Some(parent) = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty() && !options.existing_only)
        {
            std::fs::create_dir_all(parent)
                .map_err(|e| io_err(format!("creating the folder {}", parent.display()), e))?;
        }
        if !options.allow_network_filesystem {
            match crate::lock::network_filesystem_at(&path) {
                Ok(Some(fs)) => {
                    return Err(Error::config(format!(
                        "{} is on a network filesystem ({fs}); SQLite's WAL shares memory between the processes that use the file, which only works on one machine's local disk: put the file on a local disk, use PostgresStore or RedisStore for several machines, or, if every process runs on this machine, set SqliteOptions::allow_network_filesystem(true)",
                        path.display()
                    )))
                }
                Ok(None) => {}
                Err(e) => return Err(io_err(format!("checking the filesystem of {}", path.display()), e)),
            }
        }
        // Connections are counted per file, for the fork check, by the file's real path (links
        // and `..` resolved), as SQLite itself tells files apart: two stores of one file opened
        // under two spellings count as one file.
        let pool = Pool::new(&real_path(&path), options.max_connections, options.max_idle);
        let inner = Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            path,
            pool,
            clock: options.clock,
            busy_timeout: options.busy_timeout,
            existing_only: options.existing_only,
        });
        if inner.existing_only {
            inner.check_existing()?;
        } else {
            inner.with(None, inner.busy_timeout, |conn| inner.migrate(conn))?;
        }
        Ok(SqliteStore { inner })
    }

    /// The database file, absolute.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many connections are open now (idle or in use).
    pub fn open_connections(&self) -> usize {
        self.inner.pool.open_connections()
    }
}

/// The file's path with links and `..` resolved: of the file when it exists, else of its
/// folder (made above) joined with its name.
fn real_path(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(folder), Some(name)) => std::fs::canonicalize(folder)
            .map(|folder| folder.join(name))
            .unwrap_or_else(|_| path.to_owned()),
        _ => path.to_owned(),
    }
}

impl Inner {
    /// Opens a connection to the file, which it creates unless the store is `existing_only`.
    fn open_file(&self, what: &str) -> Result<Connection, Error> {
        let opened = if self.existing_only {
            use rusqlite::OpenFlags as F;
            Connection::open_with_flags(
                &self.path,
                F::SQLITE_OPEN_READ_WRITE | F::SQLITE_OPEN_URI | F::SQLITE_OPEN_NO_MUTEX,
            )
        } else {
            Connection::open(&self.path)
        };
        opened.map_err(|e| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::CannotOpen) => unwritable(&self.path, what, &e),
            _ => sql_err(None, what, e),
        })
    }

    /// The file's journal mode, read without changing it.
    fn journal_mode(&self, conn: &Connection, what: &str) -> Result<String, Error> {
        retry_busy(self.busy_timeout, || {
            conn.pragma_query_value(None, "journal_mode", |row| row.get(0))
        })
        .map_err(|e| sql_err(None, what, e))
    }

    /// The error of a file an `existing_only` store finds in a journal mode other than WAL.
    fn not_wal(&self, mode: &str) -> Error {
        Error::config(format!(
            "{} is in journal mode {mode:?}, not WAL, and this store leaves the file as it is: a rerun store is switched to WAL by the first service that opens it, so no service of rerun has (or another program switched it back); open it with a service of rerun first",
            self.path.display()
        ))
    }

    /// Checks, for an `existing_only` store, that the file holds a rerun store of this build's
    /// schema in WAL mode, reading only.
    fn check_existing(&self) -> Result<(), Error> {
        let what = format!("reading the rerun schema of {}", self.path.display());
        let conn = self.open_file(&what)?;
        conn.busy_timeout(self.busy_timeout)
            .map_err(|e| sql_err(None, &what, e))?;
        let tables: i64 = retry_busy(self.busy_timeout, || {
            conn.query_row(sql::RERUN_TABLES, [], |r| r.get(0))
        })
        .map_err(|e| sql_err(None, &what, e))?;
        if tables != 2 {
            return Err(Error::config(format!(
                "{} holds no rerun store (no rerun_meta and rerun_records tables), and this store opens existing stores only: check the path",
                self.path.display()
            )));
        }
        let version: Option<i64> = retry_busy(self.busy_timeout, || {
            conn.query_row(sql::SCHEMA_VERSION_READ, [], |r| r.get(0))
                .optional()
        })
        .map_err(|e| sql_err(None, &what, e))?;
        match version {
            Some(SCHEMA_VERSION) => {}
            Some(found) if found < SCHEMA_VERSION => {
                return Err(Error::config(format!(
                    "{} has rerun schema version {found}, older than this build's {SCHEMA_VERSION}, and this store opens stores as they are, without migrating them: migrate it by starting a service of this release first, or use the rerunctl of the release your services run",
                    self.path.display()
                )))
            }
            Some(found) => {
                return Err(Error::config(format!(
                    "{} has rerun schema version {found}, newer than this build's {SCHEMA_VERSION}; upgrade rerun",
                    self.path.display()
                )))
            }
            None => {
                return Err(Error::config(format!(
                    "{} has no rerun schema version in rerun_meta; it was not created by rerun",
                    self.path.display()
                )))
            }
        }
        let mode = self.journal_mode(&conn, &what)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(self.not_wal(&mode));
        }
        Ok(())
    }

    fn connect(&self) -> Result<Connection, Error> {
        let what = format!("opening {}", self.path.display());
        let conn = self.open_file(&what)?;
        // SQLite opens a file it could not open for writing read-only, without a word; every
        // write on the connection would then fail.
        if conn
            .is_readonly(rusqlite::DatabaseName::Main)
            .unwrap_or(false)
        {
            return Err(unwritable(
                &self.path,
                &what,
                &"SQLite could open the file only for reading",
            ));
        }
        conn.busy_timeout(self.busy_timeout)
            .map_err(|e| sql_err(None, &what, e))?;
        if self.existing_only {
            // Left in the mode it is in, which `check_existing` found to be WAL.
            let mode = self.journal_mode(&conn, &what)?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(self.not_wal(&mode));
            }
            conn.pragma_update(None, "synchronous", "NORMAL")
                .map_err(|e| sql_err(None, &what, e))?;
            return Ok(conn);
        }
        // WAL lets readers (every replay) run beside the one writer. The pragma answers the
        // mode it left the file in (read, so that rusqlite's `extra_check` does not refuse a
        // statement that returns a row); a file that stays in another mode is refused.
        let mode: String = retry_busy(self.busy_timeout, || {
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        })
        .map_err(|e| sql_err(None, &what, e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::config(format!(
                "{} stays in journal mode {mode:?}: rerun needs WAL (a file on a filesystem without shared memory, or a journal mode set by another program and locked)",
                self.path.display()
            )));
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| sql_err(None, &what, e))?;
        Ok(conn)
    }

    /// Creates the schema if missing and migrates an older one, in one immediate transaction,
    /// so that many processes opening a file at once create or migrate it exactly once; refuses
    /// a newer schema.
    fn migrate(&self, conn: &Connection) -> Result<(), Error> {
        let what = format!("creating the rerun schema in {}", self.path.display());
        let newer = |version: i64| {
            Error::config(format!(
                "{} has rerun schema version {version}, newer than this build's {SCHEMA_VERSION}; upgrade rerun",
                self.path.display()
            ))
        };
        let steps = || -> rusqlite::Result<Result<(), Error>> {
            conn.execute_batch(&format!("BEGIN IMMEDIATE;{}", sql::SCHEMA))?;
            let mut version: i64 = conn.query_row(sql::SCHEMA_VERSION_READ, [], |r| r.get(0))?;
            if version > SCHEMA_VERSION {
                conn.execute_batch("ROLLBACK")?;
                return Ok(Err(newer(version)));
            }
            while version < SCHEMA_VERSION {
                let Some(step) = usize::try_from(version - 1)
                    .ok()
                    .and_then(|i| sql::MIGRATIONS.get(i))
                else {
                    conn.execute_batch("ROLLBACK")?;
                    return Ok(Err(Error::config(format!(
                        "{} has rerun schema version {version}, which this build cannot migrate",
                        self.path.display()
                    ))));
                };
                conn.execute_batch(step)?;
                version += 1;
            }
            conn.execute_batch(sql::REMOVE_COUNTER)?;
            conn.execute_batch("COMMIT")?;
            Ok(Ok(()))
        };
        retry_busy(self.busy_timeout, || {
            steps().inspect_err(|_| {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
            })
        })
        .map_err(|e| sql_err(None, &what, e))?
    }

    /// Runs `f` on a pooled connection, all of it within `deadline`: the wait for a free
    /// connection and for other connections' write locks.
    fn with<T>(
        &self,
        key: Option<&Key>,
        deadline: Duration,
        f: impl FnOnce(&Connection) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let (mut conn, spent): (Conn, Duration) = self.pool.take(
            deadline,
            || self.connect(),
            |max, waited| {
                Error::store_msg(
                    key,
                    format!(
                        "all {max} connections to {} stayed busy for {}; raise SqliteOptions::max_connections or lower the load",
                        self.path.display(),
                        crate::error::rounded(waited)
                    ),
                )
            },
        )?;
        let left = deadline.saturating_sub(spent).max(Duration::from_millis(1));
        let out = catch_unwind(AssertUnwindSafe(|| match conn.busy_timeout(left) {
            Ok(()) => f(&conn.conn),
            Err(e) => Err(sql_err(key, "setting the busy timeout", e)),
        }));
        let out = match out {
            Ok(out) => out,
            Err(panic) => {
                // Something `f` calls panicked (a `Clock` of the options): the connection,
                // perhaps mid-statement or inside a transaction, is closed (which rolls back)
                // and counted closed, or the pool would count it open for good.
                self.pool.discard(conn);
                resume_unwind(panic);
            }
        };
        if out.is_err() && !conn.conn.is_autocommit() {
            let _ = conn.conn.execute_batch("ROLLBACK");
        }
        self.pool.put_back(conn);
        out
    }

    fn read(&self, conn: &Connection, key: &Key) -> Result<Option<LocalRecord>, Error> {
        let mut stmt = conn
            .prepare_cached(sql::READ_ONE)
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

    /// The fence for a new claim of a key whose record's fence is `top` (0: none): above it
    /// and above every deleted record's.
    fn next_fence(&self, conn: &Connection, key: &Key, top: u64) -> Result<u64, Error> {
        let floor = conn
            .prepare_cached(sql::FENCE_FLOOR)
            .and_then(|mut s| s.query_row([], |r| Ok(floor_of(r.get_ref(0)?))).optional())
            .map_err(|e| sql_err(Some(key), "drawing a fence", e))?;
        fence_above(key, top, floor)
    }

    /// What a claim does with the record it read (`None`: no record): answer from it, or claim
    /// the key. The record was read for this decision alone: a replay's result moves out of it,
    /// uncopied.
    fn judge(
        &self,
        req: &ClaimRequest<'_>,
        current: Option<&mut LocalRecord>,
    ) -> Result<Judged, Error> {
        let now = self.clock.now();
        let judged = match (decide(current.as_deref(), req, now, this_boot()), current) {
            (Decision::Replay, Some(rec)) => Judged::Answer(ClaimResponse::Replay(Replay {
                fence: rec.fence,
                result: rec.result.take().unwrap_or_default(),
            })),
            (Decision::Mismatch, _) => Judged::Answer(ClaimResponse::Mismatch),
            (Decision::Busy { lease_remaining }, Some(rec)) => {
                Judged::Answer(ClaimResponse::Busy(Busy {
                    fence: rec.fence,
                    holder: rec.holder.clone().unwrap_or_else(|| req.holder.clone()),
                    lease_remaining,
                }))
            }
            (Decision::Claim { abandoned }, _) => Judged::Claim { abandoned, now },
            _ => {
                let why = "inconsistent claim decision";
                return Err(Error::store_msg(Some(req.key), why));
            }
        };
        Ok(judged)
    }

    fn fenced(
        &self,
        claim: &Claim,
        deadline: Duration,
        what: &str,
        sql: &str,
        extra: &[&dyn rusqlite::ToSql],
        full_sync: bool,
    ) -> Result<(), Error> {
        let key = &claim.key;
        let changed = self.with(Some(key), deadline, |conn| {
            let mut stmt = conn
                .prepare_cached(sql)
                .map_err(|e| sql_err(Some(key), what, e))?;
            let fence = i64::try_from(claim.fence).unwrap_or(i64::MAX);
            let (scope, id) = (key.scope(), key.id());
            // On the stack: every fenced statement has at most eight parameters.
            let mut args: SmallVec<[&dyn rusqlite::ToSql; 8]> = SmallVec::new();
            args.extend([&scope as &dyn rusqlite::ToSql, &id, &fence]);
            args.extend_from_slice(extra);
            if !full_sync {
                return stmt
                    .execute(args.as_slice())
                    .map_err(|e| sql_err(Some(key), what, e));
            }
            // As for a `once` claim: durable against a power loss too, then back to normal.
            conn.pragma_update(None, "synchronous", "FULL")
                .map_err(|e| sql_err(Some(key), "raising durability", e))?;
            let changed = stmt
                .execute(args.as_slice())
                .map_err(|e| sql_err(Some(key), what, e));
            restore_durability(conn, key);
            changed
        })?;
        if changed == 1 {
            Ok(())
        } else {
            Err(Error::LeaseLost { key: key.clone() })
        }
    }

    /// The deadline of a call made for `claim`.
    fn claim_deadline(&self, lease: Duration) -> Duration {
        call_deadline(self.busy_timeout, lease)
    }

    /// A claim that reads in no transaction of its own: [`sql::READ_FOR_CLAIM`] reads the record
    /// and the fence floor, and, when the key is free, the claim is written while that read is
    /// still open, so that SQLite upgrades the read to the write (see the statement).
    ///
    /// [`Opened::Locked`] when the claim must be made under the write lock
    /// ([`Self::claim_locked`]): another connection wrote since the read (SQLite refuses the
    /// upgrade: `SQLITE_BUSY_SNAPSHOT`) or holds the write lock now (an upgrade does not wait
    /// for it); the claim is at most once (of a `once` function, or taking over an unknown
    /// outcome), whose commit must be a full sync, which cannot be asked for while a read is
    /// open; or the floor's row is missing, which the locked claim reports if it needs a fence.
    fn claim_open(&self, conn: &Connection, req: &ClaimRequest<'_>) -> Result<Opened, Error> {
        let key = req.key;
        let failed = |e| sql_err(Some(key), "claiming", e);
        let mut read = conn.prepare_cached(sql::READ_FOR_CLAIM).map_err(failed)?;
        // Dropped only when this returns, after the write: while it is open, so is the read.
        let mut rows = read.query(params![key.scope(), key.id()]).map_err(failed)?;
        let Some(row) = rows.next().map_err(failed)? else {
            return Ok(Opened::Locked { full_sync: false });
        };
        let mut current = match row.get_ref(sql::READ_FOR_CLAIM_ID) {
            Ok(rusqlite::types::ValueRef::Null) => None,
            _ => Some(claim_record_of(row).map_err(|kind| Error::corrupt(key, kind))?),
        };
        let (abandoned, now) = match self.judge(req, current.as_mut())? {
            Judged::Answer(answer) => return Ok(Opened::Answer(answer)),
            Judged::Claim { abandoned, now } => (abandoned, now),
        };
        let req = &req.taking_over(abandoned.as_ref());
        if req.once {
            return Ok(Opened::Locked { full_sync: true });
        }
        // The floor is read only now: an answer needs none.
        let floor = row
            .get_ref(sql::READ_FOR_CLAIM_FLOOR)
            .map(floor_of)
            .map_err(failed)?;
        let top = current.as_ref().map_or(0, |rec| rec.fence);
        let fence = fence_above(key, top, Some(floor))?;
        match self.write_claim(conn, req, fence, now) {
            Ok(()) => {}
            Err(e) if is_busy(&e) => return Ok(Opened::Locked { full_sync: false }),
            Err(e) => return Err(failed(e)),
        }
        drop(rows);
        Ok(Opened::Answer(ClaimResponse::Claimed(Claim::granted(
            req, fence, abandoned,
        ))))
    }

    /// A claim under the write lock: a `BEGIN IMMEDIATE` transaction reads the record, answers
    /// from it, or claims the key. It waits for the lock (the busy timeout), and no other
    /// connection writes between its read and its write.
    ///
    /// `Ok(None)`, after a rollback, when the claim turned out to be at most once (taking over
    /// an unknown outcome written since the caller looked) but the connection does not commit
    /// with a full sync (`full_sync`): the caller raises durability and claims again.
    fn claim_locked(
        &self,
        conn: &Connection,
        req: &ClaimRequest<'_>,
        full_sync: bool,
    ) -> Result<Option<ClaimResponse>, Error> {
        let key = req.key;
        let step = |sql: &str, what: &str| {
            conn.prepare_cached(sql)
                .and_then(|mut s| s.execute([]))
                .map_err(|e| sql_err(Some(key), what, e))
        };
        step("BEGIN IMMEDIATE", "claiming")?;
        let mut current = self.read(conn, key)?;
        let (abandoned, now) = match self.judge(req, current.as_mut())? {
            Judged::Answer(answer) => {
                step("COMMIT", "claiming")?;
                return Ok(Some(answer));
            }
            Judged::Claim { abandoned, now } => (abandoned, now),
        };
        let req = &req.taking_over(abandoned.as_ref());
        if req.once && !full_sync {
            step("ROLLBACK", "claiming")?;
            return Ok(None);
        }
        let top = current.as_ref().map_or(0, |rec| rec.fence);
        let fence = self.next_fence(conn, key, top)?;
        self.write_claim(conn, req, fence, now)
            .map_err(|e| sql_err(Some(key), "claiming", e))?;
        step("COMMIT", "committing the claim")?;
        Ok(Some(ClaimResponse::Claimed(Claim::granted(
            req, fence, abandoned,
        ))))
    }

    /// Writes the record of a claim with `fence`, made at `now` ([`sql::CLAIM`]).
    fn write_claim(
        &self,
        conn: &Connection,
        req: &ClaimRequest<'_>,
        fence: u64,
        now: Now,
    ) -> rusqlite::Result<()> {
        let key = req.key;
        let rec = LocalRecord::claimed(req, fence, now);
        conn.prepare_cached(sql::CLAIM)?.execute(params![
            key.scope(),
            key.id(),
            to_sql_ns(fence),
            &rec.fingerprint.0[..],
            req.holder.encode(),
            req.once,
            &*rec.boot_id,
            to_sql_ns(rec.lease_until_ns),
            rec.lease_until_wall_ms,
            rec.changed_wall_ms,
        ])?;
        Ok(())
    }
}

/// The fence floor as stored: a fence, or `None` when it is something else (a damaged row).
fn floor_of(value: rusqlite::types::ValueRef<'_>) -> Option<u64> {
    match value {
        rusqlite::types::ValueRef::Integer(v) => u64::try_from(v).ok(),
        _ => None,
    }
}

/// The fence for a new claim of `key`: above `top`, its record's (0: none), and above `floor`,
/// the fence floor read with it (`None`: the floor's row is missing; `Some(None)`: it holds
/// something that is not a fence). A damaged floor is `Corrupt`: no fence is drawn from it.
fn fence_above(key: &Key, top: u64, floor: Option<Option<u64>>) -> Result<u64, Error> {
    let corrupt = |why: &str| Error::corrupt(key, crate::error::CorruptKind::Record(why.into()));
    let floor = floor
        .ok_or_else(|| corrupt("rerun_meta has no fence_floor row"))?
        .ok_or_else(|| corrupt("rerun_meta's fence_floor is not a fence"))?;
    top.max(floor)
        .checked_add(1)
        .filter(|f| i64::try_from(*f).is_ok())
        .ok_or_else(|| corrupt("the key's fences reached the largest integer SQLite stores"))
}

impl Inner {
    /// Runs `delete`, a statement returning the fences of the records it deletes, and raises
    /// the fence floor above them, in one write transaction; how many it deleted.
    fn deleting(
        &self,
        key: Option<&Key>,
        what: &str,
        delete: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<u64, Error> {
        self.with(key, self.busy_timeout, |conn| {
            let steps = || -> rusqlite::Result<u64> {
                conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
                let (mut deleted, mut top) = (0u64, 0i64);
                {
                    let mut stmt = conn.prepare_cached(delete)?;
                    // A fence that is not an integer (a damaged row) is nobody's: the row is
                    // deleted all the same, which is how an operator clears it.
                    let fences = stmt.query_map(args, |r| Ok(r.get_ref(0)?.as_i64().ok()))?;
                    for fence in fences {
                        deleted += 1;
                        top = top.max(fence?.unwrap_or(0));
                    }
                }
                if deleted > 0 {
                    conn.prepare_cached(sql::RAISE_FLOOR)?.execute([top])?;
                }
                conn.prepare_cached("COMMIT")?.execute([])?;
                Ok(deleted)
            };
            steps().map_err(|e| sql_err(key, what, e))
        })
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl Store for Inner {
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        let key = req.key;
        self.with(Some(key), self.busy_timeout, |conn| {
            // First a read that takes no lock: a replay, a mismatch or a live holder is
            // answered by a reader, and a free key is claimed by upgrading that read.
            let full_sync = match self.claim_open(conn, req)? {
                Opened::Answer(answer) => return Ok(answer),
                Opened::Locked { full_sync } => full_sync || req.once,
            };
            if !full_sync {
                if let Some(answer) = self.claim_locked(conn, req, false)? {
                    return Ok(answer);
                }
            }
            // A claim at most once commits with a full sync: a power loss must not forget that
            // its body may have started. Durability cannot change inside a transaction, so it
            // is raised before the locked claim begins and lowered after it ends.
            conn.pragma_update(None, "synchronous", "FULL")
                .map_err(|e| sql_err(Some(key), "raising durability", e))?;
            // With a full sync the locked claim always answers; `None` would be a bug, reported
            // as a store failure rather than a claim made with less durability.
            let result = self.claim_locked(conn, req, true).and_then(|answer| {
                answer.ok_or_else(|| {
                    Error::store_msg(
                        Some(key),
                        "claiming: a full-sync claim asked for a full sync",
                    )
                })
            });
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            restore_durability(conn, key);
            result
        })
    }

    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        let now = self.clock.now();
        let boot: &str = this_boot();
        let exp_mono = to_sql_ns(now.mono_ns.saturating_add(crate::clock::nanos(ttl)));
        let exp_wall = now.wall_ms.saturating_add(crate::clock::millis(ttl));
        self.fenced(
            claim,
            self.claim_deadline(claim.lease),
            "recording the result",
            sql::COMPLETE,
            &[&boot, &exp_mono, &exp_wall, &result, &now.wall_ms],
            claim.once,
        )
    }

    fn release(&self, claim: &Claim) -> Result<(), Error> {
        let now = self.clock.now();
        self.fenced(
            claim,
            self.claim_deadline(claim.lease),
            "releasing the claim",
            sql::RELEASE,
            &[&now.wall_ms],
            false,
        )
    }

    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        let now = self.clock.now();
        let boot: &str = this_boot();
        let until = to_sql_ns(now.mono_ns.saturating_add(crate::clock::nanos(lease)));
        let until_wall = now.wall_ms.saturating_add(crate::clock::millis(lease));
        self.fenced(
            claim,
            self.claim_deadline(lease),
            "renewing the lease",
            sql::RENEW,
            &[&boot, &until, &until_wall],
            false,
        )
    }

    fn mark_unknown(&self, claim: &Claim) -> Result<(), Error> {
        let now = self.clock.now();
        self.fenced(
            claim,
            self.claim_deadline(claim.lease),
            "marking the outcome unknown",
            sql::MARK_UNKNOWN,
            &[&now.wall_ms],
            claim.once,
        )
    }

    fn forget(&self, key: &Key) -> Result<bool, Error> {
        let (scope, id) = (key.scope(), key.id());
        self.deleting(Some(key), "forgetting the key", sql::FORGET, &[&scope, &id])
            .map(|n| n > 0)
    }

    fn forget_if(&self, key: &Key, fence: crate::record::Fence) -> Result<bool, Error> {
        let (scope, id, fence) = (key.scope(), key.id(), to_sql_ns(fence));
        self.deleting(
            Some(key),
            "forgetting the key",
            sql::FORGET_IF,
            &[&scope, &id, &fence],
        )
        .map(|n| n > 0)
    }

    fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> {
        self.with(Some(key), self.busy_timeout, |conn| {
            let rec = self.read(conn, key)?;
            let now = self.clock.now();
            Ok(rec.map(|r| r.view(key, now, this_boot())))
        })
    }

    fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> {
        self.scan_filtered(&ScanFilter::new(), cursor, limit)
    }

    fn scan_filtered(
        &self,
        filter: &ScanFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, Error> {
        let after = cursor.map(RowKey::from_cursor).transpose()?;
        let limit = limit.max(1);
        let upper = filter.scope_upper_bound();
        let open = [Status::InProgress, Status::Unknown];
        let open_only =
            !filter.statuses.is_empty() && filter.statuses.iter().all(|s| open.contains(s));
        let sql = sql::read_page(
            filter.scope_prefix.is_some(),
            upper.is_some(),
            filter.statuses.len(),
            open_only,
            !filter.skip_results,
        );
        self.with(None, self.busy_timeout, |conn| {
            // `?1` NULL: from the first row.
            let (scope, id) = match &after {
                Some(after) => {
                    let (scope, id) = after.params();
                    (Some(scope), Some(id))
                }
                None => (None, None),
            };
            let mut stmt = conn
                .prepare_cached(&sql)
                .map_err(|e| sql_err(None, "scanning records", e))?;
            let limit_param = i64::try_from(limit).unwrap_or(i64::MAX);
            let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
            let mut args: Vec<&dyn rusqlite::ToSql> = vec![&scope, &id, &limit_param];
            // Parameters by position: ?4 the prefix, ?5 its upper bound, the states from ?6;
            // an unused position before a used one is NULL.
            let has_states = !statuses.is_empty();
            if filter.scope_prefix.is_some() || has_states {
                match &filter.scope_prefix {
                    Some(prefix) => args.push(prefix),
                    None => args.push(&rusqlite::types::Null),
                }
            }
            if upper.is_some() || has_states {
                match &upper {
                    Some(upper) => args.push(upper),
                    None => args.push(&rusqlite::types::Null),
                }
            }
            for s in &statuses {
                args.push(s);
            }
            let skip = filter.skip_results;
            let rows = stmt
                .query_map(args.as_slice(), |r| {
                    let key = RowKey::read(r.get_ref(10)?, r.get_ref(11)?);
                    Ok((record_of_shape(r, skip), key))
                })
                .map_err(|e| sql_err(None, "scanning records", e))?;
            let now = self.clock.now();
            let mut page = ScanPage::default();
            let mut read = 0;
            let mut last = None;
            for row in rows {
                let (rec, row_key) = row.map_err(|e| sql_err(None, "scanning records", e))?;
                // Read past: one damaged row, or one whose key is not text, must not hide the
                // others.
                match (&row_key, rec) {
                    (RowKey::Key(key), Ok(rec)) => {
                        page.records.push(rec.view(key, now, this_boot()))
                    }
                    (RowKey::Key(key), Err(kind)) => page.unreadable.push(Unreadable {
                        key: key.clone(),
                        kind,
                    }),
                    (RowKey::Raw(..), _) => page.unreadable.extend(row_key.not_text()),
                }
                read += 1;
                last = Some(row_key);
            }
            // The next page starts after the last row as stored, damaged or not.
            page.next = (read == limit).then(|| last.map(|k| k.cursor())).flatten();
            Ok(page)
        })
    }

    fn purge_expired(&self, limit: usize) -> Result<u64, Error> {
        let now = self.clock.now();
        let boot: &str = this_boot();
        let (mono, limit) = (
            to_sql_ns(now.mono_ns),
            i64::try_from(limit).unwrap_or(i64::MAX),
        );
        self.deleting(
            None,
            "purging expired records",
            sql::PURGE,
            &[&boot, &mono, &now.wall_ms, &limit],
        )
    }

    fn shared(&self) -> Arc<dyn Store> {
        // `self` is borrowed from an `Arc<Inner>` (a `SqliteStore`'s, or one this handed out),
        // so the count is above zero and the upgrade succeeds.
        match self.me.upgrade() {
            Some(me) => me,
            None => unreachable!("a SqliteStore's state is borrowed, so it is alive"),
        }
    }

    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn describe(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }
}

forward_store_to_inner!(SqliteStore);
async_via_sync!(SqliteStore);
