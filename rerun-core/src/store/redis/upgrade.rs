//! Records of rerun 0.1 (layout 1: a hash per record) are upgraded to layout 2 in place: by any
//! script that meets one (so correctness never waits for this), and by a sweep that a new store
//! starts in the background after it connected, so that a database written by 0.1 is migrated
//! without a call of every key.

use redis::Value;

use super::names::scan_pattern_within;
use super::RedisStore;
use crate::store::Store as _;

/// Keys a `SCAN` step looks at.
const STEP: usize = 1000;

impl RedisStore {
    /// Starts the sweep on a thread of its own; it ends after one pass.
    pub(super) fn start_upgrade_sweep(&self) {
        let store = self.clone();
        let spawned = std::thread::Builder::new()
            .name("rerun-redis-upgrade".into())
            .spawn(move || match store.upgrade_sweep() {
                Ok(0) => {}
                Ok(n) => tracing::info!(store = %store.describe(), upgraded = n, "rerun: records of rerun 0.1 were upgraded to the current layout"),
                Err(e) => tracing::warn!(store = %store.describe(), error = %e, "rerun: upgrading the records of rerun 0.1 stopped; they are upgraded when next used"),
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "rerun: could not start the upgrade of rerun 0.1's records; they are upgraded when next used");
        }
    }

    /// Upgrades every layout-1 record under the prefix; returns how many.
    ///
    /// The sweep runs on a connection of its own, closed when it ends: it never puts a
    /// connection into the pool the calls share, so what the calls' connections go through (a
    /// kill, a cut) is not hidden behind a connection the sweep opened later.
    fn upgrade_sweep(&self) -> Result<u64, crate::Error> {
        let pattern = scan_pattern_within(&self.inner.prefix, None);
        let limit = self.inner.response_timeout;
        let mut own = self.open_sync(None, limit)?;
        let conn = own.connection();
        let failed = |what: &str, e: redis::RedisError| self.driver_err(None, what, e);
        let mut cursor = 0u64;
        let mut upgraded = 0;
        loop {
            let (next, hashes): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(STEP)
                .arg("TYPE")
                .arg("hash")
                .query(conn)
                .map_err(|e| failed("finding records of rerun 0.1", e))?;
            if !hashes.is_empty() {
                // The inspect script upgrades what it reads.
                let names: Vec<&str> = hashes.iter().map(String::as_str).collect();
                let _: Vec<Value> = self
                    .inspect_all(conn, &names)
                    .map_err(|e| failed("upgrading records", e))?;
                upgraded += hashes.len() as u64;
            }
            cursor = next;
            if cursor == 0 {
                return Ok(upgraded);
            }
        }
    }
}
