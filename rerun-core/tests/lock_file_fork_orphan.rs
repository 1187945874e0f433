//! A lock file's holder that forked a child and then died: the lock is free, though the child
//! lives on. (A lock belongs to the open file description, which a fork shares: without rerun
//! closing the child's copy at the fork, the child would keep its parent's lock held for as
//! long as it runs.)
//!
//! One test, forking: no other thread of this binary runs while it forks.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, raise, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use rerun_core::lock::LockFile;

#[test]
#[allow(unsafe_code)]
fn a_dead_holder_s_lock_is_free_while_its_forked_child_lives() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("app.lock");
    let child_pid = dir.path().join("child.pid");
    let child_running = dir.path().join("child.running");
    // SAFETY: the holder runs only on the thread that forked (this test is the binary's only
    // one), and ends by SIGKILL, never returning into the test harness.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            let lock = LockFile::try_acquire(&path);
            // SAFETY: as above; the grandchild sleeps until killed.
            match (lock.is_ok(), unsafe { fork() }) {
                (true, Ok(ForkResult::Child)) => {
                    // Past `fork` in the child: its fork handlers (which close its copy of the
                    // lock) have run. Said, so the check does not race a child not yet
                    // scheduled on a loaded machine.
                    let _ = std::fs::write(&child_running, b"");
                    loop {
                        std::thread::sleep(Duration::from_secs(60));
                    }
                }
                (true, Ok(ForkResult::Parent { child })) => {
                    let until = Instant::now() + Duration::from_secs(10);
                    while !child_running.exists() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let _ = std::fs::write(&child_pid, child.as_raw().to_string());
                }
                _ => {}
            }
            let _ = raise(Signal::SIGKILL);
            // SAFETY: ends the process without running the test harness's exit handlers.
            unsafe { libc::_exit(1) }
        }
        Ok(ForkResult::Parent { child }) => {
            let status = waitpid(child, None);
            assert!(
                matches!(status, Ok(WaitStatus::Signaled(_, Signal::SIGKILL, _))),
                "the holder reported {status:?}"
            );
        }
        Err(e) => panic!("fork failed: {e}"),
    }
    let orphan = std::fs::read_to_string(&child_pid)
        .ok()
        .and_then(|t| t.parse::<i32>().ok())
        .map(Pid::from_raw)
        .unwrap_or_else(|| panic!("the holder took no lock or forked no child"));
    // The orphan is adopted by init (or a subreaper); it runs until killed.
    let alive = kill(orphan, None).is_ok();
    let taken = LockFile::try_acquire(&path);
    let _ = kill(orphan, Signal::SIGKILL);
    let until = Instant::now() + Duration::from_secs(5);
    while kill(orphan, None).is_ok() && Instant::now() < until {
        let _ = waitpid(orphan, Some(nix::sys::wait::WaitPidFlag::WNOHANG));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(alive, "the holder's child was gone before the check");
    assert!(
        taken.is_ok(),
        "the dead holder's lock was still held by its child: {taken:?}"
    );
}
