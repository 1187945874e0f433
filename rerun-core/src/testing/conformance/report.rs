//! What each check counted, and the table the suite prints.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use crate::error::Error;

/// What one check counted.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Calls made.
    pub calls: u64,
    /// Body executions.
    pub bodies: u64,
    /// Distinct results returned (across keys, for one-key checks: must be 1).
    pub results: BTreeSet<String>,
    /// Typed errors by kind.
    pub errors: BTreeMap<&'static str, u64>,
    /// Broken guarantees, in words.
    pub violations: Vec<String>,
    /// Notes (timings and the like).
    pub notes: Vec<String>,
}

impl Tally {
    /// Counts an error.
    pub fn error(&mut self, e: &Error) {
        *self.errors.entry(e.kind_name()).or_default() += 1;
    }
    /// Records a violation unless `ok`.
    pub fn expect(&mut self, ok: bool, what: String) {
        if !ok {
            self.violations.push(what);
        }
    }
    /// Adds another tally's counts.
    pub fn merge(&mut self, other: Tally) {
        self.calls += other.calls;
        self.bodies += other.bodies;
        self.results.extend(other.results);
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.violations.extend(other.violations);
        self.notes.extend(other.notes);
    }
}

/// One check's outcome.
#[derive(Debug, Clone)]
pub struct CheckReport {
    /// The check's name, e.g. `thread_storm`.
    pub check: &'static str,
    /// What it counted.
    pub tally: Tally,
    /// How long it took.
    pub elapsed: Duration,
}

/// The suite's outcome on one store.
#[derive(Debug, Clone)]
pub struct Report {
    /// The store's name.
    pub store: String,
    /// Every check, in the order run.
    pub checks: Vec<CheckReport>,
}

impl Report {
    pub(crate) fn new(store: &str) -> Report {
        Report {
            store: store.to_owned(),
            checks: Vec::new(),
        }
    }

    /// Every violation, prefixed with its check.
    pub fn violations(&self) -> Vec<String> {
        self.checks
            .iter()
            .flat_map(|c| {
                c.tally
                    .violations
                    .iter()
                    .map(move |v| format!("{}: {v}", c.check))
            })
            .collect()
    }

    /// The check named `name`.
    pub fn check(&self, name: &str) -> Option<&CheckReport> {
        self.checks.iter().find(|c| c.check == name)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "conformance of the {} store", self.store)?;
        writeln!(
            f,
            "{:<24} {:>8} {:>7} {:>8} {:>9}  {:<40} notes",
            "check", "calls", "bodies", "results", "ms", "errors"
        )?;
        for c in &self.checks {
            let errors = c
                .tally
                .errors
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ");
            writeln!(
                f,
                "{:<24} {:>8} {:>7} {:>8} {:>9}  {:<40} {}{}",
                c.check,
                c.tally.calls,
                c.tally.bodies,
                c.tally.results.len(),
                c.elapsed.as_millis(),
                errors,
                c.tally.notes.join("; "),
                if c.tally.violations.is_empty() {
                    String::new()
                } else {
                    format!(" VIOLATIONS: {}", c.tally.violations.len())
                }
            )?;
        }
        write!(f, "violations: {}", self.violations().len())
    }
}
