//! Per-call options: ttl, lease, wait and once.

use std::time::Duration;

/// How a call is run: the arguments `ttl`, `lease`, `wait` and `once` of `#[idempotent]`.
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
}

impl Options {
    /// The defaults: a 24 h ttl, a 30 s lease, no waiting, replayable.
    pub const fn new() -> Options {
        Options {
            ttl: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(30),
            wait: None,
            once: false,
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
    /// At-most-once: the body never starts twice for one key.
    pub const fn once(mut self) -> Options {
        self.once = true;
        self
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
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}
