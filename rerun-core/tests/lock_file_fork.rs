//! A lock file held by a process that forks: the child's copy of the lock, dropped in the
//! child, does not unlock the parent's (one open file description is shared across a fork, and
//! unlocking it in the child would unlock it for both).
//!
//! One test, forking: no other thread of this binary runs while it forks.

use rerun_core::lock::{LockError, LockFile};

#[test]
#[allow(unsafe_code)]
fn a_forked_child_dropping_its_copy_leaves_the_parents_lock_held() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("app.lock");
    let lock = LockFile::try_acquire(&path).expect("the lock");
    // SAFETY: the child runs only on the thread that forked (this test is the binary's only
    // one), drops the lock (closing a descriptor, reading an atomic), and leaves with `_exit`,
    // never returning into the test harness.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            drop(lock);
            // SAFETY: ends the child without running the parent's exit handlers or destructors.
            unsafe { libc::_exit(0) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            let status = nix::sys::wait::waitpid(child, None);
            assert!(
                matches!(status, Ok(nix::sys::wait::WaitStatus::Exited(_, 0))),
                "the forked child reported {status:?}"
            );
        }
        Err(e) => panic!("fork failed: {e}"),
    }
    // Another open file description (as another process would have) finds it held.
    match LockFile::try_acquire(&path) {
        Err(LockError::Held { holder, .. }) => {
            assert_eq!(holder.map(|h| h.pid), Some(std::process::id()));
        }
        other => panic!("the parent's lock was released by its child: {other:?}"),
    }
    drop(lock);
    LockFile::try_acquire(&path).expect("free once the parent drops it");
}
