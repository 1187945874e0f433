//! The connection pool of a [`super::SqliteStore`]: capped, shrinking, fork-aware.
//!
//! - **Capped**: at most `max_connections` connections exist at once; a caller that finds none
//!   free waits (up to its deadline) for one to come back, instead of opening the thousandth
//!   file descriptor.
//! - **Shrinking**: a connection handed back while more than `max_idle` are idle is closed, so a
//!   burst leaves at most `max_idle` behind.
//! - **Sharded**: idle connections sit in a few lists picked by thread, so concurrent callers
//!   rarely meet on one lock.
//! - **Fork-aware**: every connection is tagged with the process generation that opened it. A
//!   forked child never runs a statement on a connection of its parent's: SQLite connections
//!   must not cross a `fork()`. It closes the idle ones before it opens its own, since SQLite's
//!   table of this process's locks on the file would otherwise carry them over to its own
//!   connections ([`super::forked`] says why, and refuses a child whose inherited connections it
//!   cannot all close).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::forked;
use crate::error::Error;

/// How many shards the idle lists have.
const SHARDS: usize = 8;

/// This thread's shard.
fn this_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS);
    SHARD.with(|s| *s)
}

fn generation() -> u64 {
    crate::process::current().forks
}

/// A pooled connection and the busy timeout it is set to.
pub(super) struct Conn {
    pub(super) conn: Connection,
    busy: Duration,
    generation: u64,
    /// Dropped after `conn` (fields drop in order): the connection is counted as closed only
    /// once SQLite closed it.
    _counted: Counted,
}

/// An open connection to `path` of `generation`, as [`forked`] counts it.
struct Counted {
    path: Arc<Path>,
    generation: u64,
}

impl Drop for Counted {
    fn drop(&mut self) {
        forked::closed(&self.path, self.generation);
    }
}

impl Conn {
    /// Sets how long statements wait for another writer's lock, if it differs.
    pub(super) fn busy_timeout(&mut self, timeout: Duration) -> rusqlite::Result<()> {
        if self.busy != timeout {
            self.conn.busy_timeout(timeout)?;
            self.busy = timeout;
        }
        Ok(())
    }
}

struct Counts {
    /// The generation these counts are of.
    generation: u64,
    /// Connections that exist (idle or in use).
    open: usize,
}

pub(super) struct Pool {
    /// The file the connections are to.
    path: Arc<Path>,
    shards: [Mutex<Vec<Conn>>; SHARDS],
    counts: Mutex<Counts>,
    returned: Condvar,
    idle: AtomicUsize,
    waiting: AtomicUsize,
    max_open: usize,
    max_idle: usize,
}

impl Pool {
    pub(super) fn new(path: &Path, max_open: usize, max_idle: usize) -> Pool {
        Pool {
            path: Arc::from(path),
            shards: std::array::from_fn(|_| Mutex::new(Vec::new())),
            counts: Mutex::new(Counts {
                generation: generation(),
                open: 0,
            }),
            returned: Condvar::new(),
            idle: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            max_open: max_open.max(1),
            max_idle: max_idle.min(max_open.max(1)),
        }
    }

    fn shard(&self, i: usize) -> MutexGuard<'_, Vec<Conn>> {
        self.shards[i % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let now = generation();
        if counts.generation != now {
            // A forked child: the parent's connections are not ours to count.
            counts.generation = now;
            counts.open = 0;
        }
        counts
    }

    /// An idle connection of this generation, from this thread's shard first.
    fn pop_idle(&self, now: u64) -> Option<Conn> {
        let home = this_shard();
        for i in home..home + SHARDS {
            let mut shard = self.shard(i);
            while let Some(conn) = shard.pop() {
                self.idle.fetch_sub(1, Ordering::Relaxed);
                if conn.generation == now {
                    return Some(conn);
                }
                // Opened by a parent process before a fork: closed, never used (closing
                // touches no lock of the parent's, and checkpoints only a file no other
                // process has open).
                drop(conn);
            }
        }
        None
    }

    /// Closes the idle connections a parent process left in this pool before a fork.
    fn close_inherited(&self, now: u64) {
        for i in 0..SHARDS {
            let mut shard = self.shard(i);
            let before = shard.len();
            shard.retain(|conn| conn.generation == now);
            self.idle.fetch_sub(before - shard.len(), Ordering::Relaxed);
        }
    }

    /// A connection: an idle one, a new one while fewer than the cap exist, or the next one
    /// handed back, waiting up to `deadline`; with the time spent getting it.
    ///
    /// An idle connection at hand (nearly every call's case) is taken without reading the
    /// clock and counts as no time spent. The caller sets its busy timeout from what is left,
    /// so when the connection's last call had the same limit, SQLite is not called to set it
    /// again (see [`Conn::busy_timeout`]).
    pub(super) fn take(
        &self,
        deadline: Duration,
        open: impl Fn() -> Result<Connection, Error>,
        exhausted: impl Fn(usize, Duration) -> Error,
    ) -> Result<(Conn, Duration), Error> {
        let now = generation();
        if let Some(conn) = self.pop_idle(now) {
            return Ok((conn, Duration::ZERO));
        }
        let started = Instant::now();
        loop {
            if let Some(conn) = self.pop_idle(now) {
                return Ok((conn, started.elapsed()));
            }
            let mut counts = self.counts();
            if counts.open < self.max_open {
                counts.open += 1;
                drop(counts);
                self.close_inherited(now);
                if let Some(why) = forked::inherited(&self.path, now) {
                    self.closed(now);
                    return Err(Error::config(format!(
                        "opening a connection to {}: {why}",
                        self.path.display()
                    )));
                }
                return match open() {
                    Ok(conn) => Ok((
                        {
                            forked::opened(&self.path, now);
                            Conn {
                                conn,
                                busy: Duration::MAX,
                                generation: now,
                                _counted: Counted {
                                    path: self.path.clone(),
                                    generation: now,
                                },
                            }
                        },
                        started.elapsed(),
                    )),
                    Err(e) => {
                        self.closed(now);
                        Err(e)
                    }
                };
            }
            let left = deadline.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(exhausted(self.max_open, deadline));
            }
            self.waiting.fetch_add(1, Ordering::SeqCst);
            // Checked again under the lock: a connection handed back between the pop above
            // and this wait has notified before we waited.
            if self.idle.load(Ordering::SeqCst) == 0 {
                counts = self
                    .returned
                    .wait_timeout(counts, left)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            drop(counts);
        }
    }

    /// Hands a connection back; closes it when it is in a transaction, of another generation,
    /// or one idle connection too many.
    pub(super) fn put_back(&self, conn: Conn) {
        let now = generation();
        if conn.generation != now {
            // A parent's connection in use at the fork, handed back in the child: closed.
            drop(conn);
            return;
        }
        // Kept while there is a waiter for it or the idle ones are few; otherwise closed, so
        // that a burst leaves at most `max_idle` connections behind.
        let idle = self.idle.load(Ordering::SeqCst);
        let keep = conn.conn.is_autocommit()
            && (idle < self.max_idle || idle < self.waiting.load(Ordering::SeqCst));
        if keep {
            self.shard(this_shard()).push(conn);
            self.idle.fetch_add(1, Ordering::SeqCst);
            if self.waiting.load(Ordering::SeqCst) > 0 {
                let _counts = self.counts();
                self.returned.notify_one();
            }
        } else {
            // Dropping a connection left inside a transaction rolls it back.
            drop(conn);
            self.closed(now);
        }
    }

    /// Counts a connection of generation `of` as closed and wakes a waiter for its slot.
    /// Closes a connection taken from the pool instead of handing it back.
    pub(super) fn discard(&self, conn: Conn) {
        let of = conn.generation;
        drop(conn);
        self.closed(of);
    }

    fn closed(&self, of: u64) {
        let mut counts = self.counts();
        if counts.generation == of {
            counts.open = counts.open.saturating_sub(1);
        }
        self.returned.notify_one();
    }

    /// Connections that exist now (idle or in use), for tests and diagnostics.
    pub(super) fn open_connections(&self) -> usize {
        self.counts().open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> Result<Connection, Error> {
        Connection::open_in_memory().map_err(|e| Error::store_msg(None, e.to_string()))
    }

    fn exhausted(max: usize, waited: Duration) -> Error {
        Error::store_msg(None, format!("all {max} busy for {waited:?}"))
    }

    #[test]
    fn an_idle_connection_is_taken_as_no_time_spent_and_keeps_its_busy_timeout() {
        let pool = Pool::new(Path::new(":memory:"), 1, 1);
        let (mut conn, _) = pool.take(Duration::from_secs(5), open, exhausted).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        pool.put_back(conn);
        let (conn, spent) = pool.take(Duration::from_secs(5), open, exhausted).unwrap();
        assert_eq!(spent, Duration::ZERO);
        assert_eq!(conn.busy, Duration::from_secs(5));
    }

    #[test]
    fn a_wait_for_a_connection_counts_as_time_spent_and_ends_at_the_deadline() {
        let pool = Pool::new(Path::new(":memory:"), 1, 1);
        let (held, _) = pool.take(Duration::from_secs(5), open, exhausted).unwrap();
        let started = Instant::now();
        let err = match pool.take(Duration::from_millis(50), open, exhausted) {
            Ok(_) => panic!("a second connection past the cap of one"),
            Err(e) => e,
        };
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(err.to_string().contains("all 1 busy"), "{err}");
        std::thread::scope(|s| {
            s.spawn(|| {
                // Handed back only once the taker below is waiting for it.
                while pool.waiting.load(Ordering::SeqCst) == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                pool.put_back(held);
            });
            let (_, spent) = pool.take(Duration::from_secs(5), open, exhausted).unwrap();
            assert!(spent > Duration::ZERO, "{spent:?}");
        });
    }
}
