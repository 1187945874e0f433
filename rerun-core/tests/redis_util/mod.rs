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

/// The server's `host:port` in a Redis URL (what a proxy in front of it connects to).
#[allow(dead_code)]
pub fn upstream(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or("127.0.0.1:6379");
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
        .to_owned()
}

/// `url` with its server replaced by `addr` (a proxy's): the credentials, database and
/// options stay.
#[allow(dead_code)]
pub fn via(addr: std::net::SocketAddr, url: &str) -> String {
    let host = upstream(url);
    url.replacen(&host, &addr.to_string(), 1)
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

/// Waits up to 20 s for `done`, asking every 20 ms; fails the test naming `what` if it never is.
pub fn eventually(what: &str, done: impl FnMut() -> bool) {
    eventually_eq(what, true, done);
}

/// Waits up to 20 s until `probe` sees `want`, asking every 20 ms; fails the test naming `what`
/// and what it saw last if it never does.
pub fn eventually_eq<T: PartialEq + std::fmt::Debug>(
    what: &str,
    want: T,
    mut probe: impl FnMut() -> T,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = probe();
        if seen == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {seen:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Deletes every key under `prefix` (tests leave no in-progress records behind). `SCAN`, not
/// `KEYS`: the server may be serving other tests meanwhile.
pub fn cleanup(url: &str, prefix: &str) {
    let mut conn = raw(url);
    let mut cursor = 0u64;
    loop {
        // Steps of 1,000 keys: the database may hold many other tests' keys.
        let step: redis::RedisResult<(u64, Vec<Vec<u8>>)> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn);
        let Ok((next, keys)) = step else { return };
        if !keys.is_empty() {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query(&mut conn);
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// A `redis-server` of one test's own, on a free loopback port, stopped when dropped: for what
/// the server counts (`INFO commandstats`) and other tests would add to.
pub struct PrivateRedis {
    child: std::process::Child,
    pub url: String,
}

impl PrivateRedis {
    /// Starts one; `None` (with a printed notice) when `redis-server` cannot be run, which
    /// `RERUN_REQUIRE_SERVICES=1` turns into a failure.
    pub fn start() -> Option<PrivateRedis> {
        PrivateRedis::start_with(&[])
    }

    /// [`PrivateRedis::start`], with more `redis-server` arguments.
    pub fn start_with(args: &[&str]) -> Option<PrivateRedis> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let spawned = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(args)
            .stdout(std::process::Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) if !rerun_core::testing::services_required() => {
                eprintln!("note: cannot run redis-server ({e}); skipping this test");
                return None;
            }
            Err(e) => panic!("cannot run redis-server ({e}), and RERUN_REQUIRE_SERVICES=1"),
        };
        let server = PrivateRedis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = redis::Client::open(server.url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            if up.is_ok() {
                return Some(server);
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not start: {up:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many times the server ran `command` since it started or its counters were reset.
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut raw(&self.url))
            .expect("INFO commandstats");
        let field = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|line| line.strip_prefix(&field))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
