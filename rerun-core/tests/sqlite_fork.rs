//! A SQLite store used by a process that forks a worker and exits (reliability 24, on the
//! embedded store): the worker's claims and results reach every other process that opens the
//! file, even after one of them opened and closed it. Before the worker closed the connections
//! it inherited, it wrote where no other process read: the other process's claim found nothing
//! and would have run the body a second time.
//!
//! One test, forking: no other thread of this binary runs while it forks.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rerun_core::record::Status;
use rerun_core::{Call, Error, Key, SqliteStore, Store};

fn wait_for(path: &Path, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The forked worker: claims `k` (a lease of 2 s it renews itself), says so, waits for `go`,
/// records 42 and says so. Its exit status names what went wrong.
fn worker(dir: &Path, store: &SqliteStore) -> i32 {
    let out = Call::new("fork.sqlite", "k")
        .lease(Duration::from_secs(2))
        .run(store, || {
            let _ = std::fs::write(dir.join("claimed"), b"");
            wait_for(&dir.join("go"), Duration::from_secs(30));
            Ok::<_, Error>(42u32)
        });
    match out {
        Ok(o) if o.value == 42 => {
            let _ = std::fs::write(dir.join("done"), b"");
            0
        }
        Ok(_) => 3,
        Err(e) => {
            let _ = std::fs::write(dir.join("error"), e.to_string());
            4
        }
    }
}

/// Forks a process that opens a store on each of `dbs` (one file, perhaps under several
/// spellings), uses each, forks the worker on the first, and exits at once; waits for that
/// process's exit.
#[allow(unsafe_code)]
fn start(dir: &Path, dbs: &[PathBuf]) {
    // SAFETY: the forked processes run only on the thread that forked (this test is the
    // binary's only one), use rerun's fork-aware state, and leave with `_exit`, never
    // returning into the test harness.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let status = (|| {
                let opened: Vec<SqliteStore> = dbs
                    .iter()
                    .map(SqliteStore::open)
                    .collect::<Result<_, _>>()
                    .ok()?;
                for store in &opened {
                    Call::new("fork.sqlite", "warm-up")
                        .run(store, || Ok::<_, Error>(()))
                        .ok()?;
                }
                // SAFETY: as above.
                match unsafe { nix::unistd::fork() }.ok()? {
                    nix::unistd::ForkResult::Child => {
                        let status = worker(dir, &opened[0]);
                        // SAFETY: ends the worker without the parent's exit handlers.
                        unsafe { libc::_exit(status) }
                    }
                    nix::unistd::ForkResult::Parent { .. } => Some(0),
                }
            })()
            .unwrap_or(2);
            // SAFETY: as above.
            unsafe { libc::_exit(status) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            let status = nix::sys::wait::waitpid(child, None);
            assert!(
                matches!(status, Ok(nix::sys::wait::WaitStatus::Exited(_, 0))),
                "{status:?}"
            );
        }
        Err(e) => panic!("fork failed: {e}"),
    }
}

#[test]
fn a_forked_workers_record_reaches_other_processes_after_its_parent_exits() {
    let dir: PathBuf = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}")).keep();
    let db = dir.join("rerun.sqlite3");
    let key = Key::new("fork.sqlite", "k");
    start(&dir, std::slice::from_ref(&db));
    assert!(
        wait_for(&dir.join("claimed"), Duration::from_secs(20)),
        "the worker claimed"
    );
    // Another process (this one) opens the file, finds the claim, and closes the file: as the
    // last process with it open (the worker holds its locks only if it took them), it may
    // checkpoint and remove the WAL.
    {
        let store = SqliteStore::open(&db).unwrap_or_else(|e| panic!("{e}"));
        let view = store.inspect(&key).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(view.map(|v| v.status), Some(Status::InProgress));
        let busy = Call::new("fork.sqlite", "k").run(&store, || Ok::<_, Error>(7u32));
        assert!(matches!(busy, Err(Error::InProgress { .. })), "{busy:?}");
    }
    std::fs::write(dir.join("go"), b"").unwrap_or_else(|e| panic!("{e}"));
    assert!(
        wait_for(&dir.join("done"), Duration::from_secs(20)),
        "the worker recorded"
    );
    let store = SqliteStore::open(&db).unwrap_or_else(|e| panic!("{e}"));
    let again = Call::new("fork.sqlite", "k")
        .run(&store, || Ok::<_, Error>(7u32))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((again.value, again.replayed), (42, true));
    drop(store);

    // A parent with a second store of the file: its idle connections are out of the worker's
    // reach, so the worker's store refuses to open a connection, saying why, and nothing runs.
    let _ = std::fs::remove_file(dir.join("claimed"));
    let db2 = dir.join("two-stores.sqlite3");
    start(&dir, &[db2.clone(), db2]);
    assert!(
        wait_for(&dir.join("error"), Duration::from_secs(20)),
        "the worker refused"
    );
    let why = std::fs::read_to_string(dir.join("error")).unwrap_or_default();
    assert!(
        why.contains("forked") && why.contains("one SqliteStore per file"),
        "{why}"
    );
    assert!(!dir.join("claimed").exists(), "the body never ran");

    // The same with the second store opened through a linked folder and a `..`: one file
    // under three spellings is still one file.
    let _ = std::fs::remove_file(dir.join("error"));
    std::os::unix::fs::symlink(&dir, dir.join("linked")).unwrap_or_else(|e| panic!("{e}"));
    let db3 = dir.join("spelled.sqlite3");
    let spellings = [
        db3.clone(),
        dir.join("linked").join("spelled.sqlite3"),
        dir.join("linked")
            .join("..")
            .join(dir.file_name().unwrap_or_default())
            .join("spelled.sqlite3"),
    ];
    start(&dir, &spellings);
    assert!(
        wait_for(&dir.join("error"), Duration::from_secs(20)),
        "the worker refused with stores of other spellings"
    );
    let why = std::fs::read_to_string(dir.join("error")).unwrap_or_default();
    assert!(why.contains("one SqliteStore per file"), "{why}");
    assert!(!dir.join("claimed").exists(), "the body never ran");
    let _ = std::fs::remove_dir_all(&dir);
}
