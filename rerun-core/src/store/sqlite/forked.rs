//! SQLite connections a forked child inherited from its parent, counted per file.
//!
//! SQLite keeps the locks of every connection of a process to one file in one table of that
//! process. A child forked while its parent had connections to the file open inherits that
//! table, but not the kernel's locks behind it (`fcntl` locks are not inherited). A connection
//! the child opens then joins the inherited entry and believes it holds locks it never took.
//! Once the parent exits, another process can take the file's exclusive lock, rebuild the WAL
//! index and remove the WAL under the child: the child's commits go where no other process reads
//! them, and a key can be claimed twice.
//!
//! So a child first closes the inherited connections it can reach (its store's idle ones; see
//! [`super::pool`]), which empties the inherited entry, and opens a connection of its own only
//! when no inherited one to the file is left open in its memory. One that is left (a connection
//! another thread of the parent was using at the fork, or an idle one of another store of the
//! same file) makes opening a connection fail with a permanent store error that says so.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// Open connections per file and process generation.
struct Live {
    path: PathBuf,
    generation: u64,
    open: usize,
}

static LIVE: Mutex<Vec<Live>> = Mutex::new(Vec::new());

/// The process generation that last took [`LIVE`]: the first process's (0) until a fork.
static LOCKED_IN: AtomicU64 = AtomicU64::new(0);

/// The table, or `None` when it stays locked in a forked child. A process waits for the lock
/// as for any other; but the first time a child takes it, a thread of its parent may have held
/// it at the fork, and no thread of the child will ever let it go. The lock is held for a few
/// instructions at a time, so a child that cannot take it within a second gives up.
fn live() -> Option<MutexGuard<'static, Vec<Live>>> {
    let now = crate::process::current().forks;
    if LOCKED_IN.load(Ordering::Acquire) == now {
        return Some(LIVE.lock().unwrap_or_else(|p| p.into_inner()));
    }
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        let guard = match LIVE.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            Err(TryLockError::WouldBlock) => return None,
        };
        LOCKED_IN.store(now, Ordering::Release);
        return Some(guard);
    }
}

/// Counts a connection to `path` opened in `generation`.
pub(super) fn opened(path: &Path, generation: u64) {
    let Some(mut live) = live() else { return };
    match live
        .iter_mut()
        .find(|l| l.generation == generation && l.path == path)
    {
        Some(l) => l.open += 1,
        None => live.push(Live {
            path: path.to_owned(),
            generation,
            open: 1,
        }),
    }
}

/// Counts a connection to `path` opened in `generation` as closed.
pub(super) fn closed(path: &Path, generation: u64) {
    let Some(mut live) = live() else { return };
    if let Some(i) = live
        .iter()
        .position(|l| l.generation == generation && l.path == path)
    {
        live[i].open = live[i].open.saturating_sub(1);
        if live[i].open == 0 {
            live.swap_remove(i);
        }
    }
}

/// Why this process (of generation `now`) must not open a connection to `path`: the
/// connections of earlier generations still open in its memory; `None` when it may.
pub(super) fn inherited(path: &Path, now: u64) -> Option<String> {
    let Some(live) = live() else {
        return Some(
            "this process was forked while another thread was opening or closing a connection to it, so SQLite's locks here cannot be trusted".to_owned(),
        );
    };
    let left: usize = live
        .iter()
        .filter(|l| l.generation != now && l.path == path)
        .map(|l| l.open)
        .sum();
    (left > 0).then(|| {
        format!(
            "this process was forked from one that had {left} connection(s) to it open that this process cannot close (in use by another thread at the fork, or in another SqliteStore of the same file), and SQLite's locks would not hold beside them; fork while no call runs on the store, and keep one SqliteStore per file"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_of_an_earlier_generation_block_until_closed() {
        let path = Path::new("/forked-test/a.sqlite3");
        opened(path, 1);
        opened(path, 1);
        assert_eq!(inherited(path, 1), None);
        let why = inherited(path, 2).unwrap_or_default();
        assert!(why.contains("had 2 connection(s)"), "{why}");
        assert_eq!(inherited(Path::new("/forked-test/b.sqlite3"), 2), None);
        closed(path, 1);
        closed(path, 1);
        assert_eq!(inherited(path, 2), None);
        opened(path, 2);
        closed(path, 2);
        assert!(live().is_some_and(|l| l.iter().all(|l| l.path != path)));
    }
}
