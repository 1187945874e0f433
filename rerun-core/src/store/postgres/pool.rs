//! Connections and their pools.
//!
//! Two kinds of connection, so that neither half of the store pays for the other:
//!
//! - A **sync** connection owns a current-thread tokio runtime that drives its socket only
//!   while a caller waits on it (as the `postgres` crate does): a blocking call costs the round
//!   trip and no thread hop. Called from inside a tokio runtime, where blocking on another
//!   runtime would panic, the wait moves to a short-lived scoped thread instead.
//! - An **async** connection's socket is driven by the caller's multi-thread tokio runtime
//!   when there is one (no thread hop per round trip), and otherwise by a small process-wide
//!   runtime (one thread, `rerun-postgres`), so its futures run on any executor. A connection
//!   whose runtime shut down is closed, and dropped from the pool at the next checkout.
//!
//! A pool hands out at most `size` connections at once; waiting callers queue on a semaphore.
//! A connection that saw a connection-level failure is dropped, and so is every idle one
//! opened before it: a server restart or a terminated backend usually kills all of them, and
//! a retry should not meet the same dead socket again.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use tokio::runtime::{Builder, Runtime};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::{Client, Config, NoTls, Statement};

use crate::error::Error;
use crate::runtime::keeper::deadline;
use crate::store::postgres::deadline::Deadline;
use crate::store::postgres::error::store_error;
use crate::store::postgres::sql::{ScanShape, Sql, Stmt};

/// Statements prepared on one connection, filled on first use.
#[derive(Default)]
pub(crate) struct Prepared([Option<Statement>; Stmt::COUNT]);

/// A connection with its prepared statements.
pub(crate) struct Session {
    pub(crate) client: Client,
    prepared: Prepared,
    /// Scan statements, one per shape used on this connection.
    scans: Vec<(ScanShape, Statement)>,
}

impl Session {
    fn new(client: Client) -> Session {
        Session {
            client,
            prepared: Prepared::default(),
            scans: Vec::new(),
        }
    }

    /// The scan statement of `shape`, prepared on this connection's first use of it.
    pub(crate) async fn scan_statement(
        &mut self,
        sql: &Sql,
        shape: &ScanShape,
    ) -> Result<Statement, tokio_postgres::Error> {
        if let Some((_, s)) = self.scans.iter().find(|(k, _)| k == shape) {
            return Ok(s.clone());
        }
        let prepared = self.client.prepare(&sql.scan(shape)).await?;
        self.scans.push((shape.clone(), prepared.clone()));
        Ok(prepared)
    }

    /// The prepared statement, preparing it on this connection's first use.
    pub(crate) async fn statement(
        &mut self,
        sql: &Sql,
        stmt: Stmt,
    ) -> Result<Statement, tokio_postgres::Error> {
        let slot = &mut self.prepared.0[stmt.index()];
        if let Some(s) = slot {
            return Ok(s.clone());
        }
        let prepared = self.client.prepare(sql.text(stmt)).await?;
        *slot = Some(prepared.clone());
        Ok(prepared)
    }
}

/// A connection for blocking callers, with the runtime that drives its socket.
pub(crate) struct SyncConn {
    // Declared before `runtime`: the client goes first, then the runtime drops the
    // connection task, which closes the socket.
    pub(crate) session: Session,
    /// The time limit of its calls (dropped before the runtime shuts down).
    deadline: Deadline,
    runtime: Option<Runtime>,
}

impl SyncConn {
    /// Runs `fut` to completion on this connection's runtime.
    pub(crate) fn block_on<F>(runtime: &Runtime, fut: F) -> Result<F::Output, Error>
    where
        F: Future + Send,
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_err() {
            return Ok(runtime.block_on(fut));
        }
        // Inside a tokio runtime, `block_on` of another runtime panics; a scoped thread may
        // block on it.
        std::thread::scope(|s| {
            s.spawn(|| runtime.block_on(fut))
                .join()
                .map_err(|_| Error::store_msg(None, "a PostgreSQL call panicked"))
        })
    }

    /// [`SyncConn::block_on`] for at most `limit`; `Ok(None)` when the time ran out (the
    /// timer is made inside the runtime, whose clock drives it).
    pub(crate) fn block_on_for<F>(
        runtime: &Runtime,
        limit: Duration,
        fut: F,
    ) -> Result<Option<F::Output>, Error>
    where
        F: Future + Send,
        F::Output: Send,
    {
        SyncConn::block_on(runtime, async move {
            tokio::time::timeout(limit, fut).await.ok()
        })
    }

    /// Runs the future `op` makes of this connection's session on its runtime, for at most
    /// `limit`; `Ok(None)` when the time ran out (the connection is then mid-statement).
    pub(crate) fn run_for<'a, F>(
        &'a mut self,
        limit: Duration,
        op: impl FnOnce(&'a mut Session) -> F,
    ) -> Result<Option<F::Output>, Error>
    where
        F: Future + Send + 'a,
        F::Output: Send,
    {
        let SyncConn {
            session,
            deadline,
            runtime,
        } = self;
        let Some(runtime) = runtime.as_ref() else {
            return Err(Error::store_msg(
                None,
                "a PostgreSQL connection lost its runtime",
            ));
        };
        // Made in place and pinned here, so that only a pointer travels down through the
        // runtime's `block_on` (the future of a statement is over a kilobyte, and each layer
        // it passed by value copied it).
        let op = pin!(op(session));
        let fut = pin!(deadline.within(limit, op));
        SyncConn::block_on(runtime, fut)
    }
}

impl Drop for SyncConn {
    fn drop(&mut self) {
        // Dropping a runtime from inside an async context panics; shutting it down in the
        // background never does, and drops the connection task all the same.
        if let Some(rt) = self.runtime.take() {
            self.deadline = Deadline::default();
            rt.shutdown_background();
        }
    }
}

/// A connection for async callers, driven by the shared background runtime.
pub(crate) struct AsyncConn {
    pub(crate) session: Session,
}

/// What the pools connect to.
pub(crate) struct Target {
    pub(crate) config: Config,
    /// The URL with its password elided, for messages.
    pub(crate) shown: String,
}

impl Target {
    fn connect_error(&self, e: tokio_postgres::Error) -> Error {
        store_error(
            None,
            format!("connecting to PostgreSQL at {}", self.shown),
            e,
        )
    }

    fn connect_timed_out(&self, limit: Duration) -> Error {
        Error::store_msg(
            None,
            format!(
                "connecting to PostgreSQL at {}: no connection within {}",
                self.shown,
                crate::error::rounded(limit)
            ),
        )
    }

    /// Opens a connection for blocking callers, within `limit`.
    pub(crate) fn connect_sync(&self, limit: Duration) -> Result<SyncConn, Error> {
        let runtime = drivers(&mut Builder::new_current_thread())
            .build()
            .map_err(|e| {
                Error::store(
                    None,
                    format!(
                        "starting the runtime of a PostgreSQL connection to {}",
                        self.shown
                    ),
                    e,
                )
            })?;
        let config = self.config.clone();
        let connected = SyncConn::block_on_for(&runtime, limit, async move {
            let (client, connection) = config.connect(NoTls).await?;
            // The task runs whenever a caller blocks on this runtime, which is exactly when
            // the connection has work to do.
            tokio::spawn(connection);
            Ok::<_, tokio_postgres::Error>(client)
        });
        let client = match connected {
            Ok(Some(connected)) => connected.map_err(|e| self.connect_error(e)),
            Ok(None) => Err(self.connect_timed_out(limit)),
            Err(e) => Err(e),
        };
        let client = match client {
            Ok(client) => client,
            Err(e) => {
                // Never drop a runtime here: inside an async context (a caller's tokio runtime)
                // that panics; shutting it down in the background never does.
                runtime.shutdown_background();
                return Err(e);
            }
        };
        Ok(SyncConn {
            session: Session::new(client),
            deadline: Deadline::default(),
            runtime: Some(runtime),
        })
    }

    /// Opens a connection for async callers.
    ///
    /// Inside a multi-thread tokio runtime, the connection task runs on that runtime: its
    /// workers drive it whether or not anyone blocks on it, and a round trip then costs no hop
    /// to another thread. If that runtime shuts down, the connection closes, and the pool drops
    /// it at the next checkout. Elsewhere (a current-thread runtime, which only runs tasks while
    /// its owner blocks on it, or no tokio at all) the shared background runtime drives it.
    pub(crate) async fn connect_async(&self, limit: Duration) -> Result<AsyncConn, Error> {
        let caller = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if let Some(caller) = caller {
            let (client, connection) = deadline(limit, self.config.connect(NoTls))
                .await
                .ok_or_else(|| self.connect_timed_out(limit))?
                .map_err(|e| self.connect_error(e))?;
            caller.spawn(connection);
            return Ok(AsyncConn {
                session: Session::new(client),
            });
        }
        let handle = background()?;
        let config = self.config.clone();
        let task = handle.spawn(async move {
            let (client, connection) = config.connect(NoTls).await?;
            tokio::spawn(connection);
            Ok::<_, tokio_postgres::Error>(client)
        });
        let abort = task.abort_handle();
        let Some(joined) = deadline(limit, task).await else {
            abort.abort();
            return Err(self.connect_timed_out(limit));
        };
        let client = joined
            .map_err(|e| {
                Error::store(
                    None,
                    format!("connecting to PostgreSQL at {}", self.shown),
                    e,
                )
            })?
            .map_err(|e| self.connect_error(e))?;
        Ok(AsyncConn {
            session: Session::new(client),
        })
    }
}

/// The drivers a connection's runtime needs: sockets and timers. Not `enable_all`: where the
/// application's tokio has its `process` or `signal` feature, that adds their drivers, which run
/// at every park of the runtime (a sync connection parks at every round trip) for nothing a
/// connection uses; a profile of 8 blocking callers showed tokio reaping child processes in 0.8%
/// of rerun's user time.
fn drivers(builder: &mut Builder) -> &mut Builder {
    builder.enable_io().enable_time()
}

/// The runtime that drives async connections outside a caller's multi-thread runtime: one per
/// process generation (a forked child has none of its parent's threads, so it starts its own and
/// leaves the parent's untouched).
fn background() -> Result<tokio::runtime::Handle, Error> {
    static RUNTIME: Mutex<Option<(u64, tokio::runtime::Handle)>> = Mutex::new(None);
    let now = forks();
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((f, handle)) = &*slot {
        if *f == now {
            return Ok(handle.clone());
        }
    }
    let runtime = drivers(Builder::new_multi_thread().worker_threads(1))
        .thread_name("rerun-postgres")
        .build()
        .map_err(|e| {
            Error::store_msg(
                None,
                format!("starting the runtime of PostgreSQL connections: {e}"),
            )
        })?;
    let handle = runtime.handle().clone();
    // It lives as long as the process (generation); its handle is all the pools need.
    std::mem::forget(runtime);
    *slot = Some((now, handle.clone()));
    Ok(handle)
}

/// Connections of one kind, at most `size` handed out at once.
pub(crate) struct Pool<C> {
    idle: Mutex<Idle<C>>,
    size: usize,
    /// Bumped when a connection dies; idle connections of older generations are dropped.
    generation: AtomicU64,
}

/// The idle connections and the permits of one process generation: a forked child starts with
/// none of its parent's (their sessions are the parent's, and the permits they hold will never
/// come back in the child).
struct Idle<C> {
    forks: u64,
    conns: Vec<IdleConn<C>>,
    permits: Arc<Semaphore>,
}

/// An idle connection, its generation, and the thread that gave it back.
struct IdleConn<C> {
    generation: u64,
    thread: std::thread::ThreadId,
    conn: Box<C>,
}

/// An idle connection taken from a [`Pool`], with its generation.
type Taken<C> = (u64, Box<C>);

/// A connection taken from a [`Pool`]; it goes back on drop unless marked broken.
pub(crate) struct Pooled<'p, C> {
    pool: &'p Pool<C>,
    /// Boxed: a connection (its runtime, client and statements) is moved in and out of the
    /// idle list on every call, and a pointer moves cheaper than the whole of it.
    conn: Option<Box<C>>,
    generation: u64,
    forks: u64,
    broken: bool,
    /// A statement was sent and its answer not yet read: dropped now (an async call's future
    /// cancelled mid-statement), the connection would hand its next caller an answer that is
    /// not theirs, or make it wait behind the abandoned statement; it is closed instead.
    in_flight: bool,
    _permit: OwnedSemaphorePermit,
}

fn forks() -> u64 {
    crate::process::current().forks
}

impl<C> Pool<C> {
    pub(crate) fn new(size: usize) -> Pool<C> {
        let size = size.max(1);
        Pool {
            idle: Mutex::new(Idle {
                forks: forks(),
                conns: Vec::new(),
                permits: Arc::new(Semaphore::new(size)),
            }),
            size,
            generation: AtomicU64::new(0),
        }
    }

    /// The idle connections of this process generation.
    fn idle(&self) -> std::sync::MutexGuard<'_, Idle<C>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let now = forks();
        if idle.forks != now {
            for conn in idle.conns.drain(..) {
                // The parent's: closing it here could end the parent's session.
                std::mem::forget(conn);
            }
            idle.forks = now;
            idle.permits = Arc::new(Semaphore::new(self.size));
        }
        idle
    }

    /// A permit and an idle connection (if any) under one lock, when a permit is free at
    /// once; otherwise the semaphore to wait on.
    fn try_take(&self) -> Result<(OwnedSemaphorePermit, Option<Taken<C>>), Arc<Semaphore>> {
        let mut idle = self.idle();
        match idle.permits.clone().try_acquire_owned() {
            Ok(permit) => Ok((permit, self.take_idle(&mut idle))),
            Err(_) => Err(idle.permits.clone()),
        }
    }

    fn pop_idle(&self) -> Option<Taken<C>> {
        self.take_idle(&mut self.idle())
    }

    /// An idle connection: the one this thread gave back last, if it is idle, else the one
    /// given back last. A thread that keeps its connection keeps the connection's runtime,
    /// socket and buffers in its own core's cache, as a client with a connection per thread
    /// does; no connection waits for its thread, so no caller waits for a connection while
    /// another is idle.
    fn take_idle(&self, idle: &mut Idle<C>) -> Option<Taken<C>> {
        let current = self.generation.load(Ordering::Acquire);
        let me = std::thread::current().id();
        // Older generations may share the fate of a connection that died: drop them.
        idle.conns.retain(|c| c.generation >= current);
        let mine = idle.conns.iter().rposition(|c| c.thread == me);
        let taken = match mine {
            Some(i) => Some(idle.conns.remove(i)),
            None => idle.conns.pop(),
        };
        taken.map(|c| (c.generation, c.conn))
    }

    fn wrap(&self, permit: OwnedSemaphorePermit, generation: u64, conn: Box<C>) -> Pooled<'_, C> {
        Pooled {
            pool: self,
            conn: Some(conn),
            generation,
            forks: forks(),
            broken: false,
            in_flight: false,
            _permit: permit,
        }
    }

    fn closed() -> Error {
        Error::store_msg(None, "the PostgreSQL connection pool is closed")
    }

    fn exhausted(target: &Target, limit: Duration) -> Error {
        Error::store_msg(
            None,
            format!(
                "every pooled connection to PostgreSQL at {} stayed busy for {}; raise the pool size or lower the load",
                target.shown,
                crate::error::rounded(limit)
            ),
        )
    }
}

impl Pool<SyncConn> {
    /// Takes a connection, blocking while all are in use, opening one if none is idle; all of
    /// it within `limit`. Returns the connection and what is left of `limit` (all of it when a
    /// connection was idle: the clock is read only when something waited).
    pub(crate) fn get(
        &self,
        target: &Target,
        limit: Duration,
    ) -> Result<(Pooled<'_, SyncConn>, Duration), Error> {
        let (permit, idle, started) = match self.try_take() {
            Ok((permit, idle)) => (permit, idle, None),
            Err(permits) => {
                let started = Instant::now();
                let permit = park_on(permits.acquire_owned(), limit)
                    .ok_or_else(|| Self::exhausted(target, limit))?
                    .map_err(|_| Self::closed())?;
                (permit, self.pop_idle(), Some(started))
            }
        };
        if let Some((generation, conn)) = idle {
            return Ok((self.wrap(permit, generation, conn), left(limit, started)));
        }
        let started = started.unwrap_or_else(Instant::now);
        let generation = self.generation.load(Ordering::Acquire);
        let conn = Box::new(target.connect_sync(left(limit, Some(started)))?);
        Ok((
            self.wrap(permit, generation, conn),
            left(limit, Some(started)),
        ))
    }
}

impl Pool<AsyncConn> {
    /// Takes a connection, waiting while all are in use, opening one if none is idle; all of
    /// it within `limit`. Returns the connection and what is left of `limit` (all of it when a
    /// connection was idle).
    pub(crate) async fn get(
        &self,
        target: &Target,
        limit: Duration,
    ) -> Result<(Pooled<'_, AsyncConn>, Duration), Error> {
        let (permit, mut idle, started) = match self.try_take() {
            Ok((permit, idle)) => (permit, idle, None),
            Err(permits) => {
                let started = Instant::now();
                let permit = deadline(limit, permits.acquire_owned())
                    .await
                    .ok_or_else(|| Self::exhausted(target, limit))?
                    .map_err(|_| Self::closed())?;
                (permit, self.pop_idle(), Some(started))
            }
        };
        loop {
            match idle.take() {
                // The background runtime notices a dead socket on its own.
                Some((_, conn)) if conn.session.client.is_closed() => {
                    drop(conn);
                    idle = self.pop_idle();
                }
                Some((generation, conn)) => {
                    return Ok((self.wrap(permit, generation, conn), left(limit, started)))
                }
                None => break,
            }
        }
        let started = started.unwrap_or_else(Instant::now);
        let generation = self.generation.load(Ordering::Acquire);
        let conn = Box::new(target.connect_async(left(limit, Some(started))).await?);
        Ok((
            self.wrap(permit, generation, conn),
            left(limit, Some(started)),
        ))
    }
}

/// What is left of `limit` since `started` (all of it when nothing waited).
fn left(limit: Duration, started: Option<Instant>) -> Duration {
    started.map_or(limit, |s| limit.saturating_sub(s.elapsed()))
}

impl<C> Pooled<'_, C> {
    pub(crate) fn conn(&mut self) -> Result<&mut C, Error> {
        self.conn
            .as_deref_mut()
            .ok_or_else(|| Error::store_msg(None, "a pooled PostgreSQL connection was lost"))
    }

    /// Marks a statement sent: until [`Pooled::answered`], dropping closes the connection.
    pub(crate) fn sending(&mut self) {
        self.in_flight = true;
    }

    /// Marks the statement's answer read.
    pub(crate) fn answered(&mut self) {
        self.in_flight = false;
    }

    /// Drops this connection instead of returning it, and retires the idle ones opened
    /// before it failed.
    pub(crate) fn discard(&mut self) {
        self.broken = true;
        self.pool.generation.fetch_add(1, Ordering::AcqRel);
    }
}

impl<C> Drop for Pooled<'_, C> {
    fn drop(&mut self) {
        if self.broken || self.in_flight {
            return;
        }
        if let Some(conn) = self.conn.take() {
            let mut idle = self.pool.idle();
            if idle.forks != self.forks {
                // Taken before a fork: the parent's session.
                std::mem::forget(conn);
            } else if self.generation >= self.pool.generation.load(Ordering::Acquire) {
                idle.conns.push(IdleConn {
                    generation: self.generation,
                    thread: std::thread::current().id(),
                    conn,
                });
            }
        }
    }
}

/// Whether an error means the connection cannot be used again.
pub(crate) fn is_connection_error(e: &tokio_postgres::Error) -> bool {
    match e.as_db_error() {
        // I/O errors, a closed socket, protocol errors.
        None => true,
        // Class 08: connection exception; class 57: operator intervention
        // (`pg_terminate_backend`, shutdown, crash recovery), but for 57014, a statement
        // cancelled by `statement_timeout` on a connection that stays as good as it was;
        // 25006: a read-only server (a standby a multi-host URL landed on, or a primary
        // demoted by a failover): another connection may reach the new primary. 26000 (a
        // prepared statement the session no longer has, as behind a pooler that moved it to
        // another server session) and 0A000 (a cached plan whose result type changed): the
        // connection's prepared statements are stale, and a new connection prepares its own.
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08")
                || (code.starts_with("57") && code != "57014")
                || matches!(code, "25006" | "26000" | "0A000")
        }
    }
}

/// Blocks the current thread on a future that needs no runtime (a semaphore wait), for at most
/// `limit`; `None` when the time ran out.
fn park_on<F: Future>(fut: F, limit: Duration) -> Option<F::Output> {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let until = crate::clock::deadline_in(limit);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Some(out);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        std::thread::park_timeout(left);
    }
}
