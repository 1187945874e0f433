//! Model-based sequences (reliability 21): random sequences of calls, failures, panics,
//! abandoned claims, forgets, purges and clock moves, run against a reference model of contract
//! section 3 and against MemoryStore and SqliteStore. Every step's outcome and every record
//! must match the model.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use rerun_core::clock::ManualClock;
use rerun_core::record::{ClaimRequest, Status};
use rerun_core::store::sqlite::SqliteOptions;
use rerun_core::{Call, DynStore, Error, Fingerprint, Holder, Key, MemoryStore, SqliteStore};

const KEYS: u8 = 3;
const TTL: Duration = Duration::from_secs(100);
const LEASE: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
enum Body {
    Ok(u8),
    Err,
    Panic,
}

#[derive(Debug, Clone)]
enum Op {
    Call {
        key: u8,
        payload: u8,
        once: bool,
        body: Body,
    },
    /// A holder on another host claims and vanishes: only its lease ends it.
    Abandon {
        key: u8,
        payload: u8,
        once: bool,
    },
    Forget {
        key: u8,
    },
    Advance {
        secs: u64,
    },
    /// Deletes every completed record past its ttl.
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    let body = prop_oneof![
        6 => (0u8..4).prop_map(Body::Ok),
        2 => Just(Body::Err),
        1 => Just(Body::Panic),
    ];
    prop_oneof![
        10 => (0..KEYS, 0u8..2, any::<bool>(), body).prop_map(|(key, payload, once, body)| Op::Call { key, payload, once, body }),
        2 => (0..KEYS, 0u8..2, any::<bool>()).prop_map(|(key, payload, once)| Op::Abandon { key, payload, once }),
        1 => (0..KEYS).prop_map(|key| Op::Forget { key }),
        1 => Just(Op::Purge),
        3 => prop_oneof![Just(1u64), Just(9), Just(10), Just(11), Just(99), Just(100), Just(101)].prop_map(|secs| Op::Advance { secs }),
    ]
}

/// The model's record of one key.
#[derive(Debug, Clone, PartialEq)]
enum Model {
    Released,
    Completed {
        payload: u8,
        value: u8,
        expires: u64,
        once: bool,
    },
    InProgress {
        payload: u8,
        once: bool,
        lease_until: u64,
    },
    Unknown {
        payload: u8,
    },
}

/// What a step returned, as the model predicts it.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Fresh(u8),
    Replayed(u8),
    BodyErr,
    Panicked,
    Mismatch,
    InProgress,
    Unknown,
    Other(String),
}

struct World {
    now: u64,
    records: HashMap<u8, Model>,
}

impl World {
    fn call(&mut self, key: u8, payload: u8, once: bool, body: &Body) -> Seen {
        let now = self.now;
        let run = |records: &mut HashMap<u8, Model>| match body {
            Body::Ok(v) => {
                records.insert(
                    key,
                    Model::Completed {
                        payload,
                        value: *v,
                        expires: now + TTL.as_secs(),
                        once,
                    },
                );
                Seen::Fresh(*v)
            }
            Body::Err => {
                records.insert(key, Model::Released);
                Seen::BodyErr
            }
            Body::Panic => {
                records.insert(
                    key,
                    if once {
                        Model::Unknown { payload }
                    } else {
                        Model::Released
                    },
                );
                Seen::Panicked
            }
        };
        match self.records.get(&key).cloned() {
            None | Some(Model::Released) => run(&mut self.records),
            Some(Model::Completed { expires, .. }) if !once && now >= expires => {
                run(&mut self.records)
            }
            Some(Model::Completed {
                payload: p, value, ..
            }) => {
                if p == payload {
                    Seen::Replayed(value)
                } else {
                    Seen::Mismatch
                }
            }
            Some(Model::Unknown { payload: p }) => {
                if p == payload {
                    Seen::Unknown
                } else {
                    Seen::Mismatch
                }
            }
            Some(Model::InProgress {
                payload: p,
                once: was_once,
                lease_until,
            }) => {
                if p != payload {
                    Seen::Mismatch
                } else if now < lease_until {
                    Seen::InProgress
                } else if was_once {
                    self.records.insert(key, Model::Unknown { payload });
                    Seen::Unknown
                } else {
                    run(&mut self.records)
                }
            }
        }
    }

    /// Purging deletes the completed records whose ttl has run out.
    fn purge(&mut self) {
        let now = self.now;
        self.records
            .retain(|_, m| !matches!(m, Model::Completed { expires, .. } if now >= *expires));
    }

    /// An abandoning claim succeeds where a call would claim. One that takes over an unknown
    /// outcome (a record marked unknown, a dead `once` attempt) is recorded at most once,
    /// whatever its own mode.
    fn abandon(&mut self, key: u8, payload: u8, once: bool) -> bool {
        let now = self.now;
        let unknown = matches!(
            self.records.get(&key),
            Some(Model::Unknown { .. } | Model::InProgress { once: true, .. })
        );
        let claimable = match self.records.get(&key) {
            None | Some(Model::Released) => true,
            Some(Model::Completed { expires, .. }) => !once && now >= *expires,
            Some(Model::Unknown { payload: p }) => *p == payload,
            Some(Model::InProgress {
                payload: p,
                lease_until,
                ..
            }) => *p == payload && now >= *lease_until,
        };
        if claimable {
            self.records.insert(
                key,
                Model::InProgress {
                    payload,
                    once: once || unknown,
                    lease_until: now + LEASE.as_secs(),
                },
            );
        }
        claimable
    }
}

fn remote() -> Holder {
    let mut h = Holder::current();
    h.host = "model.remote.invalid".into();
    h
}

fn run_sequence(
    store: &dyn DynStore,
    clock: &ManualClock,
    scope: &str,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let mut world = World {
        now: 0,
        records: HashMap::new(),
    };
    let mut last_fence: HashMap<u8, u64> = HashMap::new();
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Call {
                key,
                payload,
                once,
                body,
            } => {
                let expected = world.call(*key, *payload, *once, body);
                let mut call = Call::new(scope.to_owned(), key)
                    .payload(payload)
                    .ttl(TTL)
                    .lease(LEASE);
                if *once {
                    call = call.once();
                }
                let got = catch_unwind(AssertUnwindSafe(|| {
                    call.run(store, || match body {
                        Body::Ok(v) => Ok(*v),
                        Body::Err => Err(Error::config("body failed")),
                        Body::Panic => panic!("the body panicked"),
                    })
                }));
                let seen = match got {
                    Err(_) => Seen::Panicked,
                    Ok(Ok(o)) => {
                        if !o.replayed {
                            let prev = last_fence.insert(*key, o.fence).unwrap_or(0);
                            prop_assert!(
                                o.fence > prev,
                                "step {step}: fence {} not above {prev}",
                                o.fence
                            );
                        }
                        if o.replayed {
                            Seen::Replayed(o.value)
                        } else {
                            Seen::Fresh(o.value)
                        }
                    }
                    Ok(Err(Error::Config { .. })) => Seen::BodyErr,
                    Ok(Err(Error::PayloadMismatch { .. })) => Seen::Mismatch,
                    Ok(Err(Error::InProgress { .. })) => Seen::InProgress,
                    Ok(Err(Error::OutcomeUnknown { .. })) => Seen::Unknown,
                    Ok(Err(e)) => Seen::Other(e.to_string()),
                };
                prop_assert_eq!(&seen, &expected, "step {} {:?}", step, op);
            }
            Op::Abandon { key, payload, once } => {
                let expected = world.abandon(*key, *payload, *once);
                let k = Key::new(scope.to_owned(), key);
                let fp =
                    Fingerprint::of(payload).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let holder = remote();
                let resp = store
                    .claim(&ClaimRequest {
                        key: &k,
                        fingerprint: &fp,
                        holder: &holder,
                        lease: LEASE,
                        once: *once,
                        steal: None,
                    })
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let claimed = matches!(resp, rerun_core::record::ClaimResponse::Claimed(_));
                // Where the model says a dead `once` attempt turns unknown, the store hands the
                // claim over with `outcome_unknown` set: both count as claimable.
                prop_assert_eq!(claimed, expected, "step {} {:?}: {:?}", step, op, resp);
            }
            Op::Forget { key } => {
                world.records.remove(key);
                store
                    .forget(&Key::new(scope.to_owned(), key))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            Op::Purge => {
                world.purge();
                store
                    .purge_expired(1000)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            Op::Advance { secs } => {
                world.now += secs;
                clock.advance(Duration::from_secs(*secs));
            }
        }
        // Every record agrees with the model's status.
        for key in 0..KEYS {
            let view = store
                .inspect(&Key::new(scope.to_owned(), &key))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let status = view.map(|v| v.status);
            let want = world.records.get(&key).map(|m| match m {
                Model::Released => Status::Released,
                Model::Completed { .. } => Status::Completed,
                Model::InProgress { .. } => Status::InProgress,
                Model::Unknown { .. } => Status::Unknown,
            });
            // The model keeps forgotten keys absent; stores may keep nothing or a released row.
            prop_assert_eq!(status, want, "after step {} {:?}, key {}", step, op, key);
        }
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("RERUN_MODEL_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(10_000)
}

fn memory() -> &'static (MemoryStore, ManualClock) {
    static S: OnceLock<(MemoryStore, ManualClock)> = OnceLock::new();
    S.get_or_init(|| {
        let clock = ManualClock::new();
        (MemoryStore::with_clock(clock.clone()), clock)
    })
}

fn sqlite() -> &'static (SqliteStore, ManualClock, tempfile::TempDir) {
    static S: OnceLock<(SqliteStore, ManualClock, tempfile::TempDir)> = OnceLock::new();
    S.get_or_init(|| {
        let clock = ManualClock::new();
        let dir = tempfile::tempdir().expect("a temp dir");
        let store = SqliteStore::open_with(
            dir.path().join("model.sqlite3"),
            SqliteOptions::new().clock(clock.clone()),
        )
        .expect("the store opens");
        (store, clock, dir)
    })
}

fn quiet_panics() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&"the body panicked") {
                default(info);
            }
        }));
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn memory_store_follows_the_model(ops in proptest::collection::vec(op(), 1..50)) {
        quiet_panics();
        let (store, clock) = memory();
        let scope = rerun_core::testing::conformance::unique("model");
        run_sequence(store, clock, &scope, &ops)?;
    }

    #[test]
    fn sqlite_store_follows_the_model(ops in proptest::collection::vec(op(), 1..50)) {
        quiet_panics();
        let (store, clock, _) = sqlite();
        let scope = rerun_core::testing::conformance::unique("model");
        run_sequence(store, clock, &scope, &ops)?;
    }
}
