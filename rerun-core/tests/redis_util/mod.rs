//! Helpers shared by the Redis tests: a store under a prefix of its own (so tests run in
//! parallel against one server), a raw connection for faults, and cleanup.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use rerun_core::store::redis::{RedisOptions, RedisStore};

/// The test server's URL, or `None` (with a printed notice) to skip.
pub fn url() -> Option<String> {
    rerun_core::testing::service_url("RERUN_TEST_REDIS_URL")
}

/// A name unique to this test run: prefix and client name of one store.
pub fn unique(test: &str) -> String {
    rerun_core::testing::conformance::unique(&format!("rerun-test-{test}"))
}

/// A store under a fresh prefix, whose connections are named `name` in `CLIENT LIST`.
pub fn store(url: &str, name: &str) -> RedisStore {
    RedisStore::connect_with(
        url,
        RedisOptions::new()
            .prefix(format!("{name}:"))
            .client_name(name)
            // Every connection the tests kill or cut is a call's, never the sweep's.
            .upgrade_sweep(false),
    )
    .expect("connecting to the test Redis")
}

/// A raw connection of the driver, for what the store must not do (planting records, killing
/// connections).
pub fn raw(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .expect("a raw connection to the test Redis")
}

/// The ids of the connections named `name`.
pub fn client_ids(raw: &mut redis::Connection, name: &str) -> Vec<u64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query(raw)
        .expect("CLIENT LIST");
    list.lines()
        .filter(|line| line.split(' ').any(|f| f == format!("name={name}")))
        .filter_map(|line| {
            line.split(' ')
                .find_map(|f| f.strip_prefix("id="))
                .and_then(|id| id.parse().ok())
        })
        .collect()
}

/// Kills every connection named `name`; returns how many.
pub fn kill_clients(raw: &mut redis::Connection, name: &str) -> usize {
    let ids = client_ids(raw, name);
    for id in &ids {
        let _: redis::RedisResult<()> = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(*id)
            .query(raw);
    }
    ids.len()
}

/// Waits until `name` has at least `n` connections queued on the server (blocked in a pause).
pub fn wait_for_clients(raw: &mut redis::Connection, name: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while client_ids(raw, name).len() < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Deletes every key under `prefix` (tests leave no in-progress records behind). `SCAN`, not
/// `KEYS`: the server may be serving other tests meanwhile.
pub fn cleanup(url: &str, prefix: &str) {
    use redis::Commands;
    let mut conn = raw(url);
    let keys: Vec<Vec<u8>> = match conn.scan_match::<_, Vec<u8>>(format!("{prefix}*")) {
        Ok(keys) => match keys.collect() {
            Ok(keys) => keys,
            Err(_) => return,
        },
        Err(_) => return,
    };
    for batch in keys.chunks(500) {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(batch).query(&mut conn);
    }
}
