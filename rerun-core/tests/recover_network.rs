//! Converge on startup (reliability test 19) on the network stores, against the servers at
//! `RERUN_TEST_POSTGRES_URL` / `RERUN_TEST_REDIS_URL` (skipped when unset, a failure with
//! `RERUN_REQUIRE_SERVICES=1`). Each test uses a fresh table or key prefix.
#![cfg(all(feature = "testing", any(feature = "postgres", feature = "redis")))]

#[cfg(feature = "postgres")]
mod postgres_common;
#[cfg(feature = "redis")]
mod redis_util;

use rerun_core::testing::recovery_check;

#[cfg(feature = "postgres")]
#[test]
fn postgres_store_converges_on_startup() {
    let Some(url) = postgres_common::url() else {
        return;
    };
    let (store, _table) = postgres_common::fresh(&url, "recover");
    let check = recovery_check(&store).unwrap_or_else(|e| panic!("{e}"));
    println!("postgres: {check:?}");
    assert_eq!(check.stale, 1000);
    assert!(check.second.changed_nothing());
}

#[cfg(feature = "redis")]
#[test]
fn redis_store_converges_on_startup() {
    let Some(url) = rerun_core::testing::service_url("RERUN_TEST_REDIS_URL") else {
        return;
    };
    let prefix = format!(
        "{}:",
        rerun_core::testing::conformance::unique("rerun-recover")
    );
    let sep = if url.contains('?') { '&' } else { '?' };
    let store =
        rerun_core::store::redis::RedisStore::connect(&format!("{url}{sep}prefix={prefix}"))
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    let check = recovery_check(&store).unwrap_or_else(|e| panic!("{e}"));
    println!("redis: {check:?}");
    redis_util::cleanup(&url, &prefix);
    assert_eq!(check.stale, 1000);
    assert!(check.second.changed_nothing());
}
