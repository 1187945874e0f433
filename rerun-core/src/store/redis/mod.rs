//! `RedisStore`: records in Redis, shared by a fleet (feature `redis`).
//!
//! Shape of the costs: a repeated call is one round trip (the claim script returns the recorded
//! result: claim-or-fetch in one step); a fresh call is two (claim, then complete). Every
//! transition is one Lua script. On Redis 7 and later the store loads them at connect as one
//! library of functions, whose shared code is built once per load instead of once per call, and
//! calls them with `FCALL` (loading the library again if it vanished: see `functions`); where
//! the server has no functions or the user may not use them, each is loaded as a script and
//! called by its SHA (`EVALSHA`, with a `SCRIPT LOAD` fallback after a server restart flushed the
//! script cache). The choice is made once, at connect:
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
//! One string per record (its fields at fixed offsets: see `layout` and `prelude.lua`; rerun 0.1
//! kept a hash, upgraded in place), at `PREFIX{SCOPE:ID}` (`rerun:{billing.charge:ord_1}` by
//! default). The braces are a Redis Cluster hash tag: everything rerun keeps for one record
//! lands on one slot. `{`, `}`, `%` (and `:` in the scope) are percent-escaped, so two keys
//! never share a name. The one other key under the prefix, `PREFIX` `rerun-layout`, says the
//! upgrade sweep has been through it (see [`RedisOptions::upgrade_sweep`]).
//!
//! # Clock, fences and expiry
//!
//! Leases and expiry are decided on Redis' clock, never the caller's: a claim reads `TIME`
//! inside its script, and a completion sets its record's expiry with `PX`, which Redis counts
//! on its own clock, so it reads none (the record keeps its ttl, rounded down to a whole
//! millisecond, and an inspection reads when it expires and when it completed from the key's
//! `PTTL`). Redis removes a completed record at the end of its ttl by itself
//! ([`Store::purge_expired`] has nothing to do and returns 0); a released record expires after
//! a day. An in-progress or unknown record never expires by itself: a dead
//! at-most-once attempt must not be forgotten silently.
//!
//! A claim's fence is `max(last fence of the key + 1, Redis' clock in microseconds)`: the last
//! fence survives release (the released record keeps it) and `forget` (a tombstone keeps it for a
//! day), and once a record expired with its fence, the clock is past it: on a server whose clock
//! does not step back. A clock set back, or a failover to a replica whose clock is behind, can
//! hand out a fence below one handed out before the record expired; rerun's own checks compare a
//! claim's fence for equality and are not affected, but a sink that keeps the highest fence it
//! saw should allow for it (or keep records longer than such a step).
//!
//! # Sync and async
//!
//! The sync half ([`Store`]) uses a pool of blocking connections and needs no runtime (rerun's
//! lease keeper calls it from a plain thread). The async half ([`AsyncStore`]) uses one
//! multiplexed connection, opened on first use in the caller's tokio runtime and reopened when
//! that runtime is gone; outside a tokio runtime it falls back to the sync half.
//!
//! # Deadlines
//!
//! Every call has a time limit: the store's operation timeout (default 5 s), and for a call made
//! for a claim at most a third of its lease ([`crate::store::call_deadline`]). A call that runs
//! out of time fails with a retryable [`Error::Store`] and its connection is closed.
//!
//! # Durability
//!
//! A claim is as durable as the server's persistence: see [`Persistence`] (read at connect, and
//! logged as a `warn` event the first time a `once` function uses a server that keeps nothing on
//! disk), and [`RedisOptions::wait_replicas`] / [`RedisOptions::wait_aof`] for `once` claims.
//!
//! | server setting | what a crash or restart can lose |
//! |---|---|
//! | `appendonly yes`, `appendfsync always` | nothing: the claim is on disk before Redis answers |
//! | `appendonly yes`, `appendfsync everysec` | about the last second of claims |
//! | `appendonly yes`, `appendfsync no` | what the OS had not flushed (typically up to 30 s) |
//! | RDB snapshots only (`save "3600 1 …"`) | every claim since the last snapshot |
//! | nothing (`appendonly no`, `save ""`) | every record, at the next restart |
//!
//! # Errors
//!
//! Every driver failure is an [`Error::Store`] naming the key, retryable unless the server
//! refuses the credentials or permissions; the connection it happened on is dropped (with every
//! idle connection opened before it, which a server restart or a `CLIENT KILL` killed too), so
//! the retry runs on a fresh one. A record written by a newer rerun is [`Error::Corrupt`] naming
//! both versions; a key or result larger than the server accepts is [`Error::Codec`] before
//! anything is written.
//!
//! The code is laid out by concern: `conn` (connections, deadlines, fork), `scripts` (the Lua
//! scripts and their arguments), `functions` (the same Lua as a library of functions), `reply`
//! (reading their answers), `names` (key names), `durability` (persistence and `WAIT`).

mod conn;
mod durability;
mod functions;
mod layout;
mod names;
mod reply;
mod scripts;
mod upgrade;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{Client, Connection, Value};

use crate::error::Error;
use crate::global::redact;
use crate::key::Key;
use crate::record::{Claim, ClaimRequest, ClaimResponse, RecordView};
use crate::store::{call_deadline, AsyncStore, ScanFilter, ScanPage, Store, StoreFuture};

use conn::{AsyncConn, Pool};
use durability::OnceDurability;
pub use durability::Persistence;
use functions::Library;
use names::{parse_record_key, record_key, scan_pattern_within, split_prefix, unreadable_name};
use reply::{newer, parse_claim, parse_fenced, parse_view, unexpected, Fenced};
use scripts::{claim_args, complete_args, span_us, Arg, Scripts, Transition, FENCE_KEEP_MS};

/// The record layout this build writes; a record with a newer one is refused as
/// [`Error::Corrupt`], never overwritten, and one of rerun 0.1 (a hash, layout 1) is upgraded
/// in place when a script first meets it (and by a sweep after connect).
///
/// 1. rerun 0.1: a hash per record.
/// 2. One string per record (see `prelude.lua`): every transition is one GET and one SET, and
///    a replay reads no clock.
pub const SCHEMA_VERSION: u32 = 2;

/// The largest key or result Redis accepts by default (`proto-max-bulk-len`, 512 MiB).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 512 * 1024 * 1024;

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
    once_durability: OnceDurability,
    upgrade_sweep: bool,
    scripts_only: bool,
    library_variant: String,
}

impl RedisOptions {
    /// Defaults: prefix `rerun:`, client name `rerun`, 5 s to connect, 5 s for a call, and
    /// values up to the server's `proto-max-bulk-len` (512 MiB unless the server says less).
    pub fn new() -> RedisOptions {
        RedisOptions {
            prefix: "rerun:".to_owned(),
            client_name: "rerun".to_owned(),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            once_durability: OnceDurability::default(),
            upgrade_sweep: true,
            scripts_only: false,
            library_variant: String::new(),
        }
    }
    /// Calls the scripts (`EVALSHA`) even where the server has functions, as the store does on
    /// Redis 6: for tests of that path.
    #[doc(hidden)]
    pub fn scripts_only(mut self, on: bool) -> Self {
        self.scripts_only = on;
        self
    }
    /// Adds `variant` to the code of the functions' library as a comment, which gives the
    /// library and its functions other names: for tests of two libraries on one server.
    #[doc(hidden)]
    pub fn library_variant(mut self, variant: impl Into<String>) -> Self {
        self.library_variant = variant.into();
        self
    }
    /// Whether a new store sweeps its prefix once, in the background, for records written by
    /// rerun 0.1 and upgrades them (default `true`). The sweep is a `SCAN` of the database on a
    /// connection of its own, made once per prefix: one that ends its pass writes the key
    /// `PREFIX` `rerun-layout`, and a store that finds it there reads that one key instead.
    /// Turn it off when many processes start at once against a large database that was never
    /// swept, or when the store's user may write only record keys: records of 0.1 are still
    /// upgraded by the first call (or scan) that meets them, so correctness never depends on the
    /// sweep.
    pub fn upgrade_sweep(mut self, on: bool) -> Self {
        self.upgrade_sweep = on;
        self
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
    /// How long opening a connection may take (default 5 s; at least 10 ms: a zero timeout
    /// would fail every connection before it began).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(10));
        self
    }
    /// How long a call may take, from taking a connection to the reply (default 5 s), before
    /// it fails with a retryable [`Error::Store`] and its connection is closed. A call made for
    /// a claim takes at most a third of its lease, if that is shorter.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout.max(Duration::from_millis(10));
        self
    }
    /// Make every `once` claim wait until `replicas` replicas acknowledged it (`WAIT`), at most
    /// `timeout`, before its body starts; a claim that does not get there is given back and the
    /// call fails with a retryable [`Error::Store`]. Keeps a failover from forgetting a claim
    /// whose body ran. One more round trip per `once` claim.
    ///
    /// The wait is part of the claim's call, so [`RedisOptions::response_timeout`] bounds it
    /// too: it ends by four fifths of that at the latest, so that a claim whose wait ran out is
    /// still given back within the call; `Duration::MAX` waits as long as that allows.
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.once_durability.replicas = Some((replicas, timeout));
        self
    }
    /// Make every `once` claim wait until it is in the append-only file of this server (when
    /// `local`) and of `replicas` replicas (`WAITAOF`, Redis 7.2 and later; connecting to an
    /// older server with this set is [`Error::Config`]), at most `timeout`. As
    /// [`RedisOptions::wait_replicas`], a claim that does not get there is given back.
    pub fn wait_aof(mut self, local: bool, replicas: u32, timeout: Duration) -> Self {
        self.once_durability.aof = Some((local, replicas, timeout));
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
    /// The operation timeout of one call.
    response_timeout: Duration,
    max_value_bytes: AtomicUsize,
    scripts: Scripts,
    /// The functions' library, when the server has functions and this user may load and call
    /// them (decided at connect); else every transition runs as its script.
    library: Option<Library>,
    pool: Mutex<Pool>,
    aio: Mutex<Option<AsyncConn>>,
    /// The connection of durable `once` claims made by async calls (see `conn::durable_claim`).
    durable: tokio::sync::Mutex<Option<(u64, redis::aio::MultiplexedConnection)>>,
    /// Ids of async connections, so that a failure on an old one never drops a newer one.
    next_conn_id: AtomicU64,
    persistence: Persistence,
    /// The server's `maxmemory-policy`, when it can evict keys (see `durability::eviction`).
    eviction: Option<String>,
    once_durability: OnceDurability,
    /// Whether the warning about a `once` claim on a server without persistence was logged.
    warned_volatile: AtomicBool,
}

impl RedisStore {
    /// Connects to the Redis at `url` (`redis://[:password@]host[:port][/db][?prefix=P]`, or
    /// `rediss://` for TLS where the `redis` crate was built with it) with default options.
    ///
    /// Works with or without an async runtime. A server that cannot be reached is a
    /// retryable [`Error::Store`] naming the URL (its password elided) and the cause; a
    /// malformed URL is [`Error::Config`]; refused credentials are a non-retryable
    /// [`Error::Store`].
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
        let options_upgrade_sweep = options.upgrade_sweep;
        if prefix.contains(['{', '}']) {
            return Err(Error::config(format!(
                "the Redis key prefix {prefix:?} contains a brace, which would break the hash tag that keeps a record on one Cluster slot; choose a prefix without `{{` or `}}`"
            )));
        }
        // What `CLIENT SETNAME` takes: printable ASCII without spaces.
        if options.client_name.is_empty()
            || !options.client_name.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(Error::config(format!(
                "the Redis client name {:?} must be a non-empty word of printable ASCII without spaces",
                options.client_name
            )));
        }
        let not_a_url = |e: redis::RedisError| {
            Error::config(format!(
                "{redacted} is not a Redis URL ({e}); expected redis://[:password@]host[:port][/db]"
            ))
        };
        let info = Client::open(driver_url.as_str())
            .map_err(not_a_url)?
            .get_connection_info()
            .clone();
        // The driver's handshake would pipeline `CLIENT SETINFO`, whose replies are read one
        // timeout each: skipped, so that opening a connection stays inside a call's deadline
        // (rerun names its connections itself).
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let client = Client::open(info.set_redis_settings(settings)).map_err(not_a_url)?;
        let mut store = RedisStore {
            inner: Arc::new(Inner {
                client,
                url: redacted,
                prefix,
                client_name: options.client_name,
                connect_timeout: options.connect_timeout,
                response_timeout: options.response_timeout,
                max_value_bytes: AtomicUsize::new(options.max_value_bytes),
                scripts: Scripts::new(),
                library: None,
                pool: Mutex::new(Pool::default()),
                aio: Mutex::new(None),
                durable: tokio::sync::Mutex::new(None),
                next_conn_id: AtomicU64::new(1),
                persistence: Persistence::Unknown,
                eviction: None,
                once_durability: options.once_durability,
                warned_volatile: AtomicBool::new(false),
            }),
        };
        let limit = options.connect_timeout.max(options.response_timeout);
        let mut pooled = store.open_sync(None, limit)?;
        let conn: &mut Connection = pooled.connection();
        if durability::cluster_enabled(conn) {
            return Err(Error::config(format!(
                "Redis at {} runs in cluster mode, which rerun's Redis store does not speak: a record and the functions that change it live on one server, and a cluster answers most keys from another node; give rerun a Redis without cluster mode (a primary, with replicas or Sentinel for failover)",
                store.inner.url
            )));
        }
        // Load the functions' library and every script now, in one round trip, so the first
        // calls need no detour: the scripts are the fallback of a function refused before it
        // ran (see `functions`), and the only form where functions are not to be had.
        let library = (!options.scripts_only).then(|| Library::new(&options.library_variant));
        let mut load = redis::pipe();
        load.ignore_errors();
        if let Some(library) = &library {
            load.add_command(library.load_cmd())
                .add_command(library.probe_cmd());
        }
        for source in &store.inner.scripts.sources {
            load.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        let replies: Vec<Value> = load
            .query(conn)
            .map_err(|e| store.connect_err(None, "loading rerun's scripts", e))?;
        let scripts_from = if library.is_some() { 2 } else { 0 };
        if let Some(Value::ServerError(e)) = replies
            .iter()
            .skip(scripts_from)
            .find(|r| matches!(r, Value::ServerError(_)))
        {
            return Err(store.connect_err(None, "loading rerun's scripts", e.clone().into()));
        }
        let library = library.and_then(|library| library.usable(&store, &replies));
        if options.scripts_only {
            tracing::debug!(store = %store.describe(), "rerun: calling rerun's scripts (EVALSHA), as the options ask");
        }
        // The server's own limit on one value, where it lets us read it (managed services may
        // not): keys and results above it are refused before anything is sent.
        let max: Option<(String, u64)> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("proto-max-bulk-len")
            .query(conn)
            .ok();
        if let Some((_, server_max)) = max {
            let server_max = usize::try_from(server_max).unwrap_or(usize::MAX);
            store
                .inner
                .max_value_bytes
                .fetch_min(server_max, Ordering::Relaxed);
        }
        let persistence = Persistence::read(conn);
        let eviction = durability::eviction(conn);
        if let Some(policy) = &eviction {
            tracing::warn!(
                store = %store.inner.url,
                policy = %policy,
                "rerun: this Redis evicts keys when it is full (maxmemory-policy {policy}): an evicted claim or result is forgotten, and its body can run again; set maxmemory-policy noeviction, or give rerun a Redis of its own"
            );
        }
        if options.once_durability.aof.is_some()
            && durability::server_version(conn).is_some_and(|v| v < (7, 2))
        {
            return Err(Error::config(format!(
                "RedisOptions::wait_aof needs WAITAOF, which Redis at {} does not have (it came with Redis 7.2); use wait_replicas, or upgrade the server",
                store.inner.url
            )));
        }
        if let Some((local, _, _)) = options.once_durability.aof {
            if let Some(why) = durability::aof_refused(local, &persistence) {
                return Err(Error::config(format!("{}: {why}", store.inner.url)));
            }
        }
        match Arc::get_mut(&mut store.inner) {
            Some(inner) => {
                inner.persistence = persistence;
                inner.eviction = eviction;
                inner.library = library;
            }
            None => {
                return Err(Error::config(
                    "the new Redis store was shared before it was ready",
                ))
            }
        }
        store.put_back(0, pooled);
        if options_upgrade_sweep {
            store.start_upgrade_sweep();
        }
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

    /// Deletes the key's record, only if its fence is `fence` when that is a number (`Arg::Bytes(b"")`:
    /// whatever its fence); whether a record was deleted.
    fn forget_where(&self, key: &Key, fence: Arg<'_>) -> Result<bool, Error> {
        let record = self.record_key(key);
        let reply = self.sync_script(
            key,
            "forgetting the key",
            self.inner.response_timeout,
            Transition::Forget,
            &record,
            &[Arg::Num(FENCE_KEEP_MS), fence],
        )?;
        match reply {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected(key, "forgetting the key", &other)),
        }
    }

    /// The Lua source of the claim-or-fetch (`"claim"`) and completion (`"complete"`) scripts
    /// as this store loads them (the shared layout code included), so that benchmarks can run
    /// the very same scripts on a raw client.
    #[doc(hidden)]
    pub fn script_source(&self, name: &str) -> Option<&str> {
        let index = Self::transition(name)? as usize;
        self.inner.scripts.sources.get(index).map(String::as_str)
    }

    /// The name of the function this store calls (`FCALL`) for the claim-or-fetch (`"claim"`)
    /// or the completion (`"complete"`), or `None` when it calls the scripts, so that benchmarks
    /// can call what the store calls on a raw client.
    #[doc(hidden)]
    pub fn function_name(&self, name: &str) -> Option<&str> {
        let t = Self::transition(name)?;
        Some(self.inner.library.as_ref()?.function(t))
    }

    /// The name of the functions' library this store loaded, or `None` when it calls the
    /// scripts (`FUNCTION LIST LIBRARYNAME` finds it).
    #[doc(hidden)]
    pub fn library_name(&self) -> Option<&str> {
        self.inner.library.as_ref().map(Library::name)
    }

    fn transition(name: &str) -> Option<Transition> {
        match name {
            "claim" => Some(Transition::Claim),
            "complete" => Some(Transition::Complete),
            _ => None,
        }
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

    /// What the server keeps on disk, as read at connect (see the module docs for what each
    /// setting can lose).
    ///
    /// ```no_run
    /// use rerun_core::store::redis::{Persistence, RedisStore};
    /// let store = RedisStore::connect("redis://127.0.0.1:6379")?;
    /// if store.persistence() == &Persistence::Nothing {
    ///     eprintln!("a restart of Redis loses {}", store.persistence().loses());
    /// }
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn persistence(&self) -> &Persistence {
        &self.inner.persistence
    }

    /// The server's `maxmemory-policy`, as read at connect, when the server can evict keys (it
    /// has a `maxmemory` and a policy other than `noeviction`); `None` when it cannot, or when
    /// its configuration cannot be read. An evicted record is forgotten: its body can run
    /// again (`allkeys-*` policies evict any record, `volatile-*` ones those with a time to
    /// live: completed, released and forgotten records, the last two keeping the key's fence).
    /// Connecting to such a server logs a warning.
    ///
    /// ```no_run
    /// use rerun_core::store::redis::RedisStore;
    /// let store = RedisStore::connect("redis://127.0.0.1:6379")?;
    /// if let Some(policy) = store.eviction_policy() {
    ///     eprintln!("records can be evicted ({policy}): set maxmemory-policy noeviction");
    /// }
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    pub fn eviction_policy(&self) -> Option<&str> {
        self.inner.eviction.as_deref()
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

    /// The record key of a claim, refused before anything is sent when it is too large.
    fn claim_key(&self, req: &ClaimRequest<'_>) -> Result<String, Error> {
        let record = self.record_key(req.key);
        self.too_large(req.key, "the key", record.len())?;
        if req.once {
            self.warn_if_volatile(req.key);
        }
        Ok(record)
    }

    /// Says once, when a `once` function first claims on a server that keeps nothing on disk,
    /// what a restart would lose.
    fn warn_if_volatile(&self, key: &Key) {
        if self.inner.persistence == Persistence::Nothing
            && !self.inner.warned_volatile.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                store = %self.describe(),
                %key,
                "rerun: a `once` function claims on a Redis server that keeps nothing on disk (appendonly no, save \"\"): a restart of the server forgets its claims, and a body whose claim is forgotten can run again; enable appendonly, or use wait_replicas/wait_aof with replicas"
            );
        }
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

    /// The time limit of a call made for a claim with `lease`.
    fn limit(&self, lease: Duration) -> Duration {
        call_deadline(self.inner.response_timeout, lease)
    }

    /// The error for a `once` claim that did not reach the durability asked for, and the claim
    /// to give back (its body has not started).
    fn not_durable(response: ClaimResponse, why: String) -> Durable {
        match response {
            ClaimResponse::Claimed(claim) => {
                let e = Error::store_msg(
                    Some(&claim.key),
                    format!("{why}; the claim was given back and the body did not start"),
                );
                Durable::GiveBack(Some(claim), e)
            }
            other => Durable::GiveBack(
                None,
                Error::store_msg(None, format!("{why} (the claim script answered {other:?})")),
            ),
        }
    }

    /// Reads what a durable claim waited for.
    fn durable_answer(
        response: ClaimResponse,
        waited: Option<redis::RedisResult<Result<(), String>>>,
    ) -> Durable {
        match waited {
            None | Some(Ok(Ok(()))) => Durable::Ready(response),
            Some(Ok(Err(why))) => RedisStore::not_durable(response, why),
            Some(Err(e)) => RedisStore::not_durable(
                response,
                format!("waiting for the claim to be durable failed: {e}"),
            ),
        }
    }
}

/// What a durable `once` claim came to.
enum Durable {
    /// The claim (or the script's other answer) stands.
    Ready(ClaimResponse),
    /// The claim did not reach the durability asked for: give it back, fail with the error.
    GiveBack(Option<Claim>, Error),
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.inner.url)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

/// The claim's holder as a record keeps it, refused before anything is sent when it is longer
/// than the record's 4-digit length field holds (`Holder::current()` is never near it; a holder
/// made by hand with a long host name can be).
fn holder_of(req: &ClaimRequest<'_>) -> Result<String, Error> {
    let holder = req.holder.encode();
    if holder.len() > layout::MAX_HOLDER {
        return Err(Error::Codec {
            key: req.key.clone(),
            what: "the holder",
            message: format!(
                "it is {} bytes encoded, more than the {} bytes a Redis record keeps of its holder; nothing was written; give the holder a shorter host name",
                holder.len(),
                layout::MAX_HOLDER
            ),
        });
    }
    Ok(holder)
}

/// The most keys one `SCAN` step reads (its `COUNT`): a step blocks every other client of the
/// server while it runs, about a microsecond a key, so a step of 1,024 keys stays under a
/// millisecond. A page of more records than that takes more steps.
const SCAN_COUNT_MAX: usize = 1024;

/// The `COUNT` of a page's first `SCAN` step: as many keys as the page wants records (at least
/// 10, at most [`SCAN_COUNT_MAX`]).
fn first_scan_count(limit: usize) -> usize {
    limit.clamp(10, SCAN_COUNT_MAX)
}

/// Whether `claim` took over an attempt whose outcome is unknown. A claim given back without
/// its body having run goes back to what it found: released when that was free (or a
/// replayable attempt), but unknown again when it was an unknown outcome, which a release would
/// erase (the next call would run the body beside an attempt that may have had its effect).
fn took_over_unknown(claim: &Claim) -> bool {
    claim.abandoned.as_ref().is_some_and(|a| a.outcome_unknown)
}

/// The `COUNT` of a page's next `SCAN` step after one that left the page short of its records:
/// twice the last, up to [`SCAN_COUNT_MAX`].
///
/// A step reads about `COUNT` keys of the whole database and returns the store's records among
/// them, so in a database shared with other keys (a cache, a queue) a page of 10 records at a
/// fixed `COUNT` of 10 took a round trip per 10 keys of the database. Growing the step only
/// while the page is short keeps a page near its size where most keys are the store's, and
/// makes a scan through a million other keys about a thousand round trips instead of a hundred
/// thousand (the server reads every key either way).
fn next_scan_count(count: usize) -> usize {
    count.saturating_mul(2).min(SCAN_COUNT_MAX)
}

// ---- the traits ---------------------------------------------------------------------------

impl Store for RedisStore {
    fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimResponse, Error> {
        let record = self.claim_key(req)?;
        let holder = holder_of(req)?;
        let packed = claim_args(req, &holder);
        let args = packed.list();
        let limit = self.inner.response_timeout;
        let durability = self.inner.once_durability;
        if !(req.once && durability.is_set()) {
            let reply = self.sync_script(
                req.key,
                "claiming",
                limit,
                Transition::Claim,
                &record,
                &args,
            )?;
            return parse_claim(req, &reply);
        }
        // The wait must run on the connection that wrote the claim: WAIT and WAITAOF wait for
        // this client's own writes.
        let until = durability::wait_until(limit);
        let (reply, waited) =
            self.sync_call(Some(req.key), "claiming", limit, |conn, budget| {
                let reply = self.run_sync(conn, budget, Transition::Claim, &record, &args)?;
                let claimed = reply::is_claimed(&reply);
                let waited = if claimed {
                    // A wait that cannot start in time is a wait that failed: the claim is given
                    // back below.
                    Some(durability.wait(conn, budget, until))
                } else {
                    None
                };
                Ok((reply, waited))
            })?;
        let response = parse_claim(req, &reply)?;
        match RedisStore::durable_answer(response, waited) {
            Durable::Ready(response) => Ok(response),
            Durable::GiveBack(claim, e) => {
                if let Some(claim) = claim {
                    let given = match took_over_unknown(&claim) {
                        true => self.mark_unknown(&claim),
                        false => self.release(&claim),
                    };
                    if let Err(e) = given {
                        tracing::warn!(key = %crate::runtime::telemetry::key_field(&claim.key), error = %crate::runtime::telemetry::error_field(&e), "rerun: could not give back a claim that did not reach its durability; its lease will end it");
                    }
                }
                Err(e)
            }
        }
    }

    fn complete(&self, claim: &Claim, result: &[u8], ttl: Duration) -> Result<(), Error> {
        self.too_large(&claim.key, "the result", result.len())?;
        let record = self.record_key(&claim.key);
        let reply = self.sync_script(
            &claim.key,
            "recording the result",
            self.limit(claim.lease),
            Transition::Complete,
            &record,
            &complete_args(claim.fence, result, ttl),
        )?;
        self.fenced_answer(claim, reply)
    }

    fn release(&self, claim: &Claim) -> Result<(), Error> {
        let record = self.record_key(&claim.key);
        let (fence, keep) = (Arg::Num(claim.fence), Arg::Num(FENCE_KEEP_MS));
        let reply = self.sync_script(
            &claim.key,
            "releasing the claim",
            self.limit(claim.lease),
            Transition::Release,
            &record,
            &[fence, keep],
        )?;
        self.fenced_answer(claim, reply)
    }

    fn renew(&self, claim: &Claim, lease: Duration) -> Result<(), Error> {
        let record = self.record_key(&claim.key);
        let limit = self.limit(lease);
        let (fence, lease) = (Arg::Num(claim.fence), Arg::Num(span_us(lease)));
        let reply = self.sync_script(
            &claim.key,
            "renewing the lease",
            limit,
            Transition::Renew,
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
            self.limit(claim.lease),
            Transition::MarkUnknown,
            &record,
            &[fence],
        )?;
        self.fenced_answer(claim, reply)
    }

    fn forget(&self, key: &Key) -> Result<bool, Error> {
        self.forget_where(key, Arg::Bytes(b""))
    }

    fn forget_if(&self, key: &Key, fence: crate::record::Fence) -> Result<bool, Error> {
        self.forget_where(key, Arg::Num(fence))
    }

    fn inspect(&self, key: &Key) -> Result<Option<RecordView>, Error> {
        let record = self.record_key(key);
        let reply = self.sync_script(
            key,
            "reading the record",
            self.inner.response_timeout,
            Transition::Inspect,
            &record,
            &[],
        )?;
        parse_view(key, &record, &reply)
    }

    fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, Error> {
        self.scan_filtered(&ScanFilter::new(), cursor, limit)
    }

    /// A scope prefix narrows the `SCAN MATCH` pattern on the server; states are selected from
    /// the records read (Redis keeps no index of them).
    fn scan_filtered(
        &self,
        filter: &ScanFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, Error> {
        let limit = limit.max(1);
        let mut cursor: u64 = match cursor {
            None => 0,
            Some(c) => c.parse().map_err(|_| {
                Error::config(format!("{c:?} is not a scan cursor of this Redis store"))
            })?,
        };
        let pattern = scan_pattern_within(&self.inner.prefix, filter.scope_prefix.as_deref());
        // As bytes: a name under the prefix that is not UTF-8 (written by something else than
        // rerun) is named as unreadable below, and must not fail the step that found it.
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut count = first_scan_count(limit);
        // SCAN may answer a step without matches; go on until there is something to return
        // or the iteration is over.
        loop {
            let (next, found): (u64, Vec<Vec<u8>>) = self.sync_call(
                None,
                "scanning records",
                self.inner.response_timeout,
                |conn, _| {
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(count)
                        .query(conn)
                },
            )?;
            names.extend(found);
            cursor = next;
            if cursor == 0 || names.len() >= limit {
                break;
            }
            count = next_scan_count(count);
        }
        // `SCAN` may return a key more than once, within a page's steps too (while Redis moves
        // its table of keys to another size): each record is read and returned once a page.
        names.sort_unstable();
        names.dedup();
        // A name rerun would not write for any key is named in the page, not read as a record.
        let (mut keys, mut foreign): (Vec<(Key, String)>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
        for name in names {
            match String::from_utf8(name) {
                Ok(name) => match parse_record_key(&self.inner.prefix, &name) {
                    Some(key) => keys.push((key, name)),
                    None => foreign.push(name.into_bytes()),
                },
                Err(e) => foreign.push(e.into_bytes()),
            }
        }
        // All records of the page in one round trip.
        let replies: Vec<Value> = if keys.is_empty() {
            Vec::new()
        } else {
            self.sync_call(
                None,
                "scanning records",
                self.inner.response_timeout,
                |conn, budget| {
                    let names: Vec<&str> = keys.iter().map(|(_, name)| name.as_str()).collect();
                    self.inspect_all(conn, budget, &names)
                },
            )?
        };
        let mut page = ScanPage {
            records: Vec::with_capacity(keys.len()),
            unreadable: foreign
                .iter()
                .map(|name| unreadable_name(&self.inner.prefix, name))
                .filter(|u| filter.holds_scope(u.key.scope()))
                .collect(),
            next: (cursor != 0).then(|| cursor.to_string()),
        };
        for ((key, name), reply) in keys.iter().zip(&replies) {
            // Read past a damaged record: one must not hide the others.
            let view = match parse_view(key, name, reply) {
                Ok(view) => view,
                Err(e) => {
                    let unreadable = crate::store::Unreadable::of(e)?;
                    if filter.holds_scope(unreadable.key.scope()) {
                        page.unreadable.push(unreadable);
                    }
                    continue;
                }
            };
            if let Some(mut view) = view {
                if filter.matches(&view) {
                    if filter.skip_results {
                        view.result = None;
                    }
                    page.records.push(view);
                }
            }
        }
        Ok(page)
    }

    fn purge_expired(&self, _limit: usize) -> Result<u64, Error> {
        // Completed records carry a PEXPIREAT: Redis removes them at their expiry by itself.
        Ok(0)
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn describe(&self) -> String {
        format!("{} (prefix {:?})", self.inner.url, self.inner.prefix)
    }
}

impl AsyncStore for RedisStore {
    fn claim_async<'a>(&'a self, req: &'a ClaimRequest<'a>) -> StoreFuture<'a, ClaimResponse> {
        Box::pin(async move {
            let record = self.claim_key(req)?;
            let holder = holder_of(req)?;
            let packed = claim_args(req, &holder);
            let args = packed.list();
            let limit = self.inner.response_timeout;
            let durability = self.inner.once_durability;
            if !(req.once && durability.is_set()) {
                let reply = self
                    .async_script(
                        req.key,
                        "claiming",
                        limit,
                        Transition::Claim,
                        &record,
                        &args,
                    )
                    .await?;
                return parse_claim(req, &reply);
            }
            // WAIT blocks the connection it runs on until the replicas answer; on the shared
            // multiplexed connection that would hold up every other call, so durable `once`
            // claims take a connection of their own.
            let (reply, waited) = self
                .durable_claim(req.key, limit, &record, &args, durability)
                .await?;
            let response = parse_claim(req, &reply)?;
            match RedisStore::durable_answer(response, waited) {
                Durable::Ready(response) => Ok(response),
                Durable::GiveBack(claim, e) => {
                    if let Some(claim) = claim {
                        let given = match took_over_unknown(&claim) {
                            true => self.mark_unknown_async(&claim).await,
                            false => self.release_async(&claim).await,
                        };
                        if let Err(e) = given {
                            tracing::warn!(key = %crate::runtime::telemetry::key_field(&claim.key), error = %crate::runtime::telemetry::error_field(&e), "rerun: could not give back a claim that did not reach its durability; its lease will end it");
                        }
                    }
                    Err(e)
                }
            }
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
            let reply = self
                .async_script(
                    &claim.key,
                    "recording the result",
                    self.limit(claim.lease),
                    Transition::Complete,
                    &record,
                    &complete_args(claim.fence, result, ttl),
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
                    self.limit(claim.lease),
                    Transition::Release,
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
                    self.limit(claim.lease),
                    Transition::MarkUnknown,
                    &record,
                    &[fence],
                )
                .await?;
            self.fenced_answer(claim, reply)
        })
    }

    fn inspect_async<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Option<RecordView>> {
        Box::pin(async move {
            let record = self.record_key(key);
            let reply = self
                .async_script(
                    key,
                    "reading the record",
                    self.inner.response_timeout,
                    Transition::Inspect,
                    &record,
                    &[],
                )
                .await?;
            parse_view(key, &record, &reply)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_page_reads_twice_the_keys_per_step_up_to_the_bound() {
        let mut count = first_scan_count(1);
        let mut steps = vec![count];
        while count < SCAN_COUNT_MAX {
            count = next_scan_count(count);
            steps.push(count);
        }
        assert_eq!(steps, [10, 20, 40, 80, 160, 320, 640, 1024]);
        assert_eq!(next_scan_count(SCAN_COUNT_MAX), SCAN_COUNT_MAX);
        assert_eq!(first_scan_count(500), 500);
        // A page of more records than a step reads, up to the whole store, steps at the bound
        // (a COUNT beyond what Redis parses would fail the scan).
        assert_eq!(first_scan_count(usize::MAX), SCAN_COUNT_MAX);
        assert_eq!(next_scan_count(usize::MAX), SCAN_COUNT_MAX);
    }

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
        // Names that only resemble a record's: each would be read under a key whose name is
        // another, so `forget` could never reach them.
        for odd in [
            "p:{ab}",
            "p:{a:b}}",
            "p:{a:b%3Ac}",
            "p:{a:%7}",
            "p:{a:%zz}",
            "p:{a{:b}",
        ] {
            assert_eq!(parse_record_key("p:", odd), None, "{odd}");
            // Named whole: never taken for the record of a key rerun writes.
            let listed = unreadable_name("p:", odd.as_bytes());
            assert!(
                matches!(listed.kind, crate::CorruptKind::ForeignKey(_)),
                "{odd}"
            );
            assert_eq!(listed.key.id(), odd);
        }
        let listed = unreadable_name("p:", b"p:{a:b%3Ac}");
        assert_eq!(listed.key, Key::from_parts("a", "p:{a:b%3Ac}"));
        assert!(listed.kind.to_string().contains("escapes a character"));
        let listed = unreadable_name("p:", b"p:{ab}");
        assert_eq!(listed.key, Key::from_parts("ab", "p:{ab}"));
        let listed = unreadable_name("p:", b"p:{a%zz:b}");
        assert_eq!(listed.key, Key::from_parts("a%zz", "p:{a%zz:b}"));
        assert!(listed
            .kind
            .to_string()
            .contains("is not `PREFIX{SCOPE:ID}`"));
        let listed = unreadable_name("p:", b"p:{a:\xff}");
        assert_eq!(listed.key, Key::from_parts("a", "p:{a:\u{fffd}}"));
        assert!(listed.kind.to_string().contains("not UTF-8 (bytes "));
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
        assert_eq!(scan_pattern_within("a*b?:", None), "a\\*b\\?:{*}");
        assert_eq!(
            scan_pattern_within("p:", Some("bill:ing*")),
            "p:{bill%3Aing\\**}"
        );
    }

    #[test]
    fn scripts_carry_the_schema_version() {
        let scripts = Scripts::new();
        assert_eq!(scripts.sources.len(), 7);
        for source in &scripts.sources {
            assert!(!source.contains("@FORMAT@"));
        }
        assert!(scripts.sources[0].contains(&format!("local FORMAT = '{SCHEMA_VERSION}'\n")));
    }

    #[test]
    fn spans_are_capped() {
        assert_eq!(span_us(Duration::from_millis(3)), 3000);
        assert_eq!(span_us(Duration::MAX), scripts::MAX_SPAN_US);
    }
}
