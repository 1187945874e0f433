//! [`Settings`] of a consumer, and the [`Report`] it returns.

use std::time::Duration;

use crate::policy::Policy;

/// How a consumer runs: how many handlers at once, its ack policy, and how long a shutdown
/// waits for handlers in flight.
///
/// ```
/// use std::time::Duration;
/// use rerun_queue::{Policy, Settings};
/// let settings = Settings::new()
///     .max_in_flight(32)
///     .grace(Duration::from_secs(20))
///     .policy(Policy::new().in_progress_delay(Duration::from_millis(500)));
/// assert_eq!(settings.max_in_flight_count(), 32);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub(crate) max_in_flight: usize,
    pub(crate) policy: Policy,
    pub(crate) grace: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::new()
    }
}

impl Settings {
    /// 16 handlers in flight, the default [`Policy`], 30 s of grace on shutdown.
    pub const fn new() -> Settings {
        Settings {
            max_in_flight: 16,
            policy: Policy::new(),
            grace: Duration::from_secs(30),
        }
    }

    /// The most handlers [`max_in_flight`](Settings::max_in_flight) allows at once: 65,536.
    pub const MAX_IN_FLIGHT: usize = 1 << 16;

    /// At most `n` handlers run at once, at least 1 and at most
    /// [`MAX_IN_FLIGHT`](Settings::MAX_IN_FLIGHT) (a larger `n` runs as that many).
    ///
    /// The consumer fetches a little ahead of its handlers, so that they rarely wait for the
    /// broker: JetStream asks for the next `n` messages once half of the last `n` have come
    /// (with `n` = 1, nothing ahead), RabbitMQ's prefetch is `2 n`. A JetStream message
    /// fetched ahead waits in the client with its ack wait running.
    ///
    /// ```
    /// use rerun_queue::Settings;
    /// assert_eq!(Settings::new().max_in_flight(0).max_in_flight_count(), 1);
    /// assert_eq!(
    ///     Settings::new().max_in_flight(usize::MAX).max_in_flight_count(),
    ///     Settings::MAX_IN_FLIGHT
    /// );
    /// ```
    pub const fn max_in_flight(mut self, n: usize) -> Settings {
        self.max_in_flight = if n == 0 {
            1
        } else if n > Settings::MAX_IN_FLIGHT {
            Settings::MAX_IN_FLIGHT
        } else {
            n
        };
        self
    }

    /// The ack policy.
    pub const fn policy(mut self, policy: Policy) -> Settings {
        self.policy = policy;
        self
    }

    /// On shutdown, how long handlers in flight may take to finish; those still running then
    /// are cut short, their claims given back and their messages handed back to the broker.
    pub const fn grace(mut self, grace: Duration) -> Settings {
        self.grace = grace;
        self
    }

    /// The number of handlers that may run at once.
    pub const fn max_in_flight_count(&self) -> usize {
        self.max_in_flight
    }
}

/// What a consumer did, returned when it stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Messages acked after their handler ran and its result was recorded.
    pub ran: u64,
    /// Messages acked because their result was recorded already (duplicates, redeliveries).
    pub replayed: u64,
    /// Deliveries handed back to be delivered again later (in progress elsewhere, retryable).
    pub redelivered: u64,
    /// Messages terminated or dead-lettered.
    pub dead_lettered: u64,
    /// Deliveries handed back unfinished on shutdown.
    pub released: u64,
    /// Settlements the broker did not take (the message will come back, and replay).
    pub settle_failures: u64,
}

impl Report {
    /// All messages acked: `ran + replayed`.
    pub fn acked(&self) -> u64 {
        self.ran + self.replayed
    }
}
