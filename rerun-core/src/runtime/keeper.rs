//! The lease keeper: renews the leases of running bodies, gives back the claims of dropped
//! futures, and wakes async waiters.
//!
//! Two kinds of thread, so that no store call can hold up anything else:
//!
//! - one **scheduler** thread per process (per fork generation: a forked child starts its own)
//!   decides what is due and serves the timers of async `wait`s. It never calls a store.
//! - **workers** make the store calls: each renewal and each give-back is a task of its own, and
//!   a task that finds no idle worker gets a new one (up to [`MAX_WORKERS`]; idle workers exit
//!   after a while). A renewal stuck on a locked SQLite file or a silent TCP peer occupies one
//!   worker until its store's deadline, and every other claim keeps being renewed meanwhile:
//!   the tasks of one store (told apart by [`Store::describe`]) run on at most
//!   [`MAX_WORKERS_PER_STORE`] workers at once, so a store that hangs with many claims in flight
//!   leaves the other workers to the other stores; a free worker takes a task of the store with
//!   the fewest running, and a store with none running gets a worker even when all
//!   [`MAX_WORKERS`] are busy (so they number at most that plus one per store, and never more
//!   than twice the limit).
//!
//! A store call that panics (a store a user wrote, say) is caught and logged; so is a waker that
//! panics. The keeper keeps going.
//!
//! While a claim is watched, the keeper knows until when its lease is surely held: the start of the
//! last renewal the store confirmed (before the first, the moment the claim was sent), plus the
//! lease (the store extended or granted it from a moment at or after that). When that moment passes
//! without a newer confirmation, the claim may be taken over: the keeper says so in a `warn` event
//! at once, and the holder learns it when it settles (its completion then reports
//! [`Error::LeaseLost`] unless the store still accepts it).
//!
//! A body shorter than a third of its lease never causes a renewal: registering a claim is the
//! store's lane (a hash of [`Store::describe`]) and a map insert under a mutex, and the
//! scheduler is only woken when a new deadline is earlier than the one it already sleeps
//! towards.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::clock::later;
use crate::error::Error;
use crate::record::Claim;
use crate::runtime::telemetry;
use crate::store::Store;

/// The most worker threads one process runs at once.
pub(crate) const MAX_WORKERS: usize = 64;

/// The most workers the tasks of one store occupy at once: a quarter of them, so that a few
/// stores that hang leave workers to the rest.
pub(crate) const MAX_WORKERS_PER_STORE: usize = MAX_WORKERS / 4;

/// The most worker threads at all: the limit, and one more for each store with none running
/// while all of those are busy, up to as many again.
const MAX_THREADS: usize = MAX_WORKERS * 2;

/// How long an idle worker waits for work before it exits (one always stays).
const WORKER_IDLE: Duration = Duration::from_secs(10);

struct Lease {
    store: Arc<dyn Store>,
    /// The store's lane, told when the claim was watched: the scheduler never calls a store,
    /// not even its `describe`.
    lane: Lane,
    claim: Claim,
    lease: Duration,
    /// When to renew next.
    next: Instant,
    /// Until when the store surely holds the lease (a lower bound).
    safe_until: Instant,
    /// A renewal of this lease is running on a worker.
    in_flight: bool,
    /// The lease may have run out (warned once); cleared by a later confirmed renewal.
    lapsed: bool,
    /// The store said the claim was taken over.
    lost: bool,
}

/// What a watched claim went through, told to its holder when it settles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LeaseState {
    /// The store said the claim was taken over, or the keeper saw the lease run out.
    gone: bool,
    /// Until when the claim or its last confirmed renewal keeps the lease (`None`: the claim
    /// was not watched).
    safe_until: Option<Instant>,
}

impl LeaseState {
    /// Whether the lease may have run out by now, or the claim was taken over: the result may
    /// not be recorded. Asked only when a completion failed, so the clock is read then, not on
    /// every call; a lease that ran out while the completion was on its way counts as lost.
    pub(crate) fn lost(&self) -> bool {
        self.gone || self.safe_until.is_some_and(|until| until <= Instant::now())
    }

    /// Whether the lease still holds `pause` from now: a completion tried again after that
    /// pause would still be in time.
    pub(crate) fn holds_for(&self, pause: Duration) -> bool {
        !self.gone
            && self
                .safe_until
                .is_none_or(|until| crate::clock::later(Instant::now(), pause) < until)
    }
}

/// Work a dropped future hands over: it cannot wait on the store itself.
pub(crate) enum Job {
    Release(Arc<dyn Store>, Claim),
    MarkUnknown(Arc<dyn Store>, Claim),
}

#[derive(Default)]
struct State {
    /// By watch id. The ids are this keeper's own counter, so a fast unseeded hash will do.
    leases: HashMap<u64, Lease, foldhash::fast::FixedState>,
    /// The pending sleeps, by deadline. A cancelled sleep leaves at once: under load the
    /// deadlines of finished calls never wake the scheduler.
    timers: BTreeMap<(Instant, u64), Waker>,
    next_id: u64,
    /// When the scheduler will wake next on its own; `None` while it waits for work.
    wake_at: Option<Instant>,
    /// Jobs submitted and jobs run, for [`Keeper::settle`].
    submitted: u64,
    finished: u64,
    /// Whether the scheduler thread runs.
    started: bool,
}

type Task = Box<dyn FnOnce() + Send + 'static>;

/// The store a task calls, as a hash of its description: tasks of one store share a lane.
type Lane = u64;

/// The lane of `store`'s tasks. `describe` is a store's own code, called on the caller's thread
/// (when a claim is watched or a job submitted), outside every lock of the keeper and never on
/// the scheduler's; one that panics puts its store's tasks in lane 0.
fn lane_of_described(store: &dyn Store) -> Lane {
    use std::hash::BuildHasher as _;
    catch_unwind(AssertUnwindSafe(|| {
        foldhash::fast::FixedState::default().hash_one(store.describe())
    }))
    .unwrap_or(0)
}

/// The lane of `store`, as [`lane_of_described`] tells it, remembered per thread for the last
/// store instance asked about: a thread's calls go to one store, and `describe` (a string
/// built, then hashed) would otherwise be a few percent of a fresh call on the memory store.
/// An instance is told by its address while held; a new store at a freed one's address may
/// get the old one's lane, which only groups its tasks with no one's.
fn lane_of(store: &Arc<dyn Store>) -> Lane {
    thread_local! {
        static LAST: std::cell::Cell<(usize, Lane)> = const { std::cell::Cell::new((0, 0)) };
    }
    let at = Arc::as_ptr(store) as *const () as usize;
    LAST.with(|last| match last.get() {
        (seen, lane) if seen == at => lane,
        _ => {
            let lane = lane_of_described(&**store);
            last.set((at, lane));
            lane
        }
    })
}

#[derive(Default)]
struct Pool {
    tasks: VecDeque<(Lane, Task)>,
    /// Tasks running now, per lane (lanes with none are removed).
    running: HashMap<Lane, usize, foldhash::fast::FixedState>,
    idle: usize,
    threads: usize,
}

impl Pool {
    /// The next task to run: of the lanes with a worker to spare, the one with the fewest tasks
    /// running (a store with none running goes before one that may be hanging), and of its
    /// tasks the first queued. A worker beyond [`MAX_WORKERS`] takes only a task of a store
    /// with none running (it was started for one), so that such workers number one per store.
    fn next_task(&mut self) -> Option<(Lane, Task)> {
        let share = if self.threads > MAX_WORKERS {
            1
        } else {
            MAX_WORKERS_PER_STORE
        };
        let running = &self.running;
        let mut best: Option<(usize, usize)> = None;
        for (at, (lane, _)) in self.tasks.iter().enumerate() {
            let n = running.get(lane).copied().unwrap_or(0);
            if n < share && best.is_none_or(|(_, fewest)| n < fewest) {
                best = Some((at, n));
                if n == 0 {
                    // None fewer: the first of a store with nothing running.
                    break;
                }
            }
        }
        let (at, _) = best?;
        let (lane, task) = self.tasks.remove(at)?;
        *self.running.entry(lane).or_insert(0) += 1;
        Some((lane, task))
    }

    /// Counts a task of `lane` as done.
    fn finished(&mut self, lane: Lane) {
        let Some(n) = self.running.get_mut(&lane) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            self.running.remove(&lane);
        }
    }
}

pub(crate) struct Keeper {
    state: Mutex<State>,
    /// Wakes the scheduler.
    cv: Condvar,
    /// Signalled when jobs finish.
    settled: Condvar,
    pool: Mutex<Pool>,
    work: Condvar,
}

/// The keeper of this process (of this fork generation), started on first use.
pub(crate) fn keeper() -> &'static Keeper {
    crate::process::current().keeper.get_or_init(|| {
        Box::leak(Box::new(Keeper {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            settled: Condvar::new(),
            pool: Mutex::new(Pool::default()),
            work: Condvar::new(),
        }))
    })
}

/// How often a lease is renewed: at a third of its length, so two renewals can fail before it ends.
fn renew_interval(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(1))
}

/// How soon a failed renewal is tried again.
fn retry_interval(lease: Duration) -> Duration {
    (lease / 10).clamp(Duration::from_millis(1), Duration::from_secs(1))
}

impl Keeper {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the scheduler if `at` is earlier than the moment it sleeps towards; starts it if
    /// it does not run yet.
    fn nudge(&'static self, state: &mut State, at: Instant) {
        if !state.started {
            state.started = self.start();
        }
        if state.wake_at.is_none_or(|w| at < w) {
            state.wake_at = Some(at);
            self.cv.notify_one();
        }
    }

    fn start(&'static self) -> bool {
        let spawned = std::thread::Builder::new()
            .name("rerun-lease-keeper".into())
            .spawn(move || self.schedule());
        match spawned {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(error = %e, "rerun could not start its lease keeper thread; leases will not be renewed until it can");
                false
            }
        }
    }

    /// Starts renewing `claim` until [`Keeper::unwatch`]. `sent` is a moment before the claim
    /// was sent: the store granted the lease after it, so the lease surely runs until `sent`
    /// plus the lease, and the first renewal is due a third of the lease after it. A claim whose
    /// answer was slow in coming is renewed that much sooner (at once, if a third of its lease
    /// went by before the answer), rather than a third of the lease after the answer.
    pub(crate) fn watch(
        &'static self,
        store: Arc<dyn Store>,
        claim: Claim,
        lease: Duration,
        sent: Instant,
    ) -> u64 {
        let next = later(sent, renew_interval(lease));
        let lane = lane_of(&store);
        let mut state = self.lock();
        state.next_id += 1;
        let id = state.next_id;
        state.leases.insert(
            id,
            Lease {
                store,
                lane,
                claim,
                lease,
                next,
                safe_until: later(sent, lease),
                in_flight: false,
                lapsed: false,
                lost: false,
            },
        );
        self.nudge(&mut state, next);
        id
    }

    /// Stops renewing, and tells what the lease went through.
    pub(crate) fn unwatch(&self, id: u64) -> LeaseState {
        match self.lock().leases.remove(&id) {
            Some(l) => LeaseState {
                gone: l.lost || l.lapsed,
                safe_until: Some(l.safe_until),
            },
            None => LeaseState::default(),
        }
    }

    /// Runs a job on a worker.
    pub(crate) fn submit(&'static self, job: Job) {
        self.lock().submitted += 1;
        let lane = match &job {
            Job::Release(store, _) | Job::MarkUnknown(store, _) => lane_of(store),
        };
        self.spawn_task(
            lane,
            Box::new(move || {
                // Counted as run even when the store's call panics: `settle` waits for it.
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run_job(job))) {
                    quietly(|| {
                        tracing::error!(
                            panic = %panic_text(&*panic),
                            "rerun: a store panicked giving back a claim; its lease will end it"
                        );
                        drop(panic);
                    });
                }
                let mut state = self.lock();
                state.finished += 1;
                self.settled.notify_all();
            }),
        );
    }

    /// Waits up to `timeout` until every job submitted so far has run (the claims of dropped
    /// or panicked async calls are given back); returns whether they all did. The safe-to-rerun
    /// harness reruns an operation only after the crashed run's claim was given back.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn settle(&self, timeout: Duration) -> bool {
        let deadline = crate::clock::deadline_in(timeout);
        let mut state = self.lock();
        let target = state.submitted;
        while state.finished < target {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .settled
                .wait_timeout(state, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        true
    }

    // ---- workers ------------------------------------------------------------------------

    /// Queues a task of `lane`; starts a worker when no idle one is left for it.
    fn spawn_task(&'static self, lane: Lane, task: Task) {
        let mut pool = self.pool();
        // An idle worker that a queued task already woke is not free for this one.
        let free = pool.idle > pool.tasks.len();
        if pool.threads >= MAX_WORKERS
            && pool.threads < MAX_THREADS
            && !free
            && !pool.running.contains_key(&lane)
        {
            // Every worker is busy (most likely waiting out store deadlines), none with this
            // task's store: it gets a worker beyond the limit all the same, so that a few
            // stores that hang with a full share each cannot hold up every other store's
            // renewals. The task goes straight to that worker and counts as running now, so
            // that the store's next task (due in the same round, say) waits for it.
            *pool.running.entry(lane).or_insert(0) += 1;
            pool.threads += 1;
            drop(pool);
            self.start_worker(Some((lane, task)));
            return;
        }
        pool.tasks.push_back((lane, task));
        if pool.idle > 0 {
            // An idle worker takes the task it should run next: this one, or one queued
            // before it.
            self.work.notify_one();
        }
        if pool.tasks.len() <= pool.idle || pool.threads >= MAX_WORKERS {
            // An idle worker will take it, or every worker is busy and some with this task's
            // store: the task runs when one comes back.
            return;
        }
        pool.threads += 1;
        drop(pool);
        self.start_worker(None);
    }

    /// Starts a worker (counted in `threads` already), which runs `first` (counted as running
    /// already) before it takes tasks from the queue. A thread that cannot start gives its
    /// task back to the queue.
    fn start_worker(&'static self, first: Option<(Lane, Task)>) {
        let handed = Arc::new(Mutex::new(first));
        let taken = handed.clone();
        let spawned = std::thread::Builder::new()
            .name("rerun-lease-worker".into())
            .spawn(move || {
                let first = taken.lock().unwrap_or_else(|p| p.into_inner()).take();
                self.work(first)
            });
        if let Err(e) = spawned {
            let mut pool = self.pool();
            pool.threads -= 1;
            if let Some((lane, task)) = handed.lock().unwrap_or_else(|p| p.into_inner()).take() {
                pool.finished(lane);
                pool.tasks.push_back((lane, task));
            }
            tracing::error!(error = %e, "rerun could not start a lease worker thread; the task waits for a busy one");
        }
    }

    fn work(&'static self, mut first: Option<(Lane, Task)>) {
        let mut pool = self.pool();
        let mut timed_out = false;
        loop {
            if let Some((lane, task)) = first.take().or_else(|| pool.next_task()) {
                drop(pool);
                // A panic of the task, or of what reports it (a subscriber's code), or of its
                // payload's destructor, leaves the counts right.
                quietly(|| {
                    if let Err(panic) = catch_unwind(AssertUnwindSafe(task)) {
                        tracing::error!(
                            panic = %panic_text(&*panic),
                            "rerun: a lease task panicked; the keeper goes on"
                        );
                        drop(panic);
                    }
                });
                pool = self.pool();
                pool.finished(lane);
                if !pool.tasks.is_empty() && pool.idle > 0 {
                    // A task held back for its lane may run now, on an idle worker.
                    self.work.notify_one();
                }
                timed_out = false;
                continue;
            }
            // No task this worker may take. It exits when it has been idle for a while and
            // the queue is empty, or when it is one beyond the limit (the tasks left are held
            // back for stores whose share is busy) and has been idle, or another worker is.
            let beyond = pool.threads > MAX_WORKERS;
            let spare = pool.tasks.is_empty() || beyond;
            if pool.threads > 1 && ((timed_out && spare) || (beyond && pool.idle > 0)) {
                pool.threads -= 1;
                return;
            }
            pool.idle += 1;
            let (guard, timeout) = self
                .work
                .wait_timeout(pool, WORKER_IDLE)
                .map(|(g, t)| (g, t.timed_out()))
                .unwrap_or_else(|p| {
                    let (g, t) = p.into_inner();
                    (g, t.timed_out())
                });
            pool = guard;
            pool.idle -= 1;
            timed_out = timeout;
        }
    }

    // ---- the scheduler --------------------------------------------------------------------

    fn schedule(&'static self) {
        loop {
            // Nothing in a round should panic; if something does, log it and keep serving (a
            // panic of what reports it, a subscriber's code, included).
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.round())) {
                quietly(|| {
                    tracing::error!(
                        panic = %panic_text(&*panic),
                        "rerun: the lease keeper panicked; it goes on"
                    );
                    drop(panic);
                });
            }
        }
    }

    /// Dispatches what is due, then sleeps until the next deadline or a nudge. What it reports
    /// (a lease that lapsed, a waker that panicked) it reports after the round's work is handed
    /// out, each report on its own: a subscriber's code that panics stops no renewal or timer.
    fn round(&'static self) {
        let mut state = self.lock();
        let now = Instant::now();
        let mut lapsed = Vec::new();
        let mut woken = Vec::new();
        while let Some(entry) = state.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            woken.push(entry.remove());
        }
        let mut due = Vec::new();
        for (id, l) in state.leases.iter_mut() {
            if l.lost {
                continue;
            }
            if !l.lapsed && l.safe_until <= now {
                l.lapsed = true;
                lapsed.push((l.claim.clone(), l.lease));
            }
            if !l.in_flight && l.next <= now {
                l.in_flight = true;
                due.push((*id, l.lane, l.store.clone(), l.claim.clone(), l.lease));
            }
        }
        let next = state
            .leases
            .values()
            .filter(|l| !l.lost)
            .flat_map(|l| {
                let renew = (!l.in_flight).then_some(l.next);
                let lapse = (!l.lapsed).then_some(l.safe_until);
                renew.into_iter().chain(lapse)
            })
            .chain(state.timers.first_key_value().map(|((at, _), _)| *at))
            .min();
        if !(due.is_empty() && woken.is_empty() && lapsed.is_empty()) {
            drop(state);
            for waker in woken {
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| waker.wake())) {
                    quietly(|| {
                        tracing::error!(panic = %panic_text(&*panic), "rerun: a waker panicked");
                        drop(panic);
                    });
                }
            }
            // Before the renewals are handed out, so that what a renewal reports comes after.
            for (claim, lease) in lapsed {
                quietly(|| {
                    tracing::warn!(
                        key = %telemetry::key_field(&claim.key),
                        fence = claim.fence,
                        lease = ?lease,
                        "rerun: a lease ran out before it could be renewed; another caller may take the key over, and this attempt's result will then not be recorded"
                    )
                });
            }
            for (id, lane, store, claim, lease) in due {
                self.spawn_task(
                    lane,
                    Box::new(move || self.renew(id, &*store, &claim, lease)),
                );
            }
            return;
        }
        state.wake_at = next;
        drop(match next {
            Some(at) => {
                let wait = at.saturating_duration_since(Instant::now());
                self.cv
                    .wait_timeout(state, wait)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0)
            }
            None => self.cv.wait(state).unwrap_or_else(|p| p.into_inner()),
        });
    }

    /// One renewal, on a worker.
    fn renew(&'static self, id: u64, store: &dyn Store, claim: &Claim, lease: Duration) {
        let sent = Instant::now();
        let kind = store.kind();
        let result = catch_unwind(AssertUnwindSafe(|| {
            telemetry::store_op_sync(kind, "renew", || store.renew(claim, lease))
        }))
        .unwrap_or_else(|panic| {
            Err(Error::store_msg(
                Some(&claim.key),
                format!("renewing the lease panicked: {}", panic_text(&*panic)),
            ))
        });
        let mut state = self.lock();
        let now = Instant::now();
        let Some(l) = state.leases.get_mut(&id) else {
            // Settled meanwhile.
            drop(state);
            quietly(|| telemetry::renewal(renewal_outcome(&result)));
            return;
        };
        l.in_flight = false;
        // The lease's record first, then what is reported of it (metrics, log events: a
        // recorder's or a subscriber's code that panics must not leave the lease unscheduled).
        let mut back = false;
        match &result {
            Ok(()) => {
                l.safe_until = later(sent, lease);
                if l.lapsed && l.safe_until > now {
                    l.lapsed = false;
                    back = true;
                }
                l.next = later(now, renew_interval(lease));
            }
            Err(Error::LeaseLost { .. }) => l.lost = true,
            Err(_) => l.next = later(now, retry_interval(lease)),
        }
        if !l.lost {
            let next = l.next;
            self.nudge(&mut state, next);
        }
        drop(state);
        quietly(|| telemetry::renewal(renewal_outcome(&result)));
        quietly(|| match &result {
            Ok(()) if back => {
                tracing::info!(key = %telemetry::key_field(&claim.key), fence = claim.fence, "rerun: a lapsed lease was renewed after all; the claim still stands");
            }
            Ok(()) => {}
            Err(Error::LeaseLost { .. }) => {
                tracing::warn!(key = %telemetry::key_field(&claim.key), fence = claim.fence, "rerun: the lease was taken over while the body ran; its result will not be recorded");
            }
            Err(e) => {
                tracing::warn!(key = %telemetry::key_field(&claim.key), fence = claim.fence, error = %telemetry::error_field(e), "rerun: renewing a lease failed; retrying");
            }
        });
    }

    // ---- timers ---------------------------------------------------------------------------

    fn register_timer(&'static self, at: Instant, waker: &Waker, id: &mut Option<u64>) {
        let mut state = self.lock();
        let timer = match *id {
            Some(t) => t,
            None => {
                state.next_id += 1;
                *id = Some(state.next_id);
                state.next_id
            }
        };
        match state.timers.get_mut(&(at, timer)) {
            Some(w) => w.clone_from(waker),
            // New, or fired already (then the next poll finds it due).
            None => {
                state.timers.insert((at, timer), waker.clone());
            }
        }
        self.nudge(&mut state, at);
    }

    fn cancel_timer(&self, at: Instant, id: u64) {
        self.lock().timers.remove(&(at, id));
    }
}

/// A renewal's outcome as the `rerun_lease_renewals_total` counter labels it.
fn renewal_outcome(result: &Result<(), Error>) -> &'static str {
    match result {
        Ok(()) => "ok",
        Err(Error::LeaseLost { .. }) => "lost",
        Err(_) => "failed",
    }
}

/// The pauses before a give-back or a completion that failed is tried again, while the store
/// says a retry may help: a restart or a lock held a moment outlasts one attempt, and a `once`
/// claim left to its lease ends as an unknown outcome.
pub(crate) const RETRY_PAUSES: [Duration; 3] = [
    Duration::from_millis(50),
    Duration::from_millis(250),
    Duration::from_secs(1),
];

fn run_job(job: Job) {
    let (give_back, key): (&dyn Fn() -> Result<(), Error>, &crate::Key) = match &job {
        Job::Release(store, claim) => (&|| store.release(claim), &claim.key),
        Job::MarkUnknown(store, claim) => (&|| store.mark_unknown(claim), &claim.key),
    };
    let mut result = give_back();
    for pause in RETRY_PAUSES {
        match &result {
            Err(e) if e.is_retryable() && !matches!(e, Error::LeaseLost { .. }) => {
                std::thread::sleep(pause);
                result = give_back();
            }
            _ => break,
        }
    }
    match result {
        Ok(()) | Err(Error::LeaseLost { .. }) => {}
        Err(e) => {
            tracing::warn!(key = %telemetry::key_field(key), error = %telemetry::error_field(&e), "rerun: could not give back a claim; its lease will end it")
        }
    }
}

/// Runs `f`, which only reports (a log event, a payload dropped), so that a panic in it (a
/// subscriber's code, a payload's destructor) is dropped too, without a word: the keeper's
/// counts stay right.
fn quietly(f: impl FnOnce()) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(f)) {
        std::mem::forget(panic);
    }
}

pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a non-text panic".into())
}

/// A runtime-independent sleep, served by the keeper's scheduler (which never waits on a store).
pub(crate) struct Sleep {
    at: Instant,
    timer: Option<u64>,
    keeper: &'static Keeper,
}

pub(crate) fn sleep(d: Duration) -> Sleep {
    Sleep {
        at: later(Instant::now(), d),
        timer: None,
        keeper: keeper(),
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.at {
            return Poll::Ready(());
        }
        this.keeper
            .register_timer(this.at, cx.waker(), &mut this.timer);
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(id) = self.timer {
            self.keeper.cancel_timer(self.at, id);
        }
    }
}

/// Runs `fut` for at most `limit`; `None` when the time ran out first. Needs no async runtime
/// (and no timer of one): the keeper's scheduler serves the deadline.
#[cfg_attr(not(any(feature = "postgres", feature = "redis")), allow(dead_code))]
pub(crate) async fn deadline<F: Future>(limit: Duration, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut timer = std::pin::pin!(sleep(limit));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::Fingerprint;
    use crate::holder::Holder;
    use crate::key::Key;
    use crate::record::{ClaimRequest, ClaimResponse};
    use crate::store::memory::MemoryStore;

    fn claim(store: &MemoryStore, name: &str, lease: Duration) -> Claim {
        let key = Key::new("keeper.test", name);
        let resp = store.claim(&ClaimRequest {
            key: &key,
            fingerprint: &Fingerprint::EMPTY,
            holder: &Holder::current(),
            lease,
            once: false,
            steal: None,
        });
        match resp {
            Ok(ClaimResponse::Claimed(c)) => c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_deadline_ends_a_pending_future() {
        let out = crate::runtime::call::block_on(deadline(
            Duration::from_millis(20),
            std::future::pending::<()>(),
        ));
        assert_eq!(out, None);
        let out = crate::runtime::call::block_on(deadline(Duration::from_secs(5), async { 7 }));
        assert_eq!(out, Some(7));
    }

    #[test]
    fn a_waker_that_panics_does_not_stop_the_timers() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::task::Wake;
        struct Panics;
        impl Wake for Panics {
            fn wake(self: Arc<Self>) {
                panic!("a waker that panics (on purpose)");
            }
        }
        let mut bad = Box::pin(sleep(Duration::from_millis(5)));
        let waker = Waker::from(Arc::new(Panics));
        assert!(bad
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        std::thread::sleep(Duration::from_millis(30));
        // A later timer still fires: the scheduler survived the panicking waker.
        let fired = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let mut good = Box::pin(sleep(Duration::from_millis(5)));
        let waker = Waker::from(Arc::new(Flag(fired.clone())));
        assert!(good
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        let until = Instant::now() + Duration::from_secs(5);
        while !fired.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(fired.load(Ordering::SeqCst));
    }

    #[test]
    fn a_claim_answered_late_is_renewed_at_once() {
        // The claim was sent 6 s ago and answered only now: two thirds of its 9 s lease are
        // gone, so its renewal is overdue. (Were the first renewal counted from the answer, it
        // would come 3 s from now.)
        let lease = Duration::from_secs(9);
        let Some(sent) = Instant::now().checked_sub(Duration::from_secs(6)) else {
            eprintln!("skipped: this monotonic clock is younger than 6 s");
            return;
        };
        let clock = crate::clock::ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let c = claim(&store, "answered late", lease);
        // On the store's clock the lease has run out: only a renewal makes it live again.
        clock.advance(lease * 2);
        let id = keeper().watch(Arc::new(store.clone()), c.clone(), lease, sent);
        let until = Instant::now() + Duration::from_secs(2);
        let renewed = || {
            store
                .inspect(&c.key)
                .ok()
                .flatten()
                .and_then(|v| v.lease_remaining)
                .is_some()
        };
        while !renewed() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(renewed(), "renewed within 2 s of the late answer");
        keeper().unwatch(id);
    }

    #[test]
    fn renewals_run_and_settling_reports_a_held_lease() {
        let store = MemoryStore::new();
        // A lease long enough that a loaded machine still renews it in time.
        let lease = Duration::from_secs(1);
        let sent = Instant::now();
        let c = claim(&store, "renewed", lease);
        let id = keeper().watch(Arc::new(store.clone()), c.clone(), lease, sent);
        std::thread::sleep(lease * 5 / 2);
        let view = store.inspect(&c.key).ok().flatten();
        assert!(view.and_then(|v| v.lease_remaining).is_some(), "renewed");
        assert!(!keeper().unwatch(id).lost());
    }
}
