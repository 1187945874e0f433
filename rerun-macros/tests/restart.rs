//! Replay across process restarts: each step runs in a fresh child process (this test binary,
//! re-run) against one SQLite file; some children die mid-body (`abort`), as a killed process
//! would, and the next child converges.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use rerun_core::{idempotent, Error, Reconciled, SqliteStore};

const MODE: &str = "RERUN_MACROS_RESTART_MODE";
const DIR: &str = "RERUN_MACROS_RESTART_DIR";

/// The world the bodies change: one line per effect, visible across processes.
fn effect(dir: &Path, what: &str) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("effects"))
        .unwrap();
    // One write of the whole line, so lines appended at once never interleave.
    f.write_all(format!("{what}\n").as_bytes()).unwrap();
    f.sync_all().unwrap();
}

fn effects(dir: &Path, what: &str) -> usize {
    std::fs::read_to_string(dir.join("effects"))
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == what)
        .count()
}

fn die_if(crash: bool) {
    if crash {
        // Killed halfway: no unwinding, no destructor gives the claim back.
        std::process::abort();
    }
}

#[idempotent(key = order, scope = "r.ship", store = store, skip(dir, crash))]
fn ship(store: &SqliteStore, order: &str, dir: &Path, crash: bool) -> Result<String, Error> {
    effect(dir, &format!("ship {order}"));
    die_if(crash);
    Ok(format!("shipped {order} by pid {}", std::process::id()))
}

fn lookup(
    _store: &SqliteStore,
    order: &str,
    dir: &&Path,
    _crash: &bool,
) -> Result<Reconciled<String>, Error> {
    Ok(if effects(dir, &format!("charge {order}")) > 0 {
        Reconciled::Done(format!("charged {order} (found by reconcile)"))
    } else {
        Reconciled::NotDone
    })
}

#[idempotent(key = order, scope = "r.charge", store = store, skip(dir, crash), once, reconcile = lookup)]
fn charge(store: &SqliteStore, order: &str, dir: &Path, crash: bool) -> Result<String, Error> {
    effect(dir, &format!("charge {order}"));
    die_if(crash);
    Ok(format!("charged {order}"))
}

#[idempotent(key = order, scope = "r.email", store = store, skip(dir, crash), once)]
fn email(store: &SqliteStore, order: &str, dir: &Path, crash: bool) -> Result<String, Error> {
    effect(dir, &format!("email {order}"));
    die_if(crash);
    Ok(format!("emailed {order}"))
}

/// The child: runs one step and prints its outcome.
#[test]
fn child() {
    let (Ok(mode), Ok(dir)) = (std::env::var(MODE), std::env::var(DIR)) else {
        return; // not a child: nothing to do
    };
    let dir = PathBuf::from(dir);
    let store = SqliteStore::open(dir.join("rerun.sqlite3")).unwrap();
    let parts: Vec<&str> = mode.split(':').collect();
    let (op, order, crash) = (parts[0], parts[1], parts.get(2) == Some(&"crash"));
    let out = match op {
        "ship" => ship(&store, order, &dir, crash),
        "charge" => charge(&store, order, &dir, crash),
        "email" => email(&store, order, &dir, crash),
        other => panic!("unknown step {other}"),
    };
    match out {
        Ok(v) => println!("\nOUTCOME:{v}"),
        Err(e) => println!("\nOUTCOME:error {}", e.kind_name()),
    }
}

/// Runs one step in a fresh process; `None` when the process died.
fn step(dir: &Path, mode: &str) -> Option<String> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(MODE, mode)
        .env(DIR, dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let outcome = stdout
        .lines()
        .find_map(|l| l.split_once("OUTCOME:").map(|(_, v)| v.to_owned()));
    if out.status.success() {
        assert!(outcome.is_some(), "child printed no outcome: {stdout}");
        outcome
    } else {
        None
    }
}

#[test]
fn replays_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let first = step(d, "ship:o1").unwrap();
    assert_eq!(
        step(d, "ship:o1").unwrap(),
        first,
        "a restarted process replays the result"
    );
    assert_eq!(effects(d, "ship o1"), 1);
}

#[test]
fn a_replayable_function_killed_halfway_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_eq!(step(d, "ship:o2:crash"), None, "the child was meant to die");
    // Same host, holder process gone: taken over at once, the body runs again and completes.
    let second = step(d, "ship:o2").unwrap();
    assert!(second.starts_with("shipped o2"));
    assert_eq!(step(d, "ship:o2").unwrap(), second);
    assert_eq!(effects(d, "ship o2"), 2);
}

#[test]
fn a_once_function_killed_halfway_is_reconciled() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_eq!(step(d, "charge:o3:crash"), None);
    assert_eq!(
        step(d, "charge:o3").unwrap(),
        "charged o3 (found by reconcile)"
    );
    assert_eq!(
        step(d, "charge:o3").unwrap(),
        "charged o3 (found by reconcile)"
    );
    assert_eq!(effects(d, "charge o3"), 1, "the card was charged twice");
}

#[test]
fn a_once_function_killed_halfway_without_reconcile_is_outcome_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_eq!(step(d, "email:o4:crash"), None);
    assert_eq!(step(d, "email:o4").unwrap(), "error outcome_unknown");
    assert_eq!(step(d, "email:o4").unwrap(), "error outcome_unknown");
    assert_eq!(effects(d, "email o4"), 1, "the email was sent twice");
}
