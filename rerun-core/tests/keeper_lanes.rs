//! One store that hangs with many claims in flight does not hold up the lease renewals of
//! another (contract 6.7): the renewals of one store run on a share of the keeper's workers,
//! the rest stay free for the others, a store with none running gets a worker even when every
//! worker is taken, and the keeper's scheduler never calls a store (not even `describe`).

#![cfg(feature = "testing")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rerun_core::record::{ClaimRequest, ClaimResponse};
use rerun_core::testing::{Faulty, Op};
use rerun_core::{Call, Error, Fingerprint, Holder, Key, MemoryStore, Store};

/// What a [`Hanging`] store hangs in until its gate opens.
#[derive(Clone, Copy)]
enum Hangs {
    /// Every renewal.
    Renew,
    /// `describe`, once armed.
    Describe,
}

/// A memory store that hangs until the gate opens, in its renewals or in `describe`.
#[derive(Clone)]
struct Hanging {
    store: Faulty,
    armed: Arc<AtomicBool>,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl Hanging {
    fn new(name: &str, hangs: Hangs) -> Hanging {
        let armed = Arc::new(AtomicBool::new(matches!(hangs, Hangs::Renew)));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let store = Faulty::new(MemoryStore::new())
            .describe_as(format!("a memory store that hangs ({name})"))
            .before({
                let (armed, gate) = (armed.clone(), gate.clone());
                move |op| {
                    let hangs_here = matches!(
                        (hangs, op),
                        (Hangs::Renew, Op::Renew { .. }) | (Hangs::Describe, Op::Describe)
                    );
                    if hangs_here && armed.load(Ordering::SeqCst) {
                        let (open, cv) = &*gate;
                        let mut open = open.lock().unwrap_or_else(|p| p.into_inner());
                        while !*open {
                            open = cv.wait(open).unwrap_or_else(|p| p.into_inner());
                        }
                    }
                    Ok(())
                }
            });
        Hanging { store, armed, gate }
    }

    fn open(&self) {
        let (open, cv) = &*self.gate;
        *open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
    }
}

const LEASE: Duration = Duration::from_secs(1);

/// One test at a time: they share the process's keeper, and each times a renewal against its
/// lease.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts `claims` calls on `store`, each with a body longer than two leases, whose renewals
/// hang (or whose `describe` does, once armed by the first body).
fn start_hanging<'s>(s: &'s std::thread::Scope<'s, '_>, store: &'s Hanging, claims: u32) {
    for i in 0..claims {
        s.spawn(move || {
            Call::new("lanes.hanging", &i)
                .lease(LEASE)
                .run(&store.store, || {
                    store.armed.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2_500));
                    Ok::<_, Error>(i)
                })
        });
    }
}

/// Runs a call on a healthy store whose body is longer than two leases, after the hanging
/// calls started, and checks that a contender finds its key busy past its first lease: only
/// renewals keep it.
fn healthy_claim_is_renewed<'s>(s: &'s std::thread::Scope<'s, '_>) {
    let healthy = MemoryStore::new();
    // Queued behind them: the healthy store's renewals, due a little later.
    std::thread::sleep(Duration::from_millis(200));
    let held = s.spawn({
        let healthy = healthy.clone();
        move || {
            Call::new("lanes.healthy", "k")
                .lease(LEASE)
                .run(&healthy, || {
                    std::thread::sleep(Duration::from_millis(2_500));
                    Ok::<_, Error>(1u32)
                })
        }
    });
    std::thread::sleep(Duration::from_millis(1_300));
    let key = Key::new("lanes.healthy", "k");
    let contender = Holder::current();
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        let answer = healthy.claim(&ClaimRequest {
            key: &key,
            fingerprint: &Fingerprint::EMPTY,
            holder: &contender,
            lease: LEASE,
            once: false,
            steal: None,
        });
        assert!(
            matches!(answer, Ok(ClaimResponse::Busy(_))),
            "the healthy claim was not renewed: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = held
        .join()
        .unwrap_or_else(|_| panic!("the healthy call panicked"));
    assert!(matches!(&out, Ok(o) if o.value == 1), "{out:?}");
}

#[test]
fn a_store_hanging_with_many_claims_leaves_workers_to_another() {
    // More claims in flight on the hanging store than the keeper has workers: each one's
    // first renewal (a third of the lease in) hangs.
    let _one = one_at_a_time();
    let hanging = Hanging::new("one", Hangs::Renew);
    std::thread::scope(|s| {
        start_hanging(s, &hanging, 80);
        healthy_claim_is_renewed(s);
        hanging.open();
    });
}

#[test]
fn stores_hanging_with_every_worker_between_them_leave_one_to_another() {
    // Five stores with more claims each than their share of workers: between them they hold
    // every worker, and the healthy store has none running.
    let _one = one_at_a_time();
    let hanging: Vec<Hanging> = (0..5)
        .map(|i| Hanging::new(&format!("store {i}"), Hangs::Renew))
        .collect();
    std::thread::scope(|s| {
        for store in &hanging {
            start_hanging(s, store, 20);
        }
        healthy_claim_is_renewed(s);
        for store in &hanging {
            store.open();
        }
    });
}

#[test]
fn a_store_whose_describe_hangs_holds_up_no_renewal() {
    // Its `describe` hangs from the moment its body starts (a store guarding its description
    // with a lock a hung operation holds, say): the keeper's scheduler must not be the one
    // waiting for it.
    let _one = one_at_a_time();
    let hanging = Hanging::new("describe", Hangs::Describe);
    std::thread::scope(|s| {
        start_hanging(s, &hanging, 1);
        healthy_claim_is_renewed(s);
        hanging.open();
    });
}

/// The keeper's lease workers alive now (thread names are cut to 15 bytes in `comm`).
fn lease_workers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|name| name.trim_end() == "rerun-lease-wor")
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_burst_of_renewals_beyond_the_limit_starts_one_worker_per_store() {
    // Four stores hold every worker; a fifth and a healthy one have many renewals due at
    // once, with none of theirs running: each gets one worker beyond the limit, not one per
    // renewal.
    let _one = one_at_a_time();
    let hanging: Vec<Hanging> = (0..5)
        .map(|i| Hanging::new(&format!("burst {i}"), Hangs::Renew))
        .collect();
    let healthy = MemoryStore::new();
    std::thread::scope(|s| {
        for store in &hanging {
            start_hanging(s, store, 20);
        }
        std::thread::sleep(Duration::from_millis(200));
        let calls: Vec<_> = (0..30u32)
            .map(|i| {
                let healthy = healthy.clone();
                s.spawn(move || {
                    Call::new("lanes.burst", &i).lease(LEASE).run(&healthy, || {
                        std::thread::sleep(Duration::from_millis(1_500));
                        Ok::<_, Error>(i)
                    })
                })
            })
            .collect();
        // Past the healthy claims' first renewal, while every hanging renewal still hangs.
        std::thread::sleep(Duration::from_millis(1_000));
        let workers = lease_workers();
        for store in &hanging {
            store.open();
        }
        // The limit and one for each of the six stores.
        let most = rerun_core_limits::MAX_WORKERS + 6;
        assert!(workers <= most, "{workers} lease workers (at most {most})");
        assert!(
            workers >= rerun_core_limits::MAX_WORKERS,
            "{workers} lease workers"
        );
        for call in calls {
            let out = call
                .join()
                .unwrap_or_else(|_| panic!("a healthy call panicked"));
            assert!(out.is_ok(), "a healthy call failed: {out:?}");
        }
    });
}

/// The keeper's limits, as `rerun_core::runtime::keeper` has them.
mod rerun_core_limits {
    pub const MAX_WORKERS: usize = 64;
}
