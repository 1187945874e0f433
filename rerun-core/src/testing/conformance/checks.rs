//! The checks that run in one process: contract section 6 and reliability tests 1-3, 7, 8,
//! 11 (in process), 12-15, 17 and 18.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::report::{CheckReport, Report, Tally};
use super::{unique, Factory, Settings};
use crate::codec;
use crate::error::{CorruptKind, Error};
use crate::fingerprint::Fingerprint;
use crate::holder::Holder;
use crate::key::Key;
use crate::record::{Claim, ClaimRequest, ClaimResponse, RecordView, Status};
use crate::runtime::{Call, Reconciled};
use crate::store::{AsyncStore, ScanFilter, Store};

pub(super) fn run_all<F: Factory>(factory: &F, settings: &Settings, report: &mut Report) {
    let checks: [(&'static str, Check<F>); 28] = [
        ("replay", replay),
        ("thread_storm", thread_storm),
        ("thread_storm_wait", thread_storm_wait),
        ("many_keys", many_keys),
        ("fencing", fencing),
        ("lease_takeover", lease_takeover),
        ("body_fails", body_fails),
        ("live_holder_kept", live_holder_kept),
        ("stale_holder_taken", stale_holder_taken),
        ("foreign_holder_waits", foreign_holder_waits),
        ("payload_mismatch", payload_mismatch),
        ("corrupt_record", corrupt_record),
        ("unencodable_result", unencodable_result),
        ("expiry", expiry),
        ("scan_pages", scan_pages),
        ("once_unknown", once_unknown),
        ("unknown_stays_once", unknown_stays_once),
        ("async_calls", async_calls),
        ("hung_neighbour", super::faults::hung_neighbour),
        ("panicking_renew", super::faults::panicking_renew),
        ("late_claim", super::faults::late_claim),
        ("failed_release", super::faults::failed_release),
        ("failed_completion", super::faults::failed_completion),
        ("hung_store", super::faults::hung_store),
        ("hung_store_async", super::faults::hung_store_async),
        ("key_domain", super::faults::key_domain),
        ("result_domain", super::faults::result_domain),
        ("large_values", super::faults::large_values),
    ];
    run_checks(factory, settings, report, &checks);
}

/// A check: what it counted, or the store error that stopped it.
pub(super) type Check<F> = fn(&F, &Settings) -> Result<Tally, Error>;

/// Runs each check, turning a store error or a panic into a violation, and adds it to `report`.
pub(super) fn run_checks<F: Factory>(
    factory: &F,
    settings: &Settings,
    report: &mut Report,
    checks: &[(&'static str, Check<F>)],
) {
    for &(name, check) in checks {
        let started = Instant::now();
        eprintln!("conformance [{}]: {name}", factory.name());
        let tally = match catch_unwind(AssertUnwindSafe(|| check(factory, settings))) {
            Ok(Ok(tally)) => tally,
            Ok(Err(e)) => Tally {
                violations: vec![format!("the store failed: {e}")],
                ..Tally::default()
            },
            Err(panic) => Tally {
                violations: vec![format!("the check panicked: {}", panic_text(&*panic))],
                ..Tally::default()
            },
        };
        report.checks.push(CheckReport {
            check: name,
            tally,
            elapsed: started.elapsed(),
        });
    }
}

pub(super) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a non-text panic".into())
}

fn scope() -> String {
    unique("conformance")
}

/// A holder on a host that does not exist: only its lease can end its claim.
pub(super) fn remote_holder() -> Holder {
    let mut h = Holder::current();
    h.host = "conformance.remote.invalid".into();
    h
}

fn claim_raw<S: Store + ?Sized>(
    store: &S,
    key: &Key,
    holder: &Holder,
    lease: Duration,
    steal: Option<u64>,
) -> Result<ClaimResponse, Error> {
    store.claim(&ClaimRequest {
        key,
        fingerprint: &Fingerprint::EMPTY,
        holder,
        lease,
        once: false,
        steal,
    })
}

fn claimed(resp: ClaimResponse, t: &mut Tally, what: &str) -> Option<Claim> {
    match resp {
        ClaimResponse::Claimed(c) => Some(c),
        other => {
            t.violations
                .push(format!("{what}: expected a claim, got {other:?}"));
            None
        }
    }
}

/// Reliability 1: one key, 100 sequential calls, then one more after reopening the store.
fn replay<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, locator) = factory.fresh()?;
    let scope = scope();
    let bodies = AtomicU64::new(0);
    let call = |store: &F::Store, i: u32| {
        Call::new(scope.clone(), "k")
            .payload(&("p", 1))
            .run(store, || {
                bodies.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(format!("result of call {i}"))
            })
    };
    let mut first = None;
    for i in 0..100 {
        t.calls += 1;
        match call(&store, i) {
            Ok(out) => {
                t.expect(
                    out.replayed == (i > 0),
                    format!("call {i}: replayed = {}", out.replayed),
                );
                first.get_or_insert_with(|| out.value.clone());
                t.results.insert(out.value);
            }
            Err(e) => t.error(&e),
        }
    }
    drop(store);
    let reopened = factory.reopen(&locator)?;
    t.calls += 1;
    match call(&reopened, 100) {
        Ok(out) => {
            t.expect(
                out.replayed,
                "after reopening, the call was not replayed".into(),
            );
            t.results.insert(out.value);
        }
        Err(e) => t.error(&e),
    }
    t.bodies = bodies.load(Ordering::SeqCst);
    t.expect(t.bodies == 1, format!("the body ran {} times", t.bodies));
    t.expect(
        t.results.len() == 1,
        format!("{} distinct results", t.results.len()),
    );
    t.expect(t.errors.is_empty(), format!("errors: {:?}", t.errors));
    Ok(t)
}

/// Runs `threads` threads, released together, each calling `f(thread, i)` `calls` times.
fn storm<S: Store>(
    store: &Arc<S>,
    threads: usize,
    calls: u64,
    f: impl Fn(&S, usize, u64) -> Result<String, Error> + Send + Sync,
) -> Tally {
    let barrier = Barrier::new(threads);
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|th| {
                let (barrier, f, store) = (&barrier, &f, store.clone());
                s.spawn(move || {
                    let mut t = Tally::default();
                    barrier.wait();
                    for i in 0..calls {
                        t.calls += 1;
                        match f(&store, th, i) {
                            Ok(v) => {
                                t.results.insert(v);
                            }
                            Err(e) => t.error(&e),
                        }
                    }
                    t
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|p| Tally {
                    violations: vec![format!("a thread panicked: {}", panic_text(&*p))],
                    ..Tally::default()
                })
            })
            .collect()
    });
    let mut total = Tally::default();
    for t in tallies {
        total.merge(t);
    }
    total
}

/// Reliability 2: 16 threads x 1000 calls on one key: body once; every call gets the result or
/// a typed `InProgress`.
fn thread_storm<F: Factory>(factory: &F, settings: &Settings) -> Result<Tally, Error> {
    one_key_storm(factory, settings.n(1000), None, Duration::from_millis(20))
}

/// Reliability 2 with `wait`: every call gets the result.
fn thread_storm_wait<F: Factory>(factory: &F, settings: &Settings) -> Result<Tally, Error> {
    one_key_storm(
        factory,
        settings.n(100),
        Some(Duration::from_secs(10)),
        Duration::from_millis(50),
    )
}

/// 16 threads released together call one key `calls` times each, with a body taking `body`.
/// The body runs once, every call returns its result, and the only error allowed is
/// `InProgress`, and none at all with `wait`.
fn one_key_storm<F: Factory>(
    factory: &F,
    calls: u64,
    wait: Option<Duration>,
    body: Duration,
) -> Result<Tally, Error> {
    let store = Arc::new(factory.fresh()?.0);
    let scope = scope();
    let bodies = AtomicU64::new(0);
    let mut t = storm(&store, 16, calls, |store, _, _| {
        let mut call = Call::new(scope.clone(), "one");
        if let Some(wait) = wait {
            call = call.wait(wait);
        }
        call.run(store, || {
            bodies.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(body);
            Ok::<_, Error>("the one result".to_owned())
        })
        .map(|o| o.value)
    });
    t.bodies = bodies.load(Ordering::SeqCst);
    t.expect(t.bodies == 1, format!("the body ran {} times", t.bodies));
    t.expect(
        t.results.len() == 1,
        format!("{} distinct results", t.results.len()),
    );
    let allowed = if wait.is_some() { "" } else { "in_progress" };
    let unexpected: Vec<_> = t.errors.keys().filter(|k| **k != allowed).collect();
    t.expect(
        unexpected.is_empty(),
        format!("unexpected errors: {unexpected:?}"),
    );
    Ok(t)
}

/// A skewed pick of one of `n` keys: low keys are far more frequent.
pub(super) fn skewed(seed: &mut u64, n: u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let a = *seed % n;
    let b = (*seed >> 32) % n;
    a * b / n
}

/// Reliability 3: 16 threads x 10,000 calls over 1,000 skewed keys: per key, body once and
/// every result equals the key's first.
fn many_keys<F: Factory>(factory: &F, settings: &Settings) -> Result<Tally, Error> {
    let store = Arc::new(factory.fresh()?.0);
    let scope = scope();
    let runs: Vec<AtomicU64> = (0..1000).map(|_| AtomicU64::new(0)).collect();
    let seen: Mutex<HashMap<u64, String>> = Mutex::new(HashMap::new());
    let diverged = AtomicU64::new(0);
    let mut t = storm(&store, 16, settings.n(10_000), |store, th, i| {
        let mut seed = (th as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i + 1);
        let k = skewed(&mut seed, 1000);
        let out = Call::new(scope.clone(), &k)
            .wait(Duration::from_secs(10))
            .run(store, || {
                let n = runs[k as usize].fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(format!("key {k} run {n}"))
            })?;
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        let first = seen.entry(k).or_insert_with(|| out.value.clone());
        if *first != out.value {
            diverged.fetch_add(1, Ordering::SeqCst);
        }
        Ok(format!("key {k}"))
    });
    t.bodies = runs.iter().map(|r| r.load(Ordering::SeqCst)).sum();
    let twice = runs.iter().filter(|r| r.load(Ordering::SeqCst) > 1).count();
    t.expect(
        twice == 0,
        format!("{twice} keys ran their body more than once"),
    );
    let d = diverged.load(Ordering::SeqCst);
    t.expect(
        d == 0,
        format!("{d} calls returned another result than their key's first"),
    );
    t.expect(t.errors.is_empty(), format!("errors: {:?}", t.errors));
    Ok(t)
}

/// Contract 6.2: tokens grow across release, takeover and forget; old tokens are rejected.
fn fencing<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let key = Key::new(scope(), "fenced");
    let lease = Duration::from_secs(30);
    let h = remote_holder();
    let Some(c1) = claimed(
        claim_raw(&store, &key, &h, lease, None)?,
        &mut t,
        "first claim",
    ) else {
        return Ok(t);
    };
    store.release(&c1)?;
    let lost = |r: Result<(), Error>| matches!(r, Err(Error::LeaseLost { .. }));
    t.expect(
        lost(store.release(&c1)),
        "a second release with the same fence was accepted".into(),
    );
    let Some(c2) = claimed(
        claim_raw(&store, &key, &h, lease, None)?,
        &mut t,
        "claim after release",
    ) else {
        return Ok(t);
    };
    t.expect(
        c2.fence > c1.fence,
        format!("fence {} after release is not above {}", c2.fence, c1.fence),
    );
    t.expect(
        lost(store.complete(&c1, b"x", lease)),
        "complete with an old fence was accepted".into(),
    );
    t.expect(
        lost(store.renew(&c1, lease)),
        "renew with an old fence was accepted".into(),
    );
    t.expect(
        lost(store.mark_unknown(&c1)),
        "mark_unknown with an old fence was accepted".into(),
    );
    // Steal from a live lease: only with the current fence.
    let stale = claim_raw(&store, &key, &h, lease, Some(c1.fence))?;
    t.expect(
        matches!(stale, ClaimResponse::Busy(_)),
        format!("a steal naming an old fence was honoured: {stale:?}"),
    );
    let Some(c3) = claimed(
        claim_raw(&store, &key, &h, lease, Some(c2.fence))?,
        &mut t,
        "steal",
    ) else {
        return Ok(t);
    };
    t.expect(
        c3.fence > c2.fence,
        "a takeover did not raise the fence".into(),
    );
    t.expect(
        c3.abandoned.as_ref().map(|a| a.fence) == Some(c2.fence),
        format!(
            "the takeover did not name the abandoned fence: {:?}",
            c3.abandoned
        ),
    );
    t.expect(
        lost(store.complete(&c2, b"x", lease)),
        "the zombie's completion was accepted".into(),
    );
    let bytes = codec::encode("done").map_err(|e| Error::store_msg(None, e.to_string()))?;
    store.complete(&c3, &bytes, lease)?;
    // `forget_if` forgets only the record with the fence it names.
    t.expect(
        !store.forget_if(&key, c2.fence)?,
        "forget_if with an old fence forgot the record".into(),
    );
    t.expect(
        store.inspect(&key)?.is_some_and(|r| r.fence == c3.fence),
        "forget_if with an old fence changed the record".into(),
    );
    t.expect(
        !store.forget_if(&Key::new(scope(), "never-claimed"), c3.fence)?,
        "forget_if found a record that was never claimed".into(),
    );
    t.expect(
        store.forget_if(&key, c3.fence)?,
        "forget_if with the current fence found no record".into(),
    );
    t.expect(
        store.inspect(&key)?.is_none(),
        "a forgotten record is still there".into(),
    );
    let Some(c4) = claimed(
        claim_raw(&store, &key, &h, lease, None)?,
        &mut t,
        "claim after forget",
    ) else {
        return Ok(t);
    };
    t.expect(
        c4.fence > c3.fence,
        format!("fence {} after forget is not above {}", c4.fence, c3.fence),
    );
    t.notes.push(format!(
        "fences {} {} {} {}",
        c1.fence, c2.fence, c3.fence, c4.fence
    ));
    Ok(t)
}

/// Contract 6.4, lease side: a holder on another host loses its claim when its lease runs out.
fn lease_takeover<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let key = Key::new(scope(), "leased");
    let short = Duration::from_millis(300);
    let Some(old) = claimed(
        claim_raw(&store, &key, &remote_holder(), short, None)?,
        &mut t,
        "claim",
    ) else {
        return Ok(t);
    };
    let busy = claim_raw(&store, &key, &remote_holder(), short, None)?;
    t.expect(
        matches!(busy, ClaimResponse::Busy(_)),
        format!("a live lease was not respected: {busy:?}"),
    );
    std::thread::sleep(Duration::from_millis(450));
    let bodies = AtomicU64::new(0);
    t.calls += 1;
    match Call::new(key.scope().to_owned(), "leased").run(&store, || {
        bodies.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Error>("successor".to_owned())
    }) {
        Ok(out) => {
            t.expect(
                out.fence > old.fence,
                "the successor's fence is not above the old one".into(),
            );
            t.results.insert(out.value);
        }
        Err(e) => {
            t.violations
                .push(format!("no takeover after the lease ran out: {e}"));
        }
    }
    t.bodies = bodies.load(Ordering::SeqCst);
    let late = store.complete(&old, b"late", short);
    t.expect(
        matches!(late, Err(Error::LeaseLost { .. })),
        format!("the old holder's completion: {late:?}"),
    );
    let rec = store.inspect(&key)?;
    t.expect(
        rec.as_ref()
            .and_then(|r| r.result.as_deref())
            .map(codec::decode::<String>)
            == Some(Ok("successor".into())),
        format!("the store does not keep the successor's result: {rec:?}"),
    );
    Ok(t)
}

/// Reliability 7: `Err` and an unwinding panic release the claim; the next call runs cleanly.
fn body_fails<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let scope = scope();
    let key = Key::new(scope.clone(), "fails");
    t.calls += 1;
    let err = Call::new(scope.clone(), "fails")
        .run(&store, || Err::<u32, _>(Error::config("the body failed")));
    t.expect(
        matches!(err, Err(Error::Config { .. })),
        format!("the body's error was not returned: {err:?}"),
    );
    let status = store.inspect(&key)?.map(|r| r.status);
    t.expect(
        status == Some(Status::Released),
        format!("after Err the record is {status:?}, not released"),
    );
    t.calls += 1;
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        Call::new(scope.clone(), "fails").run(&store, || -> Result<u32, Error> {
            panic!("the body panicked")
        })
    }));
    t.expect(panicked.is_err(), "the panic did not propagate".into());
    let status = store.inspect(&key)?.map(|r| r.status);
    t.expect(
        status == Some(Status::Released),
        format!("after a panic the record is {status:?}, not released"),
    );
    t.calls += 1;
    let ok = Call::new(scope.clone(), "fails").run(&store, || Ok::<_, Error>(7u32));
    t.expect(
        matches!(ok, Ok(ref o) if o.value == 7 && !o.replayed),
        format!("the next call did not run cleanly: {ok:?}"),
    );
    // A `once` body that panics may have done its effect: its outcome becomes unknown.
    t.calls += 2;
    let _ = catch_unwind(AssertUnwindSafe(|| {
        Call::new(scope.clone(), "once-panics")
            .once()
            .run(&store, || -> Result<u32, Error> { panic!("mid-effect") })
    }));
    let again = Call::new(scope.clone(), "once-panics")
        .once()
        .run(&store, || Ok::<_, Error>(1u32));
    t.expect(
        matches!(again, Err(Error::OutcomeUnknown { .. })),
        format!("a once body that panicked ran again: {again:?}"),
    );
    Ok(t)
}

/// Reliability 11 (in process): a body running 3x its lease keeps its claim against 8
/// contenders, because its lease is renewed.
fn live_holder_kept<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let lease = super::SHORT_LEASE;
    super::faults::long_body_kept(&store, &scope(), lease, lease * 3, 8, &mut t);
    Ok(t)
}

/// Reliability 11, identity: a record of this PID namespace whose pid is alive but whose start
/// time differs is stale and taken over at once.
fn stale_holder_taken<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let scope = scope();
    let me = Holder::current();
    let mut reused_pid = me.clone();
    reused_pid.pid = 1; // init: alive, but it started at another time than the holder did
    reused_pid.start_time = me.start_time.wrapping_add(12_345);
    let mut own_pid_reused = me.clone();
    own_pid_reused.start_time = me.start_time.wrapping_add(2);
    for (name, holder) in [
        ("reused-pid", reused_pid),
        ("own-pid-reused", own_pid_reused),
    ] {
        let key = Key::new(scope.clone(), name);
        claimed(
            claim_raw(&store, &key, &holder, Duration::from_secs(30), None)?,
            &mut t,
            name,
        );
        t.calls += 1;
        let started = Instant::now();
        match Call::new(scope.clone(), name).run(&store, || Ok::<_, Error>(name.to_owned())) {
            Ok(o) => {
                t.bodies += 1;
                t.results.insert(o.value);
                t.notes
                    .push(format!("{name} taken over in {:?}", started.elapsed()));
            }
            Err(e) => t
                .violations
                .push(format!("a {name} holder was not taken over: {e}")),
        }
    }
    Ok(t)
}

/// Contract 6.4: a holder whose process table this process cannot see (another boot id:
/// another machine, or a faked one; another PID namespace: another container; a record of
/// rerun 0.1 without a namespace) is never judged dead: it is taken over when its lease ends,
/// not before.
fn foreign_holder_waits<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let scope = scope();
    let me = Holder::current();
    let mut other_boot = me.clone();
    other_boot.boot_id = "00000000-0000-4000-8000-000000000000".into();
    let mut other_pid_ns = me.clone();
    other_pid_ns.pid_ns = me.pid_ns.wrapping_add(1);
    other_pid_ns.pid = 1;
    other_pid_ns.start_time = me.start_time.wrapping_add(7);
    let mut no_namespace = me.clone();
    no_namespace.pid_ns = 0;
    no_namespace.start_time = me.start_time.wrapping_add(3);
    let lease = Duration::from_millis(1500);
    let holders = [
        ("other-boot", other_boot),
        ("other-pid-namespace", other_pid_ns),
        ("no-namespace", no_namespace),
    ];
    for (name, holder) in &holders {
        let key = Key::new(scope.clone(), *name);
        claimed(claim_raw(&store, &key, holder, lease, None)?, &mut t, name);
    }
    let claimed_at = Instant::now();
    for (name, _) in &holders {
        t.calls += 1;
        match Call::new(scope.clone(), *name).run(&store, || Ok::<_, Error>(name.to_string())) {
            Err(Error::InProgress { .. }) => {}
            Ok(_) => {
                t.bodies += 1;
                t.violations.push(format!(
                    "a live {name} holder was taken over before its lease ended"
                ))
            }
            Err(e) => t.error(&e),
        }
    }
    for (name, _) in &holders {
        t.calls += 1;
        match Call::new(scope.clone(), *name)
            .wait(Duration::from_secs(10))
            .run(&store, || Ok::<_, Error>(name.to_string()))
        {
            Ok(o) => {
                t.bodies += 1;
                t.results.insert(o.value);
                let after = claimed_at.elapsed();
                // The lease was granted before `claimed_at`; allow for the store's clock tick.
                t.expect(
                    after + Duration::from_millis(50) >= lease,
                    format!("the {name} holder was taken over {after:?} after its claim, before its lease of {lease:?} ended"),
                );
            }
            Err(e) => t.violations.push(format!(
                "the {name} holder was not taken over after its lease: {e}"
            )),
        }
    }
    Ok(t)
}

#[derive(Serialize, Clone)]
struct Payload {
    customer: String,
    lines: Vec<Line>,
    meta: HashMap<String, String>,
}

#[derive(Serialize, Clone)]
struct Line {
    sku: String,
    cents: u64,
}

fn payload() -> Payload {
    Payload {
        customer: "cus_1".into(),
        lines: vec![
            Line {
                sku: "a".into(),
                cents: 100,
            },
            Line {
                sku: "b".into(),
                cents: 250,
            },
        ],
        meta: (0..20)
            .map(|i| (format!("k{i}"), format!("v{i}")))
            .collect(),
    }
}

/// Reliability 12: same key, changed payload (nested too, also while the first runs):
/// `PayloadMismatch`, body not run, record untouched; map order alone is no change.
fn payload_mismatch<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let store = Arc::new(factory.fresh()?.0);
    let scope = scope();
    let key = Key::new(scope.clone(), "order");
    let bodies = AtomicU64::new(0);
    let run = |p: &Payload| {
        Call::new(scope.clone(), "order")
            .payload(p)
            .run(&*store, || {
                bodies.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>("charged".to_owned())
            })
    };
    t.calls += 1;
    run(&payload())?;
    let before = store.inspect(&key)?;
    let mut nested = payload();
    nested.lines[1].cents = 251;
    let mut reordered = payload();
    reordered.meta = payload()
        .meta
        .into_iter()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    t.calls += 2;
    let r = run(&nested);
    t.expect(
        matches!(r, Err(Error::PayloadMismatch { .. })),
        format!("a nested change gave {r:?}"),
    );
    let r = run(&reordered);
    t.expect(
        matches!(r, Ok(ref o) if o.replayed),
        format!("a reordered map gave {r:?}"),
    );
    t.expect(
        same_record(&store.inspect(&key)?, &before),
        "the record changed".into(),
    );
    // While the first call still runs.
    let running_key = "running";
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            Call::new(scope.clone(), running_key)
                .payload(&payload())
                .run(&*store, || {
                    let _ = tx.send(());
                    std::thread::sleep(Duration::from_millis(200));
                    Ok::<_, Error>("first".to_owned())
                })
        });
        let _ = rx.recv_timeout(Duration::from_secs(10));
        t.calls += 1;
        let r = Call::new(scope.clone(), running_key)
            .payload(&nested)
            .run(&*store, || {
                bodies.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>("second".to_owned())
            });
        t.expect(
            matches!(r, Err(Error::PayloadMismatch { .. })),
            format!("a changed payload while running gave {r:?}"),
        );
        let _ = first.join();
    });
    t.bodies = bodies.load(Ordering::SeqCst);
    t.expect(t.bodies == 1, format!("the body ran {} times", t.bodies));
    Ok(t)
}

/// Whether two reads show the same record, ignoring how much time its lease or ttl has left
/// and its age.
fn same_record(a: &Option<RecordView>, b: &Option<RecordView>) -> bool {
    let strip = |r: &Option<RecordView>| {
        r.clone().map(|mut r| {
            r.lease_remaining = None;
            r.expires_in = None;
            r.age = None;
            r
        })
    };
    strip(a) == strip(b)
}

/// Writes `bytes` as the recorded result of `key`, through the store's own API.
fn record_bytes<S: Store + ?Sized>(store: &S, key: &Key, bytes: &[u8]) -> Result<(), Error> {
    let holder = Holder::current();
    match claim_raw(store, key, &holder, Duration::from_secs(30), None)? {
        ClaimResponse::Claimed(c) => store.complete(&c, bytes, Duration::from_secs(3600)),
        other => Err(Error::store_msg(
            Some(key),
            format!("could not claim to plant a record: {other:?}"),
        )),
    }
}

/// Reliability 13 and 14: a bit flip, a truncation, an unknown codec version or a changed
/// result type: `Corrupt`, body not run, record not overwritten; `forget` lets it run again.
fn corrupt_record<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let scope = scope();
    let good = codec::encode("a receipt").map_err(|e| Error::store_msg(None, e.to_string()))?;
    let mut flipped = good.clone();
    if let Some(b) = flipped.last_mut() {
        *b ^= 0x04;
    }
    let truncated = good[..good.len() - 3].to_vec();
    let mut version = good.clone();
    version[1] = 200;
    let changed_type = codec::encode(&42u32).map_err(|e| Error::store_msg(None, e.to_string()))?;
    for (name, bytes) in [
        ("bit-flip", flipped),
        ("truncated", truncated),
        ("version", version),
        ("type-changed", changed_type),
    ] {
        let key = Key::new(scope.clone(), name);
        record_bytes(&store, &key, &bytes)?;
        let before = store.inspect(&key)?;
        let bodies = AtomicU64::new(0);
        for _ in 0..2 {
            t.calls += 1;
            let r = Call::new(scope.clone(), name).run(&store, || {
                bodies.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>("rerun".to_owned())
            });
            match &r {
                Err(e @ Error::Corrupt { kind, .. }) => {
                    t.error(e);
                    if name == "type-changed" {
                        t.expect(
                            matches!(kind, CorruptKind::Decode(_)),
                            format!("a changed type gave {kind:?}"),
                        );
                    }
                }
                other => t
                    .violations
                    .push(format!("{name}: expected Corrupt, got {other:?}")),
            }
        }
        t.expect(
            bodies.load(Ordering::SeqCst) == 0,
            format!("{name}: the body ran"),
        );
        t.expect(
            same_record(&store.inspect(&key)?, &before),
            format!("{name}: the record was overwritten"),
        );
        store.forget(&key)?;
        t.calls += 1;
        let r = Call::new(scope.clone(), name).run(&store, || Ok::<_, Error>("fresh".to_owned()));
        t.expect(
            matches!(r, Ok(ref o) if !o.replayed),
            format!("{name}: after forget: {r:?}"),
        );
        t.bodies += bodies.load(Ordering::SeqCst) + 1;
    }
    Ok(t)
}

/// A result whose `Serialize` fails.
#[derive(Debug, Deserialize)]
struct Unencodable;

impl Serialize for Unencodable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom(
            "this value refuses to be encoded",
        ))
    }
}

/// Reliability 15: an unencodable result is `Codec`, leaves no claim in progress, and a `once`
/// function's record goes to unknown.
fn unencodable_result<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let scope = scope();
    for (name, once, want) in [
        ("replayable", false, Status::Released),
        ("once", true, Status::Unknown),
    ] {
        let mut call = Call::new(scope.clone(), name);
        if once {
            call = call.once();
        }
        t.calls += 1;
        t.bodies += 1;
        let r = call.run(&store, || Ok::<_, Error>(Unencodable));
        match &r {
            Err(e @ Error::Codec { .. }) => t.error(e),
            other => t
                .violations
                .push(format!("{name}: expected Codec, got {other:?}")),
        }
        let status = store
            .inspect(&Key::new(scope.clone(), name))?
            .map(|r| r.status);
        t.expect(
            status == Some(want),
            format!("{name}: record is {status:?}, expected {want:?}"),
        );
    }
    Ok(t)
}

/// Reliability 18: expired-but-present is absent for a replayable function; a `once` function's
/// completed record is honoured while present.
fn expiry<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let scope = scope();
    let ttl = Duration::from_millis(300);
    let bodies = AtomicU64::new(0);
    let call = |once: bool| {
        let mut c = Call::new(scope.clone(), if once { "once" } else { "replayable" }).ttl(ttl);
        if once {
            c = c.once();
        }
        c.run(&store, || {
            Ok::<_, Error>(format!("run {}", bodies.fetch_add(1, Ordering::SeqCst)))
        })
    };
    for once in [false, true] {
        t.calls += 2;
        let a = call(once)?;
        let b = call(once)?;
        t.expect(
            b.replayed && a.value == b.value,
            format!("once={once}: not replayed within ttl"),
        );
    }
    std::thread::sleep(ttl + Duration::from_millis(200));
    t.calls += 1;
    let r = call(false)?;
    t.expect(
        !r.replayed,
        "a replayable record past its ttl was replayed".into(),
    );
    let present = store.inspect(&Key::new(scope.clone(), "once"))?.is_some();
    t.calls += 1;
    let r = call(true)?;
    if present {
        t.expect(
            r.replayed,
            "a once record past its ttl but present ran again".into(),
        );
    }
    t.notes
        .push(format!("expired once record present: {present}"));
    let purged = store.purge_expired(1000)?;
    t.notes.push(format!("purged {purged}"));
    t.bodies = bodies.load(Ordering::SeqCst);
    Ok(t)
}

/// Scans page through every record (twice is allowed, as Redis' `SCAN` may; skipping is not),
/// with any page size: one record a page, a few, and `usize::MAX` (every record in one page,
/// "as many as there are"), and a filter by state finds the open claim among the completed.
fn scan_pages<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let scope = scope();
    let mut every = BTreeSet::new();
    for i in 0..25u32 {
        t.calls += 1;
        Call::new(scope.clone(), &i).run(&store, || Ok::<_, Error>(i))?;
        every.insert(Key::new(scope.clone(), &i));
    }
    let open = Key::new(scope.clone(), "open");
    t.calls += 1;
    let claim = claimed(
        claim_raw(
            &store,
            &open,
            &Holder::current(),
            Duration::from_secs(30),
            None,
        )?,
        &mut t,
        "the open claim",
    );
    every.insert(open.clone());
    let filter = ScanFilter::new();
    let in_progress = ScanFilter::new().status(Status::InProgress);
    for (filter, limit, want) in [
        (&filter, 1, &every),
        (&filter, 7, &every),
        (&filter, usize::MAX, &every),
        (&in_progress, 7, &BTreeSet::from([open.clone()])),
    ] {
        let mut seen = BTreeSet::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let page = store.scan_filtered(filter, cursor.as_deref(), limit)?;
            pages += 1;
            seen.extend(page.records.into_iter().map(|r| r.key));
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
            if pages > 10_000 {
                t.violations
                    .push(format!("a scan of pages of {limit} does not end"));
                break;
            }
        }
        t.expect(
            &seen == want,
            format!(
                "pages of {limit} ({:?}) found {} of the {} records selected, and {} others",
                filter.statuses,
                seen.intersection(want).count(),
                want.len(),
                seen.difference(want).count()
            ),
        );
        if limit == usize::MAX {
            t.expect(
                pages == 1,
                format!("a scan of pages of usize::MAX took {pages} pages"),
            );
        }
    }
    if let Some(claim) = claim {
        store.release(&claim)?;
    }
    Ok(t)
}

/// Contract 5, across modes: a replayable claim that takes over an unknown outcome (a dead
/// `once` attempt, or a record marked unknown) is recorded at most once, so that when it dies
/// too, the next call still finds the outcome unknown and never runs the body.
fn unknown_stays_once<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let scope = scope();
    let short = Duration::from_millis(200);
    let once_claim = |key: &Key, holder: &Holder| {
        store.claim(&ClaimRequest {
            key,
            fingerprint: &Fingerprint::EMPTY,
            holder,
            lease: short,
            once: true,
            steal: None,
        })
    };
    // One dead `once` attempt in progress, one marked unknown.
    once_claim(&Key::new(scope.clone(), "died"), &remote_holder())?;
    if let ClaimResponse::Claimed(c) =
        once_claim(&Key::new(scope.clone(), "marked"), &remote_holder())?
    {
        store.mark_unknown(&c)?;
    }
    std::thread::sleep(short + Duration::from_millis(150));
    for name in ["died", "marked"] {
        let key = Key::new(scope.clone(), name);
        // A replayable caller takes it over, and dies (a remote holder: its lease runs out).
        t.calls += 1;
        let taken = store.claim(&ClaimRequest {
            key: &key,
            fingerprint: &Fingerprint::EMPTY,
            holder: &remote_holder(),
            lease: short,
            once: false,
            steal: None,
        })?;
        match taken {
            ClaimResponse::Claimed(c) => t.expect(
                c.once && c.abandoned.as_ref().is_some_and(|a| a.outcome_unknown),
                format!("{name}: the takeover is not granted at most once, or does not say the outcome is unknown: {c:?}"),
            ),
            other => {
                t.violations.push(format!(
                    "{name}: a replayable claim was not granted: {other:?}"
                ));
                continue;
            }
        }
        let view = store.inspect(&key)?;
        t.expect(
            view.as_ref().is_some_and(|v| v.once),
            format!("{name}: the takeover is not recorded at most once: {view:?}"),
        );
    }
    std::thread::sleep(short + Duration::from_millis(150));
    let bodies = AtomicU64::new(0);
    for name in ["died", "marked"] {
        t.calls += 1;
        let r = Call::new(scope.clone(), name).run(&store, || {
            bodies.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(1u8)
        });
        t.expect(
            matches!(r, Err(Error::OutcomeUnknown { .. })),
            format!("{name}: after the takeover died: {r:?}"),
        );
    }
    t.bodies = bodies.load(Ordering::SeqCst);
    t.expect(t.bodies == 0, format!("the body ran {} times", t.bodies));
    Ok(t)
}

/// Contract 5: a dead `once` attempt is `OutcomeUnknown`; `reconcile` converges it either way.
fn once_unknown<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, _) = factory.fresh()?;
    let scope = scope();
    let short = Duration::from_millis(200);
    // Plant an abandoned once attempt: a remote holder whose lease runs out.
    for name in ["unknown", "done", "not-done"] {
        let key = Key::new(scope.clone(), name);
        store.claim(&ClaimRequest {
            key: &key,
            fingerprint: &Fingerprint::EMPTY,
            holder: &remote_holder(),
            lease: short,
            once: true,
            steal: None,
        })?;
    }
    std::thread::sleep(short + Duration::from_millis(150));
    let bodies = AtomicU64::new(0);
    let body = || {
        bodies.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Error>("charged".to_owned())
    };
    t.calls += 2;
    for _ in 0..2 {
        let r = Call::new(scope.clone(), "unknown").once().run(&store, body);
        t.expect(
            matches!(r, Err(Error::OutcomeUnknown { .. })),
            format!("without reconcile: {r:?}"),
        );
    }
    t.calls += 2;
    let r = Call::new(scope.clone(), "done").once().run_reconciled(
        &store,
        || Ok(Reconciled::Done("found in ledger".to_owned())),
        body,
    );
    t.expect(
        matches!(r, Ok(ref o) if o.value == "found in ledger"),
        format!("reconcile Done: {r:?}"),
    );
    let r = Call::new(scope.clone(), "done").once().run(&store, body);
    t.expect(
        matches!(r, Ok(ref o) if o.replayed && o.value == "found in ledger"),
        format!("after Done: {r:?}"),
    );
    t.calls += 1;
    let r = Call::new(scope.clone(), "not-done").once().run_reconciled(
        &store,
        || Ok(Reconciled::NotDone),
        body,
    );
    t.expect(
        matches!(r, Ok(ref o) if o.value == "charged" && !o.replayed),
        format!("reconcile NotDone: {r:?}"),
    );
    t.bodies = bodies.load(Ordering::SeqCst);
    t.expect(
        t.bodies == 1,
        format!(
            "the body ran {} times, expected once (after NotDone)",
            t.bodies
        ),
    );
    // An operator can resolve an unknown outcome by forgetting the key.
    store.forget(&Key::new(scope.clone(), "unknown"))?;
    t.calls += 1;
    let r = Call::new(scope.clone(), "unknown")
        .once()
        .run(&store, || Ok::<_, Error>("after forget".to_owned()));
    t.expect(r.is_ok(), format!("after forget: {r:?}"));
    Ok(t)
}

/// Async calls on a multi-threaded runtime (contract 3), and reliability 8: a future dropped
/// mid-body leaves no claim in progress past its lease and the next call completes.
fn async_calls<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let store = Arc::new(factory.fresh()?.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|e| Error::store(None, "starting a tokio runtime", e))?;
    let scope = scope();
    let bodies = Arc::new(AtomicU64::new(0));
    let results: BTreeMap<String, u64> = rt.block_on(async {
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (store, scope, bodies) = (store.clone(), scope.clone(), bodies.clone());
                tokio::spawn(async move {
                    let mut seen = BTreeMap::new();
                    for _ in 0..50 {
                        let bodies = bodies.clone();
                        let r = Call::new(scope.clone(), "async")
                            .wait(Duration::from_secs(10))
                            .run_async(&*store, async move {
                                bodies.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                Ok::<_, Error>("async result".to_owned())
                            })
                            .await;
                        let k = match r {
                            Ok(o) => o.value,
                            Err(e) => format!("error {}", e.kind_name()),
                        };
                        *seen.entry(k).or_insert(0) += 1;
                    }
                    seen
                })
            })
            .collect();
        let mut all = BTreeMap::new();
        for task in tasks {
            if let Ok(seen) = task.await {
                for (k, v) in seen {
                    *all.entry(k).or_insert(0) += v;
                }
            }
        }
        all
    });
    t.calls = results.values().sum();
    t.results = results.keys().cloned().collect();
    t.expect(
        results.len() == 1 && results.contains_key("async result"),
        format!("results: {results:?}"),
    );
    // A future dropped mid-body.
    let dropped = rt.block_on(async {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let store2 = store.clone();
        let scope2 = scope.clone();
        let task = tokio::spawn(async move {
            Call::new(scope2, "dropped")
                .lease(Duration::from_secs(2))
                .run_async(&*store2, async move {
                    let _ = tx.send(());
                    std::future::pending::<()>().await;
                    Ok::<_, Error>("never".to_owned())
                })
                .await
        });
        let _ = rx.await;
        task.abort();
        let _ = task.await;
        let started = Instant::now();
        let r = Call::new(scope.clone(), "dropped")
            .wait(Duration::from_secs(10))
            .run_async(&*store, async { Ok::<_, Error>("after drop".to_owned()) })
            .await;
        (r, started.elapsed())
    });
    t.calls += 1;
    match dropped {
        (Ok(o), took) => {
            t.expect(
                o.value == "after drop",
                format!("after a dropped future: {}", o.value),
            );
            t.notes
                .push(format!("claim of a dropped future freed after {took:?}"));
        }
        (Err(e), _) => t
            .violations
            .push(format!("after a dropped future the next call failed: {e}")),
    }
    t.bodies = bodies.load(Ordering::SeqCst);
    t.expect(
        t.bodies == 1,
        format!("the async body ran {} times", t.bodies),
    );
    // The async half reads a record as the sync half does.
    for id in ["async", "dropped", "absent"] {
        let key = Key::new(scope.clone(), id);
        let sync = store.inspect(&key)?;
        let read = rt.block_on(store.inspect_async(&key))?;
        let same = match (&sync, &read) {
            (Some(a), Some(b)) => {
                (&a.key, a.status, a.fence, &a.fingerprint, &a.result)
                    == (&b.key, b.status, b.fence, &b.fingerprint, &b.result)
            }
            (None, None) => true,
            _ => false,
        };
        t.expect(
            same,
            format!("{id}: inspect_async read {read:?}, inspect {sync:?}"),
        );
    }
    Ok(t)
}
