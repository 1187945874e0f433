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
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

use tokio::runtime::{Builder, Runtime};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::{Client, Config, NoTls, Statement};

use crate::error::Error;
use crate::store::postgres::sql::{Sql, Stmt};

/// Statements prepared on one connection, filled on first use.
#[derive(Default)]
pub(crate) struct Prepared([Option<Statement>; Stmt::COUNT]);

/// A connection with its prepared statements.
pub(crate) struct Session {
    pub(crate) client: Client,
    prepared: Prepared,
}

impl Session {
    fn new(client: Client) -> Session {
        Session {
            client,
            prepared: Prepared::default(),
        }
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

    /// Splits the connection into its runtime and session, for [`SyncConn::block_on`].
    pub(crate) fn parts(&mut self) -> Result<(&Runtime, &mut Session), Error> {
        match &self.runtime {
            Some(rt) => Ok((rt, &mut self.session)),
            None => Err(Error::store_msg(
                None,
                "a PostgreSQL connection lost its runtime",
            )),
        }
    }
}

impl Drop for SyncConn {
    fn drop(&mut self) {
        // Dropping a runtime from inside an async context panics; shutting it down in the
        // background never does, and drops the connection task all the same.
        if let Some(rt) = self.runtime.take() {
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
    fn connect_error(&self, e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::store(
            None,
            format!("connecting to PostgreSQL at {}: {e}", self.shown),
            e,
        )
    }

    /// Opens a connection for blocking callers.
    pub(crate) fn connect_sync(&self) -> Result<SyncConn, Error> {
        let runtime = Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| self.connect_error(e))?;
        let config = self.config.clone();
        let client = SyncConn::block_on(&runtime, async move {
            let (client, connection) = config.connect(NoTls).await?;
            // The task runs whenever a caller blocks on this runtime, which is exactly when
            // the connection has work to do.
            tokio::spawn(connection);
            Ok::<_, tokio_postgres::Error>(client)
        })?
        .map_err(|e| self.connect_error(e))?;
        Ok(SyncConn {
            session: Session::new(client),
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
    pub(crate) async fn connect_async(&self) -> Result<AsyncConn, Error> {
        let caller = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if let Some(caller) = caller {
            let (client, connection) = self
                .config
                .connect(NoTls)
                .await
                .map_err(|e| self.connect_error(e))?;
            caller.spawn(connection);
            return Ok(AsyncConn {
                session: Session::new(client),
            });
        }
        let handle = background()?;
        let config = self.config.clone();
        let joined = handle
            .spawn(async move {
                let (client, connection) = config.connect(NoTls).await?;
                tokio::spawn(connection);
                Ok::<_, tokio_postgres::Error>(client)
            })
            .await;
        let client = joined
            .map_err(|e| self.connect_error(e))?
            .map_err(|e| self.connect_error(e))?;
        Ok(AsyncConn {
            session: Session::new(client),
        })
    }
}

/// The process-wide runtime that drives async connections.
fn background() -> Result<tokio::runtime::Handle, Error> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rerun-postgres")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    match runtime {
        Ok(rt) => Ok(rt.handle().clone()),
        Err(e) => Err(Error::store_msg(
            None,
            format!("starting the runtime of PostgreSQL connections: {e}"),
        )),
    }
}

/// Connections of one kind, at most `size` handed out at once.
pub(crate) struct Pool<C> {
    idle: Mutex<Vec<(u64, C)>>,
    permits: Arc<Semaphore>,
    /// Bumped when a connection dies; idle connections of older generations are dropped.
    generation: AtomicU64,
}

/// A connection taken from a [`Pool`]; it goes back on drop unless marked broken.
pub(crate) struct Pooled<'p, C> {
    pool: &'p Pool<C>,
    conn: Option<C>,
    generation: u64,
    broken: bool,
    _permit: OwnedSemaphorePermit,
}

impl<C> Pool<C> {
    pub(crate) fn new(size: usize) -> Pool<C> {
        Pool {
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size.max(1))),
            generation: AtomicU64::new(0),
        }
    }

    fn pop_idle(&self) -> Option<(u64, C)> {
        let current = self.generation.load(Ordering::Acquire);
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        // Older generations may share the fate of a connection that died: drop them.
        idle.retain(|(g, _)| *g >= current);
        idle.pop()
    }

    fn wrap(&self, permit: OwnedSemaphorePermit, generation: u64, conn: C) -> Pooled<'_, C> {
        Pooled {
            pool: self,
            conn: Some(conn),
            generation,
            broken: false,
            _permit: permit,
        }
    }

    fn closed() -> Error {
        Error::store_msg(None, "the PostgreSQL connection pool is closed")
    }
}

impl Pool<SyncConn> {
    /// Takes a connection, blocking while all are in use, opening one if none is idle.
    pub(crate) fn get(&self, target: &Target) -> Result<Pooled<'_, SyncConn>, Error> {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => park_on(self.permits.clone().acquire_owned()).map_err(|_| Self::closed())?,
        };
        if let Some((generation, conn)) = self.pop_idle() {
            return Ok(self.wrap(permit, generation, conn));
        }
        let generation = self.generation.load(Ordering::Acquire);
        let conn = target.connect_sync()?;
        Ok(self.wrap(permit, generation, conn))
    }
}

impl Pool<AsyncConn> {
    /// Takes a connection, waiting while all are in use, opening one if none is idle.
    pub(crate) async fn get(&self, target: &Target) -> Result<Pooled<'_, AsyncConn>, Error> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Self::closed())?;
        loop {
            match self.pop_idle() {
                // The background runtime notices a dead socket on its own.
                Some((_, conn)) if conn.session.client.is_closed() => continue,
                Some((generation, conn)) => return Ok(self.wrap(permit, generation, conn)),
                None => break,
            }
        }
        let generation = self.generation.load(Ordering::Acquire);
        let conn = target.connect_async().await?;
        Ok(self.wrap(permit, generation, conn))
    }
}

impl<C> Pooled<'_, C> {
    pub(crate) fn conn(&mut self) -> Result<&mut C, Error> {
        self.conn
            .as_mut()
            .ok_or_else(|| Error::store_msg(None, "a pooled PostgreSQL connection was lost"))
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
        if self.broken {
            return;
        }
        if let Some(conn) = self.conn.take() {
            if self.generation >= self.pool.generation.load(Ordering::Acquire) {
                self.pool
                    .idle
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((self.generation, conn));
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
        // (`pg_terminate_backend`, shutdown, crash recovery).
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08") || code.starts_with("57")
        }
    }
}

/// Blocks the current thread on a future that needs no runtime (a semaphore wait).
fn park_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
