//! The store conformance suite: every guarantee of contract section 6, checked on any store.
//!
//! A store author implements [`Factory`] and calls [`run`] from a `#[test]`:
//!
//! ```no_run
//! use rerun_core::testing::conformance::{self, Factory};
//! use rerun_core::{Error, SqliteStore};
//!
//! struct Sqlite(tempfile::TempDir);
//! impl Factory for Sqlite {
//!     type Store = SqliteStore;
//!     fn name(&self) -> &str { "sqlite" }
//!     fn fresh(&self) -> Result<(SqliteStore, String), Error> {
//!         let path = self.0.path().join(format!("{}.sqlite3", conformance::unique("db")));
//!         Ok((SqliteStore::open(&path)?, path.display().to_string()))
//!     }
//!     fn reopen(&self, locator: &str) -> Result<SqliteStore, Error> {
//!         SqliteStore::open(locator)
//!     }
//! }
//!
//! #[test]
//! fn sqlite_conforms() {
//!     conformance::run(&Sqlite(tempfile::tempdir().unwrap()));
//! }
//! ```
//!
//! The multi-process checks re-run the calling test binary as child processes (same test name,
//! `--exact`), which find their role in the environment: [`run`] must be the first thing the
//! test does. The numbers of calls follow `../shared/design/reliability.md`; set
//! `RERUN_CONFORMANCE_SCALE=0.1` to run a tenth of them.

mod checks;
mod faults;
mod isolation;
mod processes;
mod report;
mod values;
mod wrappers;

use std::sync::atomic::{AtomicU64, Ordering};

pub use report::{CheckReport, Report, Tally};

use crate::error::Error;
use crate::store::DynStore;

/// Makes fresh, isolated stores for the suite, and reopens them in child processes.
pub trait Factory: Send + Sync + 'static {
    /// The store under test.
    type Store: DynStore + 'static;
    /// A short name for reports (`"sqlite"`).
    fn name(&self) -> &str;
    /// A store with no records, isolated from every other fresh store (its own file, table or
    /// key prefix), and a locator string with which [`Factory::reopen`] opens the same store.
    fn fresh(&self) -> Result<(Self::Store, String), Error>;
    /// Opens the store that `fresh` returned `locator` for, possibly in another process.
    fn reopen(&self, locator: &str) -> Result<Self::Store, Error>;
    /// Whether several processes can share one store (`false` for an in-process store); the
    /// multi-process checks run only when it is `true`.
    fn shared_between_processes(&self) -> bool {
        true
    }
    /// A fresh store whose backend the suite can make hang, and the switch that does it (a
    /// SQLite file write-locked by another connection, a TCP proxy that stops forwarding, see
    /// [`crate::testing::proxy::Proxy`]). `None` (the default) for a store without a backend
    /// that can hang; the deadline checks are then skipped.
    fn hanging(&self) -> Option<Result<Hanging<Self::Store>, Error>> {
        None
    }
}

/// A store whose backend can be made to hang, and the switch that does it.
pub type Hanging<S> = (S, Box<dyn Hang>);

/// Makes a store's backend hang, and recover: see [`Factory::hanging`].
pub trait Hang: Send + Sync {
    /// From now on, calls that reach the backend wait (a held write lock, a silent socket).
    fn freeze(&self);
    /// Calls get through again.
    fn thaw(&self);
    /// The store's own operation timeout (as it was opened with): every call must return
    /// within it, and calls made for a claim within a third of the claim's lease if sooner.
    fn op_timeout(&self) -> std::time::Duration;
}

/// The lease of the checks that wait one out: long enough for a claim on a loaded machine to
/// be renewed in time, short enough to wait out.
pub(super) const SHORT_LEASE: std::time::Duration = std::time::Duration::from_secs(1);

/// A name unique in this machine's recent history, for files, tables and prefixes.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// How much of the suite to run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Multiplies the number of calls of the load checks (1.0 = the numbers of the reliability plan).
    pub scale: f64,
    /// Run the multi-process checks (when the factory's store can be shared).
    pub processes: bool,
}

impl Default for Settings {
    fn default() -> Self {
        let scale = std::env::var("RERUN_CONFORMANCE_SCALE")
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|s: &f64| *s > 0.0)
            .unwrap_or(1.0);
        Settings {
            scale,
            processes: true,
        }
    }
}

impl Settings {
    pub(crate) fn n(&self, full: u64) -> u64 {
        ((full as f64 * self.scale).round() as u64).max(1)
    }
}

/// Runs the whole suite with default [`Settings`], prints its report, and panics naming every
/// violation if there is one.
pub fn run<F: Factory>(factory: &F) -> Report {
    run_with(factory, Settings::default())
}

/// [`run`] with explicit settings.
pub fn run_with<F: Factory>(factory: &F, settings: Settings) -> Report {
    if processes::child_role_requested() {
        processes::run_child(factory);
    }
    let mut report = Report::new(factory.name());
    checks::run_all(factory, &settings, &mut report);
    if settings.processes && factory.shared_between_processes() {
        processes::run_all(factory, &settings, &mut report);
    }
    println!("{report}");
    let violations = report.violations();
    if !violations.is_empty() {
        panic!(
            "the {} store violates {} guarantee(s):\n  - {}",
            factory.name(),
            violations.len(),
            violations.join("\n  - ")
        );
    }
    report
}
