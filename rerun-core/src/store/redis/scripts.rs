//! rerun's Lua scripts, one per transition, and their arguments.

use std::time::Duration;

use redis::Script;

use crate::record::ClaimRequest;

use super::layout::FORMAT;
use super::SCHEMA_VERSION;

/// How long a released record, or the tombstone `forget` leaves, keeps the key's last fence
/// (a day, in milliseconds).
pub(super) const FENCE_KEEP_MS: u64 = 24 * 60 * 60 * 1000;

/// The longest lease or ttl passed to Redis (100 years): keeps the scripts' microsecond
/// arithmetic exact in Lua's doubles.
pub(super) const MAX_SPAN_US: u64 = 100 * 365 * 24 * 60 * 60 * 1_000_000;

/// The scripts, loaded once at connect and called by their SHA.
pub(super) struct Scripts {
    pub(super) claim: Script,
    pub(super) complete: Script,
    pub(super) release: Script,
    pub(super) renew: Script,
    pub(super) mark_unknown: Script,
    pub(super) forget: Script,
    pub(super) inspect: Script,
    /// The sources, for `SCRIPT LOAD` at connect.
    pub(super) sources: Vec<String>,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        let sources: Vec<String> = [
            include_str!("claim.lua"),
            include_str!("complete.lua"),
            include_str!("release.lua"),
            include_str!("renew.lua"),
            include_str!("mark_unknown.lua"),
            include_str!("forget.lua"),
            include_str!("inspect.lua"),
        ]
        .iter()
        .enumerate()
        .map(|(i, code)| {
            let format = SCHEMA_VERSION.to_string();
            // The claim reads the record first and returns a completed one as it is stored,
            // before the shared code is built (see replay.lua).
            let mut source = if i == 0 {
                include_str!("replay.lua").replace("@FORMAT_BYTE@", &FORMAT.to_string()) + "\n"
            } else {
                String::new()
            };
            // Every script carries the shared layout code; its version is the format.
            source.push_str(&include_str!("prelude.lua").replace("@FORMAT@", &format));
            source.push('\n');
            source.push_str(code);
            source
        })
        .collect();
        let script = |i: usize| Script::new(&sources[i]);
        Scripts {
            claim: script(0),
            complete: script(1),
            release: script(2),
            renew: script(3),
            mark_unknown: script(4),
            forget: script(5),
            inspect: script(6),
            sources,
        }
    }
}

/// One argument of a script: bytes as they are, or a number in decimal (as the scripts
/// compare fences: `tostring` of what they stored).
#[derive(Clone, Copy)]
pub(super) enum Arg<'a> {
    Bytes(&'a [u8]),
    Num(u64),
}

impl redis::ToRedisArgs for Arg<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        match self {
            Arg::Bytes(b) => b.write_redis_args(out),
            Arg::Num(n) => n.write_redis_args(out),
        }
    }
}

/// The arguments of `claim.lua`.
pub(super) fn claim_args<'a>(req: &'a ClaimRequest<'_>, holder: &'a str) -> [Arg<'a>; 5] {
    [
        Arg::Bytes(&req.fingerprint.0),
        Arg::Bytes(holder.as_bytes()),
        Arg::Num(span_us(req.lease)),
        Arg::Bytes(if req.once { b"1" } else { b"0" }),
        match req.steal {
            Some(fence) => Arg::Num(fence),
            None => Arg::Bytes(b""),
        },
    ]
}

/// A lease or ttl in whole microseconds, capped (see [`MAX_SPAN_US`]).
pub(super) fn span_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_SPAN_US)
}
