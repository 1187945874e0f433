//! Lock files that heal themselves, with real processes and SIGKILL.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rerun_core::lock::{LockError, LockFile};

const CHILD: &str = "RERUN_LOCK_TEST_PATH";

/// Not a test of its own: the child process of the tests below takes the lock and waits.
#[test]
fn child_process() {
    let Ok(path) = std::env::var(CHILD) else {
        return;
    };
    let lock = LockFile::try_acquire(&path).unwrap();
    println!("locked {}", lock.holder().pid);
    std::thread::sleep(Duration::from_secs(120));
}

/// Starts a child that holds the lock at `path`; returns once it holds it.
fn holder_process(path: &Path) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    assert!(
        rx.iter().any(|l| l.contains("locked ")),
        "the child never took the lock"
    );
    child
}

fn sigkill(child: &mut Child) {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
}

#[test]
fn a_second_taker_is_refused_with_the_holders_identity() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.lock");
    let lock = LockFile::try_acquire(&path).unwrap();
    assert_eq!(lock.holder().pid, std::process::id());
    let err = LockFile::try_acquire(&path).unwrap_err();
    let text = err.to_string();
    println!("{text}");
    match err {
        LockError::Held {
            holder: Some(h), ..
        } => {
            assert_eq!(h.pid, std::process::id());
            assert!(text.contains(&format!("locked by process {} on {}", h.pid, h.host)));
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert!(text.contains("released as soon as that process exits"));
    lock.release();
    LockFile::try_acquire(&path).unwrap();
}

#[test]
fn a_killed_holders_lock_is_free_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.lock");
    let mut child = holder_process(&path);
    match LockFile::try_acquire(&path) {
        Err(LockError::Held {
            holder: Some(h), ..
        }) => assert_eq!(h.pid, child.id()),
        other => panic!("expected the child to hold it, got {other:?}"),
    }
    sigkill(&mut child);
    let started = Instant::now();
    let lock = LockFile::try_acquire(&path).unwrap();
    println!("taken {:?} after the holder's SIGKILL", started.elapsed());
    assert_eq!(lock.holder().pid, std::process::id());
    // The file now names us, not the dead process.
    assert_eq!(
        LockFile::read_holder(&path).map(|h| h.pid),
        Some(std::process::id())
    );
}

#[test]
fn a_waiting_taker_gets_the_lock_when_the_holder_dies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.lock");
    let mut child = holder_process(&path);
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        sigkill(&mut child);
        Instant::now()
    });
    let lock = LockFile::acquire(&path, Duration::from_secs(10)).unwrap();
    let taken = Instant::now();
    let killed = killer.join().unwrap();
    println!(
        "taken {:?} after the SIGKILL of {pid}",
        taken.saturating_duration_since(killed)
    );
    assert!(taken.saturating_duration_since(killed) < Duration::from_millis(500));
    drop(lock);
}

#[test]
fn a_child_process_does_not_inherit_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.lock");
    let lock = LockFile::try_acquire(&path).unwrap();
    // A long-lived child started while we hold the lock.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let fds = std::fs::read_dir(format!("/proc/{}/fd", sleeper.id())).unwrap();
    let canonical = path.canonicalize().unwrap();
    for fd in fds.filter_map(Result::ok) {
        let target = std::fs::read_link(fd.path()).unwrap_or_default();
        assert_ne!(target, canonical, "the child has the lock file open");
    }
    // If the child shared our open file, the lock would outlive our release of it.
    drop(lock);
    let again = LockFile::try_acquire(&path);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    again.unwrap();
}

#[test]
fn an_unwritable_place_is_a_typed_error() {
    let err = LockFile::try_acquire("/proc/rerun-no-such-dir/app.lock").unwrap_err();
    assert!(matches!(err, LockError::Io { .. }), "{err:?}");
    println!("{err}");
}

/// `Duration::MAX` waits until the lock is free: here, until its holder is killed.
#[test]
fn waiting_without_a_limit_waits_for_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forever.lock");
    let mut child = holder_process(&path);
    let waiter = {
        let path = path.clone();
        std::thread::spawn(move || LockFile::acquire(&path, Duration::MAX))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !waiter.is_finished(),
        "acquire gave up while the lock was held"
    );
    sigkill(&mut child);
    let lock = waiter.join().expect("acquire panicked").unwrap();
    assert_eq!(lock.holder().pid, std::process::id());
}
