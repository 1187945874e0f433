//! The harness's crash-point hook: records the points one thread passes, and crashes it at one.
//!
//! [`crate::checkpoint::set_hook`] is process-wide, so one harness runs at a time (a global
//! lock) and the hook acts only on the thread that runs the harness: other tests running in
//! parallel pass their checkpoints untouched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError};
use std::thread::ThreadId;

use crate::checkpoint::{self, Hook, Point};

/// The panic payload of a crash in process. Private: nothing but the harness can catch it.
pub(crate) struct CrashHere;

/// One crash point: the `occurrence`-th time (from 1) a run passes the point `name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PointId {
    /// The point's name (`rerun.claimed`, or the user's `checkpoint!` name).
    pub name: String,
    /// Which pass of that point, counting from 1.
    pub occurrence: usize,
}

impl std::fmt::Display for PointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.occurrence == 1 {
            f.write_str(&self.name)
        } else {
            write!(f, "{}#{}", self.name, self.occurrence)
        }
    }
}

/// What the hook does when its thread passes the target point.
#[derive(Clone)]
pub(crate) enum Action {
    /// Only record the points passed.
    Record,
    /// Unwind with [`CrashHere`] at the point.
    Crash(PointId),
    /// Call the function at the point (the child of a real kill: signal the parent, block).
    Call(PointId, Arc<dyn Fn(&PointId) + Send + Sync>),
}

struct State {
    thread: ThreadId,
    action: Action,
    passed: Vec<PointId>,
    counts: HashMap<&'static str, usize>,
    fired: bool,
}

/// The installed hook of one harness run; uninstalled (and the previous hook restored) on drop.
pub(crate) struct Installed {
    state: Arc<Mutex<State>>,
    previous: Option<Hook>,
    _serial: MutexGuard<'static, ()>,
}

static SERIAL: Mutex<()> = Mutex::new(());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps the default panic message of a harness crash out of the test's output: the crash is
/// expected, and the report says what happened.
fn quiet_crash_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<CrashHere>() {
                previous(info);
            }
        }));
    });
}

impl Installed {
    /// Takes the harness lock (waiting for any other harness of this process) and installs a
    /// hook acting on the current thread only.
    pub(crate) fn install() -> Installed {
        let serial = lock(&SERIAL);
        quiet_crash_panics();
        let state = Arc::new(Mutex::new(State {
            thread: std::thread::current().id(),
            action: Action::Record,
            passed: Vec::new(),
            counts: HashMap::new(),
            fired: false,
        }));
        let for_hook = state.clone();
        let hook: Hook = Arc::new(move |point: Point| on_point(&for_hook, point));
        let previous = checkpoint::set_hook(Some(hook));
        Installed {
            state,
            previous,
            _serial: serial,
        }
    }

    /// Starts a new run: forgets the points passed so far and sets what to do.
    pub(crate) fn arm(&self, action: Action) {
        let mut s = lock(&self.state);
        s.action = action;
        s.passed.clear();
        s.counts.clear();
        s.fired = false;
    }

    /// The points the current thread passed since [`Installed::arm`].
    pub(crate) fn passed(&self) -> Vec<PointId> {
        lock(&self.state).passed.clone()
    }

    /// Whether the target point was reached since [`Installed::arm`].
    pub(crate) fn fired(&self) -> bool {
        lock(&self.state).fired
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        checkpoint::set_hook(self.previous.take());
    }
}

fn on_point(state: &Mutex<State>, point: Point) {
    let fire = {
        let mut s = lock(state);
        if std::thread::current().id() != s.thread {
            return;
        }
        let name = point.name();
        let count = s.counts.entry(name).or_insert(0);
        *count += 1;
        let id = PointId {
            name: name.to_owned(),
            occurrence: *count,
        };
        s.passed.push(id.clone());
        let target = match &s.action {
            Action::Record => None,
            Action::Crash(t) | Action::Call(t, _) => Some(t),
        };
        if s.fired || target != Some(&id) {
            return;
        }
        s.fired = true;
        s.action.clone()
    };
    // The state's lock is released before crashing, so the unwind poisons nothing.
    match fire {
        Action::Record => {}
        Action::Crash(_) => std::panic::panic_any(CrashHere),
        Action::Call(id, f) => f(&id),
    }
}
