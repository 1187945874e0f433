//! The clock of one host: `CLOCK_BOOTTIME` (without any time namespace's offset) for leases and expiry, the wall clock only where a
//! record outlives the boot that wrote it.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A reading of a host clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Nanoseconds on the host's monotonic clock since boot (`CLOCK_BOOTTIME`); shared by every
    /// process of one boot, and never jumps back.
    pub mono_ns: u64,
    /// Milliseconds since the Unix epoch, used only for records written in an earlier boot.
    pub wall_ms: i64,
}

/// The clock a local store (memory, SQLite) decides leases and expiry by.
pub trait Clock: Send + Sync + 'static {
    /// The current reading.
    fn now(&self) -> Now;

    /// The monotonic part of the current reading alone, [`Now::mono_ns`]: for a store whose
    /// records never outlive the boot, which has no use for the wall clock. A clock that reads
    /// its two parts apart overrides this to read one.
    ///
    /// ```
    /// use rerun_core::clock::{Clock, ManualClock};
    /// let clock = ManualClock::new();
    /// assert_eq!(clock.mono_ns(), clock.now().mono_ns);
    /// ```
    fn mono_ns(&self) -> u64 {
        self.now().mono_ns
    }
}

/// The host's real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostClock;

impl Clock for HostClock {
    fn now(&self) -> Now {
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Now {
            mono_ns: self.mono_ns(),
            wall_ms,
        }
    }

    fn mono_ns(&self) -> u64 {
        // Inside a time namespace CLOCK_BOOTTIME is shifted by the namespace's offset; taking
        // the offset off gives the boot's own clock, the same in every namespace of one boot.
        let offset = crate::process::current().boottime_offset_ns;
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
            .map(|t| {
                let ns = i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec());
                u64::try_from(ns - offset).unwrap_or(0)
            })
            .unwrap_or_else(|_| fallback_mono_ns())
    }
}

fn fallback_mono_ns() -> u64 {
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// A clock that moves only when told to, for tests of leases and expiry.
///
/// ```
/// use std::time::Duration;
/// use rerun_core::clock::{Clock, ManualClock};
/// let clock = ManualClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now().mono_ns - t0.mono_ns, 5_000_000_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<(AtomicU64, AtomicI64)>,
}

impl ManualClock {
    /// A clock starting at the host's current reading.
    pub fn new() -> ManualClock {
        let now = HostClock.now();
        ManualClock {
            inner: Arc::new((AtomicU64::new(now.mono_ns), AtomicI64::new(now.wall_ms))),
        }
    }
    /// Moves both readings forward, stopping at the largest reading each can hold (so
    /// `advance(Duration::MAX)` moves past every deadline, and the clock never goes back).
    pub fn advance(&self, by: Duration) {
        let (ns, ms) = (nanos(by), millis(by));
        // The closures always return `Some`, so neither update can fail.
        let _ = self
            .inner
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(ns))
            });
        let _ = self
            .inner
            .1
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(ms))
            });
    }
    /// Moves only the wall clock (a caller's clock jumping), which local stores must ignore;
    /// saturating at either end of the `i64` range.
    pub fn skew_wall(&self, by_ms: i64) {
        let _ = self
            .inner
            .1
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by_ms))
            });
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Now {
        Now {
            mono_ns: self.mono_ns(),
            wall_ms: self.inner.1.load(Ordering::SeqCst),
        }
    }

    fn mono_ns(&self) -> u64 {
        self.inner.0.load(Ordering::SeqCst)
    }
}

/// Nanoseconds of a duration, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `by` after `at`, or [`MAX_DURATION`](crate::MAX_DURATION) (100 years) after it when the sum
/// goes past what an [`Instant`](std::time::Instant) can hold: a span of `Duration::MAX` means no
/// limit, never a panic.
pub(crate) fn later(at: std::time::Instant, by: Duration) -> std::time::Instant {
    at.checked_add(by)
        .or_else(|| at.checked_add(crate::MAX_DURATION))
        .unwrap_or(at)
}

/// The moment `limit` from now (see [`later`]).
pub(crate) fn deadline_in(limit: Duration) -> std::time::Instant {
    later(std::time::Instant::now(), limit)
}

/// Milliseconds of a duration, saturating.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The wall-clock time from `from` to `to` (milliseconds since the epoch); zero when `to` is not
/// later. Exact over the whole `i64` range: a record read from a file may hold any value, and a
/// test clock may read before the epoch.
pub(crate) fn wall_span(from: i64, to: i64) -> Duration {
    if to > from {
        Duration::from_millis(to.abs_diff(from))
    } else {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_saturates_and_never_goes_back() {
        let clock = ManualClock::new();
        let start = clock.now();
        clock.advance(Duration::MAX);
        let end = clock.now();
        assert_eq!(
            end,
            Now {
                mono_ns: u64::MAX,
                wall_ms: i64::MAX
            }
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), end);
        assert!(end.mono_ns > start.mono_ns);
        clock.skew_wall(i64::MIN);
        clock.skew_wall(i64::MIN);
        assert_eq!(clock.now().wall_ms, i64::MIN);
        clock.skew_wall(i64::MAX);
        assert_eq!(clock.now().wall_ms, -1);
    }

    #[test]
    fn wall_spans_are_exact_at_the_ends_of_the_range() {
        assert_eq!(
            wall_span(i64::MIN, i64::MAX),
            Duration::from_millis(u64::MAX)
        );
        assert_eq!(wall_span(-1, 1), Duration::from_millis(2));
        assert_eq!(wall_span(5, 5), Duration::ZERO);
        assert_eq!(wall_span(i64::MAX, i64::MIN), Duration::ZERO);
    }
}
