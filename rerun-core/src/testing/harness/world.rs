//! The world a harness run happens in: a fresh directory, and a durable log of effects.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The name of the effect log inside a world directory.
pub const EFFECT_LOG: &str = "rerun-effects.log";

/// The directory of one world: every run of the harness gets a fresh, empty one.
///
/// The world constructor keeps its state under [`WorldDir::path`] (a SQLite store, files) so
/// that a fresh process can reopen it after a kill; it is called again on the same directory in
/// that process, so it must open what is there rather than start from nothing.
///
/// ```
/// use rerun_core::testing::WorldDir;
/// let dir = WorldDir::temporary("doc")?;
/// dir.effects().record("email.sent", "user-42");
/// assert_eq!(dir.effects().count("email.sent", "user-42"), 1);
/// dir.remove();
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct WorldDir {
    path: PathBuf,
}

impl WorldDir {
    /// Opens an existing directory as a world (the harness uses it in the rerun process).
    pub fn at(path: impl Into<PathBuf>) -> WorldDir {
        WorldDir { path: path.into() }
    }

    /// Creates a fresh, empty directory under the system's temporary directory.
    pub fn temporary(label: &str) -> std::io::Result<WorldDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let label: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!(
                "rerun-harness-{}-{}-{n}",
                std::process::id(),
                label
            ));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(WorldDir { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// The log of non-replayable effects of this world.
    pub fn effects(&self) -> Effects {
        Effects {
            log: Arc::new(self.path.join(EFFECT_LOG)),
        }
    }

    /// The SQLite store of this world, at `rerun.sqlite3` in the directory.
    #[cfg(feature = "sqlite")]
    pub fn sqlite_store(&self) -> Result<crate::SqliteStore, crate::Error> {
        crate::SqliteStore::open(self.path.join("rerun.sqlite3"))
    }

    /// Deletes the directory and everything in it; a failure is ignored (it is temporary).
    pub fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A durable log of effects that must not happen twice: a charge, an email, a message sent.
///
/// Each [`Effects::record`] appends one line to a file in the world's directory with one
/// `write` call, so the count survives a process killed with SIGKILL right after it. The
/// harness fails any run in which one `(effect, key)` was recorded more than once.
///
/// ```
/// use rerun_core::testing::WorldDir;
/// let world = WorldDir::temporary("effects-doc")?;
/// let effects = world.effects();
/// effects.record("card.charged", "ord_1");
/// effects.record("card.charged", "ord_1");
/// let twice = &effects.duplicates()[0];
/// assert_eq!((twice.effect.as_str(), twice.key.as_str(), twice.times.len()), ("card.charged", "ord_1", 2));
/// world.remove();
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Effects {
    log: Arc<PathBuf>,
}

/// Keeps a field on one line of the log, told apart from every other: a backslash, tab, line
/// feed and carriage return are escaped (`\\`, `\t`, `\n`, `\r`).
fn field(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// A field as it was recorded ([`field`] undone).
fn unfield(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

impl Effects {
    /// Records that the effect `effect` happened for `key` (its dedupe identity: the order id,
    /// the recipient and message id, …), with the process and, inside the body of a sync
    /// idempotent call, the claim's fence ([`crate::checkpoint::current_fence`]).
    ///
    /// Never fails the operation: a log that cannot be written (a broken temporary directory)
    /// is reported on stderr, and the harness reports the effect count it could read.
    pub fn record(&self, effect: &str, key: impl std::fmt::Display) {
        let fence =
            crate::checkpoint::current_fence().map_or_else(|| "-".to_owned(), |f| f.to_string());
        let line = format!(
            "{}\t{}\t{}\t{fence}\n",
            field(effect),
            field(&key.to_string()),
            std::process::id()
        );
        let written = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&*self.log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!(
                "rerun harness: could not record effect {effect:?} in {}: {e}",
                self.log.display()
            );
        }
    }

    /// Every `(effect, key)` recorded, with each time it happened.
    pub fn tally(&self) -> BTreeMap<(String, String), Vec<Occurrence>> {
        let mut out: BTreeMap<(String, String), Vec<Occurrence>> = BTreeMap::new();
        let Ok(text) = std::fs::read_to_string(&*self.log) else {
            return out;
        };
        for line in text.lines() {
            let mut parts = line.split('\t');
            let (Some(effect), Some(key)) = (parts.next(), parts.next()) else {
                continue;
            };
            let pid = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            let fence = parts.next().and_then(|f| f.parse().ok());
            out.entry((unfield(effect), unfield(key)))
                .or_default()
                .push(Occurrence { pid, fence });
        }
        out
    }

    /// How many times `effect` was recorded for `key`.
    pub fn count(&self, effect: &str, key: impl std::fmt::Display) -> usize {
        self.tally()
            .get(&(effect.to_owned(), key.to_string()))
            .map_or(0, Vec::len)
    }

    /// The effects recorded more than once.
    pub fn duplicates(&self) -> Vec<Duplicate> {
        self.tally()
            .into_iter()
            .filter(|(_, times)| times.len() > 1)
            .map(|((effect, key), times)| Duplicate { effect, key, times })
            .collect()
    }
}

/// An effect that happened more than once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// The effect's name.
    pub effect: String,
    /// The key it happened for.
    pub key: String,
    /// Each time it happened.
    pub times: Vec<Occurrence>,
}

/// One time an effect happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occurrence {
    /// The process that did it.
    pub pid: u32,
    /// The fence of the claim whose body did it (`None` outside the body of a sync call).
    pub fence: Option<u64>,
}

impl std::fmt::Display for Duplicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let by: Vec<String> = self
            .times
            .iter()
            .map(|o| match o.fence {
                Some(fence) => format!("process {} under fence {fence}", o.pid),
                None => format!("process {} outside a claim", o.pid),
            })
            .collect();
        write!(
            f,
            "effect {:?} for key {:?} happened {} times (at most once allowed): {}",
            self.effect,
            self.key,
            self.times.len(),
            by.join(", ")
        )
    }
}
