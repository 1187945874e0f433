//! PostgresStore behaviour against a real server: the claim table of `record::decide`, fencing,
//! the server's clock, size limits, schema creation and versions, sync and async halves.
//!
//! Run with `RERUN_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo test -p
//! rerun-core --features postgres,testing --test postgres_store`.
#![cfg(all(feature = "postgres", feature = "testing"))]

mod postgres_common;

use std::time::Duration;

use postgres_common::{claimed, fresh, psql, request, url};
use rerun_core::record::{ClaimResponse, Status};
use rerun_core::store::postgres::{PostgresStore, MAX_KEY_BYTES, MAX_POOL_SIZE, SCHEMA_VERSION};
use rerun_core::{AsyncStore, Call, Error, Fingerprint, Holder, Key, Store};

const LONG: Duration = Duration::from_secs(60);

#[test]
fn claim_replay_mismatch_busy_and_fences() {
    let Some(url) = url() else { return };
    let (store, _t) = fresh(&url, "table");
    let key = Key::new("s", "k");
    let fp = Fingerprint::of(&1).unwrap();
    let other = Fingerprint::of(&2).unwrap();
    let (h1, h2) = (Holder::current(), Holder::current());

    let c1 = claimed(store.claim(&request(&key, &fp, &h1, LONG)));
    assert!(c1.abandoned.is_none());
    match store.claim(&request(&key, &fp, &h2, LONG)).unwrap() {
        ClaimResponse::Busy(b) => {
            assert_eq!((b.fence, &b.holder), (c1.fence, &h1));
            assert!(
                b.lease_remaining > Duration::from_secs(50),
                "{:?}",
                b.lease_remaining
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.claim(&request(&key, &other, &h2, LONG)).unwrap(),
        ClaimResponse::Mismatch
    );
    store.renew(&c1, LONG).unwrap();
    store.complete(&c1, b"result", LONG).unwrap();
    // Completed: a second completion, release or renewal is fenced out.
    assert!(matches!(
        store.complete(&c1, b"x", LONG),
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(store.release(&c1), Err(Error::LeaseLost { .. })));
    assert!(matches!(
        store.renew(&c1, LONG),
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(
        store.mark_unknown(&c1),
        Err(Error::LeaseLost { .. })
    ));
    match store.claim(&request(&key, &fp, &h2, LONG)).unwrap() {
        ClaimResponse::Replay(r) => {
            assert_eq!((r.fence, r.result.as_slice()), (c1.fence, &b"result"[..]))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.claim(&request(&key, &other, &h2, LONG)).unwrap(),
        ClaimResponse::Mismatch
    );
    let view = store.inspect(&key).unwrap().unwrap();
    assert_eq!(view.status, Status::Completed);
    assert!(view.expires_in.unwrap() > Duration::from_secs(50));
    assert_eq!(view.result.as_deref(), Some(&b"result"[..]));

    // Forget keeps fences growing.
    assert!(store.forget(&key).unwrap());
    assert!(!store.forget(&key).unwrap());
    let c2 = claimed(store.claim(&request(&key, &other, &h2, LONG)));
    assert!(c2.fence > c1.fence);
    // Release: the next claim runs afresh, with any fingerprint, and a larger fence.
    store.release(&c2).unwrap();
    assert_eq!(
        store.inspect(&key).unwrap().unwrap().status,
        Status::Released
    );
    let c3 = claimed(store.claim(&request(&key, &fp, &h1, LONG)));
    assert!(c3.fence > c2.fence && c3.abandoned.is_none());
}

#[test]
fn takeover_by_lease_steal_and_unknown() {
    let Some(url) = url() else { return };
    let (store, _t) = fresh(&url, "takeover");
    let key = Key::new("s", "lease");
    let fp = Fingerprint::of(&"p").unwrap();
    let (h1, h2) = (Holder::current(), Holder::current());

    // The lease runs out on the server's clock.
    let c1 = claimed(store.claim(&request(&key, &fp, &h1, Duration::from_millis(200))));
    assert!(matches!(
        store.claim(&request(&key, &fp, &h2, LONG)).unwrap(),
        ClaimResponse::Busy(_)
    ));
    std::thread::sleep(Duration::from_millis(300));
    assert!(store
        .inspect(&key)
        .unwrap()
        .unwrap()
        .lease_remaining
        .is_none());
    let c2 = claimed(store.claim(&request(&key, &fp, &h2, LONG)));
    let ab = c2.abandoned.clone().unwrap();
    assert_eq!(
        (ab.fence, ab.holder.as_ref(), ab.outcome_unknown),
        (c1.fence, Some(&h1), false)
    );
    // The zombie is fenced out; the successor completes.
    assert!(matches!(
        store.complete(&c1, b"zombie", LONG),
        Err(Error::LeaseLost { .. })
    ));
    assert!(matches!(
        store.renew(&c1, LONG),
        Err(Error::LeaseLost { .. })
    ));

    // Steal: only the current fence may be stolen, lease or not.
    let mut steal = request(&key, &fp, &h1, LONG);
    steal.steal = Some(c1.fence);
    assert!(matches!(
        store.claim(&steal).unwrap(),
        ClaimResponse::Busy(_)
    ));
    steal.steal = Some(c2.fence);
    let c3 = claimed(store.claim(&steal));
    assert_eq!(c3.abandoned.unwrap().fence, c2.fence);
    assert!(matches!(
        store.complete(&c2, b"x", LONG),
        Err(Error::LeaseLost { .. })
    ));

    // A `once` claim marked unknown is claimed again with the outcome unknown.
    let mut once = request(&key, &fp, &h2, LONG);
    once.steal = Some(c3.fence);
    once.once = true;
    let c4 = claimed(store.claim(&once));
    assert!(c4.once);
    store.mark_unknown(&c4).unwrap();
    let view = store.inspect(&key).unwrap().unwrap();
    assert_eq!((view.status, view.once), (Status::Unknown, true));
    assert_eq!(
        store
            .claim(&request(
                &key,
                &Fingerprint::of(&"other").unwrap(),
                &h1,
                LONG
            ))
            .unwrap(),
        ClaimResponse::Mismatch
    );
    let c5 = claimed(store.claim(&request(&key, &fp, &h1, LONG)));
    let ab = c5.abandoned.unwrap();
    assert!(ab.outcome_unknown && ab.fence == c4.fence);

    // A `once` claim whose lease ran out reports its outcome unknown.
    let key2 = Key::new("s", "once-lease");
    let mut once = request(&key2, &fp, &h1, Duration::from_millis(100));
    once.once = true;
    let c6 = claimed(store.claim(&once));
    std::thread::sleep(Duration::from_millis(200));
    let c7 = claimed(store.claim(&request(&key2, &fp, &h2, LONG)));
    assert_eq!(
        c7.abandoned.unwrap(),
        rerun_core::record::Abandoned {
            fence: c6.fence,
            holder: Some(h1.clone()),
            outcome_unknown: true
        }
    );
}

#[test]
fn expiry_purge_scan_on_the_server_clock() {
    let Some(url) = url() else { return };
    let (store, _t) = fresh(&url, "expiry");
    let fp = Fingerprint::of(&()).unwrap();
    let h = Holder::current();
    let mut fences = Vec::new();
    for i in 0..5u32 {
        let key = Key::new("scan", &i);
        let c = claimed(store.claim(&request(&key, &fp, &h, LONG)));
        let ttl = if i < 3 {
            Duration::from_millis(100)
        } else {
            LONG
        };
        store.complete(&c, b"r", ttl).unwrap();
        fences.push(c.fence);
    }
    std::thread::sleep(Duration::from_millis(200));
    // Expired but present: claimed afresh, with another payload too.
    let k0 = Key::new("scan", &0u32);
    let view = store.inspect(&k0).unwrap().unwrap();
    assert_eq!((view.status, view.expires_in), (Status::Completed, None));
    let c = claimed(store.claim(&request(&k0, &Fingerprint::of(&9).unwrap(), &h, LONG)));
    assert!(c.fence > *fences.iter().max().unwrap());
    store.complete(&c, b"again", LONG).unwrap();

    // Scan pages through every record in key order.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store.scan(cursor.as_deref(), 2).unwrap();
        seen.extend(page.records.iter().map(|r| r.key.clone()));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut want: Vec<Key> = (0..5u32).map(|i| Key::new("scan", &i)).collect();
    want.sort();
    assert_eq!(seen, want);

    // A `once` call honours a completed record past its ttl while it exists.
    let k1 = Key::new("scan", &1u32);
    let mut once = request(&k1, &fp, &h, LONG);
    once.once = true;
    assert!(matches!(
        store.claim(&once).unwrap(),
        ClaimResponse::Replay(_)
    ));
    let other = Fingerprint::of(&"other").unwrap();
    once.fingerprint = &other;
    assert_eq!(store.claim(&once).unwrap(), ClaimResponse::Mismatch);

    // Two expired (1 and 2) are purged; 0 was claimed again, 3 and 4 live.
    assert_eq!(store.purge_expired(100).unwrap(), 2);
    assert_eq!(store.purge_expired(100).unwrap(), 0);
    assert!(store.inspect(&Key::new("scan", &1u32)).unwrap().is_none());
    // A purged key's next claim still gets a larger fence.
    let c = claimed(store.claim(&request(&Key::new("scan", &1u32), &fp, &h, LONG)));
    assert!(c.fence > fences[4]);
}

#[test]
fn keys_and_results_too_large_are_typed_and_write_nothing() {
    let Some(url) = url() else { return };
    let table = postgres_common::unique_table("limits");
    let store = PostgresStore::builder(&url)
        .table(&table)
        .max_result_bytes(1000)
        .connect()
        .unwrap();
    let _t = postgres_common::Table {
        url: url.clone(),
        name: table.clone(),
    };
    let fp = Fingerprint::of(&()).unwrap();
    let h = Holder::current();
    let big = Key::new("s", &"x".repeat(MAX_KEY_BYTES));
    let err = store.claim(&request(&big, &fp, &h, LONG)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Codec {
                what: "the key",
                ..
            }
        ) && !err.is_retryable(),
        "{err}"
    );
    // The limit is on the key as stored, where a backslash takes two bytes: a key under it
    // before escaping and over it after is refused the same way (it used to reach the server
    // and fail there, as a retryable store error, when it did not compress).
    let slashed: String = (0..MAX_KEY_BYTES * 2 / 3)
        .map(|i| match i % 2 {
            0 => '\\',
            _ => char::from(b'!' + u8::try_from(i * 7919 % 90).unwrap()),
        })
        .collect();
    let slashed = Key::from_parts("s", slashed);
    assert!(slashed.scope().len() + slashed.id().len() < MAX_KEY_BYTES);
    let err = store.claim(&request(&slashed, &fp, &h, LONG)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Codec {
                what: "the key",
                ..
            }
        ) && !err.is_retryable()
            && err.to_string().contains("as stored"),
        "{err}"
    );
    assert!(store.scan(None, 10).unwrap().records.is_empty());
    // A key just under the limit, with NUL and non-ASCII characters, round-trips.
    let odd = Key::new("s\0cope", &format!("é\0{}", "y".repeat(MAX_KEY_BYTES - 20)));
    let c = claimed(store.claim(&request(&odd, &fp, &h, LONG)));
    let err = store.complete(&c, &vec![0u8; 1001], LONG).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Codec {
                what: "the result",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        store.inspect(&odd).unwrap().unwrap().status,
        Status::InProgress
    );
    store.complete(&c, &[7u8; 1000], LONG).unwrap();
    assert_eq!(store.scan(None, 10).unwrap().records[0].key, odd);
    // Through the runtime: an oversized result is a Codec error and leaves no claim behind.
    let out = Call::new("big", "k").run(&store, || Ok::<_, Error>("z".repeat(2000)));
    assert!(matches!(out, Err(Error::Codec { .. })), "{out:?}");
    assert_eq!(
        store
            .inspect(&Key::new("big", "k"))
            .unwrap()
            .unwrap()
            .status,
        Status::Released
    );
    // A `once` call's body ran: its claim is marked unknown at once, never left in progress
    // for its lease to end.
    let out = Call::new("big", "once")
        .once()
        .run(&store, || Ok::<_, Error>("z".repeat(2000)));
    assert!(matches!(out, Err(Error::Codec { .. })), "{out:?}");
    assert_eq!(
        store
            .inspect(&Key::new("big", "once"))
            .unwrap()
            .unwrap()
            .status,
        Status::Unknown
    );
}

#[test]
fn runtime_calls_sync_and_async_share_records() {
    let Some(url) = url() else { return };
    let (store, _t) = fresh(&url, "runtime");
    let mut runs = 0;
    for _ in 0..3 {
        let out = Call::new("demo", "k").run(&store, || {
            runs += 1;
            Ok::<_, Error>(41)
        });
        assert_eq!(out.unwrap().value, 41);
    }
    assert_eq!(runs, 1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store2 = store.clone();
    let (replayed, fresh_value) = rt.block_on(async move {
        let a = Call::new("demo", "k")
            .run_async(&store2, async { Ok::<_, Error>(0) })
            .await
            .unwrap();
        let b = Call::new("demo", "async")
            .run_async(&store2, async { Ok::<_, Error>(7) })
            .await
            .unwrap();
        // The sync half called from inside the runtime must not panic.
        let c = Call::new("demo", "async")
            .run(&store2, || Ok::<_, Error>(8))
            .unwrap();
        assert!(c.replayed && c.value == 7);
        (a, b)
    });
    assert!(replayed.replayed && replayed.value == 41);
    assert!(!fresh_value.replayed);
    // Async claims and fenced operations directly.
    let key = Key::new("direct", "k");
    let fp = Fingerprint::of(&()).unwrap();
    let h = Holder::current();
    rt.block_on(async {
        let c = match store
            .claim_async(&request(&key, &fp, &h, LONG))
            .await
            .unwrap()
        {
            ClaimResponse::Claimed(c) => c,
            other => panic!("{other:?}"),
        };
        store.mark_unknown_async(&c).await.unwrap();
        assert!(matches!(
            store.release_async(&c).await,
            Err(Error::LeaseLost { .. })
        ));
    });
}

#[test]
fn connect_and_drop_inside_a_runtime() {
    let Some(url) = url() else { return };
    let table = postgres_common::unique_table("inrt");
    let _t = postgres_common::Table {
        url: url.clone(),
        name: table.clone(),
    };
    for flavor in ["current", "multi"] {
        let rt = match flavor {
            "current" => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            _ => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
        };
        let url = url.clone();
        let table = table.clone();
        rt.block_on(async move {
            let store = PostgresStore::builder(&url)
                .table(&table)
                .connect()
                .unwrap();
            let out = Call::new("rt", flavor)
                .run(&store, || Ok::<_, Error>(1))
                .unwrap();
            assert!(!out.replayed);
            let again = Call::new("rt", flavor)
                .run_async(&store, async { Ok::<_, Error>(2) })
                .await
                .unwrap();
            assert!(again.replayed && again.value == 1);
            drop(store);
        });
    }
}

/// Every constructor returns `Err`, inside a runtime and outside: a server that is down, a
/// database that does not exist, a role the server refuses. Permanent causes say so.
#[test]
fn connect_failures_are_errors_in_and_out_of_a_runtime() {
    let Some(url) = url() else { return };
    let base = url.split('?').next().unwrap_or(&url);
    let (scheme_user, rest) = base
        .split_once('@')
        .unwrap_or(("postgres://postgres", base));
    let host = rest.split('/').next().unwrap_or("127.0.0.1:5432");
    let cases = [
        (
            "down",
            "postgres://postgres@127.0.0.1:1/test".to_owned(),
            true,
            "",
        ),
        (
            "no database",
            format!("{scheme_user}@{host}/rerun_no_such_database"),
            false,
            "does not exist",
        ),
        (
            "no role",
            format!("postgres://rerun_no_such_role@{host}/test"),
            false,
            "rerun_no_such_role",
        ),
    ];
    let check = |name: &str, url: &str, retryable: bool, cause: &str| {
        let err = match PostgresStore::connect(url) {
            Ok(_) => panic!("{name}: connected"),
            Err(e) => e,
        };
        let text = err.to_string();
        assert!(matches!(err, Error::Store { .. }), "{name}: {text}");
        assert_eq!(err.is_retryable(), retryable, "{name}: {text}");
        assert!(text.contains(cause), "{name}: {text}");
    };
    for (name, url, retryable, cause) in &cases {
        check(name, url, *retryable, cause);
    }
    for flavor in ["current", "multi"] {
        let rt = match flavor {
            "current" => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            _ => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
        };
        rt.block_on(async {
            for (name, url, retryable, cause) in &cases {
                check(
                    &format!("{name} in a {flavor}-thread runtime"),
                    url,
                    *retryable,
                    cause,
                );
            }
        });
        // The global store's URL path too: an error, not a panic.
        rt.block_on(async {
            assert!(rerun_core::open_url("postgres://postgres@127.0.0.1:1/test").is_err());
        });
    }
}

/// A builder prints its URL as the store's errors do, the password hidden; a pool size too
/// large for any server is the largest a server allows, and connects; a URL that requires TLS
/// is a configuration error.
#[test]
fn a_builder_hides_its_password_and_takes_any_pool_size() {
    // A URL that requires TLS is refused as it is: the store connects without TLS.
    let tls = PostgresStore::connect("postgres://app:s3cret@db.internal/app?sslmode=require");
    assert!(
        matches!(tls, Err(Error::Config { ref message, .. }) if message.contains("sslmode=require") && !message.contains("s3cret")),
        "{tls:?}"
    );
    let builder =
        PostgresStore::builder("postgres://app:s3cret@db.internal/app").pool_size(usize::MAX);
    let shown = format!("{builder:?}");
    assert!(
        !shown.contains("s3cret") && shown.contains("***"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("pool_size: {MAX_POOL_SIZE}")),
        "{shown}"
    );
    let Some(url) = url() else { return };
    let table = postgres_common::Table {
        url: url.clone(),
        name: postgres_common::unique_table("pool_max"),
    };
    let store = PostgresStore::builder(&url)
        .table(&table.name)
        .pool_size(usize::MAX)
        .connect()
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    let ran = Call::new("pool", "max").run(&store, || Ok::<_, Error>(1u8));
    assert!(matches!(ran, Ok(ref o) if o.value == 1), "{ran:?}");
}

/// A key the database's encoding cannot hold (a LATIN1 database, a key with an emoji) fails
/// the same way on every retry: a store error that says so and is not retryable, where a
/// retryable one would have a queue redeliver its message for ever.
#[test]
fn a_key_the_database_cannot_encode_is_not_retryable() {
    let Some(url) = url() else { return };
    let db = format!("rerun_latin1_{}", std::process::id());
    struct Database<'a>(&'a str, String);
    impl Drop for Database<'_> {
        fn drop(&mut self) {
            let _ = psql(
                self.0,
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.1),
            );
        }
    }
    psql(
        &url,
        &format!(
            "CREATE DATABASE {db} ENCODING 'LATIN1' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'"
        ),
    )
    .unwrap_or_else(|e| panic!("creating a LATIN1 database: {e}"));
    let _db = Database(&url, db.clone());
    let (base, query) = url.split_once('?').unwrap_or((&url, ""));
    let Some((server, _)) = base.rsplit_once('/') else {
        panic!("no database in {url}")
    };
    let latin1 = match query {
        "" => format!("{server}/{db}"),
        q => format!("{server}/{db}?{q}"),
    };
    let store = PostgresStore::connect(&latin1).unwrap_or_else(|e| panic!("{latin1}: {e}"));
    let ran = Call::new("s", "caf\u{e9}").run(&store, || Ok::<_, Error>(1u8));
    assert!(
        matches!(ran, Ok(ref o) if o.value == 1),
        "LATIN1 holds an e acute: {ran:?}"
    );
    for _ in 0..2 {
        let err = Call::new("s", "party \u{1f389}")
            .run(&store, || Ok::<_, Error>(1u8))
            .unwrap_err();
        assert!(matches!(err, Error::Store { .. }), "{err:?}");
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains("LATIN1"), "{err}");
    }
    drop(store);
}

/// A row whose lease or expiry is NULL cannot be judged: it is `Corrupt`, not a retryable
/// failure, and it is left untouched.
#[test]
fn null_leases_and_expiries_are_corrupt() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "nulls");
    let fp = Fingerprint::of(&()).unwrap();
    let h = Holder::current();
    let held = Key::new("s", "held");
    claimed(store.claim(&request(&held, &fp, &h, LONG)));
    let done = Key::new("s", "done");
    let c = claimed(store.claim(&request(&done, &fp, &h, LONG)));
    store.complete(&c, b"r", LONG).unwrap();
    psql(
        &url,
        &format!(
            "UPDATE \"{0}\" SET lease_until = NULL WHERE status = 'in_progress'; \
             UPDATE \"{0}\" SET expires_at = NULL WHERE status = 'completed'",
            t.name
        ),
    )
    .unwrap();
    for key in [&held, &done] {
        let err = store.claim(&request(key, &fp, &h, LONG)).unwrap_err();
        assert!(
            matches!(err, Error::Corrupt { .. }) && !err.is_retryable(),
            "{key}: {err}"
        );
    }
    let rows = psql(
        &url,
        &format!(
            "SELECT count(*) FROM \"{}\" WHERE lease_until IS NULL AND expires_at IS NULL",
            t.name
        ),
    )
    .unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("2"), "left untouched");
}

/// The answers a repeated or concurrent duplicate gets most (a replay, a mismatch on a
/// completed record, a busy key) are plain reads: no row is locked, so no transaction id is
/// taken, nothing is written and replays never queue behind each other. A locked row would
/// show the locker in `xmax`.
#[test]
fn replays_mismatches_and_busy_keys_lock_no_row() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "readonly");
    let fp = Fingerprint::of(&1).unwrap();
    let other = Fingerprint::of(&2).unwrap();
    let (h1, h2) = (Holder::current(), Holder::current());
    let held = Key::new("s", "held");
    claimed(store.claim(&request(&held, &fp, &h1, LONG)));
    let done = Key::new("s", "done");
    let c = claimed(store.claim(&request(&done, &fp, &h1, LONG)));
    store.complete(&c, b"r", LONG).unwrap();
    let versions = || {
        psql(
            &url,
            &format!(
                "SELECT id, xmin::text, xmax::text FROM \"{}\" ORDER BY id",
                t.name
            ),
        )
        .unwrap()
    };
    let before = versions();
    for _ in 0..3 {
        assert!(matches!(
            store.claim(&request(&held, &fp, &h2, LONG)).unwrap(),
            ClaimResponse::Busy(_)
        ));
        assert!(matches!(
            store.claim(&request(&done, &fp, &h2, LONG)).unwrap(),
            ClaimResponse::Replay(_)
        ));
        assert_eq!(
            store.claim(&request(&done, &other, &h2, LONG)).unwrap(),
            ClaimResponse::Mismatch
        );
    }
    let after = versions();
    assert_eq!(before, after, "no new row version");
    for row in &after {
        assert_eq!(row[2].as_deref(), Some("0"), "locked: {row:?}");
    }
}

/// Every state a record can be in, against every kind of request (same or other payload,
/// `once` or not, stealing the current fence or not): the answer is `record::decide`'s table,
/// and a request turned down leaves the record as it was. The claim statement only pre-filters
/// on the server (absent, no clock running, or the fence to steal) and leaves the exact
/// decision to the claim function's check on the locked row, so the rare corners (a mismatch
/// on an abandoned claim, a `once` call on an expired record) are where a slip would show.
#[test]
fn every_state_against_every_request_follows_the_decision_table() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "states");
    let fp = Fingerprint::of(&"same").unwrap();
    let other = Fingerprint::of(&"other").unwrap();
    let (h1, h2) = (Holder::current(), Holder::current());
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum State {
        Released,
        CompletedLive,
        CompletedExpired,
        Unknown,
        InProgressLive,
        InProgressExpired,
    }
    #[derive(Debug, PartialEq)]
    enum Answer {
        Claim { abandoned: bool, unknown: bool },
        Replay,
        Mismatch,
        Busy,
    }
    let states = [
        State::Released,
        State::CompletedLive,
        State::CompletedExpired,
        State::Unknown,
        State::InProgressLive,
        State::InProgressExpired,
    ];
    let mut n = 0;
    for state in states {
        for same in [true, false] {
            for once in [false, true] {
                for steal in [false, true] {
                    n += 1;
                    let key = Key::new("s", &n);
                    let c = claimed(store.claim(&request(&key, &fp, &h1, LONG)));
                    match state {
                        State::Released => store.release(&c).unwrap(),
                        State::CompletedLive | State::CompletedExpired => {
                            store.complete(&c, b"r", LONG).unwrap()
                        }
                        State::Unknown => store.mark_unknown(&c).unwrap(),
                        State::InProgressLive | State::InProgressExpired => {}
                    }
                    let past = match state {
                        State::CompletedExpired => "expires_at",
                        State::InProgressExpired => "lease_until",
                        _ => "",
                    };
                    if !past.is_empty() {
                        psql(
                            &url,
                            &format!(
                                "UPDATE \"{}\" SET {past} = now() - interval '1 second' \
                                 WHERE id = '{}'",
                                t.name,
                                key.id()
                            ),
                        )
                        .unwrap();
                    }
                    let before = store.inspect(&key).unwrap().unwrap();
                    let mut req = request(&key, if same { &fp } else { &other }, &h2, LONG);
                    req.once = once;
                    req.steal = steal.then_some(c.fence);
                    let expected = match state {
                        State::Released => Answer::Claim {
                            abandoned: false,
                            unknown: false,
                        },
                        State::CompletedExpired if !once => Answer::Claim {
                            abandoned: false,
                            unknown: false,
                        },
                        _ if !same => Answer::Mismatch,
                        State::CompletedLive | State::CompletedExpired => Answer::Replay,
                        State::Unknown => Answer::Claim {
                            abandoned: true,
                            unknown: true,
                        },
                        State::InProgressLive if !steal => Answer::Busy,
                        State::InProgressLive | State::InProgressExpired => Answer::Claim {
                            abandoned: true,
                            unknown: false,
                        },
                    };
                    let answer = match store.claim(&req).unwrap() {
                        ClaimResponse::Claimed(won) => {
                            assert!(won.fence > c.fence);
                            let ab = won.abandoned.as_ref();
                            if let Some(ab) = ab {
                                assert_eq!(ab.fence, c.fence);
                                assert_eq!(ab.holder.as_ref(), Some(&h1));
                            }
                            Answer::Claim {
                                abandoned: ab.is_some(),
                                unknown: ab.is_some_and(|a| a.outcome_unknown),
                            }
                        }
                        ClaimResponse::Replay(r) => {
                            assert_eq!((r.fence, r.result.as_slice()), (c.fence, &b"r"[..]));
                            Answer::Replay
                        }
                        ClaimResponse::Mismatch => Answer::Mismatch,
                        ClaimResponse::Busy(b) => {
                            assert_eq!((b.fence, &b.holder), (c.fence, &h1));
                            assert!(b.lease_remaining > Duration::from_secs(50));
                            Answer::Busy
                        }
                    };
                    let case = format!("{state:?}, same {same}, once {once}, steal {steal}");
                    assert_eq!(answer, expected, "{case}");
                    if !matches!(answer, Answer::Claim { .. }) {
                        let after = store.inspect(&key).unwrap().unwrap();
                        assert_eq!(
                            (after.status, after.fence, after.holder.as_ref()),
                            (before.status, before.fence, before.holder.as_ref()),
                            "{case}: untouched"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn many_instances_create_the_schema_at_once() {
    let Some(url) = url() else { return };
    let table = postgres_common::unique_table("schema");
    let _t = postgres_common::Table {
        url: url.clone(),
        name: table.clone(),
    };
    let stores: Vec<PostgresStore> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..12)
            .map(|_| {
                s.spawn(|| {
                    PostgresStore::builder(&url)
                        .table(&table)
                        .pool_size(2)
                        .connect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    let fp = Fingerprint::of(&()).unwrap();
    let h = Holder::current();
    let key = Key::new("s", "k");
    let c = claimed(stores[0].claim(&request(&key, &fp, &h, LONG)));
    stores[0].complete(&c, b"r", LONG).unwrap();
    for s in &stores {
        assert!(matches!(
            s.claim(&request(&key, &fp, &h, LONG)).unwrap(),
            ClaimResponse::Replay(_)
        ));
    }
    let versions = psql(&url, &format!("SELECT count(*) FROM \"{table}_meta\"")).unwrap();
    assert_eq!(versions[0][0].as_deref(), Some("2"));
}

/// A table of a newer schema or codec, or with no schema version, is refused with a
/// configuration error that names what it found.
#[test]
fn a_newer_schema_or_codec_is_refused_naming_the_versions() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "version");
    drop(store);
    let refused = || {
        PostgresStore::builder(&url)
            .table(&t.name)
            .connect()
            .unwrap_err()
    };
    psql(
        &url,
        &format!(
            "UPDATE \"{}_meta\" SET value = 99 WHERE name = 'schema_version'",
            t.name
        ),
    )
    .unwrap();
    let err = refused();
    assert!(matches!(err, Error::Config { .. }), "{err}");
    let ours = rerun_core::store::postgres::SCHEMA_VERSION;
    assert!(
        err.to_string().contains("schema version 99")
            && err.to_string().contains(&format!("build's {ours}")),
        "{err}"
    );
    psql(&url, &format!("UPDATE \"{}_meta\" SET value = {ours} WHERE name = 'schema_version'; UPDATE \"{}_meta\" SET value = 7 WHERE name = 'codec_version'", t.name, t.name)).unwrap();
    let err = refused();
    assert!(err.to_string().contains("codec version 7"), "{err}");
    // No schema version at all: not rerun's table, a configuration error too (not a
    // retryable one).
    psql(
        &url,
        &format!(
            "DELETE FROM \"{}_meta\" WHERE name = 'schema_version'",
            t.name
        ),
    )
    .unwrap();
    let err = refused();
    assert!(
        matches!(err, Error::Config { .. }) && err.to_string().contains("no schema version"),
        "{err}"
    );
}

#[test]
fn corrupt_rows_are_typed_and_untouched() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "corrupt");
    let fp = Fingerprint::of(&()).unwrap();
    let h = Holder::current();
    let key = Key::new("s", "k");
    let c = claimed(store.claim(&request(&key, &fp, &h, LONG)));
    store.complete(&c, b"r", LONG).unwrap();
    psql(&url, &format!("UPDATE \"{}\" SET status = 'bogus'", t.name)).unwrap();
    let err = store.claim(&request(&key, &fp, &h, LONG)).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(matches!(store.inspect(&key), Err(Error::Corrupt { .. })));
    let rows = psql(&url, &format!("SELECT status, fence FROM \"{}\"", t.name)).unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("bogus"));
    assert!(store.forget(&key).unwrap());
    claimed(store.claim(&request(&key, &fp, &h, LONG)));
}

/// A scan reads past rows it cannot read, one a page: a bad state, and a key whose escapes do
/// not decode (the cursor goes on from the row as stored, not from an escaped copy of it that
/// sorts before it and would page back to it for ever). Infinite times are read, not refused
/// (the statement once subtracted them from `now()`, which fails the whole statement).
#[test]
fn a_scan_reads_past_rows_that_cannot_be_read() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "scanpast");
    for k in ["a", "b", "c", "d"] {
        Call::new("s", k).run(&store, || Ok::<_, Error>(1)).unwrap();
    }
    let id = |k: &str| Key::new("s", k).id().to_owned();
    let (b, c) = (id("b"), id("c"));
    let table = &t.name;
    psql(
        &url,
        &format!("UPDATE \"{table}\" SET status = 'bogus' WHERE id = '{b}'"),
    )
    .unwrap();
    psql(
        &url,
        &format!("UPDATE \"{table}\" SET id = '{c}\\q' WHERE id = '{c}'"),
    )
    .unwrap();
    let a = id("a");
    let d = id("d");
    psql(
        &url,
        &format!("UPDATE \"{table}\" SET changed_at = '-infinity' WHERE id = '{a}'"),
    )
    .unwrap();
    psql(
        &url,
        &format!("UPDATE \"{table}\" SET expires_at = 'infinity' WHERE id = '{d}'"),
    )
    .unwrap();
    let (mut records, mut unreadable, mut cursor) = (Vec::new(), Vec::new(), None);
    for _ in 0..20 {
        let page = store.scan(cursor.as_deref(), 1).unwrap();
        records.extend(page.records.into_iter().map(|r| r.key.id().to_owned()));
        unreadable.extend(page.unreadable.into_iter().map(|u| u.key.id().to_owned()));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(records, [a, d.clone()]);
    let kept = store.inspect(&Key::new("s", "d")).unwrap().unwrap();
    assert!(
        kept.expires_in
            .is_some_and(|e| e > Duration::from_secs(1 << 40)),
        "{kept:?}"
    );
    assert_eq!(unreadable, [b, format!("{c}\\q")]);
}

#[test]
fn table_and_schema_options_and_url_parameters() {
    let Some(url) = url() else { return };
    let schema = postgres_common::unique_table("schema");
    let sep = if url.contains('?') { '&' } else { '?' };
    let store =
        PostgresStore::connect(&format!("{url}{sep}rerun_schema={schema}&rerun_table=recs"))
            .unwrap();
    assert_eq!(store.table(), format!("{schema}.recs"));
    assert!(store.describe().contains(&format!("{schema}.recs")));
    let out = Call::new("s", "k")
        .run(&store, || Ok::<_, Error>(3))
        .unwrap();
    assert_eq!(out.value, 3);
    let rows = psql(&url, &format!("SELECT count(*) FROM \"{schema}\".recs")).unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("1"));
    drop(store);
    psql(&url, &format!("DROP SCHEMA \"{schema}\" CASCADE")).unwrap();
    let err = PostgresStore::builder(&url)
        .schema("no;pe")
        .connect()
        .unwrap_err();
    assert!(matches!(err, Error::Config { .. }));
}

#[test]
fn rerun_store_urls_open_a_postgres_store() {
    let Some(url) = url() else { return };
    let table = postgres_common::unique_table("global");
    let _t = postgres_common::Table {
        url: url.clone(),
        name: table.clone(),
    };
    let store = rerun_core::open_url(&postgres_common::with_param(
        &url,
        &format!("rerun_table={table}"),
    ))
    .unwrap();
    assert!(store.describe().contains(&table), "{}", store.describe());
    let out = Call::new("global", "k")
        .run(&*store, || Ok::<_, Error>(1))
        .unwrap();
    assert!(!out.replayed);
}

#[test]
fn async_connections_outlive_the_runtime_that_opened_them() {
    let Some(url) = url() else { return };
    let (store, _t) = fresh(&url, "runtimes");
    for round in 0..3u32 {
        // Each runtime opens async connections on itself, then shuts down, closing them: the
        // next runtime must not be handed a dead one.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let calls = (0..4u32).map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    Call::new("rt", &(round, i))
                        .run_async(&store, async { Ok::<_, Error>(i) })
                        .await
                })
            });
            for call in calls {
                assert!(call.await.unwrap().is_ok());
            }
        });
        drop(rt);
    }
    // And an executor that is not tokio at all.
    let out = park_on(Call::new("rt", "plain").run_async(&store, async { Ok::<_, Error>(9) }));
    assert_eq!(out.unwrap().value, 9);
}

/// A minimal executor: polls on this thread, parks between wake-ups.
fn park_on<F: std::future::Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// Scope and id are text an operator reads with plain SQL; a key with a NUL or a backslash is
/// stored escaped and reads back whole.
#[test]
fn keys_are_readable_text_in_sql() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "text");
    for (id, stored) in [("evt_42", "s6:evt_42"), ("a\0b\\c", "s5:a\\0b\\\\c")] {
        let out = Call::new("billing.charge", id)
            .run(&store, || Ok::<_, Error>(1))
            .unwrap();
        assert!(!out.replayed);
        let rows = psql(
            &url,
            &format!(
                "SELECT scope, id FROM \"{}\" WHERE scope = 'billing.charge' AND id = '{}'",
                t.name,
                stored.replace('\'', "''")
            ),
        )
        .unwrap();
        assert_eq!(rows.len(), 1, "{id:?} is stored as {stored:?}");
        let again = Call::new("billing.charge", id)
            .run(&store, || Ok::<_, Error>(2))
            .unwrap();
        assert!(again.replayed && again.value == 1);
        let view = store
            .inspect(&Key::new("billing.charge", id))
            .unwrap()
            .unwrap();
        assert_eq!(view.key, Key::new("billing.charge", id));
        assert!(
            view.age.is_some_and(|a| a < Duration::from_secs(60)),
            "{view:?}"
        );
    }
}

/// A claim function an earlier build made (its text lacks this build's version) is replaced on
/// connect, so that every instance claims with this build's rules.
#[test]
fn an_earlier_builds_claim_function_is_replaced_on_connect() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "oldfn");
    drop(store);
    psql(
        &url,
        &format!(
            r#"CREATE OR REPLACE FUNCTION "{}_claim"(p_scope text, p_id text, p_fingerprint bytea,
                   p_holder text, p_once boolean, p_lease_us double precision, p_steal bigint,
                   p_seen_fence bigint, p_seen_status text)
               RETURNS bigint LANGUAGE plpgsql AS $f$ BEGIN RETURN NULL; END $f$"#,
            t.name
        ),
    )
    .unwrap();
    let current = format!(
        "SELECT position('rerun claim function' IN prosrc) > 0 FROM pg_proc WHERE proname = '{}_claim'",
        t.name
    );
    assert_eq!(psql(&url, &current).unwrap()[0][0].as_deref(), Some("f"));
    let store = PostgresStore::builder(&url)
        .table(&t.name)
        .connect()
        .unwrap();
    assert_eq!(psql(&url, &current).unwrap()[0][0].as_deref(), Some("t"));
    let out = Call::new("s", "k")
        .run(&store, || Ok::<_, Error>(1u8))
        .unwrap();
    assert!(!out.replayed);
}

/// Fences keep growing when the sequence was set back or lost (a table restored or copied
/// without it): a takeover draws above the record's own fence, and a sequence made again
/// beside a table of records starts above them. Making it again leaves a later build's claim
/// function as it is.
#[test]
fn fences_grow_when_the_sequence_was_set_back_or_lost() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "seqback");
    let fp = Fingerprint::of(&()).unwrap();
    let h = Holder::current();
    let keys: Vec<Key> = (0..5u32).map(|i| Key::new("s", &i)).collect();
    let claims: Vec<_> = keys
        .iter()
        .map(|k| claimed(store.claim(&request(k, &fp, &h, LONG))))
        .collect();
    let top = claims.iter().map(|c| c.fence).max().unwrap();
    psql(
        &url,
        &format!(r#"ALTER SEQUENCE "{}_fence" RESTART 1"#, t.name),
    )
    .unwrap();
    let mut steal = request(&keys[4], &fp, &h, LONG);
    steal.steal = Some(claims[4].fence);
    let taken = claimed(store.claim(&steal));
    assert!(
        taken.fence > claims[4].fence,
        "a takeover drew fence {} after {}",
        taken.fence,
        claims[4].fence
    );
    drop(store);
    // A later build's function (its text names a later version), and no sequence.
    psql(
        &url,
        &format!(
            r#"DO $$ BEGIN EXECUTE regexp_replace(pg_get_functiondef('"{t}_claim"'::regproc),
                   'rerun claim function version [0-9]+', 'rerun claim function version 99'); END $$;
               DROP SEQUENCE "{t}_fence";"#,
            t = t.name
        ),
    )
    .unwrap();
    let store = PostgresStore::builder(&url)
        .table(&t.name)
        .connect()
        .unwrap();
    let later = format!(
        "SELECT position('rerun claim function version 99' IN prosrc) > 0 FROM pg_proc WHERE proname = '{}_claim'",
        t.name
    );
    assert_eq!(psql(&url, &later).unwrap()[0][0].as_deref(), Some("t"));
    let new = claimed(store.claim(&request(&Key::new("s", "new"), &fp, &h, LONG)));
    assert!(
        new.fence > top.max(taken.fence),
        "a new key drew fence {} beside records up to {}",
        new.fence,
        top.max(taken.fence)
    );
}

/// A stricter default isolation (here the URL's; a database's or a role's acts the same) does
/// not turn racing claims into store errors: the store claims at READ COMMITTED, so a racer
/// is told the key is busy, or waits and replays.
#[test]
fn racing_claims_under_a_serializable_default_are_busy_not_errors() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "serial");
    drop(store);
    let sep = if url.contains('?') { '&' } else { '?' };
    let strict = format!("{url}{sep}options=-c%20default_transaction_isolation%3Dserializable");
    let store = PostgresStore::builder(&strict)
        .table(&t.name)
        .connect()
        .unwrap();
    for round in 0..20u32 {
        let errors: Vec<Error> = std::thread::scope(|s| {
            let racers: Vec<_> = (0..16)
                .map(|_| {
                    s.spawn(|| {
                        Call::new("race", &round).run(&store, || {
                            std::thread::sleep(Duration::from_millis(2));
                            Ok::<_, Error>(round)
                        })
                    })
                })
                .collect();
            racers
                .into_iter()
                .filter_map(|r| r.join().unwrap().err())
                .collect()
        });
        for e in errors {
            assert!(matches!(e, Error::InProgress { .. }), "round {round}: {e}");
        }
    }
}

/// An async call cancelled mid-statement (a timeout around it) does not put its connection
/// back with the statement still running: the next call gets another connection and is
/// answered within its own deadline, not stuck behind the abandoned statement.
#[test]
fn a_cancelled_async_call_leaves_no_statement_behind_for_the_next() {
    let Some(url) = url() else { return };
    let table = postgres_common::unique_table("cancel");
    let store = PostgresStore::builder(&url)
        .table(&table)
        .pool_size(1)
        .connect()
        .unwrap();
    let _t = postgres_common::Table {
        url: url.clone(),
        name: table.clone(),
    };
    let fp = Fingerprint::of(&()).unwrap();
    let h = Holder::current();
    let lease = Duration::from_secs(3);
    let a = claimed(store.claim(&request(&Key::new("s", "a"), &fp, &h, lease)));
    let b = claimed(store.claim(&request(&Key::new("s", "b"), &fp, &h, lease)));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (side, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        side.batch_execute(&format!(
            r#"BEGIN; SELECT 1 FROM "{table}" WHERE fence = {} FOR UPDATE"#,
            a.fence
        ))
        .await
        .unwrap();
        // `a`'s completion waits on the row lock, and is given up after 200 ms.
        let cancelled = tokio::time::timeout(
            Duration::from_millis(200),
            AsyncStore::complete_async(&store, &a, b"1", LONG),
        )
        .await;
        assert!(cancelled.is_err(), "{cancelled:?}");
        // `b`'s (a deadline of a third of its lease) is not queued behind it.
        AsyncStore::complete_async(&store, &b, b"2", LONG)
            .await
            .unwrap();
        side.batch_execute("ROLLBACK").await.unwrap();
    });
}

/// Stores of different tables created together in a schema that does not exist yet all
/// connect: creating a table waits for any other being created in the database.
#[test]
fn tables_created_together_in_a_new_schema_all_connect() {
    let Some(url) = url() else { return };
    for round in 0..3 {
        let schema = postgres_common::unique_table(&format!("schema{round}"));
        let dropped = DropSchema(url.clone(), schema.clone());
        let stores: Vec<Result<PostgresStore, Error>> = std::thread::scope(|s| {
            let openers: Vec<_> = (0..6)
                .map(|i| {
                    let (url, schema) = (&url, &schema);
                    s.spawn(move || {
                        PostgresStore::builder(url)
                            .schema(schema)
                            .table(format!("t{i}"))
                            .connect()
                    })
                })
                .collect();
            openers.into_iter().map(|o| o.join().unwrap()).collect()
        });
        for store in stores {
            let store = store.unwrap_or_else(|e| panic!("round {round}: {e}"));
            Call::new("s", "k")
                .run(&store, || Ok::<_, Error>(1u8))
                .unwrap();
        }
        drop(dropped);
    }
}

/// Drops a schema and all it holds when dropped.
struct DropSchema(String, String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        let _ = psql(
            &self.0,
            &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.1),
        );
    }
}

/// A table of schema 1, as rerun 0.1 made it, with `records` completed records of scope `bulk`
/// (ids `n000001`, `n000002`, …) beside one completed and one released record of scope `billing.charge`.
fn schema_1_table(url: &str, table: &str, records: u32) {
    psql(
        url,
        &format!(
            r#"CREATE TABLE "{table}_meta" (name text PRIMARY KEY, value bigint NOT NULL);
               INSERT INTO "{table}_meta" VALUES ('schema_version', 1), ('codec_version', 1);
               CREATE SEQUENCE "{table}_fence" AS bigint;
               SELECT setval('"{table}_fence"', 41);
               CREATE TABLE "{table}" (scope bytea NOT NULL, id bytea NOT NULL, status text NOT NULL,
                   fence bigint NOT NULL, fingerprint bytea NOT NULL, holder text, once boolean NOT NULL,
                   lease_until timestamptz, expires_at timestamptz, result bytea,
                   PRIMARY KEY (scope, id)) WITH (fillfactor = 80);
               CREATE INDEX "{table}_expires" ON "{table}" (expires_at) WHERE status = 'completed';
               INSERT INTO "{table}" VALUES
                 ('billing.charge'::bytea, 's6:evt_41'::bytea, 'completed', 41, '\x{fp}'::bytea, NULL,
                  false, NULL, now() + interval '1 hour', '\x{result}'::bytea),
                 ('billing.charge'::bytea, '\x73343a61006263'::bytea, 'released', 40, '\x{fp}'::bytea, NULL,
                  false, NULL, NULL, NULL);
               INSERT INTO "{table}"
                 SELECT 'bulk'::bytea, convert_to('s7:n' || lpad(i::text, 6, '0'), 'UTF8'), 'completed', 1, '\x{fp}'::bytea,
                        NULL, false, NULL, now() + interval '1 hour', '\x{result}'::bytea
                 FROM generate_series(1, {records}) AS i;"#,
            fp = Fingerprint::EMPTY.to_hex(),
            result = rerun_core::codec::encode(&7u32)
                .unwrap()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        ),
    )
    .unwrap();
}

/// Connects `instances` stores to `table` at once (each on its own thread, with `op_timeout`
/// when given) and asserts every one connected.
///
/// Every other instance names the table with its schema (`public`), the others through
/// `search_path`: both spellings of one table take one migration lock.
fn connect_together(url: &str, table: &str, instances: usize, op_timeout: Option<Duration>) {
    let openers: Vec<_> = (0..instances)
        .map(|i| {
            let (url, table) = (url.to_owned(), table.to_owned());
            std::thread::spawn(move || {
                let builder = PostgresStore::builder(&url).table(&table);
                let builder = match i % 2 {
                    0 => builder,
                    _ => builder.schema("public"),
                };
                match op_timeout {
                    Some(limit) => builder.op_timeout(limit),
                    None => builder,
                }
                .connect()
                .map(|_| ())
            })
        })
        .collect();
    for o in openers {
        o.join().unwrap().unwrap();
    }
}

/// A migration that rewrites many records takes longer than a store call may: it is not cut
/// off by the operation timeout (the server's `statement_timeout` included), and instances
/// starting meanwhile wait for it instead of failing.
#[test]
fn a_long_migration_is_not_cut_off_by_the_operation_timeout() {
    let Some(url) = url() else { return };
    let table = postgres_common::unique_table("v1long");
    let _t = postgres_common::Table {
        url: url.clone(),
        name: table.clone(),
    };
    schema_1_table(&url, &table, 100_000);
    let started = std::time::Instant::now();
    connect_together(&url, &table, 3, Some(Duration::from_millis(20)));
    let rows = psql(
        &url,
        &format!("SELECT count(*) FROM \"{table}\" WHERE scope = 'bulk'"),
    )
    .unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("100000"));
    eprintln!("migrated 100,002 records in {:?}", started.elapsed());
    let store = PostgresStore::builder(&url)
        .table(&table)
        .connect()
        .unwrap();
    let old = Call::new("bulk", "n099999")
        .run(&store, || Ok::<_, Error>(0u32))
        .unwrap();
    assert_eq!((old.value, old.replayed), (7, true));
}

/// A table written by rerun 0.1 (`bytea` keys) is migrated on connect, once, while several
/// instances start together; its records keep working.
#[test]
fn a_table_of_schema_1_is_migrated_on_connect() {
    let Some(url) = url() else { return };
    let table = postgres_common::unique_table("v1");
    let _t = postgres_common::Table {
        url: url.clone(),
        name: table.clone(),
    };
    schema_1_table(&url, &table, 0);
    connect_together(&url, &table, 4, None);
    let rows = psql(
        &url,
        &format!("SELECT value FROM \"{table}_meta\" WHERE name = 'schema_version'"),
    )
    .unwrap();
    let ours = SCHEMA_VERSION.to_string();
    assert_eq!(rows[0][0].as_deref(), Some(ours.as_str()));
    let store = PostgresStore::builder(&url)
        .table(&table)
        .connect()
        .unwrap();
    let old = Call::new("billing.charge", "evt_41")
        .run(&store, || Ok::<_, Error>(0u32))
        .unwrap();
    assert_eq!((old.value, old.replayed, old.fence), (7, true, 41));
    // The key with a NUL ("a\0bc") came through the migration escaped.
    let nul = store
        .inspect(&Key::new("billing.charge", "a\0bc"))
        .unwrap()
        .unwrap();
    assert_eq!(nul.status, Status::Released);
    let fresh = Call::new("billing.charge", "a\0bc")
        .run(&store, || Ok::<_, Error>(1u32))
        .unwrap();
    assert!(!fresh.replayed && fresh.fence > 41);
}

/// A table an earlier build of schema 2 made (the same records, no claim function) gets the
/// function on connect, once, while several instances start together, and keeps its version
/// (so instances of that build go on sharing it); its records keep their states and fences, a
/// claim in progress stays busy for another holder, and a fresh key is claimed.
#[test]
fn a_table_without_the_claim_function_gets_it_on_connect() {
    let Some(url) = url() else { return };
    let (store, t) = fresh(&url, "v2");
    let fp = Fingerprint::of(&()).unwrap();
    let h = Holder::current();
    let done = Call::new("billing.charge", "evt_1")
        .run(&store, || Ok::<_, Error>(7u32))
        .unwrap();
    let open_key = Key::new("billing.charge", "evt_2");
    let open = claimed(store.claim(&request(&open_key, &fp, &h, LONG)));
    drop(store);
    // What an earlier build of schema 2 made: the same table, without the function.
    psql(&url, &format!("DROP FUNCTION \"{}_claim\"", t.name)).unwrap();
    let function = format!(
        "SELECT count(*) FROM pg_proc WHERE proname = '{}_claim'",
        t.name
    );
    assert_eq!(psql(&url, &function).unwrap()[0][0].as_deref(), Some("0"));
    let stores: Vec<PostgresStore> = std::thread::scope(|s| {
        let openers: Vec<_> = (0..4)
            .map(|_| s.spawn(|| PostgresStore::builder(&url).table(&t.name).connect()))
            .collect();
        openers
            .into_iter()
            .map(|o| o.join().unwrap().unwrap())
            .collect()
    });
    let version = psql(
        &url,
        &format!(
            "SELECT value FROM \"{}_meta\" WHERE name = 'schema_version'",
            t.name
        ),
    )
    .unwrap();
    assert_eq!(
        version[0][0].as_deref(),
        Some(SCHEMA_VERSION.to_string().as_str())
    );
    assert_eq!(psql(&url, &function).unwrap()[0][0].as_deref(), Some("1"));
    let again = Call::new("billing.charge", "evt_1")
        .run(&stores[0], || Ok::<_, Error>(0u32))
        .unwrap();
    assert_eq!(
        (again.value, again.replayed, again.fence),
        (7, true, done.fence)
    );
    match stores[1]
        .claim(&request(&open_key, &fp, &Holder::current(), LONG))
        .unwrap()
    {
        ClaimResponse::Busy(b) => assert_eq!(b.fence, open.fence),
        other => panic!("{other:?}"),
    }
    stores[2].complete(&open, b"r", LONG).unwrap();
    let new = Call::new("billing.charge", "evt_3")
        .run(&stores[3], || Ok::<_, Error>(1u32))
        .unwrap();
    assert!(!new.replayed && new.fence > open.fence);
}

/// Filtered scans select through the indexes: a scope prefix and the open states.
#[test]
fn filtered_scans_select_by_scope_prefix_and_state() {
    use rerun_core::store::ScanFilter;
    let Some(url) = url() else { return };
    let (store, _t) = fresh(&url, "filter");
    let h = Holder::current();
    for scope in ["billing.charge", "billing.refund", "billingx", "mail"] {
        for i in 0..3 {
            Call::new(scope, &i)
                .run(&store, || Ok::<_, Error>(i))
                .unwrap();
        }
        let key = Key::new(scope, "open");
        claimed(store.claim(&request(&key, &Fingerprint::EMPTY, &h, LONG)));
    }
    let all = |filter: ScanFilter| {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let page = store.scan_filtered(&filter, cursor.as_deref(), 2).unwrap();
            out.extend(page.records);
            match page.next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        out
    };
    let billing = all(ScanFilter::new().scope_prefix("billing."));
    assert_eq!(billing.len(), 8);
    assert!(billing
        .iter()
        .all(|r| r.key.scope().starts_with("billing.")));
    let open = all(ScanFilter::new()
        .status(Status::InProgress)
        .without_results());
    assert_eq!(open.len(), 4);
    assert!(open
        .iter()
        .all(|r| r.status == Status::InProgress && r.result.is_none()));
    let done = all(ScanFilter::new()
        .scope_prefix("mail")
        .status(Status::Completed));
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|r| r.result.is_some()));
    // Scopes the table keeps escaped (a backslash, a NUL: the store takes any text) are
    // selected by the prefix as written, whatever it holds.
    for scope in ["x\\a", "x\\z", "x]", "s\0a", "s\0b\\", "s"] {
        let key = Key::from_parts(scope, "k");
        claimed(store.claim(&request(&key, &Fingerprint::EMPTY, &h, LONG)));
    }
    let scopes = |prefix: &str| {
        let mut found: Vec<String> = all(ScanFilter::new().scope_prefix(prefix))
            .iter()
            .map(|r| r.key.scope().to_owned())
            .collect();
        found.sort();
        found
    };
    assert_eq!(scopes("x\\"), ["x\\a", "x\\z"]);
    assert_eq!(scopes("x\\a"), ["x\\a"]);
    assert_eq!(scopes("s\0"), ["s\0a", "s\0b\\"]);
    assert_eq!(scopes("s\0b\\"), ["s\0b\\"]);
    assert_eq!(scopes("s\0a\0"), Vec::<String>::new());
}

/// An `op_timeout` past the longest `statement_timeout` the server accepts (`Duration::MAX`, a
/// month) is that longest: the store connects, and sync calls that wait for the one pooled
/// connection run.
#[test]
fn an_op_timeout_past_the_servers_longest_is_its_longest() {
    let Some(url) = url() else { return };
    for timeout in [Duration::MAX, Duration::from_secs(30 * 86_400)] {
        let table = postgres_common::unique_table("longop");
        let _t = postgres_common::Table {
            url: url.clone(),
            name: table.clone(),
        };
        let store = rerun_core::store::postgres::PostgresStore::builder(&url)
            .table(&table)
            .pool_size(1)
            .op_timeout(timeout)
            .connect()
            .unwrap_or_else(|e| panic!("{timeout:?}: {e}"));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for i in 0..10 {
                        let id = (t, i);
                        let out = rerun_core::Call::new("s", &id)
                            .run(&store, || Ok::<_, rerun_core::Error>(t * 100 + i))
                            .unwrap();
                        assert_eq!(out.value, t * 100 + i);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
