//! The harness among other tests: `#[converges]` checks, other threads passing checkpoints
//! while a harness runs, memory worlds, operations that do not pass the same points twice.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rerun_core::testing::{check_converges, Mode, SafeToRerun, Verdict, WorldDir};
use rerun_core::{Call, Error, MemoryStore};

#[derive(Debug, PartialEq, Default, Clone)]
struct Account {
    verified: bool,
    email: String,
    logins: u32,
}

#[test]
fn converging_functions_pass_and_counters_do_not() {
    check_converges(
        |a: &mut Account| {
            a.verified = true;
            a.email = "ada@example.com".into();
            Ok::<_, Error>(())
        },
        Account::default,
    )
    .unwrap();

    let err = check_converges(
        |a: &mut Account| {
            a.logins += 1;
            Ok::<_, Error>(())
        },
        Account::default,
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("running it twice does not end where running it once does:"),
        "{text}"
    );
    assert!(
        text.contains("    logins: 1,       ≠     logins: 2,"),
        "{text}"
    );

    // A function that fails on its second run does not converge either.
    let err = check_converges(
        |a: &mut Account| {
            if a.verified {
                return Err("already verified");
            }
            a.verified = true;
            Ok(())
        },
        Account::default,
    )
    .unwrap_err();
    assert_eq!(err.twice, "the second run failed: already verified");
}

/// A world in memory: only the in-process mode applies. The ledger keeps entries by
/// transaction id, so a body that runs again writes the same entry.
struct Memory {
    store: MemoryStore,
    ledger: Mutex<BTreeMap<String, u64>>,
}

fn memory(_: &WorldDir) -> Result<Memory, Error> {
    Ok(Memory {
        store: MemoryStore::new(),
        ledger: Mutex::new(BTreeMap::new()),
    })
}

fn ledger(m: &Memory) -> BTreeMap<String, u64> {
    m.ledger.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn add_five(m: &Memory) -> Result<u64, Error> {
    Call::new("ledger.add", "tx_1")
        .run(&m.store, || {
            let mut ledger = m.ledger.lock().unwrap_or_else(|p| p.into_inner());
            ledger.insert("tx_1".to_owned(), 5);
            Ok::<_, Error>(ledger.values().sum())
        })
        .map(|o| o.value)
}

#[test]
fn other_threads_passing_checkpoints_do_not_disturb_a_harness() {
    // Another "test" keeps running idempotent calls (and passing crash points) meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let noise = {
        let (stop, calls) = (stop.clone(), calls.clone());
        std::thread::spawn(move || {
            let store = MemoryStore::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                Call::new("noise", &i)
                    .run(&store, || {
                        rerun_core::checkpoint!("noise");
                        Ok::<_, Error>(i)
                    })
                    .expect("a call on another thread was disturbed by the harness");
                calls.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let report = SafeToRerun::new("ledger.add", memory, add_five, ledger)
        .in_process_only()
        .check();
    stop.store(true, Ordering::Relaxed);
    noise.join().unwrap();
    println!(
        "{report}\n(other thread made {} calls meanwhile)",
        calls.load(Ordering::Relaxed)
    );
    report.assert_passed();
    // Only this thread's points: the other thread's `noise` never shows up.
    assert_eq!(report.points().len(), 4);
    assert!(report.checks().iter().all(|c| c.mode != Mode::RealKill));
}

#[test]
fn an_operation_that_changes_its_points_is_reported() {
    // Takes a different path on every run: the second run skips the claim entirely.
    let runs = AtomicU64::new(0);
    let report = SafeToRerun::new(
        "flaky",
        memory,
        |m: &Memory| {
            if runs.fetch_add(1, Ordering::Relaxed) == 0 {
                add_five(m)
            } else {
                Ok(5)
            }
        },
        ledger,
    )
    .in_process_only()
    .check();
    println!("{report}");
    assert!(!report.passed());
    assert!(report
        .checks()
        .iter()
        .any(|c| matches!(c.verdict, Verdict::NotReached(_))));
    assert!(report
        .to_string()
        .contains("the run never reached this point"));
}

#[test]
fn a_failing_world_constructor_is_a_failed_check() {
    let report = SafeToRerun::new(
        "no world",
        |_: &WorldDir| Err::<Memory, _>("the database is down"),
        add_five,
        ledger,
    )
    .check();
    assert!(!report.passed());
    assert!(report
        .to_string()
        .contains("the check could not run: the world constructor failed: the database is down"));
}
