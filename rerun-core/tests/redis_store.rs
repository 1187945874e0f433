//! `RedisStore` against a real Redis (`RERUN_TEST_REDIS_URL`): the transition table, fences,
//! expiry in Redis itself, typed errors, sync and async halves, scan.
#![cfg(feature = "redis")]

mod redis_util;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rerun_core::record::{ClaimRequest, ClaimResponse};
use rerun_core::store::redis::{RedisOptions, RedisStore, SCHEMA_VERSION};
use rerun_core::{
    codec, AsyncStore, Call, CorruptKind, Error, Fingerprint, Holder, Key, Status, Store,
};

use redis_util::{cleanup, eventually, eventually_eq, raw, store, unique, url};

fn remote() -> Holder {
    let mut h = Holder::current();
    h.host = "elsewhere.invalid".into();
    h
}

fn claim(
    store: &RedisStore,
    key: &Key,
    fp: &Fingerprint,
    holder: &Holder,
    lease: Duration,
    steal: Option<u64>,
) -> ClaimResponse {
    store
        .claim(&ClaimRequest {
            key,
            fingerprint: fp,
            holder,
            lease,
            once: false,
            steal,
        })
        .expect("claim")
}

fn claimed(resp: ClaimResponse) -> rerun_core::record::Claim {
    match resp {
        ClaimResponse::Claimed(c) => c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn pttl(url: &str, store: &RedisStore, key: &Key) -> i64 {
    redis::cmd("PTTL")
        .arg(store.record_key(key))
        .query(&mut raw(url))
        .expect("PTTL")
}

#[test]
fn claim_or_fetch_follows_the_table() {
    let Some(url) = url() else { return };
    let name = unique("table");
    let store = store(&url, &name);
    let key = Key::new("billing.charge", "ord_1");
    let fp = Fingerprint::of(&("ord_1", 500)).unwrap();
    let other = Fingerprint::of(&("ord_1", 501)).unwrap();
    let h = Holder::current();
    let c = claimed(claim(&store, &key, &fp, &h, Duration::from_secs(30), None));
    assert!(c.abandoned.is_none());
    let view = store.inspect(&key).unwrap().unwrap();
    assert_eq!(
        (view.status, view.fence, view.holder.as_ref()),
        (Status::InProgress, c.fence, Some(&h))
    );
    assert!(view
        .lease_remaining
        .is_some_and(|l| l <= Duration::from_secs(30)));
    // A live holder: busy for the same payload, mismatch for another.
    match claim(&store, &key, &fp, &remote(), Duration::from_secs(30), None) {
        ClaimResponse::Busy(b) => {
            assert_eq!((b.fence, &b.holder), (c.fence, &h));
            assert!(b.lease_remaining > Duration::from_secs(25));
        }
        other => panic!("expected busy, got {other:?}"),
    }
    assert_eq!(
        claim(&store, &key, &other, &h, Duration::from_secs(30), None),
        ClaimResponse::Mismatch
    );
    // In progress: no expiry; an abandoned once attempt must never vanish by itself.
    assert_eq!(pttl(&url, &store, &key), -1);

    let result = codec::encode("receipt").unwrap();
    store
        .complete(&c, &result, Duration::from_secs(60))
        .unwrap();
    match claim(&store, &key, &fp, &h, Duration::from_secs(30), None) {
        ClaimResponse::Replay(r) => assert_eq!((r.fence, r.result), (c.fence, result.clone())),
        other => panic!("expected a replay, got {other:?}"),
    }
    assert_eq!(
        claim(&store, &key, &other, &h, Duration::from_secs(30), None),
        ClaimResponse::Mismatch
    );
    let view = store.inspect(&key).unwrap().unwrap();
    assert_eq!(
        (view.status, view.holder, view.result),
        (Status::Completed, None, Some(result))
    );
    assert!(view
        .expires_in
        .is_some_and(|e| e <= Duration::from_secs(60) && e > Duration::from_secs(50)));
    // Redis itself expires the completed record.
    let ttl = pttl(&url, &store, &key);
    assert!(ttl > 50_000 && ttl <= 60_000, "PTTL {ttl}");
    assert_eq!(store.purge_expired(100).unwrap(), 0);
    // Every fenced operation on a finished claim is refused.
    for r in [
        store.release(&c),
        store.renew(&c, Duration::from_secs(1)),
        store.mark_unknown(&c),
        store.complete(&c, b"x", Duration::from_secs(1)),
    ] {
        assert!(matches!(r, Err(Error::LeaseLost { .. })), "{r:?}");
    }
    cleanup(&url, &name);
}

#[test]
fn steal_and_lease_expiry_take_over_with_a_greater_fence() {
    let Some(url) = url() else { return };
    let name = unique("steal");
    let store = store(&url, &name);
    let key = Key::new("s", "k");
    let fp = Fingerprint::EMPTY;
    let c1 = claimed(claim(
        &store,
        &key,
        &fp,
        &remote(),
        Duration::from_secs(30),
        None,
    ));
    // A steal naming a fence that is not the current one is no proof.
    assert!(matches!(
        claim(
            &store,
            &key,
            &fp,
            &remote(),
            Duration::from_secs(30),
            Some(c1.fence - 1)
        ),
        ClaimResponse::Busy(_)
    ));
    let c2 = claimed(claim(
        &store,
        &key,
        &fp,
        &remote(),
        Duration::from_millis(150),
        Some(c1.fence),
    ));
    assert!(c2.fence > c1.fence);
    let abandoned = c2.abandoned.clone().unwrap();
    assert_eq!(
        (
            abandoned.fence,
            abandoned.holder.map(|h| h.host),
            abandoned.outcome_unknown
        ),
        (c1.fence, Some("elsewhere.invalid".into()), false)
    );
    assert!(matches!(
        store.complete(&c1, b"zombie", Duration::from_secs(5)),
        Err(Error::LeaseLost { .. })
    ));
    // The lease is judged on Redis' clock: after 150 ms it is out and the next claim takes over.
    std::thread::sleep(Duration::from_millis(250));
    let c3 = claimed(claim(
        &store,
        &key,
        &fp,
        &remote(),
        Duration::from_millis(300),
        None,
    ));
    assert!(c3.fence > c2.fence && c3.abandoned.as_ref().map(|a| a.fence) == Some(c2.fence));
    // Renewal is fenced, and extends the lease from the server's now.
    assert!(matches!(
        store.renew(&c2, Duration::from_secs(5)),
        Err(Error::LeaseLost { .. })
    ));
    store.renew(&c3, Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert!(matches!(
        claim(&store, &key, &fp, &remote(), Duration::from_secs(1), None),
        ClaimResponse::Busy(_)
    ));
    cleanup(&url, &name);
}

#[test]
fn fences_grow_across_release_forget_and_expiry() {
    let Some(url) = url() else { return };
    let name = unique("fences");
    let store = store(&url, &name);
    let key = Key::new("s", "k");
    let fp = Fingerprint::EMPTY;
    let h = Holder::current();
    let lease = Duration::from_secs(30);
    let c1 = claimed(claim(&store, &key, &fp, &h, lease, None));
    store.release(&c1).unwrap();
    assert_eq!(
        store.inspect(&key).unwrap().map(|r| r.status),
        Some(Status::Released)
    );
    let kept = pttl(&url, &store, &key);
    assert!(
        kept > 0,
        "a released record expires rather than accumulate: PTTL {kept}"
    );
    let c2 = claimed(claim(&store, &key, &fp, &h, lease, None));
    assert!(c2.fence > c1.fence);
    store
        .complete(&c2, &codec::encode(&1).unwrap(), Duration::from_millis(50))
        .unwrap();
    std::thread::sleep(Duration::from_millis(120));
    let exists: i64 = redis::cmd("EXISTS")
        .arg(store.record_key(&key))
        .query(&mut raw(&url))
        .unwrap();
    assert_eq!(exists, 0, "Redis removed the expired record");
    let c3 = claimed(claim(&store, &key, &fp, &h, lease, None));
    assert!(
        c3.fence > c2.fence,
        "{} after expiry vs {}",
        c3.fence,
        c2.fence
    );
    assert!(store.forget(&key).unwrap());
    assert!(!store.forget(&key).unwrap());
    assert!(store.inspect(&key).unwrap().is_none());
    let c4 = claimed(claim(&store, &key, &fp, &h, lease, None));
    assert!(c4.fence > c3.fence);
    cleanup(&url, &name);
}

#[test]
fn once_claims_go_unknown_and_are_never_forgotten_by_expiry() {
    let Some(url) = url() else { return };
    let name = unique("once");
    let store = store(&url, &name);
    let key = Key::new("mail", "welcome-7");
    let fp = Fingerprint::EMPTY;
    let h = Holder::current();
    let req = ClaimRequest {
        key: &key,
        fingerprint: &fp,
        holder: &h,
        lease: Duration::from_secs(30),
        once: true,
        steal: None,
    };
    let c = claimed(store.claim(&req).unwrap());
    store.mark_unknown(&c).unwrap();
    let view = store.inspect(&key).unwrap().unwrap();
    assert_eq!((view.status, view.once), (Status::Unknown, true));
    assert_eq!(pttl(&url, &store, &key), -1);
    let next = claimed(store.claim(&req).unwrap());
    assert!(next
        .abandoned
        .is_some_and(|a| a.outcome_unknown && a.fence == c.fence));
    // Through the runtime: without reconcile, an unknown outcome is reported, never rerun.
    let again = Call::new("mail", "welcome-7")
        .once()
        .run(&store, || Ok::<_, Error>("sent twice".to_owned()));
    assert!(
        matches!(
            again,
            Err(Error::OutcomeUnknown { .. }) | Err(Error::InProgress { .. })
        ),
        "{again:?}"
    );
    cleanup(&url, &name);
}

#[test]
fn a_newer_schema_is_corrupt_naming_both_versions_and_left_untouched() {
    let Some(url) = url() else { return };
    let name = unique("schema");
    let store = store(&url, &name);
    let key = Key::new("s", "from-the-future");
    let rk = store.record_key(&key);
    let mut conn = raw(&url);
    // A record of a layout this build does not know: its first byte is its format.
    let newer = SCHEMA_VERSION + 1;
    let _: () = redis::cmd("SET")
        .arg(&rk)
        .arg(format!("{newer}sealed and unknown"))
        .query(&mut conn)
        .unwrap();
    let before: Vec<u8> = redis::cmd("GET").arg(&rk).query(&mut conn).unwrap();
    let fp = Fingerprint::EMPTY;
    let h = Holder::current();
    let err = store
        .claim(&ClaimRequest {
            key: &key,
            fingerprint: &fp,
            holder: &h,
            lease: Duration::from_secs(1),
            once: false,
            steal: None,
        })
        .unwrap_err();
    match &err {
        Error::Corrupt {
            kind: CorruptKind::UnknownVersion { found, supported },
            ..
        } => {
            assert_eq!((*found, *supported), (newer, SCHEMA_VERSION));
        }
        other => panic!("expected Corrupt(UnknownVersion), got {other:?}"),
    }
    assert!(
        err.to_string().contains(&format!("version {newer}")),
        "{err}"
    );
    assert!(matches!(store.inspect(&key), Err(Error::Corrupt { .. })));
    let ran = Call::new("s", "from-the-future").run(&store, || Ok::<_, Error>(1));
    assert!(matches!(ran, Err(Error::Corrupt { .. })), "{ran:?}");
    let after: Vec<u8> = redis::cmd("GET").arg(&rk).query(&mut conn).unwrap();
    assert_eq!(before, after);
    // Only an explicit forget lets the key run again.
    assert!(store.forget(&key).unwrap());
    assert_eq!(
        Call::new("s", "from-the-future")
            .run(&store, || Ok::<_, Error>(1))
            .unwrap()
            .value,
        1
    );
    cleanup(&url, &name);
}

/// The claim answers a replay from the record's string before anything else: a completed record
/// damaged in any field (a number, the holder's length, the length itself) must still be found
/// corrupt, never replayed, and left as it is.
#[test]
fn a_damaged_completed_record_is_corrupt_not_replayed() {
    let Some(url) = url() else { return };
    let name = unique("damaged");
    let store = store(&url, &name);
    let mut conn = raw(&url);
    let recorded = Call::new("s", "whole").run(&store, || Ok::<_, Error>(7u32));
    assert!(matches!(recorded, Ok(ref o) if !o.replayed), "{recorded:?}");
    let whole: Vec<u8> = redis::cmd("GET")
        .arg(store.record_key(&Key::new("s", "whole")))
        .query(&mut conn)
        .unwrap();
    assert_eq!(&whole[..2], format!("{SCHEMA_VERSION}c").as_bytes());
    // Byte ranges of the layout (prelude.lua), 0-based: fence 3..19, lease 19..35, expiry
    // 35..51, changed 51..67, holder length 99..103. A `z`, not an `x`: "0x00…" is a number
    // to Lua's `tonumber`.
    let with = |record: &[u8], at: usize, bytes: &[u8]| {
        let mut r = record.to_vec();
        r[at..at + bytes.len()].copy_from_slice(bytes);
        r
    };
    // Each damaged record, written at a key of its own, is found corrupt and left as it is.
    let mut corrupt_and_untouched = |damaged: Vec<(&str, Vec<u8>)>| {
        for (what, bytes) in damaged {
            let rk = store.record_key(&Key::new("s", what));
            let _: () = redis::cmd("SET")
                .arg(&rk)
                .arg(&bytes)
                .query(&mut conn)
                .unwrap();
            let ran = Call::new("s", what).run(&store, || Ok::<_, Error>(8u32));
            assert!(matches!(ran, Err(Error::Corrupt { .. })), "{what}: {ran:?}");
            let after: Vec<u8> = redis::cmd("GET").arg(&rk).query(&mut conn).unwrap();
            assert_eq!(after, bytes, "{what}: the record was changed");
        }
    };
    corrupt_and_untouched(vec![
        ("fence", with(&whole, 5, b"z")),
        ("lease end", with(&whole, 20, b"z")),
        ("expiry", with(&whole, 40, b"z")),
        ("changed", with(&whole, 60, b"z")),
        ("holder length", with(&whole, 101, b"z")),
        ("truncated holder", with(&whole, 99, b"9999")),
        ("short header", whole[..90].to_vec()),
        // A sign the standard parser takes: the scripts read digits alone.
        ("signed fence", with(&whole, 3, b"+")),
        ("signed holder length", with(&whole, 99, b"+")),
    ]);
    // A released record damaged where Lua's `tonumber` would still read a number (a space, a
    // hex prefix, an exponent): the claim must not take it for free and overwrite it.
    let released = Call::new("s", "free").run(&store, || Err::<u32, _>(Error::config("no")));
    assert!(released.is_err());
    let free: Vec<u8> = redis::cmd("GET")
        .arg(store.record_key(&Key::new("s", "free")))
        .query(&mut raw(&url))
        .unwrap();
    assert_eq!(&free[..2], format!("{SCHEMA_VERSION}r").as_bytes());
    corrupt_and_untouched(vec![
        ("space in the fence", with(&free, 3, b" ")),
        ("hex lease end", with(&free, 19, b"0x")),
        ("exponent in the expiry", with(&free, 49, b"e1")),
        ("signed changed", with(&free, 51, b"+")),
        ("space in the holder length", with(&free, 99, b" ")),
    ]);
    // The whole record still replays, and another payload is still a mismatch.
    let again = Call::new("s", "whole").run(&store, || Ok::<_, Error>(9u32));
    assert!(
        matches!(again, Ok(ref o) if o.replayed && o.value == 7),
        "{again:?}"
    );
    let other = Call::new("s", "whole")
        .payload(&1u8)
        .run(&store, || Ok::<_, Error>(9u32));
    assert!(
        matches!(other, Err(Error::PayloadMismatch { .. })),
        "{other:?}"
    );
    cleanup(&url, &name);
}

/// A completion takes out of the in-progress record only what it keeps (the state, the once
/// flag, the fence, the fingerprint) and writes the rest anew: the holder of the record's fence
/// completes it even when a field it replaces is damaged, and the completed record is whole.
/// A damaged fence or state is never its claim.
#[test]
fn a_completion_reads_only_the_fields_it_keeps() {
    let Some(url) = url() else { return };
    let name = unique("completion-reads");
    let store = store(&url, &name);
    let mut conn = raw(&url);
    let fp = Fingerprint::of(&3u8).unwrap();
    let result = codec::encode(&11u32).unwrap();
    // Byte ranges of the layout (prelude.lua), 0-based: state 1, fence 3..19, lease 19..35,
    // changed 51..67, holder length 99..103.
    let cases: [(&str, usize, &[u8], bool); 6] = [
        ("lease end", 20, b"z", true),
        ("changed", 60, b"z", true),
        ("holder length", 101, b"z", true),
        ("holder length past the end", 99, b"9999", true),
        ("fence", 5, b"z", false),
        ("state", 1, b"r", false),
    ];
    for (what, at, bytes, completes) in cases {
        let key = Key::new("s", what);
        let c = claimed(claim(
            &store,
            &key,
            &fp,
            &Holder::current(),
            Duration::from_secs(30),
            None,
        ));
        let rk = store.record_key(&key);
        let mut record: Vec<u8> = redis::cmd("GET").arg(&rk).query(&mut conn).unwrap();
        assert_eq!(&record[..2], format!("{SCHEMA_VERSION}p").as_bytes());
        record[at..at + bytes.len()].copy_from_slice(bytes);
        let _: () = redis::cmd("SET")
            .arg(&rk)
            .arg(&record)
            .query(&mut conn)
            .unwrap();
        let done = store.complete(&c, &result, Duration::from_secs(60));
        if completes {
            assert!(done.is_ok(), "{what}: {done:?}");
            let view = store.inspect(&key).unwrap().expect("the record");
            assert_eq!(
                (view.status, view.fence, view.fingerprint, view.once),
                (Status::Completed, c.fence, fp, false),
                "{what}"
            );
            let replay = Call::new("s", what)
                .payload(&3u8)
                .run(&store, || Ok::<_, Error>(12u32))
                .unwrap();
            assert!(replay.replayed && replay.value == 11, "{what}: {replay:?}");
        } else {
            assert!(
                matches!(done, Err(Error::LeaseLost { .. })),
                "{what}: {done:?}"
            );
            let after: Vec<u8> = redis::cmd("GET").arg(&rk).query(&mut conn).unwrap();
            assert_eq!(after, record, "{what}: the record was changed");
        }
    }
    cleanup(&url, &name);
}

/// The claim of a key with no record and a completion of the caller's own claim write their
/// records without the shared `build` (claim.lua, complete.lua): the bytes are the layout's,
/// field by field, and a completion by the full path (a fence not sent as the record stores
/// it) writes the same record as the short one.
#[test]
fn the_short_paths_write_the_layout_of_the_full_ones() {
    let Some(url) = url() else { return };
    let name = unique("short-paths");
    let store = store(&url, &name);
    let mut conn = raw(&url);
    let fp = Fingerprint::of(&"short").unwrap();
    let holder = Holder::current();
    let lease = Duration::from_millis(30_000);
    let field = |r: &[u8], at: usize| -> u64 {
        std::str::from_utf8(&r[at..at + 16])
            .unwrap()
            .parse()
            .unwrap()
    };
    let mut completed = Vec::new();
    for (i, short) in [(0, true), (1, false)] {
        let key = Key::new("s", &format!("k{i}"));
        let rk = store.record_key(&key);
        let c = claimed(claim(&store, &key, &fp, &holder, lease, None));
        let claimed: Vec<u8> = redis::cmd("GET").arg(&rk).query(&mut conn).unwrap();
        let encoded = holder.encode();
        let mut expected = format!("{SCHEMA_VERSION}p0{:016}", c.fence).into_bytes();
        assert_eq!(
            &claimed[..19],
            &expected[..],
            "the state, once flag and fence"
        );
        assert_eq!(field(&claimed, 19), c.fence + 30_000_000, "the lease end");
        assert_eq!(&claimed[35..51], b"0000000000000000", "no expiry");
        assert_eq!(
            field(&claimed, 51),
            c.fence,
            "changed: the clock the fence is"
        );
        expected = claimed[..67].to_vec();
        expected.extend_from_slice(&fp.0);
        expected.extend_from_slice(format!("{:04}{encoded}", encoded.len()).as_bytes());
        assert_eq!(claimed, expected, "the claimed record");
        let result = codec::encode(&"done").unwrap();
        if short {
            store
                .complete(&c, &result, Duration::from_secs(60))
                .unwrap();
        } else {
            // The fence with one more leading zero: the same number to `held`, other bytes
            // than the record's field to the short path's comparison.
            let fence = format!("0{:016}", c.fence);
            let reply: String = match store.function_name("complete") {
                Some(function) => redis::cmd("FCALL")
                    .arg(function)
                    .arg(1)
                    .arg(&rk)
                    .arg(&fence)
                    .arg(&result)
                    .arg(60_000u64)
                    .arg("0000000060000000")
                    .query(&mut conn)
                    .unwrap(),
                None => redis::Script::new(store.script_source("complete").unwrap())
                    .key(&rk)
                    .arg(&fence)
                    .arg(&result)
                    .arg(60_000u64)
                    .arg("0000000060000000")
                    .invoke(&mut conn)
                    .unwrap(),
            };
            assert_eq!(reply, "ok");
        }
        let done: Vec<u8> = redis::cmd("GET").arg(&rk).query(&mut conn).unwrap();
        // A completion reads no clock: its time to live where the expiry would be, the marker
        // where the instant it changed would be, and Redis' expiry of the key.
        assert_eq!(field(&done, 19), 0, "a completed record holds no lease");
        assert_eq!(field(&done, 35), 60_000_000, "the time to live");
        assert_eq!(
            &done[51..67],
            b"9999999999999999",
            "the marker of a time to live"
        );
        let pttl = pttl(&url, &store, &key);
        assert!(pttl > 58_000 && pttl <= 60_000, "{pttl}");
        completed.push(String::from_utf8_lossy(&done).replacen(
            &format!("{:016}", c.fence),
            "FENCE",
            1,
        ));
    }
    // Apart from the fence, the two records are the same bytes.
    assert_eq!(completed[0], completed[1]);
    assert!(completed[0].starts_with(&format!("{SCHEMA_VERSION}c0FENCE")));
    cleanup(&url, &name);
}

/// A completion reads no clock: its record holds its time to live, and Redis' expiry of the
/// key says when it expires and how long ago it completed. A completed record that holds its
/// expiry as an instant (written by an earlier build) is read as before; a time to live below
/// a millisecond keeps nothing, and the longest one is kept.
#[test]
fn a_completed_record_s_times_come_from_the_key_s_expiry() {
    let Some(url) = url() else { return };
    let name = unique("completed-times");
    let store = store(&url, &name);
    let mut conn = raw(&url);
    let fp = Fingerprint::of(&"times").unwrap();
    let h = Holder::current();
    let lease = Duration::from_secs(30);
    let result = codec::encode(&"done").unwrap();

    let key = Key::new("s", "relative");
    let c = claimed(claim(&store, &key, &fp, &h, lease, None));
    store
        .complete(&c, &result, Duration::from_secs(60))
        .unwrap();
    std::thread::sleep(Duration::from_millis(60));
    let view = store.inspect(&key).unwrap().unwrap();
    let (left, age) = (view.expires_in.unwrap(), view.age.unwrap());
    assert!(
        left > Duration::from_secs(55) && left < Duration::from_millis(59_950),
        "{left:?}"
    );
    assert!(
        age >= Duration::from_millis(50) && age < Duration::from_secs(5),
        "{age:?}"
    );
    // The two add up to the time to live, to Redis' millisecond.
    let sum = left + age;
    assert!(
        sum <= Duration::from_secs(60) && sum > Duration::from_millis(59_990),
        "{sum:?}"
    );

    // The same record with its expiry as an instant and when it changed, as an earlier build
    // wrote it, under a PXAT at that instant.
    let rk = store.record_key(&key);
    let mut earlier: Vec<u8> = redis::cmd("GET").arg(&rk).query(&mut conn).unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let now = secs * 1_000_000 + micros;
    let (expires_ms, changed) = (now / 1000 + 30_000, now - 5_000_000);
    earlier[35..67].copy_from_slice(format!("{:016}{changed:016}", expires_ms * 1000).as_bytes());
    let _: () = redis::cmd("SET")
        .arg(&rk)
        .arg(&earlier)
        .arg("PXAT")
        .arg(expires_ms)
        .query(&mut conn)
        .unwrap();
    let view = store.inspect(&key).unwrap().unwrap();
    let (left, age) = (view.expires_in.unwrap(), view.age.unwrap());
    assert!(
        left > Duration::from_secs(25) && left <= Duration::from_secs(30),
        "{left:?}"
    );
    assert!(
        age >= Duration::from_secs(5) && age < Duration::from_secs(10),
        "{age:?}"
    );
    match claim(&store, &key, &fp, &h, lease, None) {
        ClaimResponse::Replay(r) => assert_eq!((r.fence, r.result), (c.fence, result.clone())),
        other => panic!("expected a replay, got {other:?}"),
    }

    for (i, ttl) in [Duration::ZERO, Duration::from_micros(999)]
        .into_iter()
        .enumerate()
    {
        let key = Key::new("s", &format!("short{i}"));
        let c = claimed(claim(&store, &key, &fp, &h, lease, None));
        store.complete(&c, &result, ttl).unwrap();
        assert!(store.inspect(&key).unwrap().is_none(), "{ttl:?}");
        let again = claimed(claim(&store, &key, &fp, &h, lease, None));
        assert!(again.fence > c.fence, "{ttl:?}");
    }

    let key = Key::new("s", "longest");
    let c = claimed(claim(&store, &key, &fp, &h, lease, None));
    store.complete(&c, &result, Duration::MAX).unwrap();
    let view = store.inspect(&key).unwrap().unwrap();
    let left = view.expires_in.unwrap();
    let century = Duration::from_secs(100 * 365 * 24 * 60 * 60);
    assert_eq!(view.status, Status::Completed);
    assert!(
        left <= century && left > century - Duration::from_secs(5),
        "{left:?}"
    );
    cleanup(&url, &name);
}

#[test]
fn another_type_at_the_key_is_corrupt() {
    let Some(url) = url() else { return };
    let name = unique("wrongtype");
    let store = store(&url, &name);
    let key = Key::new("s", "k");
    let _: () = redis::cmd("SET")
        .arg(store.record_key(&key))
        .arg("not a record")
        .query(&mut raw(&url))
        .unwrap();
    let ran = Call::new("s", "k").run(&store, || Ok::<_, Error>(1));
    assert!(matches!(ran, Err(Error::Corrupt { .. })), "{ran:?}");
    assert!(matches!(store.inspect(&key), Err(Error::Corrupt { .. })));
    assert!(store.forget(&key).unwrap());
    assert!(Call::new("s", "k")
        .run(&store, || Ok::<_, Error>(1))
        .is_ok());
    cleanup(&url, &name);
}

/// Redis keeps no index of states, so a scan (a recovery's included) reads every record of its
/// scopes: one that cannot be read is named in the page and read past, and a recovery still
/// releases the stale claim beside it (it failed as a whole before).
#[test]
fn a_scan_and_a_recovery_read_past_a_record_that_cannot_be_read() {
    let Some(url) = url() else { return };
    let name = unique("scanpast");
    let store = store(&url, &name);
    for k in ["a", "b"] {
        Call::new("s", k).run(&store, || Ok::<_, Error>(1)).unwrap();
    }
    let bad = Key::new("s", "bad");
    let _: () = redis::cmd("SET")
        .arg(store.record_key(&bad))
        .arg("not a record")
        .query(&mut raw(&url))
        .unwrap();
    // A name under the prefix that is not UTF-8: rerun never writes one, something else did.
    let mut not_utf8 = store.record_key(&Key::new("s", "zz")).into_bytes();
    not_utf8.insert(not_utf8.len() - 1, 0xff);
    let _: () = redis::cmd("SET")
        .arg(&not_utf8)
        .arg("not a record")
        .query(&mut raw(&url))
        .unwrap();
    // A name that only resembles a record's: `%3A` where rerun writes `:`.
    let resembling = store
        .record_key(&Key::new("s", "yy:1"))
        .replace("yy:1", "yy%3A1");
    let _: () = redis::cmd("SET")
        .arg(&resembling)
        .arg("not a record")
        .query(&mut raw(&url))
        .unwrap();
    let stuck = Key::new("s", "stuck");
    let fp = Fingerprint::of(&()).unwrap();
    claimed(claim(
        &store,
        &stuck,
        &fp,
        &remote(),
        Duration::from_millis(200),
        None,
    ));
    // A set: SCAN may return a key twice.
    let (mut records, mut unreadable, mut cursor) = (BTreeSet::new(), BTreeMap::new(), None);
    loop {
        let page = store.scan(cursor.as_deref(), 1).unwrap();
        records.extend(page.records.into_iter().map(|r| r.key.readable_id()));
        unreadable.extend(page.unreadable.into_iter().map(|u| (u.key, u.kind)));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(
        records,
        BTreeSet::from(["a".into(), "b".into(), "stuck".into()])
    );
    assert_eq!(unreadable.len(), 3, "{unreadable:?}");
    // A damaged record, under its key; the two foreign names, each named whole, with why.
    assert!(
        matches!(unreadable.get(&bad), Some(CorruptKind::Record(_))),
        "{unreadable:?}"
    );
    let foreign = |name: &str, why: &str| {
        matches!(
            unreadable.get(&Key::from_parts("s", name)),
            Some(CorruptKind::ForeignKey(m)) if m.contains(why)
        )
    };
    assert!(
        foreign(&resembling, "escapes a character"),
        "{unreadable:?}"
    );
    assert!(
        foreign(&String::from_utf8_lossy(&not_utf8), "is not UTF-8"),
        "{unreadable:?}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let done = rerun_core::recover(&store).unwrap();
    assert_eq!(done.released, 1, "{done}");
    assert!(done.unreadable >= 1, "{done}");
    assert!(
        done.to_string().contains(" unreadable records left"),
        "{done}"
    );
    let after = store.inspect(&stuck).unwrap().map(|r| r.status);
    assert!(after.is_none_or(|s| s == Status::Released), "{after:?}");
    cleanup(&url, &name);
}

#[test]
fn too_large_is_a_typed_error_before_anything_is_written() {
    let Some(url) = url() else { return };
    let name = unique("large");
    let store = RedisStore::connect_with(
        &url,
        RedisOptions::new()
            .prefix(format!("{name}:"))
            .max_value_bytes(1024)
            // A sweep that ended after the cleanup would leave its marker behind.
            .upgrade_sweep(false),
    )
    .unwrap();
    assert_eq!(store.max_value_bytes(), 1024);
    let big_key = Key::new("s", &"k".repeat(2000));
    let fp = Fingerprint::EMPTY;
    let h = Holder::current();
    let err = store
        .claim(&ClaimRequest {
            key: &big_key,
            fingerprint: &fp,
            holder: &h,
            lease: Duration::from_secs(1),
            once: false,
            steal: None,
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Codec {
                what: "the key",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    let exists: i64 = redis::cmd("EXISTS")
        .arg(store.record_key(&big_key))
        .query(&mut raw(&url))
        .unwrap();
    assert_eq!(exists, 0);
    // A record keeps its holder's length in 4 digits: a holder made by hand with a longer
    // encoding is refused before anything is sent, sync and async; one at the limit is kept
    // whole.
    let mut long = Holder::current();
    long.host = String::new().into();
    let rest = long.encode().len();
    long.host = "h".repeat(10_000 - rest).into();
    assert_eq!(long.encode().len(), 10_000);
    let key = Key::new("s", "long-holder");
    let req = ClaimRequest {
        key: &key,
        fingerprint: &fp,
        holder: &long,
        lease: Duration::from_secs(1),
        once: false,
        steal: None,
    };
    for err in [
        store.claim(&req).unwrap_err(),
        block_on(store.claim_async(&req)).unwrap_err(),
    ] {
        assert!(
            matches!(
                err,
                Error::Codec {
                    what: "the holder",
                    ..
                }
            ),
            "{err:?}"
        );
    }
    assert_eq!(store.inspect(&key).unwrap().map(|r| r.status), None);
    let mut at_limit = long.clone();
    at_limit.host = "h".repeat(9_999 - rest).into();
    let req = ClaimRequest {
        holder: &at_limit,
        ..req
    };
    assert!(matches!(store.claim(&req), Ok(ClaimResponse::Claimed(_))));
    let kept = store.inspect(&key).unwrap().and_then(|r| r.holder);
    assert_eq!(kept.map(|h| h.host.len()), Some(9_999 - rest));
    // A result over the limit: Codec, the claim given back, nothing recorded.
    let r = Call::new("s", "big-result").run(&store, || Ok::<_, Error>("x".repeat(4096)));
    assert!(
        matches!(
            r,
            Err(Error::Codec {
                what: "the result",
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(
        store
            .inspect(&Key::new("s", "big-result"))
            .unwrap()
            .map(|r| r.status),
        Some(Status::Released)
    );
    cleanup(&url, &name);
}

#[test]
fn connect_errors_are_typed_and_hide_the_password() {
    // Nothing listens on port 1: no server needed.
    let err = RedisStore::connect("redis://:hunter2@127.0.0.1:1/0").unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, Error::Store { .. }) && err.is_retryable(),
        "{err:?}"
    );
    assert!(
        text.contains("redis://:***@127.0.0.1:1/0") && !text.contains("hunter2"),
        "{text}"
    );
    let err = RedisStore::connect("redis://:hunter2@[nonsense").unwrap_err();
    assert!(
        matches!(err, Error::Config { .. }) && !err.to_string().contains("hunter2"),
        "{err:?}"
    );
    let err = RedisStore::connect_with("redis://127.0.0.1:1", RedisOptions::new().prefix("a{b}:"))
        .unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
    // `CLIENT SETNAME` takes printable ASCII without spaces: anything else is refused before
    // connecting, not by every connection's naming.
    for name in ["", "a b", "worker-\u{e9}", "a\u{1}b", "tab\tname"] {
        let err =
            RedisStore::connect_with("redis://127.0.0.1:1", RedisOptions::new().client_name(name))
                .unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{name:?}: {err:?}");
    }
    let err = rerun_core::open_url("redis://:hunter2@127.0.0.1:1")
        .err()
        .unwrap();
    assert!(!err.to_string().contains("hunter2"));
}

#[test]
fn the_global_store_url_selects_redis_with_its_prefix() {
    let Some(url) = url() else { return };
    let name = unique("global");
    let sep = if url.contains('?') { '&' } else { '?' };
    let store = rerun_core::open_url(&format!("{url}{sep}prefix={name}:")).unwrap();
    assert!(
        store.describe().contains(&format!("{name}:")),
        "{}",
        store.describe()
    );
    assert_eq!(
        Call::new("s", "k")
            .run(&*store, || Ok::<_, Error>(3))
            .unwrap()
            .value,
        3
    );
    // The record, and perhaps the marker of the upgrade sweep this store started.
    let marker = format!("{name}:rerun-layout");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{name}:*"))
        .query::<Vec<String>>(&mut raw(&url))
        .unwrap()
        .into_iter()
        .filter(|k| *k != marker)
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        keys[0].starts_with(&format!("{name}:{{s:")) && keys[0].ends_with('}'),
        "{keys:?}"
    );
    // The store's sweep marks its prefix (and is done with it before the keys are deleted).
    eventually(&format!("no {marker}"), || {
        redis::cmd("EXISTS")
            .arg(&marker)
            .query::<bool>(&mut raw(&url))
            .unwrap()
    });
    cleanup(&url, &name);
}

#[test]
fn scan_pages_through_every_record_and_skips_tombstones() {
    let Some(url) = url() else { return };
    let name = unique("scan");
    let store = store(&url, &name);
    let mut expected = BTreeSet::new();
    for i in 0..25 {
        let key = Key::new("scan", &i);
        Call::new("scan", &i)
            .run(&store, || Ok::<_, Error>(i))
            .unwrap();
        expected.insert(key);
    }
    let h = Holder::current();
    let fp = Fingerprint::EMPTY;
    let live = Key::new("scan.live", "x");
    claimed(claim(&store, &live, &fp, &h, Duration::from_secs(30), None));
    expected.insert(live);
    let gone = Key::new("scan", &0);
    store.forget(&gone).unwrap();
    expected.remove(&gone);
    let mut seen = BTreeSet::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = store.scan(cursor.as_deref(), 7).unwrap();
        pages += 1;
        seen.extend(page.records.into_iter().map(|r| r.key));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(pages < 1000, "scan does not end");
    }
    assert_eq!(seen, expected);
    assert!(matches!(
        store.scan(Some("not a cursor"), 5),
        Err(Error::Config { .. })
    ));
    cleanup(&url, &name);
}

/// The bytes of database 0's table of keys (`MEMORY STATS`, `overhead.hashtable.main`): its
/// slots, with those of a table it is being moved into, and its entries; 0 with no keys.
fn key_table_bytes(conn: &mut redis::Connection) -> i64 {
    let stats: Vec<redis::Value> = redis::cmd("MEMORY").arg("STATS").query(conn).unwrap();
    let field = |fields: &[redis::Value], name: &str| {
        fields.chunks(2).find_map(|pair| match pair {
            [k, v]
                if redis::from_redis_value::<String>(k.clone()).ok().as_deref() == Some(name) =>
            {
                Some(v.clone())
            }
            _ => None,
        })
    };
    match field(&stats, "db.0") {
        None => 0,
        Some(redis::Value::Array(db)) => field(&db, "overhead.hashtable.main")
            .and_then(|v| redis::from_redis_value::<i64>(v).ok())
            .unwrap_or_else(|| panic!("no overhead.hashtable.main in {db:?}")),
        Some(other) => panic!("MEMORY STATS' db.0 is {other:?}"),
    }
}

/// A database shared with many other keys (a cache beside the records): `SCAN` reads the whole
/// database, and a page short of records reads more of it per step, so a scan finds every
/// record in about one step per thousand keys, not one per page's worth of keys; where the
/// records are most of the keys, a page stays near its size. On a server of the test's own,
/// whose `SCAN` count is this scan's alone.
#[test]
fn a_scan_through_a_database_of_other_keys_reads_it_in_large_steps() {
    let Some(_) = url() else { return };
    let Some(server) = redis_util::PrivateRedis::start() else {
        return;
    };
    let other_keys = 100_000;
    // `command` on each of the other keys (`cache:1` ..), in one script.
    let on_other_keys = |command: &[&str]| {
        let _: () = redis::cmd("EVAL")
            .arg("for i = 1, tonumber(ARGV[1]) do redis.call(ARGV[2], 'cache:' .. i, unpack(ARGV, 3)) end")
            .arg(0)
            .arg(other_keys)
            .arg(command)
            .query(&mut raw(&server.url))
            .unwrap();
    };
    on_other_keys(&["SET", "x"]);
    let store = store(&server.url, "records");
    let expected: BTreeSet<Key> = (0..30u32)
        .map(|i| {
            Call::new("scan", &i)
                .run(&store, || Ok::<_, Error>(i))
                .unwrap();
            Key::new("scan", &i)
        })
        .collect();
    let pages_of = |limit: usize| {
        let mut pages = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = store.scan(cursor.as_deref(), limit).unwrap();
            let keys: Vec<Key> = page.records.into_iter().map(|r| r.key).collect();
            let once: BTreeSet<&Key> = keys.iter().collect();
            assert_eq!(once.len(), keys.len(), "a record twice in one page");
            pages.push(keys);
            match page.next {
                Some(next) => cursor = Some(next),
                None => return pages,
            }
            assert!(pages.len() < 100_000, "scan does not end");
        }
    };
    let before = server.calls("scan");
    let pages = pages_of(10);
    let steps = server.calls("scan") - before;
    assert_eq!(
        pages.iter().flatten().cloned().collect::<BTreeSet<_>>(),
        expected
    );
    // About 100 steps of 1,024 keys, and a few short ones at the start of each page; a step
    // of 10 keys, as a page of 10 records once read, makes 10,000.
    assert!(
        steps < 400,
        "{steps} SCAN steps for {other_keys} other keys"
    );

    // Only the records left: a page's first step reads as many keys as it wants records.
    on_other_keys(&["DEL"]);
    // After the deletes Redis shrinks its table of keys in the background (`serverCron`, ten
    // times a second), moving the keys over step by step. A `SCAN` step in the middle of that
    // move reads a bucket of the small table with every bucket of the large one that maps to it
    // (thousands here) and returns all 30 records at once, so the pages are read once the
    // table holds only the records.
    let mut conn = raw(&server.url);
    eventually("the table of keys shrunk to the records", || {
        key_table_bytes(&mut conn) < 64 * 1024
    });
    let pages = pages_of(10);
    assert_eq!(
        pages.iter().flatten().cloned().collect::<BTreeSet<_>>(),
        expected
    );
    assert!(
        pages.iter().all(|p| p.len() <= 20),
        "{:?}",
        pages.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_and_call_inside_a_runtime_sync_and_async() {
    let Some(url) = url() else { return };
    let name = unique("in-runtime");
    // Connecting is a plain function: it works inside a runtime too.
    let store = store(&url, &name);
    let first = Call::new("s", "k")
        .run_async(&store, async { Ok::<_, Error>(5) })
        .await
        .unwrap();
    let again = Call::new("s", "k")
        .run_async(&store, async { Ok::<_, Error>(6) })
        .await
        .unwrap();
    assert_eq!(
        (first.value, first.replayed, again.value, again.replayed),
        (5, false, 5, true)
    );
    // The sync half, from a blocking thread of the same runtime.
    let s2 = store.clone();
    let sync =
        tokio::task::spawn_blocking(move || Call::new("s", "k").run(&s2, || Ok::<_, Error>(7)))
            .await
            .unwrap()
            .unwrap();
    assert_eq!((sync.value, sync.replayed), (5, true));
    cleanup(&url, &name);
}

#[tokio::test(flavor = "current_thread")]
async fn connect_inside_a_current_thread_runtime() {
    let Some(url) = url() else { return };
    let name = unique("current-thread");
    let store = store(&url, &name);
    let out = Call::new("s", "k")
        .run_async(&store, async { Ok::<_, Error>("x".to_owned()) })
        .await
        .unwrap();
    assert!(!out.replayed);
    cleanup(&url, &name);
}

#[test]
fn the_async_half_outlives_the_runtime_it_started_in() {
    let Some(url) = url() else { return };
    let name = unique("runtimes");
    let store = store(&url, &name);
    for i in 0..3 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let out = rt
            .block_on(Call::new("s", "k").run_async(&store, async { Ok::<_, Error>(1) }))
            .unwrap_or_else(|e| panic!("runtime {i}: {e}"));
        assert_eq!((out.value, out.replayed), (1, i > 0));
        drop(rt);
    }
    // Outside any tokio runtime the async half falls back to the sync one.
    let out = block_on(store.claim_async(&ClaimRequest {
        key: &Key::new("s", "k"),
        fingerprint: &Fingerprint::EMPTY,
        holder: &Holder::current(),
        lease: Duration::from_secs(1),
        once: false,
        steal: None,
    }));
    assert!(matches!(out, Ok(ClaimResponse::Replay(_))), "{out:?}");
    cleanup(&url, &name);
}

/// The async half sets no timeouts of the driver's (redis-rs sets 500 ms on every request and
/// 1 s on connecting unless told not to): a runtime without a timer can call it, and a reply
/// slower than the driver's default but within the store's own limit is waited for.
#[test]
fn the_async_half_needs_no_timer_and_keeps_the_store_s_limit() {
    let Some(url) = url() else { return };
    let name = unique("no-timer");
    let store = store(&url, &name);
    let timerless = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let out = timerless
        .block_on(Call::new("s", "timerless").run_async(&store, async { Ok::<_, Error>(1) }));
    assert!(matches!(&out, Ok(o) if o.value == 1), "{out:?}");

    let proxy =
        rerun_core::testing::proxy::Proxy::start(&redis_util::upstream(&url)).expect("a proxy");
    let slow = RedisStore::connect_with(
        &redis_util::via(proxy.addr(), &url),
        RedisOptions::new()
            .prefix(format!("{name}:"))
            .client_name(&name)
            .upgrade_sweep(false)
            .response_timeout(Duration::from_secs(5)),
    )
    .expect("a store behind the proxy");
    proxy.delay_replies(Duration::from_millis(800));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (i, id) in ["slow-fresh", "slow-fresh"].into_iter().enumerate() {
        let out = rt.block_on(Call::new("s", id).run_async(&slow, async { Ok::<_, Error>(2) }));
        assert!(
            matches!(&out, Ok(o) if o.value == 2 && o.replayed == (i > 0)),
            "call {i} with replies 800 ms late, within a limit of 5 s: {out:?}"
        );
    }
    proxy.delay_replies(Duration::ZERO);
    cleanup(&url, &name);
}

/// The server's settings read the same over RESP3 (`?protocol=resp3`), where `CONFIG GET`
/// answers with a map rather than a flat array.
#[test]
fn the_server_s_settings_read_the_same_over_resp3() {
    let Some(url) = url() else { return };
    let name = unique("resp3");
    let plain = store(&url, &name);
    let sep = if url.contains('?') { '&' } else { '?' };
    let resp3 = RedisStore::connect_with(
        &format!("{url}{sep}protocol=resp3"),
        RedisOptions::new()
            .prefix(format!("{name}:"))
            .client_name(&name)
            .upgrade_sweep(false),
    )
    .expect("a store over RESP3");
    assert_ne!(
        resp3.persistence(),
        &rerun_core::store::redis::Persistence::Unknown
    );
    assert_eq!(resp3.persistence(), plain.persistence());
    assert_eq!(resp3.eviction_policy(), plain.eviction_policy());
    cleanup(&url, &name);
}

/// A minimal executor that is not tokio.
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
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
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// A record written by rerun 0.1 (a hash) is upgraded to one string when first met, with the
/// time it had left, and keeps working: replayed, fenced, forgotten.
#[test]
fn records_of_rerun_0_1_are_upgraded_in_place() {
    let Some(url) = url() else { return };
    let name = unique("upgrade");
    let store = store(&url, &name);
    let mut conn = raw(&url);
    let result = codec::encode(&"the 0.1 receipt").unwrap();
    let done = Key::new("s", "done");
    let _: () = redis::cmd("HSET")
        .arg(store.record_key(&done))
        .arg("v")
        .arg(1)
        .arg("st")
        .arg("completed")
        .arg("fe")
        .arg(41)
        .arg("fp")
        .arg(&Fingerprint::EMPTY.0[..])
        .arg("on")
        .arg("0")
        .arg("ex")
        .arg(u64::MAX / 4)
        .arg("re")
        .arg(&result[..])
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("PEXPIRE")
        .arg(store.record_key(&done))
        .arg(60_000)
        .query(&mut conn)
        .unwrap();
    let out = Call::new("s", "done")
        .run(&store, || Ok::<_, Error>("new".to_owned()))
        .unwrap();
    assert_eq!(
        (out.value.as_str(), out.replayed, out.fence),
        ("the 0.1 receipt", true, 41)
    );
    let kind: String = redis::cmd("TYPE")
        .arg(store.record_key(&done))
        .query(&mut conn)
        .unwrap();
    assert_eq!(kind, "string");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(store.record_key(&done))
        .query(&mut conn)
        .unwrap();
    assert!(ttl > 50_000 && ttl <= 60_000, "{ttl}");
    // An in-progress 0.1 claim of a host that does not exist: taken over after its lease.
    let held = Key::new("s", "held");
    let _: () = redis::cmd("HSET")
        .arg(store.record_key(&held))
        .arg("v")
        .arg(1)
        .arg("st")
        .arg("in_progress")
        .arg("fe")
        .arg(7)
        .arg("fp")
        .arg(&Fingerprint::EMPTY.0[..])
        .arg("ho")
        .arg("elsewhere\tboot\t1\t1\t1")
        .arg("on")
        .arg("0")
        .arg("lu")
        .arg(1)
        .query(&mut conn)
        .unwrap();
    let view = store.inspect(&held).unwrap().unwrap();
    assert_eq!((view.status, view.fence), (Status::InProgress, 7));
    let taken = Call::new("s", "held")
        .run(&store, || Ok::<_, Error>(2))
        .unwrap();
    assert!(!taken.replayed && taken.fence > 7);
    cleanup(&url, &name);
}

/// Writes at `name` a released record as rerun 0.1 kept it: a hash.
fn plant_released_0_1(conn: &mut redis::Connection, name: &str) {
    let _: () = redis::cmd("HSET")
        .arg(name)
        .arg("v")
        .arg(1)
        .arg("st")
        .arg("released")
        .arg("fe")
        .arg(5)
        .query(conn)
        .unwrap();
}

/// A new store sweeps its prefix for records of rerun 0.1 in the background, on a connection of
/// its own, so they are upgraded without a call of every key; with the sweep turned off they are
/// left for the first call that meets them.
#[test]
fn a_new_store_sweeps_records_of_rerun_0_1() {
    let Some(url) = url() else { return };
    let name = unique("sweep");
    let planted = store(&url, &name);
    let mut conn = raw(&url);
    let keys: Vec<String> = (0..3)
        .map(|i| planted.record_key(&Key::new("s", &format!("k{i}"))))
        .collect();
    for k in &keys {
        plant_released_0_1(&mut conn, k);
    }
    // Hashes someone else put under the prefix, named as rerun never names a record: the sweep
    // leaves them as they are, and one whose name is not UTF-8 does not stop it.
    let mut not_utf8 = planted.record_key(&Key::new("s", "zz")).into_bytes();
    not_utf8.insert(not_utf8.len() - 1, 0xff);
    let resembling = planted
        .record_key(&Key::new("s", "yy:1"))
        .replace("yy:1", "yy%3A1");
    for foreign in [not_utf8.clone(), resembling.clone().into_bytes()] {
        let _: () = redis::cmd("HSET")
            .arg(&foreign)
            .arg("v")
            .arg(1)
            .query(&mut conn)
            .unwrap();
    }
    let foreign_kinds = |conn: &mut redis::Connection| -> Vec<String> {
        [not_utf8.as_slice(), resembling.as_bytes()]
            .iter()
            .map(|k| redis::cmd("TYPE").arg(k).query(conn).unwrap())
            .collect()
    };
    let kinds = |conn: &mut redis::Connection| -> Vec<String> {
        keys.iter()
            .map(|k| redis::cmd("TYPE").arg(k).query(conn).unwrap())
            .collect()
    };
    // Off: nothing is touched.
    let _off = RedisStore::connect_with(
        &url,
        RedisOptions::new()
            .prefix(format!("{name}:"))
            .upgrade_sweep(false),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(kinds(&mut conn), vec!["hash"; 3]);
    // On (the default): upgraded in the background.
    let _on =
        RedisStore::connect_with(&url, RedisOptions::new().prefix(format!("{name}:"))).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while kinds(&mut conn) != vec!["string"; 3] && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(kinds(&mut conn), vec!["string"; 3]);
    assert_eq!(foreign_kinds(&mut conn), vec!["hash"; 2]);
    cleanup(&url, &name);
}

/// The upgrade sweep reads every key of the database, so it runs once per prefix: a sweep that
/// ends writes `PREFIX` `rerun-layout`, and a store that finds it at this layout sweeps nothing,
/// leaving a record of rerun 0.1 planted after it to the first call that meets it. A marker of
/// an older layout, or one that is no layout, is swept again.
#[test]
fn the_upgrade_sweep_runs_once_per_prefix() {
    let Some(server) = redis_util::PrivateRedis::start() else {
        return;
    };
    let url = server.url.clone();
    let prefix = "once:";
    let marker = format!("{prefix}rerun-layout");
    let mut conn = raw(&url);
    let names = store(&url, "once");
    let plant = |conn: &mut redis::Connection, id: &str| -> String {
        let k = names.record_key(&Key::new("s", id));
        plant_released_0_1(conn, &k);
        k
    };
    let kind = |conn: &mut redis::Connection, k: &str| -> String {
        redis::cmd("TYPE").arg(k).query(conn).unwrap()
    };
    let sweeping = || RedisStore::connect_with(&url, RedisOptions::new().prefix(prefix)).unwrap();
    let marker_of = |conn: &mut redis::Connection| -> Option<String> {
        redis::cmd("GET").arg(&marker).query(conn).unwrap()
    };

    // The first store sweeps and marks.
    let first = plant(&mut conn, "a");
    let _a = sweeping();
    eventually("the first sweep", || {
        marker_of(&mut raw(&url)).as_deref() == Some("2")
    });
    assert_eq!(kind(&mut conn, &first), "string");

    // The next store reads the marker and sweeps nothing.
    let second = plant(&mut conn, "b");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let _b = sweeping();
    eventually("the marker read", || server.calls("get") >= 1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.calls("scan"), 0);
    assert_eq!(kind(&mut conn, &second), "hash");

    // A marker of another layout, or of none, is swept again and rewritten.
    for stale in ["1", "swept"] {
        let _: () = redis::cmd("SET")
            .arg(&marker)
            .arg(stale)
            .query(&mut conn)
            .unwrap();
        let planted = plant(&mut conn, stale);
        let _c = sweeping();
        eventually("a sweep past a stale marker", || {
            marker_of(&mut raw(&url)).as_deref() == Some("2")
        });
        assert_eq!(kind(&mut conn, &planted), "string", "{stale}");
        assert_eq!(kind(&mut conn, &second), "string", "{stale}");
    }
}

/// A Redis user allowed only record keys cannot read or write the sweep's marker: the sweep
/// still upgrades, as it did before there were markers.
#[test]
fn a_user_allowed_only_record_keys_still_gets_the_sweep() {
    let Some(server) = redis_util::PrivateRedis::start() else {
        return;
    };
    let mut conn = raw(&server.url);
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "records", "on", ">secret", "+@all", "~acl:{*"])
        .query(&mut conn)
        .unwrap();
    let planted = store(&server.url, "acl").record_key(&Key::new("s", "k"));
    plant_released_0_1(&mut conn, &planted);
    let url = server.url.replace("redis://", "redis://records:secret@");
    let _sweeping = RedisStore::connect_with(&url, RedisOptions::new().prefix("acl:")).unwrap();
    eventually_eq(
        "the record's type (upgraded: string)",
        "string".to_owned(),
        || {
            redis::cmd("TYPE")
                .arg(&planted)
                .query::<String>(&mut conn)
                .unwrap()
        },
    );
    let marked: bool = redis::cmd("EXISTS")
        .arg("acl:rerun-layout")
        .query(&mut conn)
        .unwrap();
    assert!(!marked);
}

/// A zero connect timeout is the shortest that can connect, not one that fails every
/// connection; `Duration::MAX` is no limit.
#[test]
fn connect_timeouts_at_both_ends_connect() {
    let Some(url) = url() else { return };
    for timeout in [Duration::ZERO, Duration::MAX] {
        let name = unique("connect-timeout");
        let store = RedisStore::connect_with(
            &url,
            RedisOptions::new()
                .upgrade_sweep(false)
                .prefix(format!("{name}:"))
                .connect_timeout(timeout),
        )
        .unwrap_or_else(|e| panic!("{timeout:?}: {e}"));
        let out = rerun_core::Call::new("s", "k")
            .run(&store, || Ok::<_, rerun_core::Error>(7))
            .unwrap_or_else(|e| panic!("{timeout:?}: {e}"));
        assert_eq!(out.value, 7);
        cleanup(&url, &name);
    }
}

/// A server in cluster mode answers most keys from another node (`MOVED`), which every call
/// would meet as a passing store error for ever: it is refused at connect, saying why.
#[test]
fn a_server_in_cluster_mode_is_refused_at_connect() {
    let Some(_) = url() else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let nodes = dir.path().join("nodes.conf");
    let Some(server) = redis_util::PrivateRedis::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        &nodes.display().to_string(),
    ]) else {
        return;
    };
    let err = RedisStore::connect(&server.url).expect_err("a cluster-mode server was accepted");
    assert!(
        matches!(err, Error::Config { .. }) && err.to_string().contains("cluster mode"),
        "{err}"
    );
}
