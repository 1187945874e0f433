//! A lock that a forked child never waits on forever.
//!
//! A child forked while a thread of its parent held a lock inherits the lock held, and no
//! thread of the child will ever release it. [`ForkLock`] knows the fork generation of the
//! thread that holds it: a thread of the same generation is waited for (it will let go), one of
//! an earlier generation (a parent's, gone in this child) is given up on at once, and a holder
//! not yet known (taken in the instant before it could say) for about 10 ms.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::Duration;

/// A mutex that tells the fork generation of its holder (see the [module docs](self)).
pub(crate) struct ForkLock<T> {
    lock: Mutex<T>,
    /// The holder's fork generation plus one; 0 while free (or before its holder says).
    holder: AtomicU64,
}

/// What [`ForkLock::lock`] returns while held.
pub(crate) struct ForkGuard<'a, T> {
    guard: MutexGuard<'a, T>,
    holder: &'a AtomicU64,
}

impl<T> ForkLock<T> {
    pub(crate) const fn new(value: T) -> ForkLock<T> {
        ForkLock {
            lock: Mutex::new(value),
            holder: AtomicU64::new(0),
        }
    }

    /// Takes the lock for a thread of fork generation `forks`; `None` when a thread of an
    /// earlier generation holds it (or a holder that did not say which within about 10 ms).
    pub(crate) fn lock(&self, forks: u64) -> Option<ForkGuard<'_, T>> {
        let held = |guard| {
            self.holder.store(forks + 1, Ordering::SeqCst);
            Some(ForkGuard {
                guard,
                holder: &self.holder,
            })
        };
        if forks == 0 {
            // No fork happened: every holder is a thread of this process.
            return held(self.lock.lock().unwrap_or_else(|p| p.into_inner()));
        }
        for _ in 0..200 {
            match self.lock.try_lock() {
                Ok(guard) => return held(guard),
                Err(TryLockError::Poisoned(p)) => return held(p.into_inner()),
                Err(TryLockError::WouldBlock) => {}
            }
            match self.holder.load(Ordering::SeqCst) {
                0 => std::thread::sleep(Duration::from_micros(50)),
                h if h == forks + 1 => {
                    return held(self.lock.lock().unwrap_or_else(|p| p.into_inner()));
                }
                _ => return None,
            }
        }
        None
    }
}

impl<T> Deref for ForkGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for ForkGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for ForkGuard<'_, T> {
    fn drop(&mut self) {
        // Before the mutex opens (the guard field drops after this).
        self.holder.store(0, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_of_this_generation_is_waited_for_one_of_an_earlier_is_not() {
        let lock = ForkLock::new(0u32);
        // Held in generation 1 (a child's thread), asked in generation 1: waited for.
        let held = lock.lock(1);
        assert!(held.is_some());
        std::thread::scope(|s| {
            let waiter = s.spawn(|| lock.lock(1).map(|mut g| *g += 1).is_some());
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
            assert!(
                waiter.join().unwrap_or(false),
                "a holder of this generation was given up on"
            );
        });
        assert_eq!(lock.lock(0).map(|g| *g), Some(1));
        // Held in generation 0 (the parent's thread, at the fork), asked in generation 1.
        let parent = lock.lock(0);
        assert!(parent.is_some());
        let started = std::time::Instant::now();
        assert!(lock.lock(1).is_none());
        assert!(started.elapsed() < Duration::from_secs(1));
        drop(parent);
        assert!(lock.lock(1).is_some(), "free again");
    }
}
