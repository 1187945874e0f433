//! Converge on startup (reliability test 19) on the memory and SQLite stores, with threads,
//! with processes, and after a real SIGKILL.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rerun_core::record::{ClaimRequest, Status};
use rerun_core::testing::recovery_check;
use rerun_core::{recover, Call, Error, Fingerprint, Holder, Key, MemoryStore, SqliteStore, Store};

#[test]
fn memory_store_converges_on_startup() {
    let check = recovery_check(&MemoryStore::new()).unwrap_or_else(|e| panic!("{e}"));
    println!("memory: {check:?}");
    assert_eq!(check.stale, 1000);
    assert!(check.second.changed_nothing());
}

#[test]
fn sqlite_store_converges_on_startup() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("rerun.sqlite3")).unwrap();
    let check = recovery_check(&store).unwrap_or_else(|e| panic!("{e}"));
    println!("sqlite: {check:?}");
    assert_eq!(check.stale, 1000);
    assert!(check.second.changed_nothing());
}

#[test]
fn recovery_check_refuses_a_store_with_records() {
    let store = MemoryStore::new();
    Call::new("s", "k")
        .run(&store, || Ok::<_, Error>(1))
        .unwrap();
    let err = recovery_check(&store).unwrap_err();
    assert!(err.contains("needs an empty store"), "{err}");
}

const CHILD: &str = "RERUN_RECOVER_TEST_CHILD";
const DB: &str = "RERUN_RECOVER_TEST_DB";

/// Not a test of its own: the body of the child processes the tests below start.
#[test]
fn child_process() {
    let (Ok(role), Ok(db)) = (std::env::var(CHILD), std::env::var(DB)) else {
        return;
    };
    let store = SqliteStore::open(db).unwrap();
    match role.as_str() {
        // Claims 200 keys (half of them `once`), then waits to be killed.
        "hold" => {
            let holder = Holder::current();
            for i in 0..200u32 {
                let key = Key::new("jobs.hold", &i);
                store
                    .claim(&ClaimRequest {
                        key: &key,
                        fingerprint: &Fingerprint::EMPTY,
                        holder: &holder,
                        lease: Duration::from_secs(300),
                        once: i % 2 == 1,
                        steal: None,
                    })
                    .unwrap();
            }
            println!("holding");
            std::thread::sleep(Duration::from_secs(120));
        }
        // One recovery, reported on stdout.
        "recover" => {
            let r = recover(&store).unwrap();
            println!(
                "recovered {} {} {}",
                r.released, r.marked_unknown, r.moved_meanwhile
            );
        }
        other => panic!("unknown child role {other}"),
    }
}

fn child(role: &str, db: &std::path::Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "child_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, role)
        .env(DB, db)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Waits for the child's line starting with `prefix`; the rest of its output is drained on a
/// thread so the child never writes into a closed pipe.
fn wait_for_line(child: &mut std::process::Child, prefix: &str) -> String {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx.iter()
        .find_map(|l| l.find(prefix).map(|at| l[at..].to_owned()))
        .unwrap_or_else(|| panic!("the child never printed {prefix:?}"))
}

#[test]
fn claims_of_a_killed_process_are_recovered_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rerun.sqlite3");
    let store = SqliteStore::open(&db).unwrap();
    let mut holder = child("hold", &db);
    wait_for_line(&mut holder, "holding");
    // Alive: its claims are left alone.
    let live = recover(&store).unwrap();
    assert_eq!((live.live, live.released, live.marked_unknown), (200, 0, 0));

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    holder.wait().unwrap();

    // Its leases run 300 s more, but its process is provably gone: recovered at once.
    let started = Instant::now();
    let r = recover(&store).unwrap();
    println!("after SIGKILL: {r} in {:?}", started.elapsed());
    assert_eq!((r.released, r.marked_unknown, r.live), (100, 100, 0));
    assert!(recover(&store).unwrap().changed_nothing());
    let status = |i: u32| {
        store
            .inspect(&Key::new("jobs.hold", &i))
            .unwrap()
            .map(|r| r.status)
    };
    assert_eq!(status(0), Some(Status::Released));
    assert_eq!(status(1), Some(Status::Unknown));
    // A released key runs afresh; an unknown one refuses until reconciled.
    let out = Call::new("jobs.hold", &0u32)
        .run(&store, || Ok::<_, Error>(7))
        .unwrap();
    assert_eq!((out.value, out.replayed), (7, false));
    let err = Call::new("jobs.hold", &1u32)
        .once()
        .run(&store, || Ok::<_, Error>(7))
        .unwrap_err();
    assert_eq!(err.kind_name(), "outcome_unknown");
}

#[test]
fn two_processes_recovering_at_once_resolve_each_claim_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rerun.sqlite3");
    let store = SqliteStore::open(&db).unwrap();
    let mut dead = Holder::current();
    dead.start_time += 2;
    for i in 0..1000u32 {
        let key = Key::new("jobs.stale", &i);
        store
            .claim(&ClaimRequest {
                key: &key,
                fingerprint: &Fingerprint::EMPTY,
                holder: &dead,
                lease: Duration::from_secs(300),
                once: i % 2 == 1,
                steal: None,
            })
            .unwrap();
    }
    // The holder has this process's pid with another start time: a reused pid, provably not
    // the holder, as seen from any process of this host. Two processes recover at once.
    let mut a = child("recover", &db);
    let mut b = child("recover", &db);
    let parse = |line: String| -> Vec<u64> {
        line.split_whitespace()
            .skip(1)
            .map(|n| n.parse().unwrap())
            .collect()
    };
    let ra = parse(wait_for_line(&mut a, "recovered"));
    let rb = parse(wait_for_line(&mut b, "recovered"));
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    println!("process A released/unknown/moved {ra:?}, process B {rb:?}");
    assert_eq!(ra[0] + rb[0], 500);
    assert_eq!(ra[1] + rb[1], 500);
    let again = recover(&store).unwrap();
    assert!(again.changed_nothing());
    assert_eq!(again.unknown, 500);
}
