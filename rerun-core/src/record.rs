//! The record state machine.
//!
//! A key's record moves through these states; the fence (fencing token) only ever grows:
//!
//! ```text
//!            claim                 complete(fence)
//!  absent ──────────▶ in progress ─────────────────▶ completed ──(ttl)──▶ absent
//!     ▲                 │  │  ▲ takeover (lease out / holder dead): fence + 1
//!     │   release(fence)│  │  └──────────────┘
//!     └── released ◀────┘  └──mark_unknown(fence)──▶ unknown (a `once` body may have run)
//! ```
//!
//! [`decide`] is the transition function for a claim. The local stores (memory, SQLite) call it
//! directly (the memory store on a compact record of its own, through the same function); the
//! network stores implement the same table in one SQL statement or Lua script, and the
//! conformance suite holds them all to it.

use std::borrow::Cow;
use std::time::Duration;

use crate::clock::{millis, nanos, wall_span, Now};
use crate::fingerprint::Fingerprint;
use crate::holder::Holder;
use crate::key::Key;

/// A fencing token: every claim of a key gets one greater than all earlier claims of that key.
pub type Fence = u64;

/// The state of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// A holder is running the body.
    InProgress,
    /// The body's result is recorded.
    Completed,
    /// The last attempt failed and gave the key back; the next call runs afresh.
    Released,
    /// A `once` body may have run, but its result was not recorded.
    Unknown,
}

impl Status {
    /// The status as stores spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Released => "released",
            Status::Unknown => "unknown",
        }
    }
    /// Parses [`Status::as_str`].
    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "in_progress" => Status::InProgress,
            "completed" => Status::Completed,
            "released" => Status::Released,
            "unknown" => Status::Unknown,
            _ => return None,
        })
    }
}

/// A record as read back for inspection, recovery and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView {
    /// The key.
    pub key: Key,
    /// Its state.
    pub status: Status,
    /// The fence of the latest claim.
    pub fence: Fence,
    /// The payload fingerprint of the latest claim.
    pub fingerprint: Fingerprint,
    /// The holder of the latest claim.
    pub holder: Option<Holder>,
    /// Whether the latest claim was of an at-most-once function.
    pub once: bool,
    /// For an in-progress record: how long its lease still runs (`None` once it ran out).
    pub lease_remaining: Option<Duration>,
    /// For a completed record: how long until it expires (`None` once it expired).
    pub expires_in: Option<Duration>,
    /// For a completed record: the encoded result (`None` too when a scan was asked to leave
    /// results out, see [`crate::store::ScanFilter::without_results`]).
    pub result: Option<Vec<u8>>,
    /// How long ago the record last changed state (claimed, completed, released, marked
    /// unknown; a renewal is not a change of state), as far as the store knows; `None` where it does not. For people and filters only: no
    /// decision is made on it.
    pub age: Option<Duration>,
}

/// A record as the local stores keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalRecord {
    /// State.
    pub status: Status,
    /// Latest fence.
    pub fence: Fence,
    /// Latest fingerprint.
    pub fingerprint: Fingerprint,
    /// Latest holder.
    pub holder: Option<Holder>,
    /// Latest claim was `once`.
    pub once: bool,
    /// The boot during which the monotonic deadlines below were written.
    pub boot_id: Cow<'static, str>,
    /// In progress: lease end on the monotonic clock.
    pub lease_until_ns: u64,
    /// In progress: lease end on the wall clock, used only by a reader of another boot.
    pub lease_until_wall_ms: i64,
    /// Completed: expiry on the monotonic clock.
    pub expires_mono_ns: u64,
    /// Completed: expiry on the wall clock, used only after a reboot.
    pub expires_wall_ms: i64,
    /// Completed: the encoded result.
    pub result: Option<Vec<u8>>,
    /// When the record entered its state, on the wall clock (for its age, shown to people).
    pub changed_wall_ms: i64,
}

/// What a claim asks of the store.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    /// The key.
    pub key: &'a Key,
    /// The payload fingerprint.
    pub fingerprint: &'a Fingerprint,
    /// Who claims.
    pub holder: &'a Holder,
    /// How long the claim holds without renewal.
    pub lease: Duration,
    /// At-most-once: the claim must be durable before the body starts.
    pub once: bool,
    /// Take the key over from this fence even though its lease still runs: the caller has proven
    /// that holder dead. Honoured only while that fence is still the record's current claim.
    pub steal: Option<Fence>,
}

impl<'a> ClaimRequest<'a> {
    /// The request as the store records its claim when it takes over `abandoned`: an attempt
    /// whose outcome is unknown (an at-most-once attempt that died, or an unknown record) is
    /// taken over at most once whatever this request's mode, so that if this claim dies too,
    /// the next one still finds the outcome unknown instead of running the body.
    pub fn taking_over(&self, abandoned: Option<&Abandoned>) -> ClaimRequest<'a> {
        ClaimRequest {
            once: self.once || abandoned.is_some_and(|a| a.outcome_unknown),
            ..self.clone()
        }
    }
}

/// A granted claim: the right to run the body until the lease ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The key.
    pub key: Key,
    /// The claim's fence.
    pub fence: Fence,
    /// Who holds it.
    pub holder: Holder,
    /// At-most-once claim.
    pub once: bool,
    /// The lease the claim was granted with. A store bounds the calls it makes for this claim
    /// by it (see [`crate::store::call_deadline`]).
    pub lease: Duration,
    /// An earlier attempt that never finished, taken over by this claim.
    pub abandoned: Option<Abandoned>,
}

impl Claim {
    /// The claim a store grants for `req`, with its new fence.
    pub fn granted(req: &ClaimRequest<'_>, fence: Fence, abandoned: Option<Abandoned>) -> Claim {
        Claim {
            key: req.key.clone(),
            fence,
            holder: req.holder.clone(),
            // As the store records it: see [`ClaimRequest::taking_over`].
            once: req.once || abandoned.as_ref().is_some_and(|a| a.outcome_unknown),
            lease: req.lease,
            abandoned,
        }
    }
}

/// An earlier attempt that did not finish (its holder died or its lease ran out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    /// Its fence.
    pub fence: Fence,
    /// Its holder, where known.
    pub holder: Option<Holder>,
    /// It was an at-most-once attempt whose body may have started: its outcome is unknown.
    pub outcome_unknown: bool,
}

/// A completed record found by a claim with the same fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// The fence that recorded it.
    pub fence: Fence,
    /// The encoded result.
    pub result: Vec<u8>,
}

/// A live claim held by someone else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    /// The holder's fence.
    pub fence: Fence,
    /// The holder.
    pub holder: Holder,
    /// How long its lease still runs.
    pub lease_remaining: Duration,
}

/// The store's answer to a claim: claim-or-fetch in one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimResponse {
    /// The caller holds the key now and runs the body.
    Claimed(Claim),
    /// The key completed with the same payload: the recorded result.
    Replay(Replay),
    /// The key's record has another payload fingerprint.
    Mismatch,
    /// Another holder's lease is live.
    Busy(Busy),
}

/// The transition a claim makes, decided from the current record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write an in-progress record with a fresh fence.
    Claim {
        /// The attempt this claim takes over, if any.
        abandoned: Option<Abandoned>,
    },
    /// Return the recorded result.
    Replay,
    /// Payload mismatch.
    Mismatch,
    /// Held by a live lease.
    Busy {
        /// Lease left.
        lease_remaining: Duration,
    },
}

impl LocalRecord {
    /// Whether this record was written in the boot `boot_id`, so that its monotonic times can be
    /// compared with this boot's. An unknown boot id (empty: `/proc` could not be read) is no
    /// boot's: a record of one is judged on the wall clock, as one of another boot, since the
    /// monotonic clock starts again at every boot and an earlier boot's times would look far off.
    fn same_boot(&self, boot_id: &str) -> bool {
        !boot_id.is_empty() && *self.boot_id == *boot_id
    }

    /// Whether a completed record has expired at `now` (exactly at expiry counts as expired).
    pub fn expired(&self, now: Now, boot_id: &str) -> bool {
        if self.same_boot(boot_id) {
            now.mono_ns >= self.expires_mono_ns
        } else {
            now.wall_ms >= self.expires_wall_ms
        }
    }

    /// The lease left at `now`; `None` once it ran out.
    ///
    /// Within the boot that set it, the lease is judged on the monotonic clock. A reader of
    /// another boot id cannot compare monotonic times, and cannot tell a reboot (the holder is
    /// gone) from a process that only sees another boot id (a faked one, in a container): it
    /// judges the lease on the wall clock, which after a reboot has long passed a lease of
    /// seconds, and which on one running kernel is the same clock for both.
    pub fn lease_left(&self, now: Now, boot_id: &str) -> Option<Duration> {
        if self.same_boot(boot_id) {
            return (now.mono_ns < self.lease_until_ns)
                .then(|| Duration::from_nanos(self.lease_until_ns - now.mono_ns));
        }
        (now.wall_ms < self.lease_until_wall_ms)
            .then(|| wall_span(now.wall_ms, self.lease_until_wall_ms))
    }

    /// An in-progress record for a new claim.
    pub fn claimed(req: &ClaimRequest<'_>, fence: Fence, now: Now) -> Self {
        LocalRecord {
            status: Status::InProgress,
            fence,
            fingerprint: *req.fingerprint,
            holder: Some(req.holder.clone()),
            once: req.once,
            boot_id: Cow::Borrowed(crate::holder::this_boot()),
            lease_until_ns: now.mono_ns.saturating_add(nanos(req.lease)),
            lease_until_wall_ms: now.wall_ms.saturating_add(millis(req.lease)),
            expires_mono_ns: 0,
            expires_wall_ms: 0,
            result: None,
            changed_wall_ms: now.wall_ms,
        }
    }

    /// Turns an in-progress record into a completed one.
    pub fn complete(&mut self, result: &[u8], ttl: Duration, now: Now) {
        self.status = Status::Completed;
        self.boot_id = Cow::Borrowed(crate::holder::this_boot());
        self.expires_mono_ns = now.mono_ns.saturating_add(nanos(ttl));
        self.expires_wall_ms = now.wall_ms.saturating_add(millis(ttl));
        self.result = Some(result.to_vec());
        self.changed_wall_ms = now.wall_ms;
    }

    /// Extends an in-progress record's lease.
    pub fn renew(&mut self, lease: Duration, now: Now) {
        self.boot_id = Cow::Borrowed(crate::holder::this_boot());
        self.lease_until_ns = now.mono_ns.saturating_add(nanos(lease));
        self.lease_until_wall_ms = now.wall_ms.saturating_add(millis(lease));
    }

    /// Whether a fenced operation by `claim` may touch this record.
    pub fn held_by(&self, claim: &Claim) -> bool {
        self.status == Status::InProgress && self.fence == claim.fence
    }

    /// The record as a [`RecordView`].
    pub fn view(&self, key: &Key, now: Now, boot_id: &str) -> RecordView {
        RecordView {
            key: key.clone(),
            status: self.status,
            fence: self.fence,
            fingerprint: self.fingerprint,
            holder: self.holder.clone(),
            once: self.once,
            lease_remaining: match self.status {
                Status::InProgress => self.lease_left(now, boot_id),
                _ => None,
            },
            expires_in: match self.status {
                Status::Completed if !self.expired(now, boot_id) => {
                    Some(if self.same_boot(boot_id) {
                        Duration::from_nanos(self.expires_mono_ns.saturating_sub(now.mono_ns))
                    } else {
                        wall_span(now.wall_ms, self.expires_wall_ms)
                    })
                }
                _ => None,
            },
            result: self.result.clone(),
            age: (self.changed_wall_ms > 0).then(|| wall_span(self.changed_wall_ms, now.wall_ms)),
        }
    }
}

/// The claim transition: what a claim does, given the key's current record.
///
/// | record | same fingerprint | other fingerprint |
/// |---|---|---|
/// | none, released, completed but expired (replayable call) | claim | claim |
/// | completed (for a `once` call: even past its ttl, while present) | replay | mismatch |
/// | unknown | claim, abandoned with unknown outcome | mismatch |
/// | in progress, lease live, not stolen | busy | mismatch |
/// | in progress, lease out or stolen | claim, abandoned | mismatch |
pub fn decide(
    record: Option<&LocalRecord>,
    req: &ClaimRequest<'_>,
    now: Now,
    boot_id: &str,
) -> Decision {
    decide_on(record, req, now, boot_id)
}

/// What [`decide`] reads of a record: [`LocalRecord`] has it, and so does a store that keeps
/// its records in a form of its own (the memory store's compact one).
pub(crate) trait Current {
    /// The clock reading its deadlines are judged at: a [`Now`] for a record that may outlive
    /// its boot, the monotonic nanoseconds alone for one that cannot.
    type At: Copy;
    /// The record's state.
    fn status(&self) -> Status;
    /// The fence of its latest claim.
    fn fence(&self) -> Fence;
    /// The payload fingerprint of its latest claim.
    fn fingerprint(&self) -> &Fingerprint;
    /// Whether its latest claim was `once`.
    fn once(&self) -> bool;
    /// The holder of its latest claim, while it has one.
    fn holder(&self) -> Option<Holder>;
    /// [`LocalRecord::expired`].
    fn expired(&self, now: Self::At, boot_id: &str) -> bool;
    /// [`LocalRecord::lease_left`].
    fn lease_left(&self, now: Self::At, boot_id: &str) -> Option<Duration>;
}

impl Current for LocalRecord {
    type At = Now;
    fn status(&self) -> Status {
        self.status
    }
    fn fence(&self) -> Fence {
        self.fence
    }
    fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }
    fn once(&self) -> bool {
        self.once
    }
    fn holder(&self) -> Option<Holder> {
        self.holder.clone()
    }
    fn expired(&self, now: Now, boot_id: &str) -> bool {
        LocalRecord::expired(self, now, boot_id)
    }
    fn lease_left(&self, now: Now, boot_id: &str) -> Option<Duration> {
        LocalRecord::lease_left(self, now, boot_id)
    }
}

/// [`decide`] on any record that tells what it reads.
pub(crate) fn decide_on<R: Current + ?Sized>(
    record: Option<&R>,
    req: &ClaimRequest<'_>,
    now: R::At,
    boot_id: &str,
) -> Decision {
    let Some(r) = record else {
        return Decision::Claim { abandoned: None };
    };
    let same = *r.fingerprint() == *req.fingerprint;
    match r.status() {
        Status::Released => Decision::Claim { abandoned: None },
        // A `once` body never runs twice on its own: its record is honoured while it exists.
        Status::Completed if !req.once && r.expired(now, boot_id) => {
            Decision::Claim { abandoned: None }
        }
        _ if !same => Decision::Mismatch,
        Status::Completed => Decision::Replay,
        Status::Unknown => Decision::Claim {
            abandoned: Some(Abandoned {
                fence: r.fence(),
                holder: r.holder(),
                outcome_unknown: true,
            }),
        },
        Status::InProgress => match r.lease_left(now, boot_id) {
            Some(left) if req.steal != Some(r.fence()) => Decision::Busy {
                lease_remaining: left,
            },
            _ => Decision::Claim {
                abandoned: Some(Abandoned {
                    fence: r.fence(),
                    holder: r.holder(),
                    outcome_unknown: r.once(),
                }),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(ns: u64) -> Now {
        Now {
            mono_ns: ns,
            wall_ms: 1_000_000,
        }
    }

    fn req<'a>(key: &'a Key, fp: &'a Fingerprint, holder: &'a Holder) -> ClaimRequest<'a> {
        ClaimRequest {
            key,
            fingerprint: fp,
            holder,
            lease: Duration::from_nanos(100),
            once: false,
            steal: None,
        }
    }

    #[test]
    fn table() {
        let key = Key::new("s", "k");
        let fp = Fingerprint::of(&1).unwrap();
        let other = Fingerprint::of(&2).unwrap();
        let h = Holder::current();
        let r = req(&key, &fp, &h);
        assert_eq!(
            decide(None, &r, now(0), "b"),
            Decision::Claim { abandoned: None }
        );

        let mut rec = LocalRecord::claimed(&r, 1, now(0));
        let b = crate::holder::this_boot();
        assert!(matches!(
            decide(Some(&rec), &r, now(50), b),
            Decision::Busy { .. }
        ));
        // Exactly at the lease end the lease is out.
        assert!(matches!(
            decide(Some(&rec), &r, now(100), b),
            Decision::Claim { abandoned: Some(_) }
        ));
        // A reader of another boot judges the lease on the wall clock.
        let mut long = r.clone();
        long.lease = Duration::from_secs(30);
        let held = LocalRecord::claimed(&long, 1, now(0));
        let wall = |ms: i64| Now {
            mono_ns: 0,
            wall_ms: 1_000_000 + ms,
        };
        assert!(matches!(
            decide(Some(&held), &r, wall(29_999), "c"),
            Decision::Busy { .. }
        ));
        assert!(matches!(
            decide(Some(&held), &r, wall(30_000), "c"),
            Decision::Claim { abandoned: Some(_) }
        ));
        let mut stolen = r.clone();
        stolen.steal = Some(1);
        assert!(matches!(
            decide(Some(&rec), &stolen, now(50), b),
            Decision::Claim { .. }
        ));
        stolen.steal = Some(0);
        assert!(matches!(
            decide(Some(&rec), &stolen, now(50), b),
            Decision::Busy { .. }
        ));
        let mut r2 = r.clone();
        r2.fingerprint = &other;
        assert_eq!(decide(Some(&rec), &r2, now(50), b), Decision::Mismatch);

        rec.complete(b"x", Duration::from_nanos(1000), now(10));
        assert_eq!(decide(Some(&rec), &r, now(500), b), Decision::Replay);
        assert_eq!(decide(Some(&rec), &r2, now(500), b), Decision::Mismatch);
        assert_eq!(
            decide(Some(&rec), &r2, now(1010), b),
            Decision::Claim { abandoned: None }
        );
        let mut once = r.clone();
        once.once = true;
        assert_eq!(decide(Some(&rec), &once, now(1010), b), Decision::Replay);

        rec.status = Status::Released;
        assert_eq!(
            decide(Some(&rec), &r2, now(0), b),
            Decision::Claim { abandoned: None }
        );
        rec.status = Status::Unknown;
        assert!(matches!(
            decide(Some(&rec), &r, now(0), b),
            Decision::Claim {
                abandoned: Some(Abandoned {
                    outcome_unknown: true,
                    ..
                })
            }
        ));
    }

    /// Where the boot id cannot be read (empty), a record is judged on the wall clock: its
    /// monotonic times may be of an earlier boot (the clock starts again at zero), so a lease
    /// or a ttl that ran out before a reboot must not look days long after it.
    #[test]
    fn a_record_of_an_unknown_boot_is_judged_on_the_wall_clock() {
        let key = Key::new("s", "k");
        let fp = Fingerprint::of(&1).unwrap_or_else(|e| panic!("{e}"));
        let h = Holder::current();
        let mut r = LocalRecord::claimed(
            &ClaimRequest {
                lease: Duration::from_secs(30),
                ..req(&key, &fp, &h)
            },
            1,
            Now {
                mono_ns: 5_000_000_000_000,
                wall_ms: 1_000_000,
            },
        );
        r.boot_id = Cow::Borrowed("");
        // After a reboot: the monotonic clock is back near zero, the wall clock a minute on.
        let after = Now {
            mono_ns: 1_000_000_000,
            wall_ms: 1_060_000,
        };
        assert_eq!(r.lease_left(after, ""), None);
        r.complete(b"r", Duration::from_secs(30), after);
        r.boot_id = Cow::Borrowed("");
        let later = Now {
            mono_ns: 2_000_000_000,
            wall_ms: 1_100_000,
        };
        assert!(r.expired(later, ""));
        // And so is what a view shows: no expiry left, whatever the monotonic clock says.
        assert_eq!(r.view(&key, later, "").expires_in, None);
        let before = Now {
            mono_ns: 0,
            wall_ms: 1_070_000,
        };
        assert_eq!(
            r.view(&key, before, "").expires_in,
            Some(Duration::from_secs(20))
        );
        // With a known boot id, the same times on the monotonic clock: not yet.
        r.boot_id = Cow::Borrowed("b1");
        assert!(!r.expired(later, "b1"));
    }

    proptest::proptest! {
        /// A record read back from a file may hold any wall-clock value, and a test clock may
        /// read before the epoch: the lease, the expiry and the age a reader of another boot
        /// works out are the exact spans, never an overflow.
        #[test]
        fn wall_clock_spans_are_exact_over_the_whole_range(
            stored: i64,
            now_ms: i64,
        ) {
            let exact = |from: i64, to: i64| {
                let ms = (i128::from(to) - i128::from(from)).max(0);
                Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
            };
            let key = Key::new("s", "k");
            let fp = Fingerprint::of(&1).unwrap();
            let h = Holder::current();
            let mut rec = LocalRecord::claimed(&req(&key, &fp, &h), 1, now(0));
            rec.boot_id = Cow::Borrowed("another boot");
            rec.lease_until_wall_ms = stored;
            rec.changed_wall_ms = stored;
            let at = Now { mono_ns: 0, wall_ms: now_ms };
            let lease = (now_ms < stored).then(|| exact(now_ms, stored));
            proptest::prop_assert_eq!(rec.lease_left(at, "this boot"), lease);
            let view = rec.view(&key, at, "this boot");
            proptest::prop_assert_eq!(view.lease_remaining, lease);
            proptest::prop_assert_eq!(view.age, (stored > 0).then(|| exact(stored, now_ms)));

            rec.status = Status::Completed;
            rec.expires_wall_ms = stored;
            let view = rec.view(&key, at, "this boot");
            proptest::prop_assert_eq!(view.expires_in, (now_ms < stored).then(|| exact(now_ms, stored)));
        }
    }
}
