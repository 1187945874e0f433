//! The harness's report: one verdict per check, and the two states side by side on a failure.

use std::fmt;
use std::time::Duration;

use super::hook::PointId;
use super::world::Duplicate;

/// How a check ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// The operation ran twice in a row on one fresh world.
    Twice,
    /// The run crashed at the point by unwinding (the runtime's cleanup ran); the rerun used
    /// the same world in the same process.
    InProcess,
    /// A child process was killed with SIGKILL at the point (nothing cleaned up); a fresh
    /// world opened on the same directory reran the operation.
    RealKill,
}

impl Mode {
    /// A short label for reports.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Twice => "twice",
            Mode::InProcess => "in process",
            Mode::RealKill => "SIGKILL",
        }
    }
}

/// The verdict of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The rerun ended in the clean run's state, with its result.
    Converged,
    /// The rerun of an at-most-once operation refused with `OutcomeUnknown`: its effect
    /// happened at most once, and a `reconcile` function (or an operator's `forget`) decides
    /// the rest. A pass unless [`super::SafeToRerun::require_convergence`] is set.
    OutcomeUnknown,
    /// The rerun ended in another state or with another result than the clean run.
    Diverged,
    /// A non-replayable effect happened more than once.
    DuplicateEffect,
    /// The run never reached the point (the operation does not pass the same points on every
    /// run, or the child process ended first); says what happened instead.
    NotReached(String),
    /// The check could not run: the world could not be built, the child could not be started,
    /// the operation panicked.
    Failed(String),
}

/// One check: a mode, the crash point (none for [`Mode::Twice`]) and its verdict.
#[derive(Debug, Clone)]
pub struct Check {
    /// How the check ran.
    pub mode: Mode,
    /// The crash point, for [`Mode::InProcess`] and [`Mode::RealKill`].
    pub point: Option<PointId>,
    /// The verdict.
    pub verdict: Verdict,
    /// On a divergence: the clean run's state and the rerun's, side by side.
    pub side_by_side: Option<String>,
    /// Effects recorded more than once.
    pub duplicates: Vec<Duplicate>,
    /// How long the check took (for a real kill: the child, the kill and the rerun).
    pub elapsed: Duration,
}

impl Check {
    /// Whether the check passed; `strict` makes `OutcomeUnknown` a failure.
    pub fn passed(&self, strict: bool) -> bool {
        match self.verdict {
            Verdict::Converged => true,
            Verdict::OutcomeUnknown => !strict,
            _ => false,
        }
    }

    fn title(&self) -> String {
        match &self.point {
            None => "run twice in a row".to_owned(),
            Some(p) => format!("{:<10}  crash at {p}", self.mode.label()),
        }
    }
}

/// What the harness found: every check's verdict.
///
/// Its `Display` is the text a failing test prints: each check on a line, and for each
/// failure the point, what went wrong, and the two states side by side.
///
/// ```
/// use std::cell::Cell;
/// use rerun_core::testing::{Mode, SafeToRerun, Verdict, WorldDir};
///
/// // A counter without a key: running it twice counts twice.
/// let report = SafeToRerun::new(
///     "visits",
///     |_: &WorldDir| Ok::<_, String>(Cell::new(0u32)),
///     |c: &Cell<u32>| { c.set(c.get() + 1); Ok::<_, String>(()) },
///     |c: &Cell<u32>| c.get(),
/// )
/// .in_process_only()
/// .check();
/// assert!(!report.passed());
/// let check = report.failures().next().unwrap();
/// assert_eq!((check.mode, &check.verdict), (Mode::Twice, &Verdict::Diverged));
/// assert!(report.to_string().contains("running it twice ended in another state"));
/// ```
#[derive(Debug, Clone)]
pub struct Report {
    pub(crate) name: String,
    pub(crate) test_name: Option<String>,
    pub(crate) points: Vec<PointId>,
    pub(crate) checks: Vec<Check>,
    pub(crate) strict: bool,
    pub(crate) elapsed: Duration,
    pub(crate) notes: Vec<String>,
}

impl Report {
    pub(crate) fn new(name: &str, strict: bool) -> Report {
        Report {
            name: name.to_owned(),
            test_name: None,
            points: Vec::new(),
            checks: Vec::new(),
            strict,
            elapsed: Duration::ZERO,
            notes: Vec::new(),
        }
    }

    /// The harness's name (the one given to [`super::SafeToRerun::new`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The crash points of a clean run, in the order it passed them.
    pub fn points(&self) -> &[PointId] {
        &self.points
    }

    /// Every check, in the order they ran.
    pub fn checks(&self) -> &[Check] {
        &self.checks
    }

    /// The checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.passed(self.strict))
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.failures().next().is_none()
    }

    /// How long the whole harness took.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// How long the checks of one mode took together (e.g. the real-kill sweep).
    pub fn elapsed_in(&self, mode: Mode) -> Duration {
        self.checks
            .iter()
            .filter(|c| c.mode == mode)
            .map(|c| c.elapsed)
            .sum()
    }

    /// Fails the test with the report's text unless every check passed.
    #[track_caller]
    pub fn assert_passed(&self) {
        if !self.passed() {
            panic!("the operation is not safe to rerun:\n{self}");
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "safe-to-rerun: {}", self.name)?;
        if let Some(test) = &self.test_name {
            write!(f, " (test {test})")?;
        }
        writeln!(f)?;
        let points: Vec<String> = self.points.iter().map(|p| p.to_string()).collect();
        if points.is_empty() {
            writeln!(
                f,
                "crash points of a clean run: none (no rerun call or checkpoint! on the thread that ran it)"
            )?;
        } else {
            writeln!(f, "crash points of a clean run: {}", points.join(", "))?;
        }
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        for check in &self.checks {
            let status = match (&check.verdict, check.passed(self.strict)) {
                (Verdict::OutcomeUnknown, true) => "unknown",
                (_, true) => "ok",
                (_, false) => "FAILED",
            };
            write!(f, "  {status:<7} {}", check.title())?;
            if check.mode == Mode::RealKill {
                write!(f, " ({} ms)", check.elapsed.as_millis())?;
            }
            writeln!(f)?;
        }
        for check in self.checks.iter().filter(|c| !c.passed(self.strict)) {
            writeln!(f)?;
            write_failure(f, check)?;
        }
        let failed = self.failures().count();
        let count = |m| self.checks.iter().filter(|c| c.mode == m).count();
        write!(
            f,
            "{}: {} of {} checks ok (in process {}, SIGKILL {}) in {:.2} s",
            if failed == 0 { "passed" } else { "FAILED" },
            self.checks.len() - failed,
            self.checks.len(),
            count(Mode::InProcess),
            count(Mode::RealKill),
            self.elapsed.as_secs_f64()
        )
    }
}

fn write_failure(f: &mut fmt::Formatter<'_>, check: &Check) -> fmt::Result {
    let at = match &check.point {
        None => "run twice in a row".to_owned(),
        Some(p) => format!("crash at `{p}` ({})", check.mode.label()),
    };
    match &check.verdict {
        Verdict::Converged => {}
        Verdict::OutcomeUnknown => writeln!(
            f,
            "{at}: the rerun refused with OutcomeUnknown; give the operation a `reconcile` function so it converges"
        )?,
        Verdict::Diverged if check.mode == Mode::Twice => writeln!(
            f,
            "{at}: running it twice ended in another state than running it once"
        )?,
        Verdict::Diverged => writeln!(f, "{at}: the rerun ended in another state than a clean run")?,
        Verdict::DuplicateEffect => writeln!(f, "{at}: a non-replayable effect happened twice")?,
        Verdict::NotReached(why) => writeln!(
            f,
            "{at}: the run never reached this point ({why}); the operation must pass the same points on every run"
        )?,
        Verdict::Failed(why) => writeln!(f, "{at}: the check could not run: {why}")?,
    }
    for duplicate in &check.duplicates {
        writeln!(f, "    {duplicate}")?;
    }
    if let Some(table) = &check.side_by_side {
        for line in table.lines() {
            writeln!(f, "    {line}")?;
        }
    }
    Ok(())
}

/// Two texts side by side, `|` between equal lines and `≠` between lines that differ.
pub(crate) fn side_by_side(left_title: &str, left: &str, right_title: &str, right: &str) -> String {
    let l: Vec<&str> = left.lines().collect();
    let r: Vec<&str> = right.lines().collect();
    let width = l
        .iter()
        .map(|s| s.chars().count())
        .chain([left_title.chars().count()])
        .max()
        .unwrap_or(0);
    let mut out = format!("{left_title:<width$} | {right_title}\n");
    for i in 0..l.len().max(r.len()) {
        let a = l.get(i).copied().unwrap_or("");
        let b = r.get(i).copied().unwrap_or("");
        let mark = if a == b { '|' } else { '≠' };
        out.push_str(format!("{a:<width$} {mark} {b}").trim_end());
        out.push('\n');
    }
    out
}
