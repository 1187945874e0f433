//! PostgresStore across a server restart between a claim and its completion.
//!
//! It restarts the local cluster, so it runs only when `RERUN_TEST_PG_RESTART=1` (and alone in
//! its test binary, so no other test of this binary sees the restart):
//!
//! `RERUN_TEST_PG_RESTART=1 RERUN_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test
//! cargo test -p rerun-core --features postgres,testing --test postgres_restart`
#![cfg(all(feature = "postgres", feature = "testing"))]

mod postgres_common;

use std::process::Command;
use std::time::{Duration, Instant};

use postgres_common::{claimed, request};
use rerun_core::record::{ClaimResponse, Status};
use rerun_core::{AsyncStore, Error, Fingerprint, Holder, Key, Store};

const LONG: Duration = Duration::from_secs(60);

/// The local cluster's version directory (`/etc/postgresql/<version>`).
fn cluster_version() -> Option<String> {
    std::fs::read_dir("/etc/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
}

fn pg_ctl(version: &str, action: &str) -> bool {
    Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", version, "main", action])
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts the cluster again if the test stops anywhere after restarting it.
struct Restarted(String);
impl Drop for Restarted {
    fn drop(&mut self) {
        if !pg_ctl(&self.0, "status") {
            pg_ctl(&self.0, "start");
        }
    }
}

/// Retries a store call through the restart: every failure must be a retryable store error.
fn converge<T>(what: &str, mut f: impl FnMut() -> Result<T, Error>) -> (T, usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut failures = 0;
    loop {
        match f() {
            Ok(t) => return (t, failures),
            Err(e) => {
                assert!(
                    matches!(e, Error::Store { .. }) && e.is_retryable(),
                    "{what}: {e:?}"
                );
                failures += 1;
                assert!(Instant::now() < deadline, "{what} did not converge: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

#[test]
fn server_restart_between_claim_and_completion() {
    if std::env::var("RERUN_TEST_PG_RESTART").map_or(true, |v| v != "1") {
        eprintln!("note: RERUN_TEST_PG_RESTART is not 1; skipping the server restart test");
        return;
    }
    let Some(url) = postgres_common::url() else {
        return;
    };
    let Some(version) = cluster_version() else {
        panic!("RERUN_TEST_PG_RESTART=1 needs a local cluster under /etc/postgresql");
    };
    let (store, _t) = postgres_common::fresh(&url, "restart");
    let fp = Fingerprint::of(&"p").unwrap();
    let h = Holder::current();
    let (k1, k2) = (Key::new("restart", "sync"), Key::new("restart", "async"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c1 = claimed(store.claim(&request(&k1, &fp, &h, LONG)));
    let c2 = match rt
        .block_on(store.claim_async(&request(&k2, &fp, &h, LONG)))
        .unwrap()
    {
        ClaimResponse::Claimed(c) => c,
        other => panic!("{other:?}"),
    };

    let guard = Restarted(version.clone());
    assert!(pg_ctl(&version, "restart"), "pg_ctlcluster restart failed");

    // The pooled connections died with the server: the first calls may fail, typed and
    // retryable; retries complete the claims, which the server kept across the restart.
    let ((), sync_failures) = converge("complete", || store.complete(&c1, b"one", LONG));
    let ((), async_failures) = converge("complete_async", || {
        rt.block_on(store.complete_async(&c2, b"two", LONG))
    });
    println!("after the restart: {sync_failures} sync and {async_failures} async retryable failures before convergence");
    for (k, want) in [(&k1, &b"one"[..]), (&k2, &b"two"[..])] {
        let view = store.inspect(k).unwrap().unwrap();
        assert_eq!(
            (view.status, view.result.as_deref()),
            (Status::Completed, Some(want))
        );
        match store
            .claim(&request(k, &fp, &Holder::current(), LONG))
            .unwrap()
        {
            ClaimResponse::Replay(r) => assert_eq!(r.result, want),
            other => panic!("{other:?}"),
        }
    }
    drop(guard);
    assert!(
        pg_ctl(&version, "status"),
        "the cluster is not running after the test"
    );
}
