//! `RedisStore`: records in Redis, shared by a fleet (feature `redis`).
//!
//! Shape of the costs: a repeated call is one round trip (the claim script returns the recorded
//! result: claim-or-fetch in one step); a fresh call is two (claim, then complete). Every
//! transition is one Lua script, loaded once at connect and called by its SHA (`EVALSHA`, with a
//! `SCRIPT LOAD` fallback after a server restart flushed the script cache):
//!
//! | operation | script | what it closes |
//! |---|---|---|
//! | [`Store::claim`] | `claim.lua` | two callers both seeing "absent"; a claim judged on a caller's clock |
//! | [`Store::complete`] | `complete.lua` | a zombie overwriting its successor's result |
//! | [`Store::release`] | `release.lua` | a zombie freeing its successor's claim |
//! | [`Store::renew`] | `renew.lua` | a taken-over holder extending the successor's lease |
//! | [`Store::mark_unknown`] | `mark_unknown.lua` | a zombie turning a live claim into an unknown outcome |
//!
//! # Layout
//!
//! One hash per record, at `PREFIX{SCOPE:ID}` (`rerun:{billing.charge:ord_1}` by default). The
//! braces are a Redis Cluster hash tag: everything rerun keeps for one record lands on one slot.
//! `{`, `}`, `%` (and `:` in the scope) are percent-escaped, so two keys never share a name.
//!
//! # Clock, fences and expiry
//!
//! Leases and expiry are decided on Redis' clock (`TIME` inside the scripts), never the
//! caller's. A completed record carries a `PEXPIREAT`, so Redis removes it at the end of its
//! ttl by itself ([`Store::purge_expired`] has nothing to do and returns 0); a released record
//! expires after a day. An in-progress or unknown record never expires by itself: a dead
//! at-most-once attempt must not be forgotten silently.
//!
//! A claim's fence is `max(last fence of the key + 1, Redis' clock in microseconds)`: the last
//! fence survives release (the released record keeps it) and `forget` (a tombstone keeps it for a
//! day), and once a record expired with its fence, the clock is past it.
//!
//! # Sync and async
//!
//! The sync half ([`Store`]) uses a pool of blocking connections and needs no runtime (rerun's
//! lease keeper calls it from a plain thread). The async half ([`AsyncStore`]) uses one
//! multiplexed connection, opened on first use in the caller's tokio runtime and reopened when
//! that runtime is gone; outside a tokio runtime it falls back to the sync half.
//!
//! # Errors
//!
//! Every driver failure is a retryable [`Error::Store`] naming the key; the connection it
//! happened on is dropped (with every idle connection opened before it, which a server restart
//! or a `CLIENT KILL` killed too), so the retry runs on a fresh one. A record written by a newer
//! rerun is [`Error::Corrupt`] naming both versions; a key or result larger than the server
//! accepts is [`Error::Codec`] before anything is written.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Connection, ConnectionLike, RedisError, Script, Value};

use crate::error::{CorruptKind, Error};
use crate::fingerprint::Fingerprint;
use crate::global::redact;
use crate::holder::Holder;
use crate::key::Key;
use crate::record::{
    Abandoned, Busy, Claim, ClaimRequest, ClaimResponse, Fence, RecordView, Replay, Status,
};
use crate::store::{AsyncStore, ScanPage, Store, StoreFuture};

/// The record layout this build writes; a record with a newer one is refused as
/// [`Error::Corrupt`], never overwritten.
pub const SCHEMA_VERSION: u32 = 1;

/// The largest key or result Redis accepts by default (`proto-max-bulk-len`, 512 MiB).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 512 * 1024 * 1024;

/// How long a released record, or the tombstone `forget` leaves, keeps the key's last fence
/// (a day, in milliseconds).
const FENCE_KEEP_MS: u64 = 24 * 60 * 60 * 1000;

/// The longest lease or ttl passed to Redis (100 years): keeps the scripts' microsecond
/// arithmetic exact in Lua's doubles.
const MAX_SPAN_US: u64 = 100 * 365 * 24 * 60 * 60 * 1_000_000;

/// How many idle sync connections the pool keeps.
const MAX_IDLE: usize = 64;

/// Options for [`RedisStore::connect_with`].
///
/// ```
/// use std::time::Duration;
/// use rerun_core::store::redis::RedisOptions;
/// let options = RedisOptions::new()
///     .prefix("billing:rerun:")
///     .client_name("billing-worker")
///     .response_timeout(Duration::from_secs(2));
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct RedisOptions {
    prefix: String,
    client_name: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    max_value_bytes: usize,
}

impl RedisOptions {
    /// Defaults: prefix `rerun:`, client name `rerun`, 5 s to connect, 10 s for a reply, and
    /// values up to the server's `proto-max-bulk-len` (512 MiB unless the server says less).
    pub fn new() -> RedisOptions {
        RedisOptions {
            prefix: "rerun:".to_owned(),
            client_name: "rerun".to_owned(),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(10),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
        }
    }
    /// The prefix of every key rerun writes, to keep several applications (or tests) apart in
    /// one database. It may not contain `{` or `}` (they would break the hash tag).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
    /// The name every connection gives itself (`CLIENT SETNAME`), as `CLIENT LIST` shows it.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = name.into();
        self
    }
    /// How long opening a connection may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
    /// How long a reply may take before the call fails with a retryable [`Error::Store`].
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }
    /// The largest key or result to send; larger ones fail with [`Error::Codec`] before
    /// anything is written. Lowered at connect to the server's `proto-max-bulk-len` if smaller.
    pub fn max_value_bytes(mut self, bytes: usize) -> Self {
        self.max_value_bytes = bytes;
        self
    }
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions::new()
    }
}

/// A store in Redis, shared by every process and machine that connects to it.
///
/// Cloning shares the connections. It serves sync functions ([`Store`]) and async ones
/// ([`AsyncStore`]) alike.
///
/// ```no_run
/// use rerun_core::{Call, store::redis::RedisStore};
/// let store = RedisStore::connect("redis://127.0.0.1:6379")?;
/// let out = Call::new("demo", &1u64).run(&store, || Ok::<_, rerun_core::Error>("done".to_owned()))?;
/// assert_eq!(out.value, "done");
/// # Ok::<(), rerun_core::Error>(())
/// ```
///
/// The URL may carry the key prefix as a `prefix` query parameter, which is how
/// `RERUN_STORE=redis://host:6379/0?prefix=billing:` chooses it for the global store.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// The URL with its password elided, for messages.
    url: String,
    prefix: String,
    client_name: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    max_value_bytes: AtomicUsize,
    scripts: Scripts,
    pool: Mutex<Pool>,
    aio: Mutex<Option<AsyncConn>>,
    /// Ids of async connections, so that a failure on an old one never drops a newer one.
    next_conn_id: AtomicU64,
}

struct Scripts {
    claim: Script,
    complete: Script,
    release: Script,
    renew: Script,
    mark_unknown: Script,
    forget: Script,
    inspect: Script,
    /// The sources, for `SCRIPT LOAD` at connect.
    sources: Vec<String>,
}

impl Scripts {
    fn new() -> Scripts {
        let sources: Vec<String> = [
            include_str!("claim.lua"),
            include_str!("complete.lua"),
            include_str!("release.lua"),
            include_str!("renew.lua"),
            include_str!("mark_unknown.lua"),
            include_str!("forget.lua"),
            include_str!("inspect.lua"),
        ]
        .iter()
        .map(|code| code.replace("@SCHEMA@", &SCHEMA_VERSION.to_string()))
        .collect();
        let script = |i: usize| Script::new(&sources[i]);
        Scripts {
            claim: script(0),
            complete: script(1),
            release: script(2),
            renew: script(3),
            mark_unknown: script(4),
            forget: script(5),
            inspect: script(6),
            sources,
        }
    }
}

/// Idle sync connections. A connection failure bumps the generation, and connections of an
/// older generation are dropped instead of reused: whatever killed one (a restart, a
/// `CLIENT KILL`, a network cut) most likely killed its idle siblings too.
#[derive(Default)]
struct Pool {
    idle: Vec<Connection>,
    generation: u64,
}

/// The multiplexed connection of the async half, and a task in the runtime that drives it:
/// when that runtime shuts down, the task ends with it and the connection is reopened.
struct AsyncConn {
    conn: MultiplexedConnection,
    alive: tokio::task::JoinHandle<()>,
    id: u64,
}

impl Drop for AsyncConn {
    fn drop(&mut self) {
        self.alive.abort();
    }
}

/// What a fenced script answered.
enum Fenced {
    Ok,
    Lost,
    Version(u32),
}

impl RedisStore {
    /// Connects to the Redis at `url` (`redis://[:password@]host[:port][/db][?prefix=P]`, or
    /// `rediss://` for TLS where the `redis` crate was built with it) with default options.
    ///
    /// Works with or without an async runtime. A server that cannot be reached is a
    /// retryable [`Error::Store`] naming the URL (its password elided) and the cause; a
    /// malformed URL is [`Error::Config`].
    ///
    /// ```no_run
    /// let store = rerun_core::store::redis::RedisStore::connect("redis://:secret@cache:6379/0")?;
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn connect(url: &str) -> Result<RedisStore, Error> {
        RedisStore::connect_with(url, RedisOptions::new())
    }

    /// Connects with options; a `prefix` in the URL's query wins over the options' prefix.
    ///
    /// ```no_run
    /// use rerun_core::store::redis::{RedisOptions, RedisStore};
    /// let store = RedisStore::connect_with(
    ///     "redis://127.0.0.1:6379",
    ///     RedisOptions::new().prefix("billing:"),
    /// )?;
    /// assert!(store.prefix().starts_with("billing:"));
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn connect_with(url: &str, options: RedisOptions) -> Result<RedisStore, Error> {
        let redacted = redact(url);
        let (driver_url, url_prefix) = split_prefix(url)?;
        let prefix = url_prefix.unwrap_or(options.prefix);
        if prefix.contains(['{', '}']) {
            return Err(Error::config(format!(
                "the Redis key prefix {prefix:?} contains a brace, which would break the hash tag that keeps a record on one Cluster slot; choose a prefix without `{{` or `}}`"
            )));
        }
        if options.client_name.is_empty() || options.client_name.contains(char::is_whitespace) {
            return Err(Error::config(format!(
                "the Redis client name {:?} must be a non-empty word without spaces",
                options.client_name
            )));
        }
        let client = Client::open(driver_url.as_str()).map_err(|e| {
            Error::config(format!(
                "{redacted} is not a Redis URL ({e}); expected redis://[:password@]host[:port][/db]"
            ))
        })?;
        let store = RedisStore {
            inner: Arc::new(Inner {
                client,
                url: redacted,
                prefix,
                client_name: options.client_name,
                connect_timeout: options.connect_timeout,
                response_timeout: options.response_timeout,
                max_value_bytes: AtomicUsize::new(options.max_value_bytes),
                scripts: Scripts::new(),
                pool: Mutex::new(Pool::default()),
                aio: Mutex::new(None),
                next_conn_id: AtomicU64::new(1),
            }),
        };
        let mut conn = store.open_sync(None)?;
        // Load every script now, in one round trip, so the first calls need no NOSCRIPT detour.
        let mut load = redis::pipe();
        for source in &store.inner.scripts.sources {
            load.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        load.query::<()>(&mut conn)
            .map_err(|e| store.connect_err(None, "loading rerun's scripts", e))?;
        // The server's own limit on one value, where it lets us read it (managed services may
        // not): keys and results above it are refused before anything is sent.
        let limit: Option<(String, u64)> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("proto-max-bulk-len")
            .query(&mut conn)
            .ok();
        if let Some((_, server_max)) = limit {
            let server_max = usize::try_from(server_max).unwrap_or(usize::MAX);
            store
                .inner
                .max_value_bytes
                .fetch_min(server_max, Ordering::Relaxed);
        }
        store.put_back(0, conn);
        Ok(store)
    }

    /// The key prefix this store writes under.
    ///
    /// ```no_run
    /// let store = rerun_core::store::redis::RedisStore::connect("redis://127.0.0.1:6379/?prefix=app:")?;
    /// assert_eq!(store.prefix(), "app:");
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The Redis key of a record: `PREFIX{SCOPE:ID}`, escaped so that no two keys share it.
    ///
    /// ```no_run
    /// use rerun_core::{Key, store::redis::RedisStore};
    /// let store = RedisStore::connect("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.record_key(&Key::from_parts("billing.charge", "ord_1")), "rerun:{billing.charge:ord_1}");
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn record_key(&self, key: &Key) -> String {
        record_key(&self.inner.prefix, key)
    }

    /// The largest key or result this store sends.
    pub fn max_value_bytes(&self) -> usize {
        self.inner.max_value_bytes.load(Ordering::Relaxed)
    }

    // ---- connections ---------------------------------------------------------------------

    /// A new sync connection; `key` is the key of the call that needs it, for the error.
    fn open_sync(&self, key: Option<&Key>) -> Result<Connection, Error> {
        let inner = &self.inner;
        let mut conn = inner
            .client
            .get_connection_with_timeout(inner.connect_timeout)
            .map_err(|e| self.connect_err(key, "connecting", e))?;
        let timeout = Some(inner.response_timeout);
        conn.set_read_timeout(timeout)
            .and_then(|()| conn.set_write_timeout(timeout))
            .map_err(|e| self.connect_err(key, "setting timeouts", e))?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(&inner.client_name)
            .query::<()>(&mut conn)
            .map_err(|e| self.connect_err(key, "naming the connection", e))?;
        Ok(conn)
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        // Every update of the pool is a single push, pop or assignment: a poisoned lock is
        // still consistent.
        self.inner.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, key: Option<&Key>) -> Result<(u64, Connection), Error> {
        let (generation, pooled) = {
            let mut pool = self.pool();
            (pool.generation, pool.idle.pop())
        };
        match pooled {
            Some(conn) => Ok((generation, conn)),
            None => Ok((generation, self.open_sync(key)?)),
        }
    }

    fn put_back(&self, generation: u64, conn: Connection) {
        let mut pool = self.pool();
        if generation == pool.generation && conn.is_open() && pool.idle.len() < MAX_IDLE {
            pool.idle.push(conn);
        }
    }

    /// Forgets every idle connection of generation `generation` or older.
    fn invalidate(&self, generation: u64) {
        let mut pool = self.pool();
        if pool.generation == generation {
            pool.generation += 1;
            pool.idle.clear();
        }
    }

    /// Runs one request on a pooled sync connection.
    fn sync_call<T>(
        &self,
        key: Option<&Key>,
        what: &str,
        f: impl FnOnce(&mut Connection) -> Result<T, RedisError>,
    ) -> Result<T, Error> {
        let (generation, mut conn) = self.take(key)?;
        match f(&mut conn) {
            Ok(v) => {
                self.put_back(generation, conn);
                Ok(v)
            }
            Err(e) => {
                if breaks_connection(&e) {
                    self.invalidate(generation);
                } else {
                    self.put_back(generation, conn);
                }
                Err(self.driver_err(key, what, e))
            }
        }
    }

    /// The async connection: the cached one while the runtime that drives it runs, else a new
    /// one in the current runtime. `None` outside a tokio runtime.
    async fn async_conn(&self, key: &Key) -> Result<Option<(u64, MultiplexedConnection)>, Error> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Ok(None);
        }
        let seen = {
            let cached = self.inner.aio.lock().unwrap_or_else(|p| p.into_inner());
            match &*cached {
                Some(a) if !a.alive.is_finished() => return Ok(Some((a.id, a.conn.clone()))),
                Some(a) => Some(a.id),
                None => None,
            }
        };
        let inner = &self.inner;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(inner.connect_timeout))
            .set_response_timeout(Some(inner.response_timeout));
        let mut conn = inner
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.connect_err(Some(key), "connecting", e))?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(&inner.client_name)
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| self.connect_err(Some(key), "naming the connection", e))?;
        // A task that lives exactly as long as the runtime that drives the connection.
        let alive = tokio::spawn(std::future::pending::<()>());
        let mut cached = self.inner.aio.lock().unwrap_or_else(|p| p.into_inner());
        match &*cached {
            // Another task opened one meanwhile: share it, drop ours.
            Some(a) if Some(a.id) != seen && !a.alive.is_finished() => {
                alive.abort();
                Ok(Some((a.id, a.conn.clone())))
            }
            _ => {
                let id = self.inner.next_conn_id.fetch_add(1, Ordering::Relaxed);
                *cached = Some(AsyncConn {
                    conn: conn.clone(),
                    alive,
                    id,
                });
                Ok(Some((id, conn)))
            }
        }
    }

    fn invalidate_async(&self, id: u64) {
        let mut cached = self.inner.aio.lock().unwrap_or_else(|p| p.into_inner());
        if cached.as_ref().is_some_and(|a| a.id == id) {
            *cached = None;
        }
    }

    /// Runs one script on the async connection, or on the sync half outside a tokio runtime.
    async fn async_script(
        &self,
        key: &Key,
        what: &str,
        script: &Script,
        record: &str,
        args: &[Arg<'_>],
    ) -> Result<Value, Error> {
        let Some((id, mut conn)) = self.async_conn(key).await? else {
            return self.sync_script(key, what, script, record, args);
        };
        let mut invocation = script.key(record);
        for arg in args {
            invocation.arg(arg);
        }
        match invocation.invoke_async::<Value>(&mut conn).await {
            Ok(v) => Ok(v),
            Err(e) => {
                if breaks_connection(&e) {
                    self.invalidate_async(id);
                }
                Err(self.driver_err(Some(key), what, e))
            }
        }
    }

    fn sync_script(
        &self,
        key: &Key,
        what: &str,
        script: &Script,
        record: &str,
        args: &[Arg<'_>],
    ) -> Result<Value, Error> {
        self.sync_call(Some(key), what, |conn| {
            let mut invocation = script.key(record);
            for arg in args {
                invocation.arg(arg);
            }
            invocation.invoke::<Value>(conn)
        })
    }

    // ---- errors --------------------------------------------------------------------------

    fn connect_err(&self, key: Option<&Key>, what: &str, e: RedisError) -> Error {
        Error::store(
            key,
            format!("{what} to Redis at {}: {e}", self.inner.url),
            e,
        )
    }

    fn driver_err(&self, key: Option<&Key>, what: &str, e: RedisError) -> Error {
        if let (Some(key), Some("WRONGTYPE")) = (key, e.code()) {
            return Error::corrupt(
                key,
                CorruptKind::Record(format!(
                    "the Redis key {} holds another type than rerun's hash",
                    self.record_key(key)
                )),
            );
        }
        Error::store(
            key,
            format!("{what} on Redis at {}: {e}", self.inner.url),
            e,
        )
    }

    fn too_large(&self, key: &Key, what: &'static str, len: usize) -> Result<(), Error> {
        let max = self.max_value_bytes();
        if len > max {
            return Err(Error::Codec {
                key: key.clone(),
                what,
                message: format!(
                    "it is {len} bytes, more than the {max} bytes one Redis value may hold (proto-max-bulk-len); nothing was written; make it smaller, or raise the server's limit",
                ),
            });
        }
        Ok(())
    }

    // ---- the operations, shared by both halves -------------------------------------------

    /// The record key of a claim, refused before anything is sent when it is too large.
    fn claim_key(&self, req: &ClaimRequest<'_>) -> Result<String, Error> {
        let record = self.record_key(req.key);
        self.too_large(req.key, "the key", record.len())?;
        Ok(record)
    }

    fn fenced_answer(&self, claim: &Claim, reply: Value) -> Result<(), Error> {
        match parse_fenced(&claim.key, &reply)? {
            Fenced::Ok => Ok(()),
            Fenced::Lost => Err(Error::LeaseLost {
                key: claim.key.clone(),
            }),
            Fenced::Version(found) => Err(newer(&claim.key, found)),
        }
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.inner.url)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

/// One argument of a script: bytes as they are, or a number in decimal (as the scripts
/// compare fences: `tostring` of what they stored).
#[derive(Clone, Copy)]
enum Arg<'a> {
    Bytes(&'a [u8]),
    Num(u64),
}

impl redis::ToRedisArgs for Arg<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        match self {
            Arg::Bytes(b) => b.write_redis_args(out),
            Arg::Num(n) => n.write_redis_args(out),
        }
    }
}

/// The arguments of `claim.lua`.
fn claim_args<'a>(req: &'a ClaimRequest<'_>, holder: &'a str) -> [Arg<'a>; 5] {
    [
        Arg::Bytes(&req.fingerprint.0),
        Arg::Bytes(holder.as_bytes()),
        Arg::Num(span_us(req.lease)),
        Arg::Bytes(if req.once { b"1" } else { b"0" }),
        match req.steal {
            Some(fence) => Arg::Num(fence),
            None => Arg::Bytes(b""),
        },
    ]
}

/// Whether a driver error leaves the connection unusable (closed, reset, timed out mid-reply).
fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_unrecoverable_error()
}

/// A lease or ttl in whole microseconds, capped (see [`MAX_SPAN_US`]).
fn span_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_SPAN_US)
}

fn newer(key: &Key, found: u32) -> Error {
    Error::corrupt(
        key,
        CorruptKind::UnknownVersion {
            found,
            supported: SCHEMA_VERSION,
        },
    )
}

/// Takes a `prefix=` query parameter out of the URL (the driver does not know it).
fn split_prefix(url: &str) -> Result<(String, Option<String>), Error> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut prefix = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("prefix", value)) => prefix = Some(percent_decode(value)?),
            _ => rest.push(pair),
        }
    }
    let driver_url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((driver_url, prefix))
}

fn percent_decode(s: &str) -> Result<String, Error> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    Error::config(format!("{s:?} is not a valid percent-encoded prefix"))
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::config(format!("the prefix {s:?} is not UTF-8")))
}

// ---- key names --------------------------------------------------------------------------

fn escape_into(out: &mut String, part: &str, colon: bool) {
    let special = |c: char| matches!(c, '%' | '{' | '}') || (colon && c == ':');
    if !part.contains(special) {
        out.push_str(part);
        return;
    }
    for c in part.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            ':' if colon => out.push_str("%3A"),
            c => out.push(c),
        }
    }
}

fn unescape(part: &str) -> Option<String> {
    let mut out = String::with_capacity(part.len());
    let mut rest = part;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let c = match rest.get(i + 1..i + 3)? {
            "25" => '%',
            "7B" => '{',
            "7D" => '}',
            "3A" => ':',
            _ => return None,
        };
        out.push(c);
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

fn record_key(prefix: &str, key: &Key) -> String {
    let mut out = String::with_capacity(prefix.len() + key.scope().len() + key.id().len() + 3);
    out.push_str(prefix);
    out.push('{');
    escape_into(&mut out, key.scope(), true);
    out.push(':');
    escape_into(&mut out, key.id(), false);
    out.push('}');
    out
}

fn parse_record_key(prefix: &str, name: &str) -> Option<Key> {
    let tag = name
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    let (scope, id) = tag.split_once(':')?;
    Some(Key::from_parts(unescape(scope)?, unescape(id)?))
}

/// `SCAN MATCH` pattern of every record under `prefix`.
fn scan_pattern(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 4);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push_str("{*}");
    out
}

// ---- replies ----------------------------------------------------------------------------

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

fn text(v: &Value) -> Option<&str> {
    bytes(v).and_then(|b| std::str::from_utf8(b).ok())
}

fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        _ => text(v)?.parse().ok(),
    }
}

fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) | Value::Set(items) => items,
        _ => &[],
    }
}

fn unexpected(key: &Key, what: &str, reply: &Value) -> Error {
    Error::store_msg(
        Some(key),
        format!("{what}: Redis answered {reply:?}, which is not a reply of rerun's script"),
    )
}

fn parse_version(key: &Key, found: Option<&str>) -> Error {
    let found = found
        .and_then(|f| f.parse::<u64>().ok())
        .map(|f| u32::try_from(f).unwrap_or(u32::MAX))
        .unwrap_or(u32::MAX);
    newer(key, found)
}

fn parse_claim(req: &ClaimRequest<'_>, reply: &Value) -> Result<ClaimResponse, Error> {
    let key = req.key;
    let parts = items(reply);
    let bad = || unexpected(key, "claiming", reply);
    let tag = parts.first().and_then(text).ok_or_else(bad)?;
    let fence = || parts.get(1).and_then(number).ok_or_else(bad);
    match tag {
        "claimed" => {
            let abandoned = match parts.get(2) {
                None => None,
                Some(v) => Some(Abandoned {
                    fence: number(v).ok_or_else(bad)?,
                    holder: parts.get(3).and_then(text).and_then(Holder::decode),
                    outcome_unknown: parts.get(4).and_then(text) == Some("1"),
                }),
            };
            Ok(ClaimResponse::Claimed(Claim {
                key: key.clone(),
                fence: fence()?,
                holder: req.holder.clone(),
                once: req.once,
                abandoned,
            }))
        }
        "replay" => Ok(ClaimResponse::Replay(Replay {
            fence: fence()?,
            result: parts.get(2).and_then(bytes).ok_or_else(bad)?.to_vec(),
        })),
        "mismatch" => Ok(ClaimResponse::Mismatch),
        "busy" => {
            let holder = parts.get(2).and_then(text).unwrap_or("");
            let holder = Holder::decode(holder).ok_or_else(|| {
                Error::corrupt(
                    key,
                    CorruptKind::Record(format!("malformed holder {holder:?}")),
                )
            })?;
            Ok(ClaimResponse::Busy(Busy {
                fence: fence()?,
                holder,
                lease_remaining: Duration::from_micros(
                    parts.get(3).and_then(number).ok_or_else(bad)?,
                ),
            }))
        }
        "version" => Err(parse_version(key, parts.get(1).and_then(text))),
        "corrupt" => Err(Error::corrupt(
            key,
            CorruptKind::Record(parts.get(1).and_then(text).unwrap_or("").to_owned()),
        )),
        _ => Err(bad()),
    }
}

fn parse_fenced(key: &Key, reply: &Value) -> Result<Fenced, Error> {
    match text(reply) {
        Some("ok") => Ok(Fenced::Ok),
        Some("lost") => Ok(Fenced::Lost),
        Some(v) if v.starts_with("version:") => {
            match parse_version(key, v.strip_prefix("version:")) {
                Error::Corrupt {
                    kind: CorruptKind::UnknownVersion { found, .. },
                    ..
                } => Ok(Fenced::Version(found)),
                other => Err(other),
            }
        }
        _ => Err(unexpected(key, "updating the record", reply)),
    }
}

/// Builds a view from `inspect.lua`'s reply; `None` for no record (or a tombstone).
fn parse_view(key: &Key, record: &str, reply: &Value) -> Result<Option<RecordView>, Error> {
    let parts = items(reply);
    let bad = || unexpected(key, "reading the record", reply);
    let now = parts.first().and_then(number).ok_or_else(bad)?;
    match parts.get(1).and_then(text) {
        Some("none") => return Ok(None),
        Some("hash") => {}
        Some(other) => {
            return Err(Error::corrupt(
                key,
                CorruptKind::Record(format!(
                    "the Redis key {record} holds a {other}, not rerun's hash"
                )),
            ))
        }
        None => return Err(bad()),
    }
    // A missing field is nil to a RESP2 client and `false` to a RESP3 one.
    let field = |i: usize| {
        parts
            .get(i + 2)
            .filter(|v| !matches!(v, Value::Nil | Value::Boolean(false)))
    };
    let corrupt = |msg: &str| Error::corrupt(key, CorruptKind::Record(msg.to_owned()));
    let status = match field(1).and_then(text) {
        None | Some("forgotten") => return Ok(None),
        Some(s) => s,
    };
    let version = field(0)
        .and_then(number)
        .ok_or_else(|| corrupt("the record has no schema version"))?;
    if version > u64::from(SCHEMA_VERSION) {
        return Err(newer(key, u32::try_from(version).unwrap_or(u32::MAX)));
    }
    let status =
        Status::parse(status).ok_or_else(|| corrupt(&format!("unknown status {status:?}")))?;
    let fence: Fence = field(2)
        .and_then(number)
        .ok_or_else(|| corrupt("the record has no fence"))?;
    let fingerprint = field(3)
        .and_then(bytes)
        .and_then(Fingerprint::from_slice)
        .ok_or_else(|| corrupt("the fingerprint is not 32 bytes"))?;
    let holder = match field(4) {
        None => None,
        Some(v) => {
            let s = text(v).unwrap_or("");
            Some(Holder::decode(s).ok_or_else(|| corrupt(&format!("malformed holder {s:?}")))?)
        }
    };
    let left = |i: usize| {
        field(i)
            .and_then(number)
            .filter(|until| *until > now)
            .map(|until| Duration::from_micros(until - now))
    };
    let result = field(8).and_then(bytes).map(<[u8]>::to_vec);
    if status == Status::Completed && result.is_none() {
        return Err(corrupt("a completed record has no result"));
    }
    Ok(Some(RecordView {
        key: key.clone(),
        status,
        fence,
        fingerprint,
        holder,
        once: field(5).and_then(text) == Some("1"),
        lease_remaining: (status == Status::InProgress).then(|| left(6)).flatten(),
        expires_in: (status == Status::Completed).then(|| left(7)).flatten(),
        result: (status == Status::Completed).then_some(result).flatten(),
    }))
}

// ---- the traits ---------------------------------------------------------------------------

impl Store for RedisStore {
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        let record = self.claim_key(req)?;
        let holder = req.holder.encode();
        let args = claim_args(req, &holder);
        let reply = self.sync_script(
            req.key,
            "claiming",
            &self.inner.scripts.claim,
            &record,
            &args,
        )?;
        parse_claim(req, &reply)
    }

    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        self.too_large(&claim.key, "the result", result.len())?;
        let record = self.record_key(&claim.key);
        let (fence, ttl) = (Arg::Num(claim.fence), Arg::Num(span_us(ttl)));
        let reply = self.sync_script(
            &claim.key,
            "recording the result",
            &self.inner.scripts.complete,
            &record,
            &[fence, Arg::Bytes(result), ttl],
        )?;
        self.fenced_answer(claim, reply)
    }

    fn release(&self, claim: &Claim) -> Result<(), Error> {
        let record = self.record_key(&claim.key);
        let (fence, keep) = (Arg::Num(claim.fence), Arg::Num(FENCE_KEEP_MS));
        let reply = self.sync_script(
            &claim.key,
            "releasing the claim",
            &self.inner.scripts.release,
            &record,
            &[fence, keep],
        )?;
        self.fenced_answer(claim, reply)
    }

    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        let record = self.record_key(&claim.key);
        let (fence, lease) = (Arg::Num(claim.fence), Arg::Num(span_us(lease)));
        let reply = self.sync_script(
            &claim.key,
            "renewing the lease",
            &self.inner.scripts.renew,
            &record,
            &[fence, lease],
        )?;
        self.fenced_answer(claim, reply)
    }

    fn mark_unknown(&self, claim: &Claim) -> Result<(), Error> {
        let record = self.record_key(&claim.key);
        let fence = Arg::Num(claim.fence);
        let reply = self.sync_script(
            &claim.key,
            "marking the outcome unknown",
            &self.inner.scripts.mark_unknown,
            &record,
            &[fence],
        )?;
        self.fenced_answer(claim, reply)
    }

    fn forget(&self, key: &Key) -> Result<bool, Error> {
        let record = self.record_key(key);
        let reply = self.sync_script(
            key,
            "forgetting the key",
            &self.inner.scripts.forget,
            &record,
            &[Arg::Num(FENCE_KEEP_MS)],
        )?;
        match reply {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected(key, "forgetting the key", &other)),
        }
    }

    fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> {
        let record = self.record_key(key);
        let reply = self.sync_script(
            key,
            "reading the record",
            &self.inner.scripts.inspect,
            &record,
            &[],
        )?;
        parse_view(key, &record, &reply)
    }

    fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> {
        let limit = limit.max(1);
        let mut cursor: u64 = match cursor {
            None => 0,
            Some(c) => c.parse().map_err(|_| {
                Error::config(format!("{c:?} is not a scan cursor of this Redis store"))
            })?,
        };
        let pattern = scan_pattern(&self.inner.prefix);
        let mut names: Vec<String> = Vec::new();
        // SCAN may answer a page without matches; go on until there is something to return
        // or the iteration is over.
        loop {
            let (next, found): (u64, Vec<String>) =
                self.sync_call(None, "scanning records", |conn| {
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(limit.max(10))
                        .query(conn)
                })?;
            names.extend(found);
            cursor = next;
            if cursor == 0 || names.len() >= limit {
                break;
            }
        }
        let keys: Vec<(Key, String)> = names
            .into_iter()
            .filter_map(|name| parse_record_key(&self.inner.prefix, &name).map(|k| (k, name)))
            .collect();
        // All records of the page in one round trip.
        let replies: Vec<Value> = if keys.is_empty() {
            Vec::new()
        } else {
            self.sync_call(None, "scanning records", |conn| {
                let mut pipe = redis::pipe();
                for (_, name) in &keys {
                    pipe.cmd("EVALSHA")
                        .arg(self.inner.scripts.inspect.get_hash())
                        .arg(1)
                        .arg(name);
                }
                match pipe.query::<Vec<Value>>(conn) {
                    Err(e)
                        if e.kind()
                            == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                    {
                        self.inner.scripts.inspect.prepare_invoke().load(conn)?;
                        pipe.query(conn)
                    }
                    other => other,
                }
            })?
        };
        let mut records = Vec::with_capacity(keys.len());
        for ((key, name), reply) in keys.iter().zip(&replies) {
            if let Some(view) = parse_view(key, name, reply)? {
                records.push(view);
            }
        }
        Ok(ScanPage {
            records,
            next: (cursor != 0).then(|| cursor.to_string()),
        })
    }

    fn purge_expired(&self, _limit: usize) -> Result<u64, Error> {
        // Completed records carry a PEXPIREAT: Redis removes them at their expiry by itself.
        Ok(0)
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    fn describe(&self) -> String {
        format!("{} (prefix {:?})", self.inner.url, self.inner.prefix)
    }
}

impl AsyncStore for RedisStore {
    fn claim_async<'a>(&'a self, req: &'a ClaimRequest<'a>) -> StoreFuture<'a, ClaimResponse> {
        Box::pin(async move {
            let record = self.claim_key(req)?;
            let holder = req.holder.encode();
            let args = claim_args(req, &holder);
            let reply = self
                .async_script(
                    req.key,
                    "claiming",
                    &self.inner.scripts.claim,
                    &record,
                    &args,
                )
                .await?;
            parse_claim(req, &reply)
        })
    }

    fn complete_async<'a>(
        &'a self,
        claim: &'a Claim,
        result: &'a [u8],
        ttl: Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.too_large(&claim.key, "the result", result.len())?;
            let record = self.record_key(&claim.key);
            let (fence, ttl) = (Arg::Num(claim.fence), Arg::Num(span_us(ttl)));
            let reply = self
                .async_script(
                    &claim.key,
                    "recording the result",
                    &self.inner.scripts.complete,
                    &record,
                    &[fence, Arg::Bytes(result), ttl],
                )
                .await?;
            self.fenced_answer(claim, reply)
        })
    }

    fn release_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let record = self.record_key(&claim.key);
            let (fence, keep) = (Arg::Num(claim.fence), Arg::Num(FENCE_KEEP_MS));
            let reply = self
                .async_script(
                    &claim.key,
                    "releasing the claim",
                    &self.inner.scripts.release,
                    &record,
                    &[fence, keep],
                )
                .await?;
            self.fenced_answer(claim, reply)
        })
    }

    fn mark_unknown_async<'a>(&'a self, claim: &'a Claim) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let record = self.record_key(&claim.key);
            let fence = Arg::Num(claim.fence);
            let reply = self
                .async_script(
                    &claim.key,
                    "marking the outcome unknown",
                    &self.inner.scripts.mark_unknown,
                    &record,
                    &[fence],
                )
                .await?;
            self.fenced_answer(claim, reply)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_keys_are_injective_and_parse_back() {
        let keys = [
            Key::from_parts("billing.charge", "ord_1"),
            Key::from_parts("a:b", "c"),
            Key::from_parts("a", "b:c"),
            Key::from_parts("s{x}", "}{%3A%"),
            Key::from_parts("", ""),
        ];
        let names: Vec<String> = keys.iter().map(|k| record_key("p:", k)).collect();
        assert_eq!(names[0], "p:{billing.charge:ord_1}");
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
            // The hash tag is the whole braced part: one record, one slot.
            let open = a.find('{').unwrap();
            assert_eq!(a[open + 1..].find('}').unwrap() + open + 1, a.len() - 1);
        }
        for (k, n) in keys.iter().zip(&names) {
            assert_eq!(parse_record_key("p:", n).as_ref(), Some(k));
        }
        assert_eq!(parse_record_key("p:", "q:{a:b}"), None);
    }

    #[test]
    fn prefix_comes_out_of_the_url() {
        let (url, prefix) = split_prefix("redis://h:6379/0?prefix=app%3A&protocol=resp3").unwrap();
        assert_eq!(url, "redis://h:6379/0?protocol=resp3");
        assert_eq!(prefix.as_deref(), Some("app:"));
        assert_eq!(
            split_prefix("redis://h").unwrap(),
            ("redis://h".to_owned(), None)
        );
        assert!(split_prefix("redis://h?prefix=%zz").is_err());
    }

    #[test]
    fn scan_pattern_escapes_globs() {
        assert_eq!(scan_pattern("a*b?:"), "a\\*b\\?:{*}");
    }

    #[test]
    fn scripts_carry_the_schema_version() {
        let scripts = Scripts::new();
        assert_eq!(scripts.sources.len(), 7);
        for source in &scripts.sources {
            assert!(!source.contains("@SCHEMA@"));
        }
        assert!(scripts.sources[0].contains(&format!("local SCHEMA = {SCHEMA_VERSION}\n")));
    }

    #[test]
    fn spans_are_capped() {
        assert_eq!(span_us(Duration::from_millis(3)), 3000);
        assert_eq!(span_us(Duration::MAX), MAX_SPAN_US);
    }
}
