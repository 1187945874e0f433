//! `PostgresStore` (feature `postgres`): records in one PostgreSQL table, shared by a fleet.
//!
//! Shape of the costs: a repeated call is **one** round trip (claim-or-fetch is one statement,
//! a plain `SELECT` by key when the key is completed, mismatched or held, which calls the
//! table's claim function only when the key is free); a fresh call is **two** (the claim, then
//! the fenced completion). Leases and expiry are decided on the server's clock
//! (`now()`), never the caller's. Fences come from one sequence per table, so they grow per key
//! across release, takeover, `forget` and purging.
//!
//! The same store serves sync functions ([`Store`]) without any runtime of the caller's, and
//! async functions ([`AsyncStore`]) on any executor; see the `pool` module for how each half
//! drives its connections.
//!
//! The SQL, and which race each statement's shape closes, is in the `sql` module.

mod deadline;
mod error;
mod exec;
mod pool;
mod sql;

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::config::SslMode;
use tokio_postgres::Config;

use crate::error::Error;
use crate::key::Key;
use crate::record::{Claim, ClaimRequest, ClaimResponse, RecordView};
use crate::store::{AsyncStore, ScanFilter, ScanPage, Store, StoreFuture};

use crate::runtime::keeper::deadline;
use exec::{exec, Op, Reply};
use pool::{AsyncConn, Pool, SyncConn, Target};
use sql::{Names, Sql};

pub use sql::SCHEMA_VERSION;

/// The table [`PostgresStore::connect`] uses unless told otherwise.
pub const DEFAULT_TABLE: &str = "rerun_records";

/// The longest key (scope and id together, in bytes as stored, where a NUL or a backslash takes
/// two) the store accepts: PostgreSQL cannot index a primary-key entry much above 2.7 kB, so a
/// longer key is refused before anything is written.
pub const MAX_KEY_BYTES: usize = 2600;

/// The largest result the store accepts by default: just under PostgreSQL's 1 GiB limit on one
/// value and one protocol message.
pub const MAX_RESULT_BYTES: usize = (1 << 30) - (1 << 20);

const DEFAULT_POOL_SIZE: usize = 16;

/// The longest [`PostgresBuilder::op_timeout`]: the longest `statement_timeout` the server
/// accepts (`i32::MAX` milliseconds, about 24.8 days).
pub const MAX_OP_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// The largest [`PostgresBuilder::pool_size`]: the most connections a PostgreSQL server
/// accepts (`max_connections` is at most 2^18 - 1).
pub const MAX_POOL_SIZE: usize = 262_143;

/// How long one store call may take by default (see [`PostgresBuilder::op_timeout`]).
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long `connect` may spend creating the table or migrating an older one by default (see
/// [`PostgresBuilder::migration_timeout`]).
pub const DEFAULT_MIGRATION_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// A store in a PostgreSQL table, for fleets of processes on many machines.
///
/// [`PostgresStore::connect`] creates the table if it is missing (safely when many instances
/// start at once) and opens a pool of connections. Cloning shares the pools. The same value is
/// both a [`Store`] (sync functions; no async runtime needed) and an [`AsyncStore`] (async
/// functions, on any executor).
///
/// ```no_run
/// use rerun_core::{Call, PostgresStore};
///
/// let store = PostgresStore::connect("postgres://app:secret@db.internal/app")?;
/// let out = Call::new("billing.charge", "ord_1")
///     .run(&store, || Ok::<_, rerun_core::Error>("charged".to_owned()))?;
/// assert_eq!(out.value, "charged");
/// # Ok::<(), rerun_core::Error>(())
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    names: Names,
    sql: Sql,
    sync_pool: Pool<SyncConn>,
    async_pool: Pool<AsyncConn>,
    /// The connections lease renewals use, and nothing else: a pool full of slow calls on
    /// other keys (claims waiting on a row an operator locked, large completions) cannot keep
    /// a live holder from renewing its lease until another process takes its key over.
    renew_pool: Pool<SyncConn>,
    max_result_bytes: usize,
    op_timeout: Duration,
    /// Opened with [`PostgresBuilder::existing_only`]: nothing is created or migrated.
    existing_only: bool,
    /// The table's codec version, when it is older than this build's and was left so (opened
    /// with `existing_only`): results are not written then (see `check_codec`).
    codec_behind: std::sync::OnceLock<i64>,
}

/// Options for a [`PostgresStore`], from [`PostgresStore::builder`].
///
/// ```no_run
/// use rerun_core::PostgresStore;
///
/// let store = PostgresStore::builder("postgres://app@db.internal/app")
///     .schema("billing")
///     .table("charges_rerun")
///     .pool_size(32)
///     .connect()?;
/// # Ok::<(), rerun_core::Error>(())
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `connect` is called"]
pub struct PostgresBuilder {
    url: String,
    table: String,
    schema: Option<String>,
    pool_size: usize,
    max_result_bytes: usize,
    op_timeout: Duration,
    migration_timeout: Duration,
    existing_only: bool,
}

impl PostgresBuilder {
    /// Open the table only if it exists and is of this build's schema, as it is (default
    /// `false`): for tools that look at a store the services own, such as `rerunctl`.
    ///
    /// [`connect`](PostgresBuilder::connect) then creates nothing (no schema, table, sequence or
    /// function), migrates nothing, replaces no claim function and raises no codec version: it
    /// only reads the table's versions. It fails with [`Error::Config`] when the table (or its
    /// `<table>_meta` or `<table>_fence` beside it) does not exist, when its schema version is
    /// older than this build's (start a service of this release first, which migrates it, or
    /// use the rerun of the release the services run), and, as without this option, when its
    /// schema or codec version is newer.
    ///
    /// A table whose claim function an earlier build made is opened as it is. Inspections,
    /// scans, `forget`, `purge_expired`, `release` and `mark_unknown` do not use that function
    /// and work as with this build's; a claim (a takeover, as `rerunctl recover` makes) runs the
    /// table's function, the one the services on it run, and fails with a store error if the
    /// function is missing. A table whose codec version is older than this build's stays so:
    /// results this build would write could not be read by the services on it, so `complete`
    /// on such a store fails with [`Error::Codec`] before sending anything.
    ///
    /// ```no_run
    /// let store = rerun_core::PostgresStore::builder("postgres://ops@db.internal/app")
    ///     .existing_only(true)
    ///     .connect()?; // Error::Config if `rerun_records` is missing or of another schema
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn existing_only(mut self, on: bool) -> Self {
        self.existing_only = on;
        self
    }

    /// How long one store call may take, from taking a connection to the server's answer
    /// (default 5 s): then it fails with a retryable [`Error::Store`] and its connection is
    /// closed. Calls made for a claim take at most a third of its lease, if that is shorter.
    /// The server's `statement_timeout` is set to the same (unless the URL sets it), and TCP
    /// keepalives and `tcp_user_timeout` notice a peer that went silent. Between 10 ms and
    /// [`MAX_OP_TIMEOUT`] (the longest `statement_timeout` the server accepts, `i32::MAX`
    /// milliseconds, about 24.8 days); a longer one, such as `Duration::MAX`, is that.
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout.clamp(Duration::from_millis(10), MAX_OP_TIMEOUT);
        self
    }

    /// How long [`connect`](PostgresBuilder::connect) may spend creating the table, or taking a
    /// table of an older schema to this build's (default [`DEFAULT_MIGRATION_TIMEOUT`], 10
    /// minutes), waiting for another instance doing the same included. A migration rewrites
    /// every record, so it runs without the server's `statement_timeout`; this is its only
    /// limit. The checks `connect` makes on a table that needs neither keep
    /// [`op_timeout`](PostgresBuilder::op_timeout) (at least 30 s). At least 1 s and at most
    /// [`MAX_OP_TIMEOUT`].
    ///
    /// ```no_run
    /// let store = rerun_core::PostgresStore::builder("postgres://app@db.internal/app")
    ///     .migration_timeout(std::time::Duration::from_secs(3600))
    ///     .connect()?;
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn migration_timeout(mut self, timeout: Duration) -> Self {
        self.migration_timeout = timeout.clamp(Duration::from_secs(1), MAX_OP_TIMEOUT);
        self
    }

    /// The table to keep records in (default `rerun_records`). rerun also creates
    /// `<table>_meta` (versions), `<table>_fence` (the fence sequence) and the function
    /// `<table>_claim` (which writes a claim) beside it. A plain
    /// identifier: ASCII letters, digits and `_`, not starting with a digit, at most 55 bytes.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// The schema of the table (default: the first schema of the connection's `search_path`).
    /// Created if missing. A plain identifier, as for [`PostgresBuilder::table`].
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// How many connections each half of the store (sync and async) opens at most
    /// (default 16). Callers beyond that wait for a free connection. At least 1 and at most
    /// [`MAX_POOL_SIZE`]; a larger one is that. Lease renewals have as many again of their
    /// own, opened as renewals need them (one or two, unless renewals wait on rows someone
    /// holds locked), so that calls filling the pool never hold a renewal up.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.clamp(1, MAX_POOL_SIZE);
        self
    }

    /// Refuse results larger than this many bytes with [`Error::Codec`] before writing
    /// (default and maximum [`MAX_RESULT_BYTES`]).
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = bytes.min(MAX_RESULT_BYTES);
        self
    }

    /// Connects, creates the schema if missing, and checks its version (with
    /// [`existing_only`](PostgresBuilder::existing_only), only checks it).
    ///
    /// Fails with [`Error::Config`] for a malformed URL or name, a URL that requires TLS
    /// (`sslmode=require`: the store connects without TLS), or a table written by a newer
    /// version of rerun, and with [`Error::Store`] (naming the URL, password elided) when the
    /// server cannot be reached.
    pub fn connect(self) -> Result<PostgresStore, Error> {
        let shown = crate::redact(&self.url);
        for (what, name) in [
            ("table", Some(&self.table)),
            ("schema", self.schema.as_ref()),
        ] {
            if let Some(name) = name.filter(|n| !sql::valid_identifier(n)) {
                return Err(Error::config(format!(
                    "{name:?} is not a valid PostgreSQL {what} name for rerun: use ASCII letters, digits and `_`, not starting with a digit, at most 55 bytes"
                )));
            }
        }
        let mut config: Config = self.url.parse().map_err(|e| {
            Error::config(format!("{shown} is not a PostgreSQL connection URL: {e}"))
        })?;
        if matches!(config.get_ssl_mode(), SslMode::Require) {
            // Connecting without TLS would fail every time, each failure retryable.
            return Err(Error::config(format!(
                "{shown} requires TLS (sslmode=require), and rerun's PostgreSQL store connects without it: reach a server that requires TLS through a proxy that speaks TLS to it (a cloud SQL proxy, pgbouncer, stunnel) on a trusted network, or set sslmode=disable or prefer"
            )));
        }
        if config.get_application_name().is_none() {
            // Lets operators (and the fault tests) tell rerun's backends apart.
            config.application_name("rerun");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.op_timeout);
        }
        // A peer that stops answering (a frozen proxy, a cut network) is noticed by the
        // kernel, not only by rerun's deadlines: unacknowledged data fails the socket after the
        // operation timeout, and an idle connection is probed within seconds.
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(self.op_timeout);
        }
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            config.keepalives(true);
            config.keepalives_idle(Duration::from_secs(5));
            config.keepalives_interval(Duration::from_secs(1));
            config.keepalives_retries(3);
        }
        // The server gives up on a statement when rerun does, instead of finishing work no
        // one waits for.
        let mut options = config.get_options().unwrap_or("").to_owned();
        if !options.contains("statement_timeout") {
            let ms = self.op_timeout.as_millis().max(1);
            options = format!("{options} -c statement_timeout={ms}");
        }
        // The claim relies on READ COMMITTED's `ON CONFLICT`: it re-checks the newest row
        // version. Under a stricter default (of the database, the role or the URL) a claim
        // that meets a row a concurrent claim committed fails with a serialization error
        // instead of answering busy or replaying. Set last, so it wins.
        options.push_str(" -c default_transaction_isolation=read\\ committed");
        config.options(options.trim_start());
        let names = Names::new(self.schema.as_deref(), &self.table);
        let sql = Sql::new(&names);
        let store = PostgresStore {
            inner: Arc::new(Inner {
                target: Target { config, shown },
                names,
                sql,
                sync_pool: Pool::new(self.pool_size),
                async_pool: Pool::new(self.pool_size),
                renew_pool: Pool::new(self.pool_size),
                max_result_bytes: self.max_result_bytes,
                op_timeout: self.op_timeout,
                existing_only: self.existing_only,
                codec_behind: std::sync::OnceLock::new(),
            }),
        };
        store.migrate(self.migration_timeout)?;
        Ok(store)
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/dbname`, or
    /// libpq's `key=value` form) and keeps records in the table `rerun_records`, created if
    /// missing.
    ///
    /// In the URL form, the query parameters `rerun_table` and `rerun_schema` choose the table
    /// and schema, so that `RERUN_STORE` can name them too.
    ///
    /// Works with and without an async runtime around it.
    ///
    /// ```no_run
    /// let store = rerun_core::PostgresStore::connect(
    ///     "postgres://app@127.0.0.1:5432/app?rerun_table=jobs_rerun",
    /// )?;
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn connect(url: &str) -> Result<PostgresStore, Error> {
        PostgresStore::builder(url).connect()
    }

    /// Options beyond the URL: table, schema, pool size.
    ///
    /// ```no_run
    /// let store = rerun_core::PostgresStore::builder("postgres://app@127.0.0.1/app")
    ///     .table("webhooks_rerun")
    ///     .connect()?;
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn builder(url: &str) -> PostgresBuilder {
        let (url, params) = split_rerun_params(url);
        let mut builder = PostgresBuilder {
            url,
            table: DEFAULT_TABLE.to_owned(),
            schema: None,
            pool_size: DEFAULT_POOL_SIZE,
            max_result_bytes: MAX_RESULT_BYTES,
            op_timeout: DEFAULT_OP_TIMEOUT,
            migration_timeout: DEFAULT_MIGRATION_TIMEOUT,
            existing_only: false,
        };
        for (name, value) in params {
            builder = match name.as_str() {
                "rerun_table" => builder.table(value),
                _ => builder.schema(value),
            };
        }
        builder
    }

    /// The table, as `schema.table` or `table`.
    pub fn table(&self) -> &str {
        &self.inner.names.display
    }

    /// The SQL text of the claim-or-fetch (`"claim"`) and completion (`"complete"`)
    /// statements, so that benchmarks can run the very same statements on a raw client.
    #[doc(hidden)]
    pub fn statement_text(&self, name: &str) -> Option<&str> {
        let stmt = match name {
            "claim" => sql::Stmt::Claim,
            "complete" => sql::Stmt::Complete,
            _ => return None,
        };
        Some(self.inner.sql.text(stmt))
    }

    /// Creates the table or takes it to this build's schema when it needs it, then checks its
    /// versions (opened `existing_only`, only checks them: see [`PostgresStore::check_existing`]).
    /// Three steps on one connection: the checks and the final read under the
    /// operation timeout (at least 30 s), the work in between (which may rewrite every record,
    /// or wait for another instance doing so) under `migration_timeout`.
    fn migrate(&self, migration_timeout: Duration) -> Result<(), Error> {
        let inner = &*self.inner;
        let names = &inner.names;
        let limit = inner.op_timeout.max(Duration::from_secs(30));
        let what = || {
            format!(
                "PostgreSQL at {}: creating or checking the rerun table {}",
                inner.target.shown, names.display
            )
        };
        let (mut pooled, left) = inner.sync_pool.get(&inner.target, limit)?;
        let conn = pooled.conn()?;
        // Whether everything is there, and the schema version if the table is.
        let found = conn.run_for(left, |session| async move {
            let client = &mut session.client;
            let row = client.query_one(&names.exists_query(), &[]).await?;
            let (exists, current, some): (bool, bool, bool) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            let version = match exists {
                true => schema_version(client, names).await?,
                false => None,
            };
            Ok((exists, current, some, version))
        })?;
        let (exists, current, some, version) = match migration_step(found, left, false, &what()) {
            Ok(found) => found,
            Err(e) => {
                pooled.discard();
                return Err(e);
            }
        };
        if inner.existing_only {
            self.check_existing(exists, some, version)?;
        } else if !exists || !current || version == Some(1) {
            let work = conn.run_for(migration_timeout, |session| async move {
                let client = &mut session.client;
                // One transaction under an advisory lock, one for every rerun table of the
                // database: instances starting together wait for the first to create
                // everything, then find it there, and two tables made at once in a new schema
                // do not race `CREATE SCHEMA IF NOT EXISTS`. No statement timeout: the wait may
                // be for a migration (below) of another instance. When only the claim function
                // is missing or of an earlier build it is replaced alone (its owner may, where
                // creating tables would need more rights).
                let ddl = match (exists, current) {
                    (false, _) => Some(names.schema_ddl()),
                    (true, false) => Some(names.function_ddl()),
                    (true, true) => None,
                };
                if let Some(ddl) = ddl {
                    client
                        .batch_execute(&format!(
                            "BEGIN; SET LOCAL statement_timeout = 0; \
                             SELECT pg_advisory_xact_lock({lock}); {ddl} COMMIT;",
                            lock = sql::CREATION_LOCK_ID,
                        ))
                        .await?;
                }
                // A table of an older schema is migrated once, by whichever instance takes
                // the lock first; the others find it migrated.
                if schema_version(client, names).await? == Some(1) {
                    let tx = client.transaction().await?;
                    tx.batch_execute("SET LOCAL statement_timeout = 0").await?;
                    tx.execute(sql::MIGRATION_LOCK, &[&names.records]).await?;
                    if schema_version(&tx, names).await? == Some(1) {
                        tx.batch_execute(&names.migration_1_to_2()).await?;
                    }
                    tx.commit().await?;
                }
                Ok(())
            });
            let done = match work {
                Ok(out) => migration_step(out, migration_timeout, true, &what()),
                Err(e) => Err(e),
            };
            if let Err(e) = done {
                pooled.discard();
                return Err(e);
            }
        }
        // Records this build writes need this build's codec to be read: say so in the table,
        // so that an older rerun refuses the table instead of misreading them.
        // Not when opened `existing_only`: the services on the table may be of an older build.
        let codec = i64::from(crate::codec::CODEC_VERSION);
        let raise = !inner.existing_only;
        let read = conn.run_for(limit, |session| async move {
            let client = &mut session.client;
            if raise {
                client
                    .execute(&names.raise_codec_version(), &[&codec])
                    .await?;
            }
            let rows = client.query(&names.versions_query(), &[]).await?;
            rows.iter()
                .map(|r| Ok((r.try_get::<_, String>(0)?, r.try_get::<_, i64>(1)?)))
                .collect::<Result<Vec<_>, tokio_postgres::Error>>()
        });
        let versions = match read.and_then(|out| migration_step(out, limit, false, &what())) {
            Ok(v) => v,
            Err(e) => {
                pooled.discard();
                return Err(e);
            }
        };
        let version = |name: &str| versions.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let checks = [
            ("schema", version("schema_version"), SCHEMA_VERSION),
            (
                "codec",
                version("codec_version"),
                i64::from(crate::codec::CODEC_VERSION),
            ),
        ];
        for (what, found, supported) in checks {
            match found {
                Some(found) if found <= supported => {}
                Some(found) => {
                    return Err(Error::config(format!(
                        "the rerun table {} has {what} version {found}, newer than this build's {supported}; upgrade rerun to use it",
                        names.display
                    )))
                }
                None => {
                    return Err(Error::config(format!(
                        "the rerun table {} has no {what} version in {}; it was not created by rerun",
                        names.display, names.meta
                    )))
                }
            }
        }
        if let Some(codec) = version("codec_version").filter(|&v| v < codec) {
            // Left as it is (`existing_only`): say so at the first write of a result.
            let _ = inner.codec_behind.set(codec);
        }
        Ok(())
    }

    /// Refuses, for a store opened [`existing_only`](PostgresBuilder::existing_only), a table
    /// that is missing (`exists`: the table, its meta table and its fence sequence; `some`:
    /// any of them) or of another schema version than this build's (`version`).
    fn check_existing(&self, exists: bool, some: bool, version: Option<i64>) -> Result<(), Error> {
        let inner = &*self.inner;
        let names = &inner.names;
        if !exists && some {
            return Err(Error::config(format!(
                "PostgreSQL at {}: the rerun table {} is incomplete (it needs {}, {} and {} together): it was partly dropped, or made by something other than rerun; this store opens existing tables only and changes nothing, so check it by hand",
                inner.target.shown, names.display, names.records, names.meta, names.fence_seq
            )));
        }
        if !exists {
            return Err(Error::config(format!(
                "PostgreSQL at {}: there is no rerun table {} (with {} and {} beside it), and this store opens existing tables only: check the database, the schema and the table (`rerun_schema`, `rerun_table` in the URL); a service of rerun creates the table when it first starts",
                inner.target.shown, names.display, names.meta, names.fence_seq
            )));
        }
        match version {
            Some(SCHEMA_VERSION) => Ok(()),
            Some(found) if found < SCHEMA_VERSION => Err(Error::config(format!(
                "the rerun table {} has schema version {found}, older than this build's {SCHEMA_VERSION}, and this store opens tables as they are, without migrating them: migrate it by starting a service of this release first, or use the rerunctl of the release your services run",
                names.display
            ))),
            Some(found) => Err(Error::config(format!(
                "the rerun table {} has schema version {found}, newer than this build's {SCHEMA_VERSION}; upgrade rerun to use it",
                names.display
            ))),
            None => Err(Error::config(format!(
                "the rerun table {} has no schema version in {}; it was not created by rerun",
                names.display, names.meta
            ))),
        }
    }

    /// Refuses to write a result into a table whose codec version is older than this build's
    /// (left so by [`PostgresBuilder::existing_only`]): the services on it could not read it.
    /// `Codec`, as for a result too large: refused before anything was sent.
    fn check_codec(&self, claim: &Claim) -> Result<(), Error> {
        match self.inner.codec_behind.get() {
            None => Ok(()),
            Some(found) => Err(Error::Codec {
                key: claim.key.clone(),
                what: "the result",
                message: format!(
                    "the rerun table {} has codec version {found}, older than this build's {}, and this store was opened without raising it (existing_only): results it wrote could not be read by the services on the table; write results through a store opened normally",
                    self.inner.names.display,
                    crate::codec::CODEC_VERSION
                ),
            }),
        }
    }

    fn check_key(key: &Key) -> Result<(), Error> {
        let len = sql::text_len(key.scope()) + sql::text_len(key.id());
        if len > MAX_KEY_BYTES {
            return Err(Error::Codec {
                key: key.clone(),
                what: "the key",
                message: format!(
                    "it is {len} bytes as stored (a NUL or a backslash takes two); PostgreSQL indexes keys (scope and id) of at most {MAX_KEY_BYTES} bytes, so hash long key parts first"
                ),
            });
        }
        Ok(())
    }

    fn check_result(&self, claim: &Claim, result: &[u8]) -> Result<(), Error> {
        if result.len() > self.inner.max_result_bytes {
            return Err(Error::Codec {
                key: claim.key.clone(),
                what: "the result",
                message: format!(
                    "it is {} bytes; this PostgresStore stores results of at most {} bytes",
                    result.len(),
                    self.inner.max_result_bytes
                ),
            });
        }
        Ok(())
    }

    /// The time limit of an operation.
    fn limit(&self, op: &Op<'_>) -> Duration {
        match op.lease() {
            Some(lease) => crate::store::call_deadline(self.inner.op_timeout, lease),
            None => self.inner.op_timeout,
        }
    }

    /// The error of a call that ran out of time (made only then: the message is formatted).
    fn timed_out(&self, key: Option<&Key>, what: &str, limit: Duration) -> Error {
        Error::store_msg(
            key,
            format!(
                "PostgreSQL at {}: {what}: no answer within {}; the connection was closed",
                self.inner.target.shown,
                crate::error::rounded(limit)
            ),
        )
    }

    /// Runs an operation on a sync connection, within its time limit.
    fn run(&self, op: Op<'_>) -> Result<Reply, Error> {
        self.run_on(&self.inner.sync_pool, op)
    }

    /// Runs an operation on a connection of `pool`, within its time limit.
    fn run_on(&self, pool: &Pool<SyncConn>, op: Op<'_>) -> Result<Reply, Error> {
        let inner = &*self.inner;
        let limit = self.limit(&op);
        let key = op.key();
        let (mut pooled, left) = pool.get(&inner.target, limit).map_err(|e| keyed(e, key))?;
        let what = op.what();
        let answer = pooled
            .conn()?
            .run_for(left, |session| exec(session, &inner.sql, op))?;
        match answer {
            Some(Ok(reply)) => Ok(reply),
            Some(Err(failure)) => {
                if failure.broken {
                    pooled.discard();
                }
                Err(failure.error)
            }
            None => {
                // The connection is mid-statement: it cannot serve another call.
                pooled.discard();
                Err(self.timed_out(key, what, limit))
            }
        }
    }

    /// Runs an operation on an async connection, within its time limit.
    async fn run_async(&self, op: Op<'_>) -> Result<Reply, Error> {
        let inner = &*self.inner;
        let limit = self.limit(&op);
        let key = op.key();
        let (mut pooled, left) = inner
            .async_pool
            .get(&inner.target, limit)
            .await
            .map_err(|e| keyed(e, key))?;
        let what = op.what();
        // Cancelled from here on (a `select!`, a timeout around the call), the connection is
        // closed rather than put back with the statement still running on it.
        pooled.sending();
        let conn = pooled.conn()?;
        let outcome = {
            // Pinned here, so that the statement's future is not copied into the deadline's.
            let exec = pin!(exec(&mut conn.session, &inner.sql, op));
            deadline(left, exec).await
        };
        pooled.answered();
        match outcome {
            Some(Ok(reply)) => Ok(reply),
            Some(Err(failure)) => {
                if failure.broken {
                    pooled.discard();
                }
                Err(failure.error)
            }
            None => {
                pooled.discard();
                Err(self.timed_out(key, what, limit))
            }
        }
    }
}

/// Adds the key to a store error that was raised before the key was known (a failed connect).
/// The table's schema version, or `None` when the meta table has no row for it.
async fn schema_version(
    client: &impl tokio_postgres::GenericClient,
    names: &Names,
) -> Result<Option<i64>, tokio_postgres::Error> {
    let row = client.query_opt(&names.schema_version_query(), &[]).await?;
    row.map(|row| row.try_get(0)).transpose()
}

/// What one step of [`PostgresStore::migrate`] came to: its value, or the error of `what`.
fn migration_step<T>(
    out: Option<Result<T, tokio_postgres::Error>>,
    limit: Duration,
    migrating: bool,
    what: &str,
) -> Result<T, Error> {
    match out {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(error::store_error(None, what.to_owned(), e)),
        None => Err(Error::store_msg(
            None,
            format!(
                "{what}: no answer within {}{}",
                crate::error::rounded(limit),
                if migrating {
                    " (creating the table may wait for another instance's migration, and a migration of many records may need a longer `migration_timeout`)"
                } else {
                    ""
                }
            ),
        )),
    }
}

fn keyed(e: Error, key: Option<&Key>) -> Error {
    match e {
        Error::Store {
            key: None,
            message,
            source,
            retryable,
            after_body,
        } => Error::Store {
            key: key.cloned(),
            message,
            source,
            retryable,
            after_body,
        },
        other => other,
    }
}

/// Takes rerun's own query parameters (`rerun_table`, `rerun_schema`) out of a URL, which the
/// driver would reject as unknown options.
fn split_rerun_params(url: &str) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?').filter(|_| url.contains("://")) else {
        return (url.to_owned(), Vec::new());
    };
    let mut kept = Vec::new();
    let mut ours = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((name @ ("rerun_table" | "rerun_schema"), value)) => {
                ours.push((name.to_owned(), value.to_owned()))
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, ours)
}

fn unexpected(what: &str) -> Error {
    Error::store_msg(None, format!("PostgreSQL: {what}: unexpected reply"))
}

/// The URL's password is shown as `***`, as in the store's errors.
impl std::fmt::Debug for PostgresBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBuilder")
            .field("url", &crate::redact(&self.url))
            .field("table", &self.table)
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("max_result_bytes", &self.max_result_bytes)
            .field("op_timeout", &self.op_timeout)
            .field("migration_timeout", &self.migration_timeout)
            .field("existing_only", &self.existing_only)
            .finish()
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.inner.target.shown)
            .field("table", &self.inner.names.display)
            .finish_non_exhaustive()
    }
}

/// Maps a [`Reply`] to the type an operation returns.
macro_rules! expect_reply {
    ($reply:expr, $pat:pat => $out:expr, $what:expr) => {
        match $reply {
            $pat => Ok($out),
            _ => Err(unexpected($what)),
        }
    };
}

impl Store for PostgresStore {
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        PostgresStore::check_key(req.key)?;
        expect_reply!(self.run(Op::Claim(req))?, Reply::Claim(r) => r, "claim")
    }

    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        self.check_codec(claim)?;
        self.check_result(claim, result)?;
        expect_reply!(self.run(Op::Complete(claim, result, ttl))?, Reply::Done => (), "complete")
    }

    fn release(&self, claim: &Claim) -> Result<(), Error> {
        expect_reply!(self.run(Op::Release(claim))?, Reply::Done => (), "release")
    }

    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        // On connections of their own: see `Inner::renew_pool`.
        let renewed = self.run_on(&self.inner.renew_pool, Op::Renew(claim, lease))?;
        expect_reply!(renewed, Reply::Done => (), "renew")
    }

    fn mark_unknown(&self, claim: &Claim) -> Result<(), Error> {
        expect_reply!(self.run(Op::MarkUnknown(claim))?, Reply::Done => (), "mark_unknown")
    }

    fn forget(&self, key: &Key) -> Result<bool, Error> {
        expect_reply!(self.run(Op::Forget(key))?, Reply::Forgot(b) => b, "forget")
    }

    fn forget_if(&self, key: &Key, fence: crate::record::Fence) -> Result<bool, Error> {
        expect_reply!(self.run(Op::ForgetIf(key, fence))?, Reply::Forgot(b) => b, "forget")
    }

    fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> {
        expect_reply!(self.run(Op::Inspect(key))?, Reply::Record(r) => r, "inspect")
    }

    fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> {
        expect_reply!(self.run(Op::Scan(&ScanFilter::new(), cursor, limit))?, Reply::Page(p) => p, "scan")
    }

    fn scan_filtered(
        &self,
        filter: &ScanFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, Error> {
        expect_reply!(self.run(Op::Scan(filter, cursor, limit))?, Reply::Page(p) => p, "scan")
    }

    fn purge_expired(&self, limit: usize) -> Result<u64, Error> {
        expect_reply!(self.run(Op::Purge(limit))?, Reply::Purged(n) => n, "purge")
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn describe(&self) -> String {
        format!(
            "{} (table {})",
            self.inner.target.shown, self.inner.names.display
        )
    }
}

impl AsyncStore for PostgresStore {
    fn claim_async<'a>(&'a self, req: &'a ClaimRequest<'a>) -> StoreFuture<'a, ClaimResponse> {
        Box::pin(async move {
            PostgresStore::check_key(req.key)?;
            expect_reply!(self.run_async(Op::Claim(req)).await?, Reply::Claim(r) => r, "claim")
        })
    }

    fn complete_async<'a>(
        &'a self,
        claim: &'a Claim,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.check_codec(claim)?;
            self.check_result(claim, result)?;
            expect_reply!(
                self.run_async(Op::Complete(claim, result, ttl)).await?,
                Reply::Done => (),
                "complete"
            )
        })
    }

    fn release_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            expect_reply!(self.run_async(Op::Release(claim)).await?, Reply::Done => (), "release")
        })
    }

    fn mark_unknown_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            expect_reply!(
                self.run_async(Op::MarkUnknown(claim)).await?,
                Reply::Done => (),
                "mark_unknown"
            )
        })
    }

    fn inspect_async<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Option<RecordView>> {
        Box::pin(async move {
            expect_reply!(self.run_async(Op::Inspect(key)).await?, Reply::Record(r) => r, "inspect")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rerun_params_are_taken_out_of_the_url() {
        let (url, ours) =
            split_rerun_params("postgres://u@h/db?sslmode=disable&rerun_table=t1&rerun_schema=s");
        assert_eq!(url, "postgres://u@h/db?sslmode=disable");
        assert_eq!(
            ours,
            vec![
                ("rerun_table".to_owned(), "t1".to_owned()),
                ("rerun_schema".to_owned(), "s".to_owned())
            ]
        );
        assert_eq!(split_rerun_params("host=h dbname=d").0, "host=h dbname=d");
        let b = PostgresStore::builder("postgres://h/db?rerun_table=x");
        assert_eq!((b.url.as_str(), b.table.as_str()), ("postgres://h/db", "x"));
    }

    #[test]
    fn bad_names_and_urls_are_config_errors() {
        let err = PostgresStore::builder("postgres://127.0.0.1:1/db")
            .table("bad-name")
            .connect()
            .unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err}");
        let err = PostgresStore::connect("postgres://u:pw@h:notaport/db").unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
    }

    #[test]
    fn an_unreachable_server_is_a_store_error_naming_the_url() {
        // Port 1 on loopback refuses at once.
        let err = PostgresStore::connect("postgres://u:secret@127.0.0.1:1/db").unwrap_err();
        assert!(
            matches!(err, Error::Store { .. }) && err.is_retryable(),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains("postgres://u:***@127.0.0.1:1/db"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }
}
