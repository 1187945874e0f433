//! Per-call options: ttl, lease, wait, once and settle, and the limits they must keep.

use std::time::Duration;

/// The longest `ttl`, `lease`, `wait` or `settle`: 100 years of 365 days. Longer durations
/// overflow the arithmetic of some stores' clocks (and mean "forever", which a record never
/// needs).
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The shortest lease, 100 ms. A lease is renewed every third of itself, a store call made for
/// it gives up after a third of it, and a claim answered after the lease could have ended is
/// given back unrun, so a lease must outlast a round trip to the store (a new connection's
/// included) and a scheduling stall. Leases under a few seconds suit tests of lease expiry on
/// a local store; in production a stall of a third of the lease (a busy core, a
/// garbage-collection pause of a neighbour) costs a healthy holder its claim, so keep the
/// default 30 s or a lease well above your worst stall.
pub const MIN_LEASE: Duration = Duration::from_millis(100);

/// How a call is run: the arguments `ttl`, `lease`, `wait`, `once` and `settle` of
/// `#[idempotent]` (the last, how long a reconcile waits for an earlier attempt's effects to
/// land: [`Options::settle`]).
///
/// ```
/// use std::time::Duration;
/// use rerun_core::Options;
/// const CHARGE: Options = Options::new().once().ttl(Duration::from_secs(7 * 86_400));
/// assert!(CHARGE.is_once());
/// assert_eq!(CHARGE.lease_duration(), Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    ttl: Duration,
    lease: Duration,
    wait: Option<Duration>,
    once: bool,
    settle: Duration,
}

/// How long a reconcile function waits by default ([`Options::settle`]): a request sent over
/// loopback or a LAN, queued behind other work on a busy database, and one TCP retransmission.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(1);

impl Options {
    /// The defaults: a 24 h ttl, a 30 s lease, no waiting, replayable; a reconcile waits
    /// [`DEFAULT_SETTLE`].
    pub const fn new() -> Options {
        Options {
            ttl: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(30),
            wait: None,
            once: false,
            settle: DEFAULT_SETTLE,
        }
    }
    /// How long a completed record is kept and replayed.
    pub const fn ttl(mut self, ttl: Duration) -> Options {
        self.ttl = ttl;
        self
    }
    /// How long a claim holds without renewal (renewed automatically while the body runs).
    pub const fn lease(mut self, lease: Duration) -> Options {
        self.lease = lease;
        self
    }
    /// Wait up to `wait` for a live holder's result instead of failing with `InProgress`.
    pub const fn wait(mut self, wait: Duration) -> Options {
        self.wait = Some(wait);
        self
    }
    /// At-most-once: the body never starts twice for one key. An `Err` the body returns says
    /// its effect did not happen: the claim is released and the next call runs the body again.
    pub const fn once(mut self) -> Options {
        self.once = true;
        self
    }
    /// With `once`: how long a call that finds an earlier attempt's outcome unknown waits, once
    /// it has taken the key over, before its reconcile function looks at the world (default
    /// [`DEFAULT_SETTLE`]; `settle = "5s"` beside `reconcile` in the macros).
    ///
    /// A process that dies can leave its effect on the way: a request already in a socket, a
    /// statement the database has not run yet. A holder found dead is taken over at once (its
    /// fence is refused from then on), and a reconcile that looked at once could miss that
    /// effect, answer `NotDone` and let the body run a second time. Waiting lets it land first.
    /// Raise it when effects travel far (another region, a queue in between); an effect that
    /// can arrive later than any wait needs a check of its own, such as the provider's
    /// idempotency key or the claim's fence (see [`crate::checkpoint::current_fence`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use rerun_core::Options;
    /// let send = Options::new().once().settle(Duration::from_secs(5));
    /// assert_eq!(send.settle_duration(), Duration::from_secs(5));
    /// ```
    pub const fn settle(mut self, settle: Duration) -> Options {
        self.settle = settle;
        self
    }
    /// The settle time.
    pub const fn settle_duration(&self) -> Duration {
        self.settle
    }
    /// The ttl.
    pub const fn ttl_duration(&self) -> Duration {
        self.ttl
    }
    /// The lease.
    pub const fn lease_duration(&self) -> Duration {
        self.lease
    }
    /// The wait, if any.
    pub const fn wait_duration(&self) -> Option<Duration> {
        self.wait
    }
    /// Whether the call is at-most-once.
    pub const fn is_once(&self) -> bool {
        self.once
    }

    /// Checks the limits: every duration at most [`MAX_DURATION`], the lease at least
    /// [`MIN_LEASE`], the ttl more than zero. A call with options out of bounds fails with
    /// [`crate::Error::Config`] before it touches the store.
    ///
    /// ```
    /// use std::time::Duration;
    /// use rerun_core::Options;
    /// assert!(Options::new().check().is_ok());
    /// assert!(Options::new().lease(Duration::from_millis(10)).check().is_err());
    /// assert!(Options::new().ttl(Duration::MAX).check().is_err());
    /// ```
    pub fn check(&self) -> Result<(), String> {
        let too_long = |name: &str, d: Duration| {
            (d > MAX_DURATION).then(|| {
                format!(
                    "{name} = {d:?} is longer than rerun's maximum of 100 years; use at most `Duration::from_secs(100 * 365 * 86_400)`"
                )
            })
        };
        if let Some(e) = too_long("ttl", self.ttl)
            .or_else(|| too_long("lease", self.lease))
            .or_else(|| self.wait.and_then(|w| too_long("wait", w)))
            .or_else(|| too_long("settle", self.settle))
        {
            return Err(e);
        }
        if self.lease < MIN_LEASE {
            return Err(format!(
                "lease = {:?} is below the minimum lease of 100ms: a lease must outlast a store round trip and a scheduling stall; use `lease(Duration::from_millis(100))` or more",
                self.lease
            ));
        }
        if self.ttl.is_zero() {
            return Err(
                "ttl = 0s would forget every result at once; give the record a ttl, e.g. `ttl(Duration::from_secs(24 * 3600))`".to_owned(),
            );
        }
        Ok(())
    }
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}
