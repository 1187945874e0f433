//! Crash points: the runtime's own transitions and the user's `checkpoint!("name")` marks.
//!
//! Outside the safe-to-rerun harness a checkpoint costs one relaxed atomic load. The harness
//! (`rerun_core::testing`, feature `testing`) installs a hook that records the points of a clean
//! run, then crashes a run at each of them.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// A crash point of the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Point {
    /// The key was claimed; the body has not started.
    Claimed,
    /// The body is about to start.
    BodyStarted,
    /// The body returned; its result is not recorded yet.
    BodyReturned,
    /// The result is recorded.
    Recorded,
    /// The claim was given back after the body failed.
    Released,
    /// A user's `rerun_core::checkpoint!("name")`.
    User(&'static str),
}

impl Point {
    /// The point's name: `rerun.claimed`, …, or the user's name.
    pub fn name(&self) -> &'static str {
        match self {
            Point::Claimed => "rerun.claimed",
            Point::BodyStarted => "rerun.body_started",
            Point::BodyReturned => "rerun.body_returned",
            Point::Recorded => "rerun.recorded",
            Point::Released => "rerun.released",
            Point::User(name) => name,
        }
    }
}

/// A function called at every crash point while installed.
pub type Hook = Arc<dyn Fn(Point) + Send + Sync>;

static ARMED: AtomicBool = AtomicBool::new(false);
static HOOK: RwLock<Option<Hook>> = RwLock::new(None);

/// Passes a crash point: free unless a hook is installed.
#[inline]
pub fn hit(point: Point) {
    if ARMED.load(Ordering::Relaxed) {
        call_hook(point);
    }
}

/// [`hit`] for the `checkpoint!` macro: the point is a `static`, so the unarmed path is one
/// load and one branch, with nothing built on the stack.
#[doc(hidden)]
#[inline]
pub fn hit_static(point: &'static Point) {
    if ARMED.load(Ordering::Relaxed) {
        call_hook(*point);
    }
}

#[cold]
#[inline(never)]
fn call_hook(point: Point) {
    let hook = HOOK.read().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(hook) = hook {
        hook(point);
    }
}

/// Installs `hook` (replacing any other), or removes it with `None`. Returns the previous one.
pub fn set_hook(hook: Option<Hook>) -> Option<Hook> {
    let mut slot = HOOK.write().unwrap_or_else(|p| p.into_inner());
    ARMED.store(hook.is_some(), Ordering::SeqCst);
    std::mem::replace(&mut *slot, hook)
}

thread_local! {
    static FENCE: Cell<Option<u64>> = const { Cell::new(None) };
    static CALL_END: Cell<CallEnd> = const { Cell::new(CallEnd::None) };
}

/// How the last call that ended on this thread ended, noted while a hook is installed: the
/// harness tells an operation's own failure from rerun's by it, whatever error type the
/// operation wraps rerun's errors in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum CallEnd {
    /// No call ended on this thread since the last [`take_call_end`].
    #[default]
    None,
    /// The call returned its value (run, replayed or reconciled).
    Returned,
    /// The body, or the reconcile function, returned an error.
    BodyFailed,
    /// rerun failed the call: a store, its configuration, the codec, a busy key, a lost lease;
    /// `unknown` when it is an unknown outcome.
    Failed { unknown: bool },
}

/// Notes, while a hook is installed (the harness runs), how the call running on this thread
/// ended. Free otherwise.
#[inline]
pub(crate) fn note_call_end(end: CallEnd) {
    if ARMED.load(Ordering::Relaxed) {
        CALL_END.with(|c| c.set(end));
    }
}

/// Notes, while a hook is installed, that rerun refused a call before claiming anything (an
/// invalid scope or option, a payload that did not encode, a store that could not be opened),
/// and returns the error. Free otherwise.
#[inline]
pub(crate) fn refused(e: crate::Error) -> crate::Error {
    note_call_end(CallEnd::Failed { unknown: false });
    e
}

/// How the last call noted on this thread ended ([`note_call_end`]); cleared by reading it.
#[cfg(feature = "testing")]
pub(crate) fn take_call_end() -> CallEnd {
    CALL_END.with(|c| c.replace(CallEnd::None))
}

/// The fence of the claim whose body runs on this thread: `Some` inside the body of a sync
/// call (`Call::run`, a sync `#[idempotent]` function), `None` elsewhere, and in async bodies,
/// which may move between threads. The harness's effect log records it next to each effect.
///
/// ```
/// use rerun_core::{checkpoint::current_fence, Call, MemoryStore};
/// let store = MemoryStore::new();
/// let out = Call::new("s", "k").run(&store, || Ok::<_, rerun_core::Error>(current_fence()))?;
/// assert_eq!(out.value, Some(out.fence));
/// assert_eq!(current_fence(), None);
/// # Ok::<(), rerun_core::Error>(())
/// ```
pub fn current_fence() -> Option<u64> {
    FENCE.with(Cell::get)
}

/// Sets [`current_fence`] while a sync body runs; restores the outer value (a body that calls
/// another idempotent function) when dropped, also by a panic.
pub(crate) struct InBody(Option<u64>);

impl InBody {
    pub(crate) fn enter(fence: u64) -> InBody {
        InBody(FENCE.with(|f| f.replace(Some(fence))))
    }
}

impl Drop for InBody {
    fn drop(&mut self) {
        FENCE.with(|f| f.set(self.0));
    }
}

/// Marks a crash point in the body of an idempotent function.
///
/// The safe-to-rerun harness crashes a run here and checks that the rerun converges; outside
/// the harness it costs one relaxed atomic load.
///
/// ```
/// fn transfer() {
///     // debit …
///     rerun_core::checkpoint!("debited");
///     // credit …
/// }
/// transfer();
/// ```
#[macro_export]
macro_rules! checkpoint {
    ($name:literal) => {{
        static __RERUN_POINT: $crate::checkpoint::Point = $crate::checkpoint::Point::User($name);
        $crate::checkpoint::hit_static(&__RERUN_POINT)
    }};
}
