//! Checks of contract 6.7 (no stall spreads) and of the value domain, run in one process:
//! reliability 25 (a hung store next to a healthy one, a store whose `renew` panics) and 26
//! (keys of every shape, results of every serde shape, 50 MB values).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::report::Tally;
use super::values::{random_keys, random_results, KeyModel};
use super::wrappers::{
    FailsFirstComplete, FailsFirstRelease, LateClaims, PanicsOnce, Stalling, SLOW_LANDING,
};
use super::{unique, Factory, Settings, SHORT_LEASE};
use crate::codec;
use crate::error::Error;
use crate::key::Key;
use crate::runtime::Call;
use crate::store::memory::MemoryStore;
use crate::store::{call_deadline, Store};

/// A body of `length` on `store` (lease `lease`) while `contenders` threads call the same key
/// every 50 ms: the body runs once, the holder's call succeeds, and no contender runs it (the
/// holder renews its lease). Adds what it saw to `t`.
pub(super) fn long_body_kept<S: Store + ?Sized>(
    store: &S,
    scope: &str,
    lease: Duration,
    length: Duration,
    contenders: usize,
    t: &mut Tally,
) {
    let bodies = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let holding = AtomicBool::new(false);
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let holder = s.spawn(|| {
            let r = Call::new(scope.to_owned(), "long")
                .lease(lease)
                .run(store, || {
                    bodies.fetch_add(1, Ordering::SeqCst);
                    holding.store(true, Ordering::SeqCst);
                    std::thread::sleep(length);
                    Ok::<_, Error>("holder".to_owned())
                });
            done.store(true, Ordering::SeqCst);
            r
        });
        // The contenders start once the holder holds the key: its first call may have to open
        // a connection, and a contender that claimed first would be the holder instead.
        while !holding.load(Ordering::SeqCst) && !holder.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let handles: Vec<_> = (0..contenders)
            .map(|_| {
                s.spawn(|| {
                    let mut t = Tally::default();
                    while !done.load(Ordering::SeqCst) {
                        t.calls += 1;
                        match Call::new(scope.to_owned(), "long")
                            .lease(lease)
                            .run(store, || {
                                bodies.fetch_add(1, Ordering::SeqCst);
                                Ok::<_, Error>("contender".to_owned())
                            }) {
                            Ok(o) => {
                                t.results.insert(o.value);
                            }
                            Err(e) => t.error(&e),
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    t
                })
            })
            .collect();
        let mut all: Vec<Tally> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
        let mut ht = Tally::default();
        ht.calls += 1;
        match holder.join() {
            Ok(Ok(o)) => {
                ht.results.insert(o.value);
            }
            Ok(Err(e)) => ht.violations.push(format!("the live holder failed: {e}")),
            Err(_) => ht.violations.push("the live holder panicked".into()),
        }
        all.push(ht);
        all
    });
    for c in tallies {
        t.merge(c);
    }
    let ran = bodies.load(Ordering::SeqCst);
    t.bodies += ran;
    t.expect(
        ran == 1,
        format!("the body ran {ran} times: the live holder was stolen from"),
    );
    t.expect(
        !t.results.contains("contender"),
        "a contender ran the body".into(),
    );
}

/// Runs a claim on `neighbour` whose body lasts until `finish` is set, while `during` runs.
fn beside<R>(neighbour: &dyn Store, lease: Duration, during: impl FnOnce() -> R) -> (R, Tally) {
    let mut t = Tally::default();
    let finish = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        let held = s.spawn(|| {
            Call::new("rerun.conformance.neighbour", "held")
                .lease(lease)
                .run(neighbour, || {
                    started.store(true, Ordering::SeqCst);
                    while !finish.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Ok::<_, Error>(())
                })
        });
        while !started.load(Ordering::SeqCst) && !held.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let out = during();
        finish.store(true, Ordering::SeqCst);
        t.calls += 1;
        if let Ok(Err(e)) = held.join() {
            t.error(&e);
        }
        out
    });
    (out, t)
}

/// Contract 6.7: a neighbour store whose renewals hang forever (ignoring every deadline, as a
/// broken store a user wrote might) does not delay the renewals of this store's claims: a body
/// three leases long here is not taken over.
pub(super) fn hung_neighbour<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let (store, _) = factory.fresh()?;
    let scope = unique("conformance");
    let lease = SHORT_LEASE;
    let stalling = Stalling::new(Arc::new(MemoryStore::new()));
    let (mut t, neighbour) = {
        let mut t = Tally::default();
        let ((), n) = beside(&stalling, lease, || {
            // Let the neighbour's first renewal get stuck before the body here starts.
            std::thread::sleep(lease / 2);
            long_body_kept(&store, &scope, lease, lease * 3, 4, &mut t);
            stalling.release();
        });
        (t, n)
    };
    t.merge(neighbour);
    t.notes
        .push("a neighbour store's renewals hung for the whole body".into());
    Ok(t)
}

/// A store whose `renew` panics (once): the keeper catches it and goes on renewing, this claim
/// and later ones.
pub(super) fn panicking_renew<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let (store, _) = factory.fresh()?;
    let wrapped = PanicsOnce::new(store.shared());
    let mut t = Tally::default();
    let lease = SHORT_LEASE;
    long_body_kept(
        &wrapped,
        &unique("conformance"),
        lease,
        lease * 3,
        4,
        &mut t,
    );
    t.expect(wrapped.fired(), "the panicking renewal never ran".into());
    // A later claim is renewed too: the keeper survived.
    long_body_kept(
        &wrapped,
        &unique("conformance"),
        lease,
        lease * 3,
        2,
        &mut t,
    );
    Ok(t)
}

/// A claim the store answers only after its lease could have ended (another caller may have
/// taken the key over meanwhile): the body does not start, the call fails with a retryable
/// store error, and the claim is given back, so the next call runs the body at once; for a
/// `once` call too, whose body never began.
pub(super) fn late_claim<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let (store, _) = factory.fresh()?;
    let lease = SHORT_LEASE;
    let late = LateClaims::new(store.shared(), lease + lease / 10);
    let scope = unique("conformance");
    let mut t = Tally::default();
    for once in [false, true] {
        let id = if once { "once" } else { "replayable" };
        let bodies = AtomicU64::new(0);
        let body = || {
            bodies.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(7u32)
        };
        let call = |store: &dyn Store| {
            let call = Call::with_key(Key::new(scope.clone(), id)).lease(lease);
            let call = if once { call.once() } else { call };
            value_of(call.run(store, body))
        };
        let first = call(&late);
        t.calls += 1;
        t.expect(
            matches!(&first, Err(e @ Error::Store { .. }) if e.is_retryable()),
            format!("{id}: a claim answered after its lease gave {first:?}, not a retryable store error"),
        );
        let second = call(&*store.shared());
        t.calls += 1;
        t.expect(
            matches!(second, Ok(7)),
            format!("{id}: the call after a late claim gave {second:?}, not the body's result"),
        );
        let ran = bodies.load(Ordering::SeqCst);
        t.bodies += ran;
        t.expect(
            ran == 1,
            format!("{id}: the body ran {ran} times; once, by the second call, was expected"),
        );
    }
    Ok(t)
}

/// A body that fails, whose claim's release fails too (once): the claim is still given back,
/// a `once` claim included (the body's effect did not happen), so the next call runs the body
/// at once instead of waiting out the lease, after which a `once` key would be an unknown
/// outcome, refused until an operator forgets it.
pub(super) fn failed_release<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let (store, _) = factory.fresh()?;
    let scope = unique("conformance");
    let mut t = Tally::default();
    for once in [false, true] {
        let id = if once { "once" } else { "replayable" };
        let key = Key::new(scope.clone(), id);
        let failing = FailsFirstRelease::new(store.shared());
        let bodies = AtomicU64::new(0);
        let call = |store: &dyn Store, fails: bool| {
            let call = Call::with_key(key.clone()).lease(SHORT_LEASE * 30);
            let call = if once { call.once() } else { call };
            value_of(call.run(store, || {
                bodies.fetch_add(1, Ordering::SeqCst);
                if fails {
                    Err(Error::config("the body's own failure"))
                } else {
                    Ok(7u32)
                }
            }))
        };
        let first = call(&failing, true);
        t.calls += 1;
        t.expect(
            matches!(&first, Err(Error::Config { .. })),
            format!("{id}: a failing body's call gave {first:?}, not the body's error"),
        );
        // Given back in the background: within seconds, not a lease of 30.
        let until = Instant::now() + Duration::from_secs(10);
        let status = loop {
            let status = store.inspect(&key)?.map(|r| r.status);
            if status != Some(crate::record::Status::InProgress) || Instant::now() > until {
                break status;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        t.expect(
            status == Some(crate::record::Status::Released),
            format!("{id}: after a failed body and a failed release the record is {status:?}, not released"),
        );
        let second = call(&*store.shared(), false);
        t.calls += 1;
        t.expect(
            matches!(second, Ok(7)),
            format!("{id}: the call after a failed body gave {second:?}, not the body's result"),
        );
        let ran = bodies.load(Ordering::SeqCst);
        t.bodies += ran;
        t.expect(
            ran == 2,
            format!("{id}: the body ran {ran} times; twice (failed, then ran) was expected"),
        );
    }
    Ok(t)
}

/// A completion that fails quickly with a retryable error (a connection that died while the
/// body ran), whether or not it was recorded before its answer was lost, in sync and async
/// calls: the call still ends with the body's result recorded, the body having run once, and a
/// `once` key is not left to its lease to end unknown.
pub(super) fn failed_completion<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let (store, _) = factory.fresh()?;
    let scope = unique("conformance");
    let mut t = Tally::default();
    for mode in [Mode::Sync, Mode::Async] {
        for once in [false, true] {
            for lands in [false, true] {
                let id = format!(
                    "{mode:?}, {}, {}",
                    if once { "once" } else { "replayable" },
                    if lands { "recorded" } else { "not recorded" }
                );
                let key = Key::new(scope.clone(), id.as_str());
                let failing = FailsFirstComplete::new(store.shared(), lands);
                let bodies = AtomicU64::new(0);
                let call = || {
                    let call = Call::with_key(key.clone()).lease(SHORT_LEASE * 30);
                    if once {
                        call.once()
                    } else {
                        call
                    }
                };
                let first = match mode {
                    Mode::Sync => call().run(&failing, || {
                        bodies.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, Error>(7u32)
                    }),
                    Mode::Async => runtime()?.block_on(call().run_async(&failing, async {
                        bodies.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, Error>(7u32)
                    })),
                };
                t.calls += 1;
                if first.is_err() && failing.landed_slowly() {
                    // The store took longer to record the result than a failure the runtime
                    // tries again: what this machine made of the case, not the store.
                    t.notes.push(format!(
                        "{id}: the store took over {SLOW_LANDING:?} to record the result; not judged"
                    ));
                    continue;
                }
                t.expect(
                    matches!(&first, Ok(o) if o.value == 7 && !o.replayed),
                    format!("{id}: a call whose first completion failed gave {first:?}, not the body's result"),
                );
                let record = store.inspect(&key)?;
                let status = record.as_ref().map(|r| r.status);
                t.expect(
                    status == Some(crate::record::Status::Completed),
                    format!(
                        "{id}: after a failed completion the record is {status:?}, not completed"
                    ),
                );
                let second = call().run(&*store.shared(), || {
                    bodies.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Error>(8u32)
                });
                t.calls += 1;
                t.expect(
                    matches!(&second, Ok(o) if o.value == 7 && o.replayed),
                    format!("{id}: the next call gave {second:?}, not the recorded result"),
                );
                let ran = bodies.load(Ordering::SeqCst);
                t.bodies += ran;
                t.expect(
                    ran == 1,
                    format!("{id}: the body ran {ran} times, not once"),
                );
            }
        }
    }
    Ok(t)
}

/// The value of a call's outcome.
fn value_of<T>(out: Result<crate::runtime::Outcome<T>, Error>) -> Result<T, Error> {
    out.map(|o| o.value)
}

/// Reliability 25: the store's own backend hangs (a SQLite file locked by another connection,
/// a TCP proxy that stops forwarding) for longer than a lease, while a claim on it runs and a
/// healthy store of the same kind holds another. The healthy claim is not taken over; the hung
/// claim's completion is `LeaseLost`; every call returns within its deadline.
pub(super) fn hung_store<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    hung_store_in(factory, Mode::Sync)
}

/// [`hung_store`] with async calls (the store's async half, on a multi-threaded runtime).
pub(super) fn hung_store_async<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    hung_store_in(factory, Mode::Async)
}

/// Which half of a store a check calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Sync,
    Async,
}

/// The runtime of the async checks here.
fn runtime() -> Result<&'static tokio::runtime::Runtime, Error> {
    static RT: std::sync::OnceLock<Result<tokio::runtime::Runtime, String>> =
        std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| Error::store_msg(None, format!("starting a runtime: {e}")))
}

/// Runs `call` on `store`'s sync or async half.
fn run_in<S, T>(
    mode: Mode,
    store: &S,
    call: Call,
    body: impl FnOnce() -> Result<T, Error> + Send,
) -> Result<crate::runtime::Outcome<T>, Error>
where
    S: crate::store::DynStore + ?Sized,
    T: serde::Serialize + serde::de::DeserializeOwned + Send,
{
    match mode {
        Mode::Sync => call.run(store, body),
        Mode::Async => runtime()?.block_on(call.run_async(store, async move { body() })),
    }
}

fn hung_store_in<F: Factory>(factory: &F, mode: Mode) -> Result<Tally, Error> {
    let Some(hanging) = factory.hanging() else {
        let mut t = Tally::default();
        t.notes
            .push("skipped: this store has no backend that can hang".into());
        return Ok(t);
    };
    let (hung, hang) = hanging?;
    let (healthy, _) = factory.fresh()?;
    let op_timeout = hang.op_timeout();
    let lease = Duration::from_millis(1500);
    let limit = call_deadline(op_timeout, lease);
    // Scheduling slack on a loaded machine; the deadlines themselves are the promise.
    let slack = Duration::from_millis(1500);
    let scope = unique("conformance");
    let mut t = Tally::default();
    let started = AtomicBool::new(false);
    let go = AtomicBool::new(false);
    let hung_bodies = AtomicU64::new(0);
    let returned_after = Mutex::new(None);
    let healthy_tally = std::thread::scope(|s| {
        let holder = s.spawn(|| {
            let call = Call::new(scope.clone(), "hung").lease(lease);
            run_in(mode, &hung, call, || {
                hung_bodies.fetch_add(1, Ordering::SeqCst);
                started.store(true, Ordering::SeqCst);
                while !go.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok::<_, Error>("first".to_owned())
            })
        });
        while !started.load(Ordering::SeqCst) && !holder.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let freezer = s.spawn(|| {
            hang.freeze();
            // Past the lease: renewals cannot get through.
            std::thread::sleep(lease * 2);
            let t0 = Instant::now();
            go.store(true, Ordering::SeqCst);
            while !holder.is_finished() {
                std::thread::sleep(Duration::from_millis(5));
            }
            *returned_after.lock().unwrap_or_else(|p| p.into_inner()) = Some(t0.elapsed());
            // A call on the hung backend for another key returns within the store's timeout.
            let t1 = Instant::now();
            let other = run_in(mode, &hung, Call::new(scope.clone(), "other"), || {
                Ok::<_, Error>(())
            });
            let took = t1.elapsed();
            hang.thaw();
            (holder.join(), other, took)
        });
        let mut found = Tally::default();
        match freezer.join() {
            Ok((holder, other, took)) => {
                match holder {
                    Ok(Err(Error::LeaseLost { .. })) => {}
                    Ok(other) => found.violations.push(format!(
                        "the claim whose store hung past its lease ended with {other:?}, not LeaseLost"
                    )),
                    Err(_) => found.violations.push("the hung holder panicked".into()),
                }
                if let Err(e) = &other {
                    found.error(e);
                }
                found.expect(
                    took <= op_timeout + slack,
                    format!(
                        "a claim on the hung store took {took:?}, more than its timeout of {op_timeout:?}"
                    ),
                );
                found
                    .notes
                    .push(format!("a claim on the hung store returned in {took:?}"));
            }
            Err(_) => found.violations.push("the freezer panicked".into()),
        }
        found
    });
    t.merge(healthy_tally);
    // Meanwhile (and after), a healthy store of the same kind keeps its claims.
    long_body_kept(&healthy, &scope, SHORT_LEASE, SHORT_LEASE * 3, 2, &mut t);
    let after = *returned_after.lock().unwrap_or_else(|p| p.into_inner());
    match after {
        Some(after) => {
            t.notes.push(format!(
                "the hung holder's completion returned in {after:?}"
            ));
            t.expect(
                after <= limit + slack,
                format!(
                    "the hung holder's completion took {after:?}, more than its deadline of {limit:?}"
                ),
            );
        }
        None => t.violations.push("the hung holder never returned".into()),
    }
    // Thawed, the key is taken over and its body runs once more, cleanly.
    t.calls += 1;
    match Call::new(scope.clone(), "hung")
        .lease(lease)
        .wait(Duration::from_secs(10))
        .run(&hung, || {
            hung_bodies.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>("second".to_owned())
        }) {
        Ok(o) => {
            t.results.insert(o.value);
        }
        Err(e) => t.violations.push(format!(
            "after the hang, the key could not be run again: {e}"
        )),
    }
    t.bodies += hung_bodies.load(Ordering::SeqCst);
    Ok(t)
}

/// Reliability 26, keys: distinct key values of every shape never share a record; each key's
/// replay is its own result.
pub(super) fn key_domain<F: Factory>(factory: &F, settings: &Settings) -> Result<Tally, Error> {
    let (store, _) = factory.fresh()?;
    let scope = unique("conformance");
    let mut t = Tally::default();
    let keys = random_keys(0x5eed_0001, settings.n(300) as usize);
    let mut seen: BTreeMap<String, &KeyModel> = BTreeMap::new();
    for (i, model) in keys.iter().enumerate() {
        let id = Key::new(scope.clone(), model).id().to_owned();
        if let Some(earlier) = seen.insert(id.clone(), model) {
            if earlier != model {
                t.violations
                    .push(format!("{earlier:?} and {model:?} encode alike ({id:?})"));
            }
        }
        t.calls += 1;
        Call::new(scope.clone(), model).run(&store, || {
            t.bodies += 1;
            Ok::<_, Error>(i)
        })?;
    }
    for (i, model) in keys.iter().enumerate() {
        t.calls += 1;
        let out = Call::new(scope.clone(), model).run(&store, || Ok::<_, Error>(usize::MAX))?;
        // The first of equal models recorded the result.
        let first = keys.iter().position(|m| m == model).unwrap_or(i);
        t.expect(
            out.replayed && out.value == first,
            format!("{model:?} replayed {} (recorded for #{first})", out.value),
        );
    }
    Ok(t)
}

/// Reliability 26, results: values of a zoo of serde shapes (floats of every class, nested
/// options, every enum variant shape, i128/u128, maps with non-string keys, bytes) replay
/// exactly, bit for bit, through the store.
pub(super) fn result_domain<F: Factory>(factory: &F, settings: &Settings) -> Result<Tally, Error> {
    let (store, _) = factory.fresh()?;
    let scope = unique("conformance");
    let mut t = Tally::default();
    for (i, value) in random_results(0x5eed_0002, settings.n(100) as usize)
        .into_iter()
        .enumerate()
    {
        let first = Call::new(scope.clone(), &i).run(&store, || Ok::<_, Error>(value.clone()))?;
        let again = Call::new(scope.clone(), &i).run(&store, || Ok::<_, Error>(value.clone()))?;
        t.calls += 2;
        t.bodies += 1;
        let same =
            |a: &_| codec::encode(a).ok() == codec::encode(&value).ok() && value.same_bits(a);
        t.expect(
            !first.replayed && again.replayed && same(&first.value) && same(&again.value),
            format!(
                "#{i} did not replay exactly: {value:?} came back as {:?}",
                again.value
            ),
        );
    }
    Ok(t)
}

/// Reliability 26: a 50 MB payload fingerprints, and a 50 MB result records and replays.
pub(super) fn large_values<F: Factory>(factory: &F, settings: &Settings) -> Result<Tally, Error> {
    let (store, _) = factory.fresh()?;
    let scope = unique("conformance");
    let mut t = Tally::default();
    let size = settings.n(50 * 1024 * 1024) as usize;
    let payload: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let result: Vec<u8> = (0..size).map(|i| (i % 241) as u8).collect();
    let started = Instant::now();
    let first = Call::new(scope.clone(), "large")
        .payload(&payload)
        .run(&store, || Ok::<_, Error>(result.clone()))?;
    let again = Call::new(scope.clone(), "large")
        .payload(&payload)
        .run(&store, || Ok::<_, Error>(Vec::<u8>::new()))?;
    t.calls += 2;
    t.bodies += 1;
    t.expect(
        !first.replayed && again.replayed && again.value == result,
        "a large result did not replay as recorded".into(),
    );
    t.notes.push(format!(
        "{} MB payload and result: recorded and replayed in {:?}",
        size / (1024 * 1024),
        started.elapsed()
    ));
    Ok(t)
}
