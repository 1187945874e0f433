//! The Redis server restarted between claim and completion (reliability 16). The test server
//! keeps nothing on disk, so a restart loses every record: the completion fails with a typed,
//! retryable `Error::Store`, and the rerun runs cleanly against the empty server.
//!
//! It stops the server, so it runs only with `RERUN_TEST_REDIS_RESTART=1` (and alone: other
//! tests using the server would fail meanwhile). It restarts the local server with
//! `redis-cli shutdown nosave` and
//! `redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no`.
#![cfg(feature = "redis")]

mod redis_util;

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rerun_core::{Call, Error, Key, Status, Store};

use redis_util::{cleanup, store, unique, url};

fn restart_server(url: &str) {
    let _ = Command::new("redis-cli")
        .args(["-p", "6379", "shutdown", "nosave"])
        .status();
    let started = Command::new("redis-server")
        .args([
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "-::1",
            "--port",
            "6379",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .status()
        .expect("running redis-server");
    assert!(started.success(), "redis-server did not start");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let up = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
        if up.is_ok() {
            return;
        }
        assert!(Instant::now() < deadline, "Redis did not come back: {up:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn server_restarted_between_claim_and_completion() {
    let Some(url) = url() else { return };
    if std::env::var("RERUN_TEST_REDIS_RESTART").as_deref() != Ok("1") {
        eprintln!("note: RERUN_TEST_REDIS_RESTART is not 1; skipping the server restart test");
        return;
    }
    let name = unique("restart");
    let store = store(&url, &name);
    let key = Key::new("s", "k");
    let bodies = AtomicU32::new(0);
    let r = Call::new("s", "k").run(&store, || {
        bodies.fetch_add(1, Ordering::SeqCst);
        restart_server(&url);
        Ok::<_, Error>("first".to_owned())
    });
    match &r {
        Err(e @ Error::Store { key: Some(k), .. }) => assert!(e.is_retryable() && *k == key),
        other => panic!("expected a retryable Error::Store, got {other:?}"),
    }
    // The restart lost the claim with everything else (and the script cache: the next calls
    // reload the scripts); the rerun runs the body once more and records it.
    assert!(store.inspect(&key).unwrap().is_none());
    let out = Call::new("s", "k").run(&store, || {
        bodies.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Error>("second".to_owned())
    });
    assert_eq!(out.unwrap().value, "second");
    assert_eq!(
        store.inspect(&key).unwrap().map(|v| v.status),
        Some(Status::Completed)
    );
    assert_eq!(
        Call::new("s", "k")
            .run(&store, || Ok::<_, Error>("third".to_owned()))
            .unwrap()
            .value,
        "second"
    );
    assert_eq!(bodies.load(Ordering::SeqCst), 2);
    cleanup(&url, &name);
    println!(
        "restarted the Redis server between claim and completion: typed error, then a clean rerun"
    );
}
