//! The memory store's record: what a record must hold inside one process, and no more.
//!
//! A [`LocalRecord`](crate::record::LocalRecord) is written to be read by another process,
//! perhaps after a reboot, so it keeps every deadline on both clocks, the boot that wrote them,
//! and a whole holder. A memory store lives and dies in one process, so its records keep each
//! deadline once on this boot's monotonic clock, only the attempt of a holder that is a
//! generation of this process, and only the deadline and the holder their state reads: 104
//! bytes in place of 216. The time a record entered its state is on the same clock, so the
//! store reads no wall clock at all: every operation reads one clock, once.

use std::time::Duration;

use crate::clock::nanos;
use crate::fingerprint::Fingerprint;
use crate::holder::Holder;
use crate::key::Key;
use crate::process::{self, Process};
use crate::record::{Claim, ClaimRequest, Current, Fence, RecordView, Status};

/// One key's record in a memory store.
pub(super) struct Stored {
    fingerprint: Fingerprint,
    fence: Fence,
    /// In progress: the lease's end; completed: the expiry. On this boot's monotonic clock;
    /// no other state reads it.
    until_ns: u64,
    /// When the record entered its state, on the same clock (for its age, shown to people).
    changed_ns: u64,
    holder: StoredHolder,
    /// Completed: the encoded result.
    result: Option<Box<[u8]>>,
    status: Status,
    once: bool,
}

/// A record's holder.
enum StoredHolder {
    None,
    /// An attempt of a generation of this process (one per fork); the rest of the holder is
    /// that generation's. The generation is kept, not looked up again, so that a forked child's
    /// copy of the store still names the parent.
    Ours(&'static Process, u64),
    /// Any other holder: one a caller built, or another process's.
    Other(Box<Holder>),
}

impl StoredHolder {
    fn of(h: &Holder) -> StoredHolder {
        let p = process::current();
        if h.pid == p.pid
            && h.start_time == p.start_time
            && h.pid_ns == p.pid_ns
            && *h.boot_id == *p.boot_id
            && *h.host == *p.host
        {
            StoredHolder::Ours(p, h.attempt)
        } else {
            StoredHolder::Other(Box::new(h.clone()))
        }
    }

    fn get(&self) -> Option<Holder> {
        match self {
            StoredHolder::None => None,
            StoredHolder::Ours(p, attempt) => Some(p.holder(*attempt)),
            StoredHolder::Other(h) => Some((**h).clone()),
        }
    }
}

/// `now + d` on the monotonic clock (nanoseconds), saturating.
fn after(now: u64, d: Duration) -> u64 {
    now.saturating_add(nanos(d))
}

impl Stored {
    /// An in-progress record for a new claim.
    pub(super) fn claimed(req: &ClaimRequest<'_>, fence: Fence, now: u64) -> Stored {
        Stored {
            fingerprint: *req.fingerprint,
            fence,
            until_ns: after(now, req.lease),
            changed_ns: now,
            holder: StoredHolder::of(req.holder),
            result: None,
            status: Status::InProgress,
            once: req.once,
        }
    }

    /// Whether a fenced operation by `claim` may touch this record.
    pub(super) fn held_by(&self, claim: &Claim) -> bool {
        self.status == Status::InProgress && self.fence == claim.fence
    }

    /// Records the result.
    pub(super) fn complete(&mut self, result: &[u8], ttl: Duration, now: u64) {
        self.status = Status::Completed;
        self.until_ns = after(now, ttl);
        self.result = Some(result.into());
        self.holder = StoredHolder::None;
        self.changed_ns = now;
    }

    /// Gives the key back.
    pub(super) fn release(&mut self, now: u64) {
        self.status = Status::Released;
        self.holder = StoredHolder::None;
        self.changed_ns = now;
    }

    /// Extends the lease.
    pub(super) fn renew(&mut self, lease: Duration, now: u64) {
        self.until_ns = after(now, lease);
    }

    /// A `once` attempt's outcome became unknown; its holder is kept, for the takeover's report.
    pub(super) fn mark_unknown(&mut self, now: u64) {
        self.status = Status::Unknown;
        self.changed_ns = now;
    }

    /// The recorded result (empty where there is none).
    pub(super) fn result(&self) -> Vec<u8> {
        self.result
            .as_deref()
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    /// The time left at `now` until the record's deadline (its lease's end or its expiry);
    /// `None` once it passed.
    fn left(&self, now: u64) -> Option<Duration> {
        (now < self.until_ns).then(|| Duration::from_nanos(self.until_ns - now))
    }

    /// Whether the record is completed and expired at `now`.
    pub(super) fn completed_and_expired(&self, now: u64) -> bool {
        self.status == Status::Completed && self.left(now).is_none()
    }

    /// The record as a [`RecordView`].
    pub(super) fn view(&self, key: &Key, now: u64) -> RecordView {
        let left = self.left(now);
        RecordView {
            key: key.clone(),
            status: self.status,
            fence: self.fence,
            fingerprint: self.fingerprint,
            holder: self.holder.get(),
            once: self.once,
            lease_remaining: left.filter(|_| self.status == Status::InProgress),
            expires_in: left.filter(|_| self.status == Status::Completed),
            result: self.result.as_deref().map(<[u8]>::to_vec),
            age: Some(Duration::from_nanos(now.saturating_sub(self.changed_ns))),
        }
    }
}

/// A memory store's records were all written in this boot, so `boot_id` is never another's:
/// every deadline is read on the monotonic clock.
impl Current for Stored {
    type At = u64;
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
        self.holder.get()
    }
    fn expired(&self, now: u64, _boot_id: &str) -> bool {
        self.left(now).is_none()
    }
    fn lease_left(&self, now: u64, _boot_id: &str) -> Option<Duration> {
        self.left(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Now;
    use crate::record::{decide, decide_on, LocalRecord};
    use proptest::prelude::*;

    /// What a memory store does to a key, and the clock moving on.
    #[derive(Debug, Clone)]
    enum Op {
        Claim {
            payload: u8,
            once: bool,
            lease_ns: u64,
            ours: bool,
            steal: bool,
        },
        Complete {
            ttl_ns: u64,
        },
        Release,
        Renew {
            lease_ns: u64,
        },
        MarkUnknown,
        Wait {
            ns: u64,
            ms: i64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        // Durations from none to `u64::MAX` nanoseconds, deadlines that saturate included.
        let ns = prop_oneof![0..1_000u64, any::<u64>()];
        prop_oneof![
            (
                0..2u8,
                any::<bool>(),
                ns.clone(),
                any::<bool>(),
                any::<bool>()
            )
                .prop_map(|(payload, once, lease_ns, ours, steal)| Op::Claim {
                    payload,
                    once,
                    lease_ns,
                    ours,
                    steal
                }),
            ns.clone().prop_map(|ttl_ns| Op::Complete { ttl_ns }),
            Just(Op::Release),
            ns.prop_map(|lease_ns| Op::Renew { lease_ns }),
            Just(Op::MarkUnknown),
            (0..2_000u64, 0..5i64).prop_map(|(ns, ms)| Op::Wait { ns, ms }),
        ]
    }

    /// A holder this process did not make: another pid, host and boot.
    fn stranger() -> Holder {
        Holder {
            host: "elsewhere\tand beyond".into(),
            boot_id: "another-boot".into(),
            pid_ns: 7,
            pid: 1,
            start_time: 3,
            attempt: 9,
        }
    }

    proptest! {
        /// Within one boot a compact record decides every claim as a [`LocalRecord`] does, and
        /// reads back the same, through any sequence of transitions.
        #[test]
        fn behaves_as_a_local_record(ops in prop::collection::vec(op(), 1..40)) {
            let boot = crate::holder::this_boot();
            let key = Key::new("prop.memory", "k");
            let mut now = Now { mono_ns: 1_000, wall_ms: 1_700_000_000_000 };
            let mut fence = 0;
            let mut state: Option<(LocalRecord, Stored, Claim)> = None;
            // When the record last entered a state, on the monotonic clock: the memory store
            // tells its age on that clock, a local record on the wall clock.
            let mut changed_ns = 0;
            for op in ops {
                match op {
                    Op::Claim { payload, once, lease_ns, ours, steal } => {
                        let fp = Fingerprint::of(&payload).unwrap_or(Fingerprint::EMPTY);
                        let holder = if ours { Holder::current() } else { stranger() };
                        let req = ClaimRequest {
                            key: &key,
                            fingerprint: &fp,
                            holder: &holder,
                            lease: Duration::from_nanos(lease_ns),
                            once,
                            steal: steal.then_some(fence),
                        };
                        let local = state.as_ref().map(|(l, _, _)| l);
                        let stored = state.as_ref().map(|(_, s, _)| s);
                        let decision = decide(local, &req, now, boot);
                        prop_assert_eq!(&decide_on(stored, &req, now.mono_ns, boot), &decision);
                        if let crate::record::Decision::Claim { abandoned } = decision {
                            fence += 1;
                            changed_ns = now.mono_ns;
                            state = Some((
                                LocalRecord::claimed(&req, fence, now),
                                Stored::claimed(&req, fence, now.mono_ns),
                                Claim::granted(&req, fence, abandoned),
                            ));
                        }
                    }
                    Op::Wait { ns, ms } => {
                        now.mono_ns += ns;
                        now.wall_ms += ms;
                    }
                    other => {
                        let Some((local, stored, claim)) = state.as_mut() else { continue };
                        let held = local.held_by(claim);
                        prop_assert_eq!(stored.held_by(claim), held);
                        if !held {
                            continue;
                        }
                        match other {
                            Op::Complete { ttl_ns } => {
                                let result = [1, 2, 3];
                                local.complete(&result, Duration::from_nanos(ttl_ns), now);
                                local.holder = None;
                                stored.complete(&result, Duration::from_nanos(ttl_ns), now.mono_ns);
                                changed_ns = now.mono_ns;
                            }
                            Op::Release => {
                                local.status = Status::Released;
                                local.holder = None;
                                local.changed_wall_ms = now.wall_ms;
                                stored.release(now.mono_ns);
                                changed_ns = now.mono_ns;
                            }
                            Op::Renew { lease_ns } => {
                                local.renew(Duration::from_nanos(lease_ns), now);
                                stored.renew(Duration::from_nanos(lease_ns), now.mono_ns);
                            }
                            Op::MarkUnknown => {
                                local.status = Status::Unknown;
                                local.changed_wall_ms = now.wall_ms;
                                stored.mark_unknown(now.mono_ns);
                                changed_ns = now.mono_ns;
                            }
                            Op::Claim { .. } | Op::Wait { .. } => {}
                        }
                    }
                }
                if let Some((local, stored, _)) = &state {
                    let mut view = stored.view(&key, now.mono_ns);
                    prop_assert_eq!(view.age, Some(Duration::from_nanos(now.mono_ns - changed_ns)));
                    view.age = local.view(&key, now, boot).age;
                    prop_assert_eq!(view, local.view(&key, now, boot));
                    prop_assert_eq!(
                        stored.completed_and_expired(now.mono_ns),
                        local.status == Status::Completed && local.expired(now, boot)
                    );
                    prop_assert_eq!(stored.result(), local.result.clone().unwrap_or_default());
                }
            }
        }
    }

    #[test]
    fn a_record_is_104_bytes() {
        // The per-record memory budget (under 200 bytes beside the key and the result) counts
        // this box and the map's buckets; `tests/memory_footprint.rs` measures the whole.
        assert_eq!(std::mem::size_of::<Stored>(), 104);
    }

    #[test]
    fn holders_read_back_as_written() {
        let key = Key::new("prop.memory", "k");
        let now = 5;
        for holder in [Holder::current(), stranger()] {
            let req = ClaimRequest {
                key: &key,
                fingerprint: &Fingerprint::EMPTY,
                holder: &holder,
                lease: Duration::from_secs(1),
                once: false,
                steal: None,
            };
            let stored = Stored::claimed(&req, 1, now);
            assert_eq!(stored.holder(), Some(holder.clone()));
            assert_eq!(stored.view(&key, now).holder, Some(holder));
        }
    }
}
