//! Records of rerun 0.1 (layout 1: a hash per record) are upgraded to layout 2 in place: by any
//! script that meets one (so correctness never waits for this), and by a sweep that a new store
//! starts in the background after it connected, so that a database written by 0.1 is migrated
//! without a call of every key.
//!
//! A sweep reads every key of the database, so it runs once per prefix, not once per process:
//! a sweep that ends its pass writes the marker `PREFIX` `rerun-layout` (the layout it swept
//! to), and a store that finds the marker at the layout it writes, or a newer one, sweeps
//! nothing. A record of 0.1 written after the marker (a 0.1 process still running in a rolling
//! upgrade, a rollback) is upgraded by the first call that meets it, or by a scan, which reads
//! through the inspect script.

use redis::Value;

use super::conn::Budget;
use super::names::{layout_marker, parse_record_key, scan_pattern_within};
use super::{RedisStore, SCHEMA_VERSION};
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

    /// Upgrades every layout-1 record under the prefix, unless a sweep of this layout or a
    /// newer one already ended there; returns how many it upgraded.
    ///
    /// The sweep runs on a connection of its own, closed when it ends: it never puts a
    /// connection into the pool the calls share, so what the calls' connections go through (a
    /// kill, a cut) is not hidden behind a connection the sweep opened later.
    fn upgrade_sweep(&self) -> Result<u64, crate::Error> {
        let marker = layout_marker(&self.inner.prefix);
        let limit = self.inner.response_timeout;
        let mut own = self.open_sync(None, limit)?;
        let conn = own.connection();
        // A marker that cannot be read or written (an ACL that allows only record keys) costs
        // a sweep at every start, as before there were markers, and nothing else.
        match redis::cmd("GET")
            .arg(&marker)
            .query::<Option<Vec<u8>>>(conn)
        {
            Ok(Some(value)) if marks_done(&value) => return Ok(0),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(store = %self.describe(), error = %e, "rerun: the upgrade sweep's marker could not be read; sweeping")
            }
        }
        let upgraded = self.sweep_pass(conn)?;
        let marked: redis::RedisResult<()> = redis::cmd("SET")
            .arg(&marker)
            .arg(SCHEMA_VERSION)
            .query(conn);
        if let Err(e) = marked {
            tracing::warn!(store = %self.describe(), error = %e, "rerun: the upgrade sweep's marker could not be written, so every new store sweeps the database again; allow the store's user to write it, or turn the sweep off");
        }
        Ok(upgraded)
    }

    /// One full `SCAN` pass over the prefix, upgrading every hash it finds.
    fn sweep_pass(&self, conn: &mut redis::Connection) -> Result<u64, crate::Error> {
        let pattern = scan_pattern_within(&self.inner.prefix, None);
        let failed = |what: &str, e: redis::RedisError| self.driver_err(None, what, e);
        let mut cursor = 0u64;
        let mut upgraded = 0;
        loop {
            let (next, found): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(STEP)
                .arg("TYPE")
                .arg("hash")
                .query(conn)
                .map_err(|e| failed("finding records of rerun 0.1", e))?;
            // Only the names rerun writes: a hash someone else named under the prefix is left
            // as it is (a scan names it), and one whose name is not UTF-8 stops nothing.
            let hashes: Vec<String> = found
                .into_iter()
                .filter_map(|name| String::from_utf8(name).ok())
                .filter(|name| parse_record_key(&self.inner.prefix, name).is_some())
                .collect();
            if !hashes.is_empty() {
                // The inspect script upgrades what it reads.
                let names: Vec<&str> = hashes.iter().map(String::as_str).collect();
                let _: Vec<Value> = self
                    .inspect_all(conn, &mut Budget::per_trip(), &names)
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

/// Whether a marker's value says a sweep to this layout (or a newer one) ended: anything else
/// (not a number, an older layout, a key someone else wrote) means sweep.
fn marks_done(value: &[u8]) -> bool {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .is_some_and(|layout| layout >= SCHEMA_VERSION)
}

#[cfg(test)]
mod tests {
    use super::marks_done;
    use crate::store::redis::names::{layout_marker, parse_record_key};

    #[test]
    fn a_marker_of_this_layout_or_newer_ends_the_sweep() {
        assert!(marks_done(b"2"));
        assert!(marks_done(b"3"));
        for other in [
            &b"1"[..],
            b"",
            b"two",
            b"-2",
            b"2.0",
            b"\xff",
            b"99999999999",
        ] {
            assert!(!marks_done(other), "{other:?}");
        }
    }

    #[test]
    fn the_marker_is_no_record() {
        for prefix in ["rerun:", "", "a*b?:"] {
            let marker = layout_marker(prefix);
            assert!(!marker.contains(['{', '}']), "{marker}");
            assert_eq!(parse_record_key(prefix, &marker), None);
        }
    }
}
