//! The settle time a harness gives the calls it runs ([`super::SafeToRerun::settle`]).
//!
//! Kept per thread, as the crash points are: the harness runs the operation on the thread that
//! calls `check`, and other tests running in parallel keep their own settle times.

use std::cell::Cell;
use std::time::Duration;

thread_local! {
    static SETTLE: Cell<Option<Duration>> = const { Cell::new(None) };
}

/// The settle time the harness running on this thread set, if any.
pub(crate) fn current() -> Option<Duration> {
    SETTLE.with(Cell::get)
}

/// Sets this thread's settle time until dropped, then restores the one before.
pub(super) struct Scoped {
    previous: Option<Duration>,
}

impl Scoped {
    pub(super) fn set(settle: Option<Duration>) -> Scoped {
        Scoped {
            previous: SETTLE.with(|s| s.replace(settle)),
        }
    }
}

impl Drop for Scoped {
    fn drop(&mut self) {
        SETTLE.with(|s| s.set(self.previous));
    }
}
