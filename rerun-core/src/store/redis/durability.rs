//! How durable a claim in Redis is, and what a `once` claim can be made to wait for.
//!
//! A `once` function's claim must outlive anything that could make its body start twice: if the
//! server forgets the claim (a restart without persistence, a failover to a replica the claim
//! had not reached), the next call finds the key free and runs the body again. Redis keeps a
//! claim exactly as well as the server is configured to keep any write:
//!
//! | server setting | what a crash or restart can lose |
//! |---|---|
//! | `appendonly yes`, `appendfsync always` | nothing: the claim is on disk before Redis answers |
//! | `appendonly yes`, `appendfsync everysec` (Redis' default for AOF) | about the last second of claims |
//! | `appendonly yes`, `appendfsync no` | what the OS had not flushed (typically up to 30 s) |
//! | RDB snapshots only (`save "3600 1 …"`) | every claim since the last snapshot |
//! | nothing (`appendonly no`, `save ""`) | every record, at the next restart |
//!
//! and a failover loses what had not reached the promoted replica. [`RedisOptions::wait_replicas`]
//! makes a `once` claim wait (`WAIT`) until that many replicas have it, and
//! [`RedisOptions::wait_aof`] until it is in the append-only file of the server and of replicas
//! (`WAITAOF`, Redis 7.2 and later); a claim that does not get there in time is given back before
//! the body starts, and the call fails with a retryable [`crate::Error::Store`]. Each costs one
//! more round trip, on `once` claims only.
//!
//! [`RedisOptions::wait_replicas`]: super::RedisOptions::wait_replicas
//! [`RedisOptions::wait_aof`]: super::RedisOptions::wait_aof

use std::fmt;
use std::time::{Duration, Instant};

use super::conn::Budget;
use redis::Connection;

/// What the server keeps on disk, as read from its configuration at connect.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Persistence {
    /// Append-only file, synced on every write: nothing acknowledged is lost.
    AofAlways,
    /// Append-only file, synced every second: a crash loses about a second of writes.
    AofEverySecond,
    /// Append-only file, synced when the OS decides.
    AofOsFlush,
    /// RDB snapshots only, with these `save` rules: writes since the last snapshot are lost.
    Snapshots(String),
    /// Nothing on disk: a restart loses every record.
    Nothing,
    /// The server does not let clients read its configuration (managed services often
    /// disable `CONFIG`).
    Unknown,
}

impl Persistence {
    /// Reads the server's settings; [`Persistence::Unknown`] where `CONFIG GET` is refused.
    pub(super) fn read(conn: &mut Connection) -> Persistence {
        let get = config_get;
        let Some(aof) = get(conn, "appendonly") else {
            return Persistence::Unknown;
        };
        if aof == "yes" {
            return match get(conn, "appendfsync").as_deref() {
                Some("always") => Persistence::AofAlways,
                Some("no") => Persistence::AofOsFlush,
                _ => Persistence::AofEverySecond,
            };
        }
        match get(conn, "save") {
            Some(rules) if !rules.trim().is_empty() => Persistence::Snapshots(rules),
            Some(_) => Persistence::Nothing,
            None => Persistence::Unknown,
        }
    }

    /// What a crash or restart of the server can lose, in words.
    pub fn loses(&self) -> &'static str {
        match self {
            Persistence::AofAlways => "nothing acknowledged",
            Persistence::AofEverySecond => "about the last second of claims",
            Persistence::AofOsFlush => "the claims the OS had not yet written to disk",
            Persistence::Snapshots(_) => "every claim since the last snapshot",
            Persistence::Nothing => "every record",
            Persistence::Unknown => "an unknown amount (the server's configuration cannot be read)",
        }
    }
}

impl fmt::Display for Persistence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Persistence::AofAlways => f.write_str("appendonly yes, appendfsync always"),
            Persistence::AofEverySecond => f.write_str("appendonly yes, appendfsync everysec"),
            Persistence::AofOsFlush => f.write_str("appendonly yes, appendfsync no"),
            Persistence::Snapshots(rules) => write!(f, "RDB snapshots only (save \"{rules}\")"),
            Persistence::Nothing => f.write_str("nothing on disk (appendonly no, save \"\")"),
            Persistence::Unknown => f.write_str("unknown (CONFIG GET refused)"),
        }
    }
}

/// The server's `maxmemory-policy` when it can evict keys: a `maxmemory` is set and the policy
/// is not `noeviction`. `None` when it cannot, or when its configuration cannot be read.
///
/// An evicted record is forgotten as a restart without persistence forgets it: an evicted
/// claim or result lets the body run again (`allkeys-*` evicts any record, `volatile-*` those
/// with a time to live: completed, released and forgotten records).
pub(super) fn eviction(conn: &mut Connection) -> Option<String> {
    let limit = config_get(conn, "maxmemory")?;
    if limit.trim() == "0" {
        return None;
    }
    config_get(conn, "maxmemory-policy").filter(|policy| policy != "noeviction")
}

/// One setting of the server's (`CONFIG GET`), `None` when refused. Read as a map: a flat
/// array of names and values on RESP2, a map on RESP3 (`?protocol=resp3`).
fn config_get(conn: &mut Connection, name: &str) -> Option<String> {
    let mut reply: std::collections::HashMap<String, String> =
        redis::cmd("CONFIG").arg("GET").arg(name).query(conn).ok()?;
    reply.remove(name)
}

/// Why `WAITAOF` asked of this server's own file can never succeed, if it cannot: the server
/// keeps no append-only file (known from its configuration; an unknown one is let through).
pub(super) fn aof_refused(local: bool, persistence: &Persistence) -> Option<String> {
    let keeps_aof = matches!(
        persistence,
        Persistence::AofAlways
            | Persistence::AofEverySecond
            | Persistence::AofOsFlush
            | Persistence::Unknown
    );
    (local && !keeps_aof).then(|| {
        format!(
            "RedisOptions::wait_aof(true, ..) waits for the server's own append-only file, and this server keeps none ({persistence}): every `once` claim would fail; set appendonly yes on the server, or pass local = false"
        )
    })
}

/// What a `once` claim waits for before its body may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct OnceDurability {
    /// `WAIT replicas timeout`.
    pub(super) replicas: Option<(u32, Duration)>,
    /// `WAITAOF local replicas timeout`.
    pub(super) aof: Option<(bool, u32, Duration)>,
}

impl OnceDurability {
    pub(super) fn is_set(&self) -> bool {
        self.replicas.is_some() || self.aof.is_some()
    }

    /// Waits on `conn` (the connection that wrote the claim) for what is asked, until `until`
    /// at the latest (see [`wait_until`]); `Err` names what was not reached.
    pub(super) fn wait(
        &self,
        conn: &mut Connection,
        budget: &mut Budget,
        until: Instant,
    ) -> redis::RedisResult<Result<(), String>> {
        if let Some((replicas, timeout)) = self.replicas {
            budget.next_trip(conn)?;
            let timeout = bounded(timeout, until);
            let got: u64 = redis::cmd("WAIT")
                .arg(replicas)
                .arg(millis(timeout))
                .query(conn)?;
            if got < u64::from(replicas) {
                return Ok(Err(format!(
                    "the claim reached {got} of {replicas} replicas within {}",
                    crate::error::rounded(timeout)
                )));
            }
        }
        if let Some((local, replicas, timeout)) = self.aof {
            budget.next_trip(conn)?;
            let timeout = bounded(timeout, until);
            let got: (u64, u64) = redis::cmd("WAITAOF")
                .arg(u8::from(local))
                .arg(replicas)
                .arg(millis(timeout))
                .query(conn)?;
            if (local && got.0 < 1) || got.1 < u64::from(replicas) {
                return Ok(Err(format!(
                    "the claim reached the append-only file of {} local and {} of {replicas} replica servers within {}",
                    got.0,
                    got.1,
                    crate::error::rounded(timeout)
                )));
            }
        }
        Ok(Ok(()))
    }

    /// The async twin of [`OnceDurability::wait`].
    pub(super) async fn wait_async(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
        until: Instant,
    ) -> redis::RedisResult<Result<(), String>> {
        if let Some((replicas, timeout)) = self.replicas {
            let timeout = bounded(timeout, until);
            let got: u64 = redis::cmd("WAIT")
                .arg(replicas)
                .arg(millis(timeout))
                .query_async(conn)
                .await?;
            if got < u64::from(replicas) {
                return Ok(Err(format!(
                    "the claim reached {got} of {replicas} replicas within {}",
                    crate::error::rounded(timeout)
                )));
            }
        }
        if let Some((local, replicas, timeout)) = self.aof {
            let timeout = bounded(timeout, until);
            let got: (u64, u64) = redis::cmd("WAITAOF")
                .arg(u8::from(local))
                .arg(replicas)
                .arg(millis(timeout))
                .query_async(conn)
                .await?;
            if (local && got.0 < 1) || got.1 < u64::from(replicas) {
                return Ok(Err(format!(
                    "the claim reached the append-only file of {} local and {} of {replicas} replica servers within {}",
                    got.0,
                    got.1,
                    crate::error::rounded(timeout)
                )));
            }
        }
        Ok(Ok(()))
    }
}

/// The latest a claim made now, within a call bounded by `limit`, waits for its durability:
/// four fifths of the way, so that a wait that runs out still answers before the call's own
/// deadline and the claim is given back, never left behind when the call gives up on the
/// connection (a `once` claim left there would read as an unknown outcome).
pub(super) fn wait_until(limit: Duration) -> Instant {
    crate::clock::deadline_in(limit.saturating_sub(limit / 5))
}

/// `timeout`, cut to what is left until `until`.
fn bounded(timeout: Duration, until: Instant) -> Duration {
    timeout.min(until.saturating_duration_since(Instant::now()))
}

/// A wait's timeout as `WAIT` and `WAITAOF` take it: at least 1 ms (0 would wait forever), at
/// most [`MAX_DURATION`](crate::MAX_DURATION), rerun's "no limit" (the server refuses a timeout
/// whose deadline does not fit its clock, such as `Duration::MAX`'s).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.min(crate::MAX_DURATION).as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Whether the server runs in cluster mode (`cluster_enabled:1` in `INFO cluster`); `false`
/// where the server does not say (a managed service that hides `INFO`).
pub(super) fn cluster_enabled(conn: &mut Connection) -> bool {
    let info: Option<String> = redis::cmd("INFO").arg("cluster").query(conn).ok();
    info.is_some_and(|info| info.lines().any(|l| l.trim_end() == "cluster_enabled:1"))
}

/// The server's version as `(major, minor)`, from `INFO server`.
pub(super) fn server_version(conn: &mut Connection) -> Option<(u32, u32)> {
    let info: String = redis::cmd("INFO").arg("server").query(conn).ok()?;
    let line = info.lines().find(|l| l.starts_with("redis_version:"))?;
    let mut parts = line.trim_start_matches("redis_version:").trim().split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_says_what_it_loses() {
        for p in [
            Persistence::AofAlways,
            Persistence::AofEverySecond,
            Persistence::AofOsFlush,
            Persistence::Snapshots("3600 1".into()),
            Persistence::Nothing,
            Persistence::Unknown,
        ] {
            assert!(!p.loses().is_empty());
            assert!(!p.to_string().is_empty());
        }
        assert_eq!(millis(Duration::ZERO), 1);
        let longest = crate::MAX_DURATION.as_millis() as u64;
        assert_eq!(millis(Duration::MAX), longest);
        assert_eq!(
            millis(crate::MAX_DURATION + Duration::from_nanos(1)),
            longest
        );
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
    }

    #[test]
    fn waiting_for_the_server_s_own_file_needs_one() {
        let kept = [
            Persistence::AofAlways,
            Persistence::AofEverySecond,
            Persistence::AofOsFlush,
            Persistence::Unknown,
        ];
        let none = [
            Persistence::Snapshots("3600 1".into()),
            Persistence::Nothing,
        ];
        for p in kept.iter().chain(&none) {
            assert_eq!(aof_refused(false, p), None, "{p}");
        }
        for p in &kept {
            assert_eq!(aof_refused(true, p), None, "{p}");
        }
        for p in &none {
            let why = aof_refused(true, p).unwrap_or_default();
            assert!(why.contains("appendonly yes"), "{p}: {why}");
        }
    }
}
