//! What a Redis server keeps on disk, and what `once` claims can wait for (`WAIT`, `WAITAOF`),
//! against a real Redis (`RERUN_TEST_REDIS_URL`); and credentials the server refuses.
#![cfg(feature = "redis")]

mod redis_util;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rerun_core::store::redis::{Persistence, RedisOptions, RedisStore};
use rerun_core::{Call, Error, Key, Status, Store};

use redis_util::{cleanup, raw, unique, url};

/// The server's persistence settings, set back when dropped.
struct Settings {
    url: String,
    saved: Vec<(String, String)>,
}

impl Settings {
    fn set(url: &str, pairs: &[(&str, &str)]) -> Settings {
        let mut conn = raw(url);
        let mut saved = Vec::new();
        for (name, value) in pairs {
            let old: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query(&mut conn)
                .unwrap();
            saved.push(((*name).to_owned(), old.get(1).cloned().unwrap_or_default()));
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query(&mut conn)
                .unwrap();
        }
        Settings {
            url: url.to_owned(),
            saved,
        }
    }
}

impl Drop for Settings {
    fn drop(&mut self) {
        let mut conn = raw(&self.url);
        for (name, value) in &self.saved {
            let _: redis::RedisResult<()> = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query(&mut conn);
        }
    }
}

fn store(url: &str, name: &str, options: RedisOptions) -> Result<RedisStore, Error> {
    // No upgrade sweep: one that ended after the test's cleanup would leave its marker behind.
    RedisStore::connect_with(url, options.prefix(format!("{name}:")).upgrade_sweep(false))
}

/// Captures the `warn` events of the current thread.
///
/// tracing caches, once per process, whether a callsite is wanted, and computes it against the
/// dispatcher of whichever thread reaches the callsite first. A test running beside this one
/// with no subscriber (the replicas test makes `once` claims on the same volatile server) would
/// get the volatile-server warning cached as unwanted, and this thread's capture would stay
/// empty. A process-wide subscriber that wants `warn` events and writes them nowhere makes every
/// thread answer "wanted"; the capturing subscriber below overrides it on this thread.
fn capture<R>(f: impl FnOnce() -> R) -> (R, String) {
    static ANCHOR: std::sync::Once = std::sync::Once::new();
    ANCHOR.call_once(|| {
        let anchor = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(std::io::sink)
            .finish();
        // Already set (by nothing else in this binary): the cache is then someone else's to keep.
        let _ = tracing::subscriber::set_global_default(anchor);
    });
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let out = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || out.clone())
        .finish();
    let r = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    (r, text)
}

#[test]
fn persistence_is_read_at_connect_and_a_volatile_server_is_named_once() {
    let Some(url) = url() else { return };
    // Serialized with the other test that changes the server's settings.
    let _guard = SETTINGS.lock().unwrap_or_else(|p| p.into_inner());
    let name = unique("persist");
    {
        let _s = Settings::set(&url, &[("appendonly", "no"), ("save", "")]);
        let s = store(&url, &name, RedisOptions::new()).unwrap();
        assert_eq!(s.persistence(), &Persistence::Nothing);
        assert_eq!(s.persistence().loses(), "every record");
        let ((), logged) = capture(|| {
            for i in 0..3 {
                Call::new("mail.welcome", &i)
                    .once()
                    .run(&s, || Ok::<_, Error>(()))
                    .unwrap();
            }
            // Replayable calls say nothing.
            Call::new("cache.fill", "k")
                .run(&s, || Ok::<_, Error>(()))
                .unwrap();
        });
        assert_eq!(
            logged.matches("keeps nothing on disk").count(),
            1,
            "{logged}"
        );
    }
    {
        let _s = Settings::set(&url, &[("appendonly", "no"), ("save", "3600 1")]);
        let s = store(&url, &name, RedisOptions::new()).unwrap();
        assert_eq!(s.persistence(), &Persistence::Snapshots("3600 1".into()));
    }
    // (Turning the append-only file on would make the server write files wherever it runs;
    // the snapshot rule above changes nothing on disk for an hour.)
    cleanup(&url, &name);
}

/// A runtime for the async calls of a test (two workers: a wait blocks only its own
/// connection).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

static SETTINGS: Mutex<()> = Mutex::new(());

/// A server that can evict keys (a `maxmemory` and a policy other than `noeviction`) is named
/// at connect, with its policy; one that cannot is not.
#[test]
fn a_server_that_evicts_keys_is_named_at_connect() {
    let Some(url) = url() else { return };
    let _guard = SETTINGS.lock().unwrap_or_else(|p| p.into_inner());
    let name = unique("evict");
    {
        // A limit far above what the tests use: nothing is evicted meanwhile.
        let _s = Settings::set(
            &url,
            &[("maxmemory", "4gb"), ("maxmemory-policy", "allkeys-lru")],
        );
        let (s, logged) = capture(|| store(&url, &name, RedisOptions::new()).unwrap());
        assert_eq!(s.eviction_policy(), Some("allkeys-lru"));
        assert!(
            logged.contains("maxmemory-policy allkeys-lru") && logged.contains("noeviction"),
            "{logged}"
        );
    }
    {
        let _s = Settings::set(
            &url,
            &[("maxmemory", "4gb"), ("maxmemory-policy", "noeviction")],
        );
        let s = store(&url, &name, RedisOptions::new()).unwrap();
        assert_eq!(s.eviction_policy(), None);
    }
    {
        let _s = Settings::set(
            &url,
            &[("maxmemory", "0"), ("maxmemory-policy", "volatile-lru")],
        );
        let s = store(&url, &name, RedisOptions::new()).unwrap();
        assert_eq!(s.eviction_policy(), None, "no limit, nothing evicted");
    }
    cleanup(&url, &name);
}

/// With `wait_replicas`, a `once` claim that no replica acknowledges is given back before its
/// body starts, and the call fails with a retryable error; replayable claims do not wait.
#[test]
fn once_claims_wait_for_replicas_or_are_given_back() {
    let Some(url) = url() else { return };
    let name = unique("wait");
    let s = store(
        &url,
        &name,
        RedisOptions::new().wait_replicas(1, Duration::from_millis(100)),
    )
    .unwrap();
    let ran = std::sync::atomic::AtomicU32::new(0);
    let err = Call::new("charge", "ord_1")
        .once()
        .run(&s, || {
            ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, Error>(())
        })
        .unwrap_err();
    assert!(
        matches!(err, Error::Store { .. }) && err.is_retryable(),
        "{err}"
    );
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 0);
    let view = s.inspect(&Key::new("charge", "ord_1")).unwrap().unwrap();
    assert_eq!(view.status, Status::Released, "the claim was given back");
    // Replayable calls do not wait.
    Call::new("cache", "k")
        .run(&s, || Ok::<_, Error>(1))
        .unwrap();
    // Async calls too, on a connection of their own.
    let rt = runtime();
    let err = rt
        .block_on(
            Call::new("charge", "ord_2")
                .once()
                .run_async(&s, async { Ok::<_, Error>(()) }),
        )
        .unwrap_err();
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
    // Zero replicas asked: nothing to wait for.
    let s0 = store(
        &url,
        &name,
        RedisOptions::new().wait_replicas(0, Duration::from_millis(100)),
    )
    .unwrap();
    Call::new("charge", "ord_3")
        .once()
        .run(&s0, || Ok::<_, Error>(()))
        .unwrap();
    // `Duration::MAX` is no limit, as everywhere in rerun: the server is asked for the longest
    // wait rerun allows, never for a number it refuses.
    let unbounded = store(
        &url,
        &name,
        RedisOptions::new().wait_replicas(0, Duration::MAX),
    )
    .unwrap();
    Call::new("charge", "ord_4")
        .once()
        .run(&unbounded, || Ok::<_, Error>(()))
        .unwrap();
    cleanup(&url, &name);
}

/// The connection an async `once` claim waits on is named as every connection of the store is,
/// so `CLIENT LIST` (and an operator's `CLIENT KILL`) finds it under the store's name.
#[test]
fn the_connection_an_async_claim_waits_on_is_named() {
    let Some(url) = url() else { return };
    let name = unique("wait-named");
    let s = store(
        &url,
        &name,
        RedisOptions::new()
            .client_name(&name)
            .wait_replicas(1, Duration::from_millis(50)),
    )
    .unwrap();
    let rt = runtime();
    let err = rt
        .block_on(
            Call::new("charge", "ord_1")
                .once()
                .run_async(&s, async { Ok::<_, Error>(()) }),
        )
        .unwrap_err();
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
    // Only the async claim's own connection sent WAIT under this name.
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut raw(&url))
        .unwrap();
    let waited = clients
        .lines()
        .filter(|line| line.split(' ').any(|f| f == format!("name={name}")))
        .filter(|line| line.split(' ').any(|f| f == "cmd=wait"))
        .count();
    assert_eq!(waited, 1, "{clients}");
    drop(s);
    cleanup(&url, &name);
}

/// A `once` claim that takes over an unknown outcome and reaches no replica is given back as
/// what it found, unknown, never released: the next call must not run the body beside an
/// attempt that may have had its effect. Sync and async.
#[test]
fn a_claim_on_an_unknown_outcome_that_reaches_no_replica_leaves_it_unknown() {
    use rerun_core::Fingerprint;
    let Some(url) = url() else { return };
    let name = unique("waitunknown");
    let plain = store(&url, &name, RedisOptions::new()).unwrap();
    let waiting = store(
        &url,
        &name,
        RedisOptions::new().wait_replicas(1, Duration::from_millis(100)),
    )
    .unwrap();
    let rt = runtime();
    let ran = std::sync::atomic::AtomicU32::new(0);
    for id in ["sync", "async"] {
        let key = Key::new("charge", id);
        rerun_core::testing::leave_unknown(&plain, &key, &Fingerprint::EMPTY).unwrap();
        let body = || {
            ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, Error>(())
        };
        let call = Call::new("charge", id).once();
        let err = match id {
            "sync" => call.run(&waiting, body).unwrap_err(),
            _ => rt
                .block_on(call.run_async(&waiting, async { body() }))
                .unwrap_err(),
        };
        assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
        let view = plain.inspect(&key).unwrap().unwrap();
        assert_eq!(view.status, Status::Unknown, "{id}: given back as unknown");
        let again = Call::new("charge", id)
            .once()
            .run(&plain, body)
            .unwrap_err();
        assert!(
            matches!(again, Error::OutcomeUnknown { .. }),
            "{id}: {again}"
        );
    }
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 0);
    cleanup(&url, &name);
}

/// A wait for replicas longer than the call may take ends within the call, and its claim is
/// given back (released, the body never started) instead of being left behind when the call
/// gives up on the connection, where it would later read as an unknown outcome.
#[test]
fn a_wait_longer_than_the_response_timeout_gives_the_claim_back_in_time() {
    let Some(url) = url() else { return };
    let name = unique("waitlong");
    let s = store(
        &url,
        &name,
        RedisOptions::new()
            .wait_replicas(1, Duration::from_secs(30))
            .response_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let rt = runtime();
    for id in ["sync", "async"] {
        let started = std::time::Instant::now();
        let call = Call::new("charge", id).once();
        let err = match id {
            "sync" => call.run(&s, || Ok::<_, Error>(())).unwrap_err(),
            _ => rt
                .block_on(call.run_async(&s, async { Ok::<_, Error>(()) }))
                .unwrap_err(),
        };
        assert!(err.to_string().contains("0 of 1 replicas"), "{id}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{id}: {:?}",
            started.elapsed()
        );
        let view = s.inspect(&Key::new("charge", id)).unwrap().unwrap();
        assert_eq!(view.status, Status::Released, "{id}: given back");
    }
    cleanup(&url, &name);
}

#[test]
fn waitaof_needs_a_server_that_has_it() {
    let Some(url) = url() else { return };
    let name = unique("waitaof");
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut raw(&url))
        .unwrap();
    let old = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| {
            let mut p = v.trim().split('.');
            Some((
                p.next()?.parse::<u32>().ok()?,
                p.next()?.parse::<u32>().ok()?,
            ))
        })
        .is_some_and(|v| v < (7, 2));
    if old {
        let r = store(
            &url,
            &name,
            RedisOptions::new().wait_aof(true, 0, Duration::from_millis(100)),
        );
        let err = r.unwrap_err();
        assert!(
            matches!(err, Error::Config { .. }) && err.to_string().contains("7.2"),
            "{err}"
        );
    } else {
        // Nothing asked of the local file or of replicas: the wait returns at once.
        let s = store(
            &url,
            &name,
            RedisOptions::new().wait_aof(false, 0, Duration::from_millis(100)),
        )
        .unwrap();
        Call::new("charge", "aof")
            .once()
            .run(&s, || Ok::<_, Error>(()))
            .unwrap();
    }
    cleanup(&url, &name);
}

/// Credentials the server refuses are a store error that no retry fixes.
#[test]
fn refused_credentials_are_permanent() {
    let Some(url) = url() else { return };
    let user = unique("user").replace(['-', ':'], "_");
    let mut conn = raw(&url);
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">right-password")
        .arg("~*")
        .arg("+@all")
        .query(&mut conn)
        .unwrap();
    let hostport = url
        .trim_start_matches("redis://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .to_owned();
    let err =
        RedisStore::connect(&format!("redis://{user}:wrong-password@{hostport}")).unwrap_err();
    let _: redis::RedisResult<()> = redis::cmd("ACL").arg("DELUSER").arg(&user).query(&mut conn);
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    assert!(!err.is_retryable(), "{err}");
    assert!(!err.to_string().contains("wrong-password"), "{err}");
}
