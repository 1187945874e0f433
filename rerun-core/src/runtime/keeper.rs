//! The lease keeper: one background thread per process that renews the leases of running
//! bodies, performs releases handed over by dropped futures, and wakes async waiters.
//!
//! A body shorter than a third of its lease never causes a renewal: registering a claim is a
//! map insert under a mutex, and the thread is only woken when a new deadline is earlier than
//! the one it already sleeps towards.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::record::Claim;
use crate::store::Store;

struct Lease {
    store: Arc<dyn Store>,
    claim: Claim,
    lease: Duration,
    next: Instant,
}

/// Work a dropped future hands over: it cannot wait on the store itself.
pub(crate) enum Job {
    Release(Arc<dyn Store>, Claim),
    MarkUnknown(Arc<dyn Store>, Claim),
}

#[derive(Default)]
struct State {
    leases: HashMap<u64, Lease>,
    jobs: Vec<Job>,
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    wakers: HashMap<u64, Waker>,
    next_id: u64,
    /// When the thread will wake next on its own; `None` while it waits for work.
    wake_at: Option<Instant>,
    /// Jobs submitted and jobs run, for [`Keeper::settle`].
    submitted: u64,
    finished: u64,
}

pub(crate) struct Keeper {
    state: Mutex<State>,
    cv: Condvar,
    /// Signalled when jobs finish (apart from `cv`, which wakes the keeper thread).
    settled: Condvar,
}

/// The process's keeper, started on first use.
pub(crate) fn keeper() -> &'static Keeper {
    static KEEPER: OnceLock<&'static Keeper> = OnceLock::new();
    KEEPER.get_or_init(|| {
        let keeper: &'static Keeper = Box::leak(Box::new(Keeper {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            settled: Condvar::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("rerun-lease-keeper".into())
            .spawn(move || keeper.run());
        if let Err(e) = spawned {
            tracing::error!(error = %e, "rerun could not start its lease keeper thread; leases will not be renewed");
        }
        keeper
    })
}

/// How often a lease is renewed: at a third of its length, so two renewals can fail before it ends.
fn renew_interval(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(1))
}

impl Keeper {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn nudge(&self, state: &mut State, at: Instant) {
        if state.wake_at.is_none_or(|w| at < w) {
            state.wake_at = Some(at);
            self.cv.notify_one();
        }
    }

    /// Starts renewing `claim` until [`Keeper::unwatch`].
    pub(crate) fn watch(&self, store: Arc<dyn Store>, claim: Claim, lease: Duration) -> u64 {
        let next = Instant::now() + renew_interval(lease);
        let mut state = self.lock();
        state.next_id += 1;
        let id = state.next_id;
        state.leases.insert(
            id,
            Lease {
                store,
                claim,
                lease,
                next,
            },
        );
        self.nudge(&mut state, next);
        id
    }

    /// Stops renewing.
    pub(crate) fn unwatch(&self, id: u64) {
        self.lock().leases.remove(&id);
    }

    /// Runs a job on the keeper thread.
    pub(crate) fn submit(&self, job: Job) {
        let mut state = self.lock();
        state.jobs.push(job);
        state.submitted += 1;
        state.wake_at = Some(Instant::now());
        self.cv.notify_one();
    }

    /// Waits up to `timeout` until every job submitted so far has run (the claims of dropped
    /// or panicked async calls are given back); returns whether they all did. The safe-to-rerun
    /// harness reruns an operation only after the crashed run's claim was given back.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn settle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
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

    fn run(&self) {
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            let jobs = std::mem::take(&mut state.jobs);
            let due: Vec<(u64, Arc<dyn Store>, Claim, Duration)> = state
                .leases
                .iter()
                .filter(|(_, l)| l.next <= now)
                .map(|(id, l)| (*id, l.store.clone(), l.claim.clone(), l.lease))
                .collect();
            let mut woken = Vec::new();
            while let Some(Reverse((at, id))) = state.timers.peek().copied() {
                if at > now {
                    break;
                }
                state.timers.pop();
                if let Some(w) = state.wakers.remove(&id) {
                    woken.push(w);
                }
            }
            if !(jobs.is_empty() && due.is_empty() && woken.is_empty()) {
                drop(state);
                woken.into_iter().for_each(Waker::wake);
                let ran = jobs.len() as u64;
                for job in jobs {
                    run_job(job);
                }
                let results: Vec<(u64, Result<(), Error>, Duration)> = due
                    .into_iter()
                    .map(|(id, store, claim, lease)| (id, store.renew(&claim, lease), lease))
                    .collect();
                state = self.lock();
                if ran > 0 {
                    state.finished += ran;
                    self.settled.notify_all();
                }
                let now = Instant::now();
                for (id, result, lease) in results {
                    match result {
                        Ok(()) => {
                            if let Some(l) = state.leases.get_mut(&id) {
                                l.next = now + renew_interval(lease);
                            }
                        }
                        Err(Error::LeaseLost { key, .. }) => {
                            tracing::warn!(%key, "rerun: the lease was taken over while the body ran; its result will not be recorded");
                            state.leases.remove(&id);
                        }
                        Err(e) => {
                            // The store is unreachable: try again soon, well before the lease ends.
                            tracing::warn!(error = %e, "rerun: renewing a lease failed; retrying");
                            if let Some(l) = state.leases.get_mut(&id) {
                                l.next = now + (lease / 10).max(Duration::from_millis(1));
                            }
                        }
                    }
                }
                continue;
            }
            let next = state
                .leases
                .values()
                .map(|l| l.next)
                .chain(state.timers.peek().map(|Reverse((at, _))| *at))
                .min();
            state.wake_at = next;
            state = match next {
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    self.cv
                        .wait_timeout(state, wait)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0)
                }
                None => self.cv.wait(state).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }

    fn register_timer(&self, at: Instant, waker: &Waker, id: &mut Option<u64>) {
        let mut state = self.lock();
        let timer = match *id {
            Some(t) => t,
            None => {
                state.next_id += 1;
                let t = state.next_id;
                state.timers.push(Reverse((at, t)));
                *id = Some(t);
                t
            }
        };
        state.wakers.insert(timer, waker.clone());
        self.nudge(&mut state, at);
    }

    fn cancel_timer(&self, id: u64) {
        self.lock().wakers.remove(&id);
    }
}

fn run_job(job: Job) {
    let (result, key) = match &job {
        Job::Release(store, claim) => (store.release(claim), &claim.key),
        Job::MarkUnknown(store, claim) => (store.mark_unknown(claim), &claim.key),
    };
    match result {
        Ok(()) | Err(Error::LeaseLost { .. }) => {}
        Err(e) => {
            tracing::warn!(%key, error = %e, "rerun: could not give back the claim of a dropped call; its lease will end it")
        }
    }
}

/// A runtime-independent sleep, served by the keeper thread.
pub(crate) struct Sleep {
    at: Instant,
    timer: Option<u64>,
}

pub(crate) fn sleep(d: Duration) -> Sleep {
    Sleep {
        at: Instant::now() + d,
        timer: None,
    }
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.at {
            return Poll::Ready(());
        }
        keeper().register_timer(this.at, cx.waker(), &mut this.timer);
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(id) = self.timer {
            keeper().cancel_timer(id);
        }
    }
}
