//! PostgresStore under faults: a connection killed mid-call (`pg_terminate_backend`), a holder
//! SIGKILLed mid-body (fast takeover), a holder SIGSTOPped past its lease (its completion gets
//! `LeaseLost`; the successor's result stays).
//!
//! `RERUN_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo test -p rerun-core
//! --features postgres,testing --test postgres_faults`
#![cfg(all(feature = "postgres", feature = "testing"))]

mod postgres_common;

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use postgres_common::{
    child, claimed, request, terminate_waiting, url, wait_until_waiting, with_param, Side, Table,
};
use rerun_core::record::{ClaimResponse, Status};
use rerun_core::store::postgres::PostgresStore;
use rerun_core::{codec, AsyncStore, Call, Error, Fingerprint, Holder, Key, Options, Store};

const LONG: Duration = Duration::from_secs(60);
const ROLE: &str = "RERUN_PG_FAULT_ROLE";

fn assert_retryable_store_error(e: &Error, key: &Key) {
    assert!(
        matches!(e, Error::Store { .. }) && e.is_retryable() && e.key() == Some(key),
        "expected a retryable store error for {key}, got {e:?}"
    );
}

#[test]
fn killed_connection_mid_call_is_a_retryable_store_error_then_converges() {
    let Some(url) = url() else { return };
    let app = format!("rerun_kill_{}", std::process::id());
    let table = postgres_common::unique_table("kill");
    let _t = Table {
        url: url.clone(),
        name: table.clone(),
    };
    let store = PostgresStore::builder(&with_param(&url, &format!("application_name={app}")))
        .table(&table)
        .connect()
        .unwrap();
    let side = Side::connect(&url);
    let fp = Fingerprint::of(&"payload").unwrap();
    let h = Holder::current();
    let key = Key::new("fault", "complete");
    let c1 = claimed(store.claim(&request(&key, &fp, &h, LONG)));
    let lock_row = format!("BEGIN; SELECT 1 FROM \"{table}\" FOR UPDATE");

    // 1. The completion blocks on a row lock; its backend is terminated while it waits.
    side.exec(&lock_row);
    let err = std::thread::scope(|s| {
        let call = s.spawn(|| store.complete(&c1, b"done", LONG));
        terminate_waiting(&url, &app);
        call.join().unwrap().unwrap_err()
    });
    assert_retryable_store_error(&err, &key);
    side.exec("ROLLBACK");
    // The killed statement did not commit: the claim is still held, and a retry completes it.
    assert_eq!(
        store.inspect(&key).unwrap().unwrap().status,
        Status::InProgress
    );
    store.complete(&c1, b"done", LONG).unwrap();
    match store
        .claim(&request(&key, &fp, &Holder::current(), LONG))
        .unwrap()
    {
        ClaimResponse::Replay(r) => assert_eq!(r.result, b"done"),
        other => panic!("{other:?}"),
    }

    // 2. A claim killed while it waits: nothing was claimed, and the retry claims with a
    //    larger fence.
    let key2 = Key::new("fault", "claim");
    let c2 = claimed(store.claim(&request(&key2, &fp, &h, LONG)));
    store.release(&c2).unwrap();
    side.exec(&lock_row);
    let err = std::thread::scope(|s| {
        let call = s.spawn(|| store.claim(&request(&key2, &fp, &h, LONG)));
        terminate_waiting(&url, &app);
        call.join().unwrap().unwrap_err()
    });
    assert_retryable_store_error(&err, &key2);
    side.exec("ROLLBACK");
    assert_eq!(
        store.inspect(&key2).unwrap().unwrap().status,
        Status::Released
    );
    let c3 = claimed(store.claim(&request(&key2, &fp, &h, LONG)));
    assert!(c3.fence > c2.fence);

    // 3. The async half: the same fault, the same typed error, the same convergence.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    side.exec(&lock_row);
    let err = std::thread::scope(|s| {
        let call = s.spawn(|| rt.block_on(store.complete_async(&c3, b"async", LONG)));
        terminate_waiting(&url, &app);
        call.join().unwrap().unwrap_err()
    });
    assert_retryable_store_error(&err, &key2);
    side.exec("ROLLBACK");
    rt.block_on(store.complete_async(&c3, b"async", LONG))
        .unwrap();
    assert_eq!(
        store.inspect(&key2).unwrap().unwrap().result.as_deref(),
        Some(&b"async"[..])
    );

    // 4. Through the runtime: a call whose claim is killed returns the typed store error and
    //    runs no body; the rerun runs it once, and the next call replays.
    let runtime_key = Key::new("fault", "runtime");
    let c4 = claimed(store.claim(&request(&runtime_key, &Fingerprint::EMPTY, &h, LONG)));
    store.release(&c4).unwrap();
    side.exec(&lock_row);
    let mut bodies = 0;
    let err = std::thread::scope(|s| {
        let call = s.spawn(|| {
            Call::new("fault", "runtime").run(&store, || {
                bodies += 1;
                Ok::<_, Error>(5)
            })
        });
        terminate_waiting(&url, &app);
        call.join().unwrap().unwrap_err()
    });
    assert_retryable_store_error(&err, &runtime_key);
    side.exec("ROLLBACK");
    let out = Call::new("fault", "runtime")
        .run(&store, || {
            bodies += 1;
            Ok::<_, Error>(5)
        })
        .unwrap();
    assert_eq!((out.value, bodies), (5, 1));
    assert!(
        Call::new("fault", "runtime")
            .run(&store, || Ok::<_, Error>(6))
            .unwrap()
            .replayed
    );
}

/// The child's side of the holder tests: claims `KEY` through the runtime and runs a body that
/// announces itself and sleeps, then reports what its completion got.
fn holder_child() {
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let url = env("RERUN_TEST_POSTGRES_URL");
    let store = PostgresStore::builder(&url)
        .table(env("RERUN_PG_FAULT_TABLE"))
        .connect()
        .unwrap();
    let lease = Duration::from_millis(env("RERUN_PG_FAULT_LEASE_MS").parse().unwrap_or(30_000));
    let body = Duration::from_millis(env("RERUN_PG_FAULT_BODY_MS").parse().unwrap_or(60_000));
    let out = Call::new("holder", &env("RERUN_PG_FAULT_KEY"))
        .options(Options::new().lease(lease))
        .run(&store, || {
            println!("STARTED");
            std::thread::sleep(body);
            Ok::<_, Error>("zombie".to_owned())
        });
    match out {
        Ok(_) => println!("RESULT ok"),
        Err(e) => println!("RESULT {}", e.kind_name()),
    }
}

fn spawn_holder(
    test: &str,
    table: &str,
    key: &str,
    lease_ms: u64,
    body_ms: u64,
) -> (Child, impl Iterator<Item = String>) {
    let mut cmd = child(
        test,
        &[
            (ROLE, "holder".into()),
            ("RERUN_PG_FAULT_TABLE", table.into()),
            ("RERUN_PG_FAULT_KEY", key.into()),
            ("RERUN_PG_FAULT_LEASE_MS", lease_ms.to_string()),
            ("RERUN_PG_FAULT_BODY_MS", body_ms.to_string()),
        ],
    );
    let mut proc = cmd.spawn().unwrap();
    let mut lines = BufReader::new(proc.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    for line in lines.by_ref() {
        // libtest's "test NAME ... " may precede the child's first line.
        if line.ends_with("STARTED") {
            return (proc, lines);
        }
    }
    let _ = proc.wait();
    panic!("the holder child exited before its body started");
}

/// A statement the server cancels for its `statement_timeout` (SQLSTATE 57014, here one set
/// in the URL, shorter than the store's own limit) fails retryably and leaves its connection as
/// good as it was: it goes back to the pool, and the next calls run on the same backend.
#[test]
fn a_statement_timeout_keeps_its_connection() {
    let Some(url) = url() else { return };
    let app = format!("rerun_timeout_{}", std::process::id());
    let table = postgres_common::unique_table("stmt_timeout");
    let _t = Table {
        url: url.clone(),
        name: table.clone(),
    };
    let with_timeout = with_param(
        &with_param(&url, &format!("application_name={app}")),
        "options=-c%20statement_timeout%3D1000",
    );
    let store = PostgresStore::builder(&with_timeout)
        .table(&table)
        .pool_size(1)
        .connect()
        .unwrap();
    let side = Side::connect(&url);
    let backends = || {
        side.exec(&format!(
            "SELECT pid FROM pg_stat_activity WHERE application_name = '{app}' ORDER BY pid"
        ))
    };
    let (fp, h) = (Fingerprint::of(&"payload").unwrap(), Holder::current());
    let key = Key::new("fault", "statement timeout");
    let claim = claimed(store.claim(&request(&key, &fp, &h, LONG)));
    let before = backends();
    assert!(!before.is_empty());
    side.exec(&format!("BEGIN; SELECT 1 FROM \"{table}\" FOR UPDATE"));
    let err = store.complete(&claim, b"done", LONG).unwrap_err();
    side.exec("ROLLBACK");
    assert_retryable_store_error(&err, &key);
    assert!(err.to_string().contains("statement timeout"), "{err}");
    store.complete(&claim, b"done", LONG).unwrap();
    assert_eq!(
        backends(),
        before,
        "the connection was closed and another opened"
    );
}

/// A claim that read a record it may take over (here a `once` attempt whose lease ran out),
/// whose record an operator deletes (`forget`) before the claim writes: the claim takes over
/// nothing. It reads again and claims the key afresh, instead of reporting the attempt it read
/// as abandoned, which for a `once` attempt would put an unknown outcome back on the key the
/// operator just cleared.
#[test]
fn a_record_forgotten_under_a_claim_is_not_taken_over() {
    let Some(url) = url() else { return };
    let app = format!("rerun_forgotten_{}", std::process::id());
    let table = postgres_common::unique_table("forgotten");
    let _t = Table {
        url: url.clone(),
        name: table.clone(),
    };
    let store = PostgresStore::builder(&with_param(&url, &format!("application_name={app}")))
        .table(&table)
        .connect()
        .unwrap();
    let side = Side::connect(&url);
    let (fp, h) = (Fingerprint::of(&"payload").unwrap(), Holder::current());
    let key = Key::new("fault", "forgotten");
    let mut once = request(&key, &fp, &h, Duration::from_secs(1));
    once.once = true;
    let first = claimed(store.claim(&once));
    std::thread::sleep(Duration::from_millis(1_300));
    // The operator's deletion, not yet committed when the claim reads the record.
    side.exec(&format!("BEGIN; DELETE FROM \"{table}\""));
    let answer = std::thread::scope(|s| {
        let claim = s.spawn(|| store.claim(&request(&key, &fp, &h, LONG)));
        wait_until_waiting(&url, &app);
        side.exec("COMMIT");
        claim.join().unwrap()
    });
    let claim = claimed(answer);
    assert_eq!(claim.abandoned, None, "the deleted attempt was taken over");
    assert!(!claim.once);
    assert!(claim.fence > first.fence);
    assert_eq!(
        store.inspect(&key).unwrap().unwrap().status,
        Status::InProgress
    );
}

#[test]
fn sigkilled_holder_is_taken_over_at_once_with_the_next_fence() {
    if std::env::var(ROLE).is_ok() {
        holder_child();
        std::process::exit(0);
    }
    let Some(url) = url() else { return };
    let (store, t) = postgres_common::fresh(&url, "sigkill");
    let key = Key::new("holder", "killed");
    // A 30 s lease: only the proof that the holder is dead allows a fast takeover.
    let (mut proc, _lines) = spawn_holder(
        "sigkilled_holder_is_taken_over_at_once_with_the_next_fence",
        &t.name,
        "killed",
        30_000,
        60_000,
    );
    let before = store.inspect(&key).unwrap().unwrap();
    assert_eq!(before.status, Status::InProgress);
    kill(Pid::from_raw(proc.id() as i32), Signal::SIGKILL).unwrap();
    let _ = proc.wait();
    let started = Instant::now();
    let out = Call::new("holder", "killed")
        .run(&store, || Ok::<_, Error>("successor".to_owned()))
        .unwrap();
    let took = started.elapsed();
    println!("takeover of a SIGKILLed holder took {took:?}");
    assert!(!out.replayed && out.value == "successor");
    assert!(out.fence > before.fence);
    assert!(took < Duration::from_secs(2), "takeover took {took:?}");
}

#[test]
fn sigstopped_holder_past_its_lease_gets_lease_lost_and_the_successor_stays() {
    if std::env::var(ROLE).is_ok() {
        holder_child();
        std::process::exit(0);
    }
    let Some(url) = url() else { return };
    let (store, t) = postgres_common::fresh(&url, "sigstop");
    let key = Key::new("holder", "stopped");
    let (mut proc, lines) = spawn_holder(
        "sigstopped_holder_past_its_lease_gets_lease_lost_and_the_successor_stays",
        &t.name,
        "stopped",
        1_000,
        3_000,
    );
    let pid = Pid::from_raw(proc.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let zombie_fence = store.inspect(&key).unwrap().unwrap().fence;
    // The process exists, so only its lease (no longer renewed) can end the claim.
    let out = Call::new("holder", "stopped")
        .options(Options::new().wait(Duration::from_secs(20)))
        .run(&store, || Ok::<_, Error>("successor".to_owned()))
        .unwrap();
    assert!(!out.replayed && out.fence > zombie_fence);
    kill(pid, Signal::SIGCONT).unwrap();
    let report: Vec<String> = lines
        .filter_map(|l| l.find("RESULT").map(|i| l[i..].to_owned()))
        .collect();
    let _ = proc.wait();
    assert_eq!(report, vec!["RESULT lease_lost".to_owned()]);
    let view = store.inspect(&key).unwrap().unwrap();
    assert_eq!((view.status, view.fence), (Status::Completed, out.fence));
    let recorded: String = codec::decode(view.result.as_deref().unwrap()).unwrap();
    assert_eq!(recorded, "successor");
}

/// Terminates every backend of `application_name` and waits until the server has ended them:
/// a pooled connection is then a dead socket its owner has not noticed.
fn terminate_all(url: &str, application_name: &str) {
    let sql = format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{application_name}'"
    );
    postgres_common::psql(url, &sql).expect("terminating the store's backends");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = postgres_common::psql(
            url,
            &format!(
                "SELECT pid FROM pg_stat_activity WHERE application_name = '{application_name}'"
            ),
        )
        .unwrap_or_default();
        if rows.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the backends of {application_name} did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_connection_killed_while_the_body_ran_still_records_the_result() {
    let Some(url) = url() else { return };
    let app = format!("rerun_bodykill_{}", std::process::id());
    let table = postgres_common::unique_table("bodykill");
    let _t = Table {
        url: url.clone(),
        name: table.clone(),
    };
    let store = PostgresStore::builder(&with_param(&url, &format!("application_name={app}")))
        .table(&table)
        .connect()
        .unwrap();
    for once in [false, true] {
        let key = Key::new("fault", if once { "once" } else { "replayable" });
        let call = Call::with_key(key.clone()).lease(LONG);
        let call = if once { call.once() } else { call };
        let mut ran = 0;
        // The body outlives the store's connections (a server restart, a failover, a proxy
        // that closed them): the completion meets a dead socket first.
        let out = call.run(&store, || {
            ran += 1;
            terminate_all(&url, &app);
            Ok::<_, Error>(42u32)
        });
        assert!(
            matches!(&out, Ok(o) if o.value == 42 && !o.replayed),
            "once = {once}: {out:?}"
        );
        let record = store.inspect(&key).unwrap().expect("a record");
        assert_eq!(record.status, Status::Completed, "once = {once}");
        let again = Call::with_key(key.clone())
            .run(&store, || Ok::<_, Error>(0u32))
            .unwrap();
        assert_eq!((again.value, again.replayed, ran), (42, true, 1));
    }
}

/// Calls filling the store's pool (here claims waiting on a row an operator holds locked, each
/// for up to the operation timeout) hold up no lease renewal: renewals have connections of
/// their own, so a live holder on another key keeps its claim past many leases, and a
/// contender (another process's store) never takes it over.
#[test]
fn a_pool_full_of_waiting_calls_holds_up_no_renewal() {
    let Some(url) = url() else { return };
    let table = postgres_common::unique_table("renew_pool");
    let _t = Table {
        url: url.clone(),
        name: table.clone(),
    };
    let connect = || {
        PostgresStore::builder(&url)
            .table(&table)
            .pool_size(2)
            .op_timeout(Duration::from_secs(3))
            .connect()
            .unwrap()
    };
    let (store, contender) = (connect(), connect());
    let fp = Fingerprint::EMPTY;
    let mut elsewhere = Holder::current();
    elsewhere.host = "renew-pool.elsewhere.invalid".into();

    // A claim whose lease lapsed, its row locked by an operator: a claim of its key takes it
    // over, so waits on the lock.
    let locked = Key::new("fault", "locked");
    let lapsed = claimed(store.claim(&request(
        &locked,
        &fp,
        &Holder::current(),
        Duration::from_millis(100),
    )));
    let side = Side::connect(&url);
    side.exec(&format!(
        "BEGIN; SELECT 1 FROM \"{table}\" WHERE fence = {} FOR UPDATE",
        lapsed.fence
    ));
    std::thread::sleep(Duration::from_millis(200));

    let stop = std::sync::atomic::AtomicBool::new(false);
    let held = Key::new("fault", "held");
    let taken = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (started_tx, started) = std::sync::mpsc::channel();
        let call = s.spawn(|| {
            Call::with_key(held.clone())
                .lease(Duration::from_millis(600))
                .run(&store, move || {
                    let _ = started_tx.send(());
                    std::thread::sleep(Duration::from_millis(2_400));
                    Ok::<_, Error>(1u32)
                })
        });
        started.recv().unwrap();
        // Four callers for two connections: the pool is full, and more wait for it.
        for _ in 0..4 {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let _ = store.claim(&request(&locked, &fp, &elsewhere, LONG));
                }
            });
        }
        // Past several leases of the held key, a contender keeps trying to take it.
        let until = Instant::now() + Duration::from_millis(1_800);
        while Instant::now() < until {
            if let Ok(ClaimResponse::Claimed(_)) =
                contender.claim(&request(&held, &fp, &elsewhere, LONG))
            {
                taken.store(true, std::sync::atomic::Ordering::SeqCst);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        side.exec("ROLLBACK");
        let out = call.join().unwrap();
        assert!(
            !taken.load(std::sync::atomic::Ordering::SeqCst),
            "a live holder's key was taken over: its renewals waited behind the pool"
        );
        assert!(
            matches!(&out, Ok(o) if !o.replayed && o.value == 1),
            "{out:?}"
        );
    });
}
