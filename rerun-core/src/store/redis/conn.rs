//! The connections of a [`RedisStore`]: a pool of blocking connections for the sync half, one
//! multiplexed connection for the async half.
//!
//! - **Deadlines**: every call has a time limit (the store's operation timeout, or a third of
//!   the claim's lease): a blocking connection's socket timeouts are set to what is left of it
//!   before each round trip (a [`Budget`]), so a call of several (a library or a script loaded
//!   again, a durability wait) ends by its deadline as a call of one does; an async call is
//!   raced against the keeper's timer (which needs no timer of the caller's runtime). A call
//!   that runs out of time drops its connection: an answer may still be on its way.
//! - **Failures**: a connection that failed is dropped, and so is every idle connection opened
//!   before it (whatever killed one, a restart, a `CLIENT KILL` or a cut network, most likely
//!   killed its siblings too), so a retry runs on a fresh one.
//! - **fork()**: connections are tagged with the process generation that opened them; a forked
//!   child leaves its parent's alone (they carry the parent's session) and opens its own.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Connection, ConnectionLike, RedisError, RedisResult, Value};

use crate::error::{CorruptKind, Error};
use crate::key::Key;
use crate::runtime::keeper::deadline;

use super::durability::OnceDurability;
use super::scripts::{Arg, Transition};
use super::RedisStore;

/// How many idle sync connections the pool keeps.
const MAX_IDLE: usize = 64;

fn forks() -> u64 {
    crate::process::current().forks
}

/// A blocking connection and the socket timeout it is set to.
pub(super) struct SyncConn {
    conn: Connection,
    timeout: Duration,
}

impl SyncConn {
    /// The driver's connection.
    pub(super) fn connection(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

/// What is left of a sync call's time limit, for its round trips after the first: before each,
/// the socket's timeouts are set to the time left, so that no number of round trips, each
/// answered just within the socket's timeout, takes a call past its deadline.
pub(super) struct Budget {
    /// `None` for work with no deadline of its own (each round trip still has the socket's).
    until: Option<Instant>,
    /// The timeout this call last set on the socket, if it set one.
    set: Option<Duration>,
}

impl Budget {
    /// The budget of a call that started at `started` with `limit`.
    fn new(started: Instant, limit: Duration) -> Budget {
        Budget {
            until: started.checked_add(limit),
            set: None,
        }
    }

    /// No deadline beyond each round trip's socket timeout: for a sweep of many steps.
    pub(super) fn per_trip() -> Budget {
        Budget {
            until: None,
            set: None,
        }
    }

    /// Before a round trip after the first: sets the socket's timeouts to the time left, or
    /// answers a timeout (nothing was sent) when none is.
    pub(super) fn next_trip(&mut self, conn: &mut Connection) -> RedisResult<()> {
        let Some(until) = self.until else {
            return Ok(());
        };
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the call's time limit ran out before its next round trip",
            )
            .into());
        }
        conn.set_read_timeout(Some(left))?;
        conn.set_write_timeout(Some(left))?;
        self.set = Some(left);
        Ok(())
    }
}

/// Idle sync connections. A connection failure bumps the generation, and connections of an
/// older generation are dropped instead of reused.
#[derive(Default)]
pub(super) struct Pool {
    idle: Vec<SyncConn>,
    generation: u64,
    /// The process generation the idle connections belong to.
    forks: u64,
}

/// The multiplexed connection of the async half, and a task in the runtime that drives it:
/// when that runtime shuts down, the task ends with it and the connection is reopened.
pub(super) struct AsyncConn {
    conn: MultiplexedConnection,
    alive: tokio::task::JoinHandle<()>,
    id: u64,
    forks: u64,
}

impl Drop for AsyncConn {
    fn drop(&mut self) {
        self.alive.abort();
    }
}

/// Whether a driver error leaves the connection unusable (closed, reset, timed out mid-reply).
pub(super) fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_unrecoverable_error()
}

/// Whether no retry can fix the error: credentials or permissions the server refuses.
fn is_permanent(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::AuthenticationFailed | redis::ErrorKind::InvalidClientConfig
    ) || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}

impl RedisStore {
    /// A new sync connection; `key` is the key of the call that needs it, for the error.
    pub(super) fn open_sync(&self, key: Option<&Key>, limit: Duration) -> Result<SyncConn, Error> {
        let inner = &self.inner;
        let started = Instant::now();
        // The handshake may read a reply per step (AUTH, SELECT), each with this timeout: a
        // third of the limit each leaves the rest for naming the connection.
        let mut conn = inner
            .client
            .get_connection_with_timeout(inner.connect_timeout.min(limit / 3))
            .map_err(|e| self.connect_err(key, "connecting", e))?;
        // The handshake above took part of the limit; naming the connection gets the rest.
        let left = limit
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        conn.set_read_timeout(Some(left))
            .and_then(|()| conn.set_write_timeout(Some(left)))
            .map_err(|e| self.connect_err(key, "setting timeouts", e))?;
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(&inner.client_name)
            .query::<()>(&mut conn)
            .map_err(|e| {
                if e.is_timeout() {
                    self.timed_out(key, "naming a new connection", limit)
                } else {
                    self.connect_err(key, "naming the connection", e)
                }
            })?;
        Ok(SyncConn {
            conn,
            timeout: left,
        })
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        // Every update of the pool is a single push, pop or assignment: a poisoned lock is
        // still consistent.
        let mut pool = self.inner.pool.lock().unwrap_or_else(|p| p.into_inner());
        let now = forks();
        if pool.forks != now {
            // A forked child: the idle connections carry the parent's sessions.
            for conn in pool.idle.drain(..) {
                std::mem::forget(conn);
            }
            pool.forks = now;
            pool.generation += 1;
        }
        pool
    }

    /// A pooled connection, or a new one (then `true`: its timeouts are set to what its
    /// handshake left of `limit`).
    fn take(&self, key: Option<&Key>, limit: Duration) -> Result<(u64, SyncConn, bool), Error> {
        let (generation, pooled) = {
            let mut pool = self.pool();
            (pool.generation, pool.idle.pop())
        };
        match pooled {
            Some(conn) => Ok((generation, conn, false)),
            None => Ok((generation, self.open_sync(key, limit)?, true)),
        }
    }

    pub(super) fn put_back(&self, generation: u64, conn: SyncConn) {
        let mut pool = self.pool();
        if generation == pool.generation && conn.conn.is_open() && pool.idle.len() < MAX_IDLE {
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

    /// Runs one request on a pooled sync connection, within `limit`: `f` calls
    /// [`Budget::next_trip`] before each round trip after its first.
    pub(super) fn sync_call<T>(
        &self,
        key: Option<&Key>,
        what: &str,
        limit: Duration,
        f: impl FnOnce(&mut Connection, &mut Budget) -> Result<T, RedisError>,
    ) -> Result<T, Error> {
        let started = Instant::now();
        let (generation, mut conn, opened) = self.take(key, limit)?;
        let mut budget = Budget::new(started, limit);
        // A pooled connection's timeouts are set to the call's limit only when they differ
        // from what it has (calls of one kind share a limit): two system calls saved per call,
        // for a first round trip that may end a few microseconds past the deadline. A new one
        // gets what its handshake (connecting, naming it) left of the limit.
        if opened {
            if let Err(e) = budget.next_trip(&mut conn.conn) {
                self.invalidate(generation);
                return Err(match e.is_timeout() {
                    true => self.timed_out(key, what, limit),
                    false => self.driver_err(key, what, e),
                });
            }
        } else if conn.timeout != limit {
            let set = conn
                .conn
                .set_read_timeout(Some(limit))
                .and_then(|()| conn.conn.set_write_timeout(Some(limit)));
            if let Err(e) = set {
                self.invalidate(generation);
                return Err(self.driver_err(key, what, e));
            }
            conn.timeout = limit;
        }
        let result = f(&mut conn.conn, &mut budget);
        if let Some(set) = budget.set {
            conn.timeout = set;
        }
        match result {
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
                if e.is_timeout() {
                    return Err(self.timed_out(key, what, limit));
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
        let now = forks();
        let seen = {
            let mut cached = self.inner.aio.lock().unwrap_or_else(|p| p.into_inner());
            if cached.as_ref().is_some_and(|a| a.forks != now) {
                // Inherited across a fork: it belongs to the parent's runtime and session.
                std::mem::forget(cached.take());
            }
            match &*cached {
                Some(a) if !a.alive.is_finished() => return Ok(Some((a.id, a.conn.clone()))),
                Some(a) => Some(a.id),
                None => None,
            }
        };
        let conn = self.open_async(key).await?;
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
                    forks: now,
                });
                Ok(Some((id, conn)))
            }
        }
    }

    /// A new multiplexed connection in the current runtime, named as every connection is.
    async fn open_async(&self, key: &Key) -> Result<MultiplexedConnection, Error> {
        let inner = &self.inner;
        // No timeouts of the driver's (it sets 500 ms on every request and 1 s on connecting
        // unless told not to): they need the caller's runtime to have a timer, would cut off a
        // `WAIT` longer than that or a large result, and ignore the store's own limits. The
        // call's own deadline (around this, and around every request) bounds both.
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(None);
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
        Ok(conn)
    }

    fn invalidate_async(&self, id: u64) {
        let mut cached = self.inner.aio.lock().unwrap_or_else(|p| p.into_inner());
        if cached.as_ref().is_some_and(|a| a.id == id) {
            *cached = None;
        }
    }

    /// Runs one request on the async connection within `limit`, or on the sync half outside a
    /// tokio runtime. `request` gets the connection; `sync` is the same request for the sync half.
    pub(super) async fn async_call<T, Fut>(
        &self,
        key: &Key,
        what: &str,
        limit: Duration,
        request: impl FnOnce(MultiplexedConnection) -> Fut,
        sync: impl FnOnce(&mut Connection, &mut Budget) -> Result<T, RedisError>,
    ) -> Result<T, Error>
    where
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let started = Instant::now();
        let conn = match deadline(limit, self.async_conn(key)).await {
            Some(conn) => conn?,
            None => return Err(self.timed_out(Some(key), what, limit)),
        };
        let Some((id, conn)) = conn else {
            return self.sync_call(Some(key), what, limit, sync);
        };
        let left = limit.saturating_sub(started.elapsed());
        match deadline(left, request(conn)).await {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => {
                if breaks_connection(&e) {
                    self.invalidate_async(id);
                }
                Err(self.driver_err(Some(key), what, e))
            }
            None => {
                // The connection may be stuck behind a silent peer: the next call opens another.
                self.invalidate_async(id);
                Err(self.timed_out(Some(key), what, limit))
            }
        }
    }

    /// Runs one transition on the async connection within `limit`.
    pub(super) async fn async_script(
        &self,
        key: &Key,
        what: &str,
        limit: Duration,
        t: Transition,
        record: &str,
        args: &[Arg<'_>],
    ) -> Result<Value, Error> {
        self.async_call(
            key,
            what,
            limit,
            |mut conn| async move { self.run_async(&mut conn, t, record, args).await },
            |conn, budget| self.run_sync(conn, budget, t, record, args),
        )
        .await
    }

    /// Runs one transition on a pooled sync connection within `limit`.
    pub(super) fn sync_script(
        &self,
        key: &Key,
        what: &str,
        limit: Duration,
        t: Transition,
        record: &str,
        args: &[Arg<'_>],
    ) -> Result<Value, Error> {
        self.sync_call(Some(key), what, limit, |conn, budget| {
            self.run_sync(conn, budget, t, record, args)
        })
    }

    /// A `once` claim made by an async call that must reach replicas or the append-only file
    /// before its body starts: the claim script and the wait run on one connection of their own,
    /// because WAIT holds its connection until the replicas answer. Returns the script's reply
    /// and, for a granted claim, what the wait found.
    pub(super) async fn durable_claim(
        &self,
        key: &Key,
        limit: Duration,
        record: &str,
        args: &[Arg<'_>],
        durability: OnceDurability,
    ) -> Result<(Value, Option<redis::RedisResult<Result<(), String>>>), Error> {
        let started = Instant::now();
        let Some(mut lane) = deadline(limit, self.inner.durable.lock()).await else {
            return Err(self.timed_out(Some(key), "claiming", limit));
        };
        let now = forks();
        let mut conn = match &*lane {
            Some((f, conn)) if *f == now => conn.clone(),
            _ => {
                let left = limit.saturating_sub(started.elapsed());
                let opened = deadline(left, self.open_async(key))
                    .await
                    .ok_or_else(|| self.timed_out(Some(key), "connecting", limit))??;
                if let Some(old) = lane.take() {
                    // From before a fork, or broken: never touched again.
                    std::mem::forget(old);
                }
                *lane = Some((now, opened.clone()));
                opened
            }
        };
        let left = limit.saturating_sub(started.elapsed());
        let until = super::durability::wait_until(left);
        let run = async {
            let reply = self
                .run_async(&mut conn, Transition::Claim, record, args)
                .await?;
            let waited = if super::reply::is_claimed(&reply) {
                Some(durability.wait_async(&mut conn, until).await)
            } else {
                None
            };
            Ok::<_, RedisError>((reply, waited))
        };
        match deadline(left, run).await {
            Some(Ok(answer)) => Ok(answer),
            Some(Err(e)) => {
                if breaks_connection(&e) {
                    *lane = None;
                }
                Err(self.driver_err(Some(key), "claiming", e))
            }
            None => {
                *lane = None;
                Err(self.timed_out(Some(key), "claiming", limit))
            }
        }
    }

    // ---- errors --------------------------------------------------------------------------

    pub(super) fn connect_err(&self, key: Option<&Key>, what: &str, e: RedisError) -> Error {
        let what = format!("{what} to Redis at {}", self.inner.url);
        if is_permanent(&e) {
            Error::store_permanent(key, what, e)
        } else {
            Error::store(key, what, e)
        }
    }

    pub(super) fn driver_err(&self, key: Option<&Key>, what: &str, e: RedisError) -> Error {
        if let (Some(key), Some("WRONGTYPE")) = (key, e.code()) {
            return Error::corrupt(
                key,
                CorruptKind::Record(format!(
                    "the Redis key {} holds another type than rerun's record (a string, or a hash of rerun 0.1)",
                    self.record_key(key)
                )),
            );
        }
        let what = format!("{what} on Redis at {}", self.inner.url);
        if is_permanent(&e) {
            Error::store_permanent(key, what, e)
        } else {
            Error::store(key, what, e)
        }
    }

    fn timed_out(&self, key: Option<&Key>, what: &str, limit: Duration) -> Error {
        Error::store_msg(
            key,
            format!(
                "{what} on Redis at {}: no answer within {}; the connection was closed",
                self.inner.url,
                crate::error::rounded(limit)
            ),
        )
    }
}
