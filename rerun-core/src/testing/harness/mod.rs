//! The safe-to-rerun harness: the principle's own test, as a library.
//!
//! Give [`SafeToRerun`] a fresh-world constructor, the operation and an observation of the
//! world. It checks that
//! 1. running the operation twice in a row ends where running it once does;
//! 2. for every crash point the operation passes (the runtime's `rerun.claimed`,
//!    `rerun.body_started`, `rerun.body_returned`, `rerun.recorded`, plus the body's own
//!    [`crate::checkpoint!`] marks), a run that dies there followed by a rerun ends in the
//!    clean run's state with the clean run's result: once crashing by unwinding in process,
//!    once killing a child process with SIGKILL and rerunning against what it left on disk;
//! 3. no effect recorded in [`Effects`] happened twice.
//!
//! ```
//! use rerun_core::testing::{SafeToRerun, WorldDir};
//! use rerun_core::{Call, Error, SqliteStore};
//!
//! struct Shop { store: SqliteStore, effects: rerun_core::testing::Effects }
//!
//! let report = SafeToRerun::new(
//!     "shop.charge",
//!     |dir: &WorldDir| -> Result<Shop, Error> {
//!         Ok(Shop { store: dir.sqlite_store()?, effects: dir.effects() })
//!     },
//!     |shop: &Shop| {
//!         Call::new("shop.charge", "ord_1").once().run(&shop.store, || {
//!             shop.effects.record("card.charged", "ord_1");
//!             Ok::<_, Error>(500u64)
//!         }).map(|o| o.value)
//!     },
//!     |shop: &Shop| shop.effects.count("card.charged", "ord_1"),
//! )
//! .in_process_only() // doc tests cannot re-run themselves; a #[test] does both modes
//! .check();
//! report.assert_passed();
//! ```

mod child;
mod converges;
mod hook;
mod recovery;
mod report;
pub(crate) mod settle;
mod world;

use std::any::Any;
use std::fmt::{Debug, Display};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

pub use converges::{check_converges, Divergence};
pub use hook::PointId;
pub use recovery::{recovery_check, RecoveryCheck};
pub use report::{Check, Mode, Report, Verdict};
pub use world::{Duplicate, Effects, Occurrence, WorldDir, EFFECT_LOG};

use crate::checkpoint::CallEnd;
use crate::error::Error;
use hook::{Action, CrashHere, Installed};
use report::side_by_side;

/// An operation's error, as the harness keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RunError {
    text: String,
    outcome_unknown: bool,
    /// rerun failed the call (a store, configuration or codec failure, a busy key), whatever
    /// type the operation wraps the error in; a body's own failure is not rerun's.
    rerun: bool,
}

/// What one run of the operation did.
enum Ran<T> {
    Returned(Result<T, RunError>),
    Crashed,
    Panicked(String),
}

type WorldFn<'a, W> = Box<dyn Fn(&WorldDir) -> Result<W, String> + 'a>;
type OpFn<'a, W, T> = Box<dyn Fn(&W) -> Result<T, RunError> + 'a>;
type ObserveFn<'a, W, O> = Box<dyn Fn(&W) -> O + 'a>;

/// The safe-to-rerun harness over one operation; see the [module docs](self).
///
/// Built with [`SafeToRerun::new`], run with [`SafeToRerun::check`]. The harness serializes
/// itself (one harness at a time per process) and its crash points act only on the thread
/// that calls `check`, so it is safe among parallel tests.
///
/// The real-kill mode re-runs the current test binary with `<test name> --exact`; the test
/// name is the current thread's name (what `cargo test` and cargo-nextest give it), or the one
/// set with [`SafeToRerun::test_name`]. In that child, `check` runs the operation until the
/// point and is killed there; other harnesses in the same test return an empty report, so
/// give each harness of one test its own name.
///
/// ```
/// use std::sync::Mutex;
/// use rerun_core::testing::{SafeToRerun, WorldDir};
/// use rerun_core::{Call, Error, MemoryStore};
///
/// // A world in memory: crash in process only (nothing would survive a kill).
/// struct Flags { store: MemoryStore, verified: Mutex<bool> }
///
/// let report = SafeToRerun::new(
///     "users.verify",
///     |_: &WorldDir| Ok::<_, Error>(Flags { store: MemoryStore::new(), verified: Mutex::new(false) }),
///     |w: &Flags| {
///         Call::new("users.verify", "u1").run(&w.store, || {
///             *w.verified.lock().unwrap() = true; // setting a flag converges
///             Ok::<_, Error>(())
///         }).map(|o| o.value)
///     },
///     |w: &Flags| *w.verified.lock().unwrap(),
/// )
/// .in_process_only()
/// .check();
/// assert!(report.passed(), "{report}");
/// assert_eq!(report.points().len(), 4); // claimed, body started, body returned, recorded
/// ```
pub struct SafeToRerun<'a, W, T, O> {
    name: String,
    world: WorldFn<'a, W>,
    op: OpFn<'a, W, T>,
    observe: ObserveFn<'a, W, O>,
    in_process: bool,
    real_kill: bool,
    test_name: Option<String>,
    strict: bool,
    child_timeout: Duration,
    settle: Option<Duration>,
}

impl<'a, W, T, O> SafeToRerun<'a, W, T, O>
where
    T: PartialEq + Debug,
    O: PartialEq + Debug,
{
    /// A harness named `name` over `operation`.
    ///
    /// - `world` builds the world in a fresh directory, or reopens the one a killed child
    ///   left there (a SQLite store under [`WorldDir::sqlite_store`], files, [`Effects`]).
    /// - `operation` is what a webhook handler, a job or a click runs; its errors are compared
    ///   by their text.
    /// - `observe` reads the state the operation changed; two runs that end in equal
    ///   observations ended in the same state.
    pub fn new<WE, E>(
        name: &str,
        world: impl Fn(&WorldDir) -> Result<W, WE> + 'a,
        operation: impl Fn(&W) -> Result<T, E> + 'a,
        observe: impl Fn(&W) -> O + 'a,
    ) -> Self
    where
        WE: Display,
        E: Display + 'static,
    {
        SafeToRerun {
            name: name.to_owned(),
            world: Box::new(move |dir| world(dir).map_err(|e| e.to_string())),
            op: Box::new(move |w| {
                crate::checkpoint::take_call_end();
                operation(w).map_err(|e| run_error(&e, crate::checkpoint::take_call_end()))
            }),
            observe: Box::new(observe),
            in_process: true,
            real_kill: true,
            test_name: None,
            strict: false,
            child_timeout: Duration::from_secs(60),
            settle: None,
        }
    }

    /// Crash only in process (unwinding): for worlds that do not persist (a `MemoryStore`),
    /// and for doc tests, which cannot re-run themselves.
    pub fn in_process_only(mut self) -> Self {
        self.in_process = true;
        self.real_kill = false;
        self
    }

    /// Crash only for real (SIGKILL of a child process).
    pub fn real_kill_only(mut self) -> Self {
        self.in_process = false;
        self.real_kill = true;
        self
    }

    /// The full name of the test that runs this harness (`module::test_fn`), for the child
    /// process of a real kill; by default the current thread's name, which `cargo test` and
    /// cargo-nextest set to it.
    pub fn test_name(mut self, name: impl Into<String>) -> Self {
        self.test_name = Some(name.into());
        self
    }

    /// Fail a rerun that ends in `OutcomeUnknown` (an at-most-once operation without a
    /// `reconcile` function) instead of accepting it as safe.
    pub fn require_convergence(mut self) -> Self {
        self.strict = true;
        self
    }

    /// How long a child process may take to reach its crash point (default 60 s).
    pub fn child_timeout(mut self, timeout: Duration) -> Self {
        self.child_timeout = timeout;
        self
    }

    /// The settle time of the calls the checks run, in place of their own
    /// ([`crate::Options::settle`], `settle = "…"`): how long a rerun that takes over a dead
    /// attempt waits before its reconcile function looks (a second by default, per crash point
    /// that reconciles, in each mode).
    ///
    /// `Duration::ZERO` is right when the operation's effects land before it goes on, as in a
    /// world of files and [`Effects`]: the crashed run's effects are all there when its rerun
    /// starts. Leave it unset when an effect can still be on its way after the crash (a request
    /// to a server the test runs, a queue), which is what the settle time is for.
    ///
    /// It applies to calls made on the thread that runs [`SafeToRerun::check`], as the crash
    /// points do. One longer than [`crate::MAX_DURATION`] fails the report, as it would fail a
    /// call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rerun_core::testing::{SafeToRerun, WorldDir};
    /// use rerun_core::{Call, Error, MemoryStore, Reconciled};
    /// use std::sync::Mutex;
    ///
    /// struct Mailer { store: MemoryStore, sent: Mutex<u32> }
    ///
    /// let report = SafeToRerun::new(
    ///     "mail.welcome",
    ///     |_: &WorldDir| Ok::<_, Error>(Mailer { store: MemoryStore::new(), sent: Mutex::new(0) }),
    ///     |m: &Mailer| {
    ///         let sent = || *m.sent.lock().unwrap();
    ///         Call::new("mail.welcome", "u1").once().run_reconciled(
    ///             &m.store,
    ///             || Ok::<_, Error>(if sent() > 0 { Reconciled::Done(()) } else { Reconciled::NotDone }),
    ///             || { *m.sent.lock().unwrap() += 1; Ok(()) },
    ///         ).map(|o| o.value)
    ///     },
    ///     |m: &Mailer| *m.sent.lock().unwrap(),
    /// )
    /// .in_process_only()
    /// .settle(Duration::ZERO) // the mail is counted before the body returns
    /// .require_convergence()
    /// .check();
    /// report.assert_passed();
    /// ```
    pub fn settle(mut self, settle: Duration) -> Self {
        self.settle = Some(settle);
        self
    }

    /// Runs every check and returns the report; see [`Report::assert_passed`].
    pub fn check(&self) -> Report {
        let started = Instant::now();
        let mut report = Report::new(&self.name, self.strict);
        if let Some(settle) = self.settle.filter(|s| *s > crate::MAX_DURATION) {
            report.checks.push(failed(
                Mode::Twice,
                None,
                format!("settle = {settle:?} is longer than rerun's maximum of 100 years; use at most `rerun_core::MAX_DURATION`"),
                Duration::ZERO,
            ));
            return report;
        }
        let _settle = settle::Scoped::set(self.settle);
        if let Some(order) = child::Order::from_env() {
            if order.name == self.name {
                self.serve_as_child(&order);
            }
            report.notes.push(format!(
                "skipped in the child process of harness {:?}",
                order.name
            ));
            return report;
        }
        let hook = Installed::install();
        let in_process = self.in_process && cfg!(panic = "unwind");
        if self.in_process && !in_process && !self.real_kill {
            // Nothing could crash: a report of the twice check alone would pass unchecked.
            report.checks.push(failed(
                Mode::InProcess,
                None,
                "this build aborts on panic, and crashing in process needs unwinding; with real kills off (`in_process_only`) no crash check can run: test it in a build that unwinds, or with real kills".to_owned(),
                Duration::ZERO,
            ));
            report.elapsed = started.elapsed();
            return report;
        }
        if self.in_process && !in_process {
            report.notes.push(
                "this build aborts on panic, and crashing in process needs unwinding: only real kills ran"
                    .to_owned(),
            );
        }
        let Some(clean) = self.clean_run(&hook, &mut report) else {
            report.elapsed = started.elapsed();
            return report;
        };
        self.twice(&hook, &clean, &mut report);
        if in_process {
            for point in report.points.clone() {
                let check = self.crash_in_process(&hook, &clean, &point);
                report.checks.push(check);
            }
        }
        if self.real_kill {
            let test_name = self.test_name.clone().or_else(|| {
                std::thread::current()
                    .name()
                    .filter(|n| *n != "main")
                    .map(str::to_owned)
            });
            report.test_name = test_name.clone();
            for point in report.points.clone() {
                let check = match &test_name {
                    Some(test) => self.crash_for_real(&hook, &clean, &point, test),
                    None => failed(
                        Mode::RealKill,
                        Some(point),
                        "cannot tell this test's name from its thread; set it with .test_name(\"module::test_fn\")".to_owned(),
                        Duration::ZERO,
                    ),
                };
                report.checks.push(check);
            }
        }
        report.elapsed = started.elapsed();
        report
    }

    /// The reference run: once, on a fresh world, recording the points it passes.
    fn clean_run(&self, hook: &Installed, report: &mut Report) -> Option<Clean<T, O>> {
        let started = Instant::now();
        let fail = |report: &mut Report, why: String| {
            report
                .checks
                .push(failed(Mode::Twice, None, why, started.elapsed()));
        };
        let dir = match WorldDir::temporary(&self.name) {
            Ok(dir) => dir,
            Err(e) => {
                fail(report, format!("cannot create a world directory: {e}"));
                return None;
            }
        };
        let world = match (self.world)(&dir) {
            Ok(w) => w,
            Err(e) => {
                fail(report, format!("the world constructor failed: {e}"));
                dir.remove();
                return None;
            }
        };
        hook.arm(Action::Record);
        let result = match self.run(&world) {
            Ran::Returned(r) => r,
            Ran::Crashed => Err(RunError {
                text: "crashed".into(),
                outcome_unknown: false,
                rerun: false,
            }),
            Ran::Panicked(msg) => {
                fail(
                    report,
                    format!("the operation panicked in a clean run: {msg}"),
                );
                dir.remove();
                return None;
            }
        };
        report.points = hook.passed();
        // Every rerun is judged against this run: one that rerun itself failed (a store that
        // cannot be opened, a scope or key it refuses, a result it cannot record) would make
        // every check compare one failure with another and pass. A body (or reconcile
        // function) that returned rerun's `Error` as its own (a declined charge) is compared.
        if let Err(RunError {
            text, rerun: true, ..
        }) = &result
        {
            fail(
                report,
                format!("the clean run failed with rerun's own error: {text}; every rerun is compared with a clean run, which must succeed or fail in its body (check the world's store, the operation's key and its result)"),
            );
            drop(world);
            dir.remove();
            return None;
        }
        let observed = (self.observe)(&world);
        drop(world);
        dir.remove();
        Some(Clean { result, observed })
    }

    /// Check 1: twice in a row, on one fresh world.
    fn twice(&self, hook: &Installed, clean: &Clean<T, O>, report: &mut Report) {
        let started = Instant::now();
        let check = self.in_fresh_world(Mode::Twice, None, |dir, world| {
            hook.arm(Action::Record);
            let first = self.run(world);
            let second = self.run(world);
            let (first, second) = match (first, second) {
                (Ran::Returned(a), Ran::Returned(b)) => (a, b),
                (Ran::Panicked(msg), _) | (_, Ran::Panicked(msg)) => {
                    return Err(format!("the operation panicked: {msg}"))
                }
                _ => return Err("the operation crashed outside a crash check".into()),
            };
            let observed = (self.observe)(world);
            let mut check = self.judge(Mode::Twice, None, clean, &second, &observed, dir, started);
            if check.verdict == Verdict::Converged && !same_result(&first, &second) {
                check.verdict = Verdict::Diverged;
                check.side_by_side = Some(side_by_side(
                    "first run",
                    &result_text(&first),
                    "second run",
                    &result_text(&second),
                ));
            }
            Ok(check)
        });
        report.checks.push(check);
    }

    /// Check 2, in process: unwind at the point, then rerun on the same world.
    fn crash_in_process(&self, hook: &Installed, clean: &Clean<T, O>, point: &PointId) -> Check {
        let started = Instant::now();
        self.in_fresh_world(Mode::InProcess, Some(point), |dir, world| {
            hook.arm(Action::Crash(point.clone()));
            let crashed = self.run(world);
            if !hook.fired() {
                return Ok(Check {
                    mode: Mode::InProcess,
                    point: Some(point.clone()),
                    verdict: Verdict::NotReached("the run ended without passing it".into()),
                    side_by_side: None,
                    duplicates: Vec::new(),
                    elapsed: started.elapsed(),
                });
            }
            if let Ran::Panicked(msg) = crashed {
                return Err(format!("the operation panicked before the point: {msg}"));
            }
            // An async call gives its claim back on the lease keeper's thread (a destructor
            // cannot await): rerun once that happened, as a later request would.
            if !crate::runtime::keeper::keeper().settle(Duration::from_secs(10)) {
                return Err("the crashed run's claim was not given back within 10 s".into());
            }
            hook.arm(Action::Record);
            let rerun = match self.run(world) {
                Ran::Returned(r) => r,
                Ran::Panicked(msg) => return Err(format!("the rerun panicked: {msg}")),
                Ran::Crashed => return Err("the rerun crashed".into()),
            };
            let observed = (self.observe)(world);
            Ok(self.judge(
                Mode::InProcess,
                Some(point),
                clean,
                &rerun,
                &observed,
                dir,
                started,
            ))
        })
    }

    /// Check 2, for real: a child process is killed at the point; a fresh world on the same
    /// directory reruns.
    fn crash_for_real(
        &self,
        hook: &Installed,
        clean: &Clean<T, O>,
        point: &PointId,
        test_name: &str,
    ) -> Check {
        let started = Instant::now();
        let dir = match WorldDir::temporary(&self.name) {
            Ok(dir) => dir,
            Err(e) => {
                return failed(
                    Mode::RealKill,
                    Some(point.clone()),
                    format!("cannot create a world directory: {e}"),
                    started.elapsed(),
                )
            }
        };
        let outcome =
            match child::kill_at(test_name, &self.name, point, dir.path(), self.child_timeout) {
                Ok(_pid) => self.rerun_after_kill(hook, clean, point, &dir, started),
                Err(child::KillError::NotReached(why)) => Ok(Check {
                    mode: Mode::RealKill,
                    point: Some(point.clone()),
                    verdict: Verdict::NotReached(why),
                    side_by_side: None,
                    duplicates: Vec::new(),
                    elapsed: started.elapsed(),
                }),
                Err(child::KillError::Failed(why)) => Err(why),
            };
        let check = outcome.unwrap_or_else(|why| {
            failed(Mode::RealKill, Some(point.clone()), why, started.elapsed())
        });
        dir.remove();
        check
    }

    /// After the kill: a fresh world on the killed child's directory reruns the operation.
    fn rerun_after_kill(
        &self,
        hook: &Installed,
        clean: &Clean<T, O>,
        point: &PointId,
        dir: &WorldDir,
        started: Instant,
    ) -> Result<Check, String> {
        let world = (self.world)(dir).map_err(|e| {
            format!("the world constructor failed on the killed child's directory: {e}")
        })?;
        hook.arm(Action::Record);
        let rerun = match self.run(&world) {
            Ran::Returned(r) => r,
            Ran::Panicked(msg) => return Err(format!("the rerun panicked: {msg}")),
            Ran::Crashed => return Err("the rerun crashed".into()),
        };
        let observed = (self.observe)(&world);
        Ok(self.judge(
            Mode::RealKill,
            Some(point),
            clean,
            &rerun,
            &observed,
            dir,
            started,
        ))
    }

    /// In the child process of a real kill: run the operation until the point and wait there
    /// to be killed. Returns only if the order is not for this harness's operation.
    fn serve_as_child(&self, order: &child::Order) -> ! {
        child::die_with_parent();
        let dir = WorldDir::at(&order.dir);
        let world = match (self.world)(&dir) {
            Ok(w) => w,
            Err(e) => child::missed(&format!("the world constructor failed in the child: {e}")),
        };
        let hook = Installed::install();
        hook.arm(Action::Call(order.point.clone(), child::stand_at_point()));
        let ran = self.run(&world);
        let why = match ran {
            Ran::Panicked(msg) => format!("the operation panicked in the child: {msg}"),
            _ => format!("the run in the child never passed {}", order.point),
        };
        drop(hook);
        child::missed(&why)
    }

    /// Builds a fresh world, runs `f` on it, removes it.
    fn in_fresh_world(
        &self,
        mode: Mode,
        point: Option<&PointId>,
        f: impl FnOnce(&WorldDir, &W) -> Result<Check, String>,
    ) -> Check {
        let started = Instant::now();
        let dir = match WorldDir::temporary(&self.name) {
            Ok(dir) => dir,
            Err(e) => {
                return failed(
                    mode,
                    point.cloned(),
                    format!("cannot create a world directory: {e}"),
                    started.elapsed(),
                )
            }
        };
        let check = match (self.world)(&dir) {
            Ok(world) => f(&dir, &world)
                .unwrap_or_else(|why| failed(mode, point.cloned(), why, started.elapsed())),
            Err(e) => failed(
                mode,
                point.cloned(),
                format!("the world constructor failed: {e}"),
                started.elapsed(),
            ),
        };
        dir.remove();
        check
    }

    fn run(&self, world: &W) -> Ran<T> {
        match catch_unwind(AssertUnwindSafe(|| (self.op)(world))) {
            Ok(result) => Ran::Returned(result),
            Err(payload) if payload.is::<CrashHere>() => Ran::Crashed,
            Err(payload) => Ran::Panicked(panic_message(payload.as_ref())),
        }
    }

    /// The verdict of a rerun against the clean run.
    #[allow(clippy::too_many_arguments)]
    fn judge(
        &self,
        mode: Mode,
        point: Option<&PointId>,
        clean: &Clean<T, O>,
        rerun: &Result<T, RunError>,
        observed: &O,
        dir: &WorldDir,
        started: Instant,
    ) -> Check {
        let duplicates = dir.effects().duplicates();
        let same = same_result(&clean.result, rerun) && clean.observed == *observed;
        let side = (!same).then(|| {
            let title = match point {
                None => "run twice".to_owned(),
                Some(p) => format!("crash at {p}, then rerun"),
            };
            side_by_side(
                if point.is_none() {
                    "run once"
                } else {
                    "clean run"
                },
                &format!("{}\n{:#?}", result_text(&clean.result), clean.observed),
                &title,
                &format!("{}\n{:#?}", result_text(rerun), observed),
            )
        });
        let verdict = if !duplicates.is_empty() {
            Verdict::DuplicateEffect
        } else if same {
            Verdict::Converged
        } else if rerun.as_ref().err().is_some_and(|e| e.outcome_unknown) {
            Verdict::OutcomeUnknown
        } else {
            Verdict::Diverged
        };
        Check {
            mode,
            point: point.cloned(),
            verdict,
            side_by_side: side,
            duplicates,
            elapsed: started.elapsed(),
        }
    }
}

/// What the clean run returned and left.
struct Clean<T, O> {
    result: Result<T, RunError>,
    observed: O,
}

fn failed(mode: Mode, point: Option<PointId>, why: String, elapsed: Duration) -> Check {
    Check {
        mode,
        point,
        verdict: Verdict::Failed(why),
        side_by_side: None,
        duplicates: Vec::new(),
        elapsed,
    }
}

fn same_result<T: PartialEq>(a: &Result<T, RunError>, b: &Result<T, RunError>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => a == b,
        (Err(a), Err(b)) => a.text == b.text,
        _ => false,
    }
}

fn result_text<T: Debug>(r: &Result<T, RunError>) -> String {
    match r {
        Ok(v) => format!("returned Ok({v:?})"),
        Err(e) => format!("returned Err({})", e.text),
    }
}

/// Keeps an operation's error as text, noting whether rerun failed it (and with an unknown
/// outcome). `end` is how the last call on the harness's thread ended: it tells rerun's failure
/// from the body's whatever type the operation wraps errors in. Without it (the call ran on
/// another thread, or the operation failed outside any call), the error's type tells, and a
/// wrapped error its text.
fn run_error<E: Display + 'static>(e: &E, end: CallEnd) -> RunError {
    let text = e.to_string();
    let own = (e as &dyn Any).downcast_ref::<Error>();
    let (rerun, outcome_unknown) = match end {
        CallEnd::Failed { unknown } => (true, unknown),
        // The body's own error: rerun's `Error` returned by the body (a nested call's, or a
        // declined charge) is the operation's result, compared like any other.
        CallEnd::BodyFailed => (false, unknown_in(own, &text)),
        CallEnd::Returned | CallEnd::None => (own.is_some(), unknown_in(own, &text)),
    };
    RunError {
        text,
        outcome_unknown,
        rerun,
    }
}

/// Whether an error that rerun did not note is an unknown outcome: rerun's own `Error` by its
/// variant; a user's error type that wraps rerun's (`#[error(transparent)]`, or a message that
/// includes it) by its text.
fn unknown_in(own: Option<&Error>, text: &str) -> bool {
    match own {
        Some(err) => matches!(err, Error::OutcomeUnknown { .. }),
        None => text.contains("its outcome is unknown"),
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".to_owned())
}
