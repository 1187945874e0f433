//! `recovery_check`: reliability test 19 (converge on startup) on any store.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::codec;
use crate::error::Error;
use crate::fingerprint::Fingerprint;
use crate::holder::Holder;
use crate::key::Key;
use crate::record::{ClaimRequest, ClaimResponse, Fence, Status};
use crate::recover::{recover, Recovery};
use crate::store::Store;

/// Stale records per kind: four kinds make the test's 1,000.
const PER_KIND: usize = 250;
/// Live claims, expired and unexpired completed records, which recovery must get right too.
const OTHERS: usize = 20;
const SHORT: Duration = Duration::from_millis(50);

/// What [`recovery_check`] found: the seeded records and each recovery's report.
#[derive(Debug, Clone)]
pub struct RecoveryCheck {
    /// Stale claims seeded (dead holders and run-out leases, replayable and `once`).
    pub stale: usize,
    /// The two recoveries that ran at once.
    pub concurrent: [Recovery; 2],
    /// The recovery run after them, which must change nothing.
    pub second: Recovery,
    /// How long the recoveries took, together.
    pub elapsed: Duration,
}

/// Reliability test 19 on `store`, which must be empty: seeds 1,000 stale claims (250 each:
/// replayable or `once`, with a dead holder or a run-out lease) plus live claims and completed
/// records, runs two [`recover`]s at once and then a third, and checks that every stale claim
/// was resolved exactly once, live claims and unexpired results were left alone, expired ones
/// were purged, and the third run changed nothing.
///
/// Store authors call it from a test on a fresh store (PostgreSQL, Redis, their own).
///
/// ```
/// use rerun_core::{testing::recovery_check, MemoryStore};
/// let check = recovery_check(&MemoryStore::new())?;
/// assert_eq!(check.stale, 1000);
/// assert!(check.second.changed_nothing());
/// # Ok::<(), String>(())
/// ```
pub fn recovery_check<S: Store + ?Sized>(store: &S) -> Result<RecoveryCheck, String> {
    let fail = |e: Error| e.to_string();
    let first = store.scan(None, 1).map_err(fail)?;
    if !first.records.is_empty() || !first.unreadable.is_empty() {
        return Err(format!(
            "recovery_check needs an empty store; {} has records",
            store.describe()
        ));
    }
    let seeded = seed(store).map_err(fail)?;
    // Let the short leases and ttls run out on the store's clock.
    std::thread::sleep(SHORT * 4);

    let started = Instant::now();
    let barrier = Barrier::new(2);
    let (a, b) = std::thread::scope(|s| {
        let run = || {
            barrier.wait();
            recover(store)
        };
        let a = s.spawn(run);
        let b = s.spawn(run);
        (a.join(), b.join())
    });
    let a = a
        .map_err(|_| "a recovery panicked".to_owned())?
        .map_err(fail)?;
    let b = b
        .map_err(|_| "a recovery panicked".to_owned())?
        .map_err(fail)?;
    let after_first = snapshot(store).map_err(fail)?;
    let second = recover(store).map_err(fail)?;
    let elapsed = started.elapsed();
    let after_second = snapshot(store).map_err(fail)?;

    let mut problems = Vec::new();
    // Stores whose server expires records itself (Redis) have nothing left to purge; the
    // expired records must be gone either way, which the state check below sees.
    if a.purged + b.purged > OTHERS as u64 {
        problems.push(format!(
            "expired records purged: {}, but only {OTHERS} expired",
            a.purged + b.purged
        ));
    }
    let mut expect_count = |what: &str, got: u64, want: usize| {
        if got != want as u64 {
            problems.push(format!("{what}: {got}, expected {want}"));
        }
    };
    expect_count(
        "stale replayable claims released",
        a.released + b.released,
        2 * PER_KIND,
    );
    expect_count(
        "stale once claims marked unknown",
        a.marked_unknown + b.marked_unknown,
        2 * PER_KIND,
    );
    expect_count("the second run's releases", second.released, 0);
    expect_count("the second run's unknown marks", second.marked_unknown, 0);
    expect_count("the second run's purges", second.purged, 0);
    expect_count(
        "live claims seen by the second run",
        second.live,
        2 * OTHERS,
    );
    expect_count(
        "unknown outcomes seen by the second run",
        second.unknown,
        2 * PER_KIND,
    );
    for (key, want) in &seeded {
        let got = after_first.get(key);
        let ok = match want {
            Want::Status(status) => got.map(|g| g.0) == Some(*status),
            Want::Untouched(fence) => got == Some(&(Status::InProgress, *fence)),
            Want::Gone => got.is_none(),
        };
        if !ok && problems.len() < 20 {
            problems.push(format!("{key}: {got:?}, expected {want:?}"));
        }
    }
    if after_first != after_second {
        problems.push("the second recovery changed the store".to_owned());
    }
    if problems.is_empty() {
        Ok(RecoveryCheck {
            stale: 4 * PER_KIND,
            concurrent: [a, b],
            second,
            elapsed,
        })
    } else {
        Err(format!(
            "recovery on {} did not converge:\n  {}",
            store.describe(),
            problems.join("\n  ")
        ))
    }
}

/// What a seeded record must look like after recovery.
#[derive(Debug)]
enum Want {
    Status(Status),
    Untouched(Fence),
    Gone,
}

fn claim<S: Store + ?Sized>(
    store: &S,
    key: &Key,
    holder: &Holder,
    lease: Duration,
    once: bool,
) -> Result<crate::record::Claim, Error> {
    let req = ClaimRequest {
        key,
        fingerprint: &Fingerprint::EMPTY,
        holder,
        lease,
        once,
        steal: None,
    };
    match store.claim(&req)? {
        ClaimResponse::Claimed(c) => Ok(c),
        other => Err(Error::store_msg(
            Some(key),
            format!("seeding expected a fresh claim, got {other:?}"),
        )),
    }
}

fn seed<S: Store + ?Sized>(store: &S) -> Result<BTreeMap<Key, Want>, Error> {
    let alive = Holder::current();
    // Our own pid with another start time: a reused pid, provably not the holder.
    let mut reused_pid = Holder::current();
    reused_pid.start_time = reused_pid.start_time.wrapping_add(2);
    // Init's pid with another start time: alive, but not the holder.
    let mut init_pid_reused = Holder::current();
    init_pid_reused.pid = 1;
    init_pid_reused.start_time = init_pid_reused.start_time.wrapping_add(2);
    // A holder whose process table is not ours to see (another boot id): alive for all we
    // know, so left alone while its lease runs.
    let mut foreign = Holder::current();
    foreign.boot_id = "00000000-0000-4000-8000-000000000000".into();
    let long = Duration::from_secs(300);

    let mut want = BTreeMap::new();
    for i in 0..PER_KIND {
        let kinds: [(&str, &Holder, Duration, bool, Status); 4] = [
            (
                "dead.replayable",
                &reused_pid,
                long,
                false,
                Status::Released,
            ),
            ("lapsed.replayable", &alive, SHORT, false, Status::Released),
            ("dead.once", &init_pid_reused, long, true, Status::Unknown),
            ("lapsed.once", &alive, SHORT, true, Status::Unknown),
        ];
        for (scope, holder, lease, once, status) in kinds {
            let key = Key::new(format!("rerun.recovery_check.{scope}"), &i);
            claim(store, &key, holder, lease, once)?;
            want.insert(key, Want::Status(status));
        }
    }
    let result = codec::encode(&"done").map_err(|e| Error::store_msg(None, e.to_string()))?;
    for i in 0..OTHERS {
        let key = Key::new("rerun.recovery_check.live", &i);
        let c = claim(store, &key, &alive, long, i % 2 == 0)?;
        want.insert(key, Want::Untouched(c.fence));

        let key = Key::new("rerun.recovery_check.foreign", &i);
        let c = claim(store, &key, &foreign, long, i % 2 == 1)?;
        want.insert(key, Want::Untouched(c.fence));

        let key = Key::new("rerun.recovery_check.expired", &i);
        let c = claim(store, &key, &alive, long, false)?;
        store.complete(&c, &result, SHORT)?;
        want.insert(key, Want::Gone);

        let key = Key::new("rerun.recovery_check.kept", &i);
        let c = claim(store, &key, &alive, long, false)?;
        store.complete(&c, &result, Duration::from_secs(3600))?;
        want.insert(key, Want::Status(Status::Completed));
    }
    Ok(want)
}

/// Every record's status and fence.
fn snapshot<S: Store + ?Sized>(store: &S) -> Result<BTreeMap<Key, (Status, Fence)>, Error> {
    let mut out = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store.scan(cursor.as_deref(), 500)?;
        for r in page.records {
            out.insert(r.key, (r.status, r.fence));
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(out),
        }
    }
}
