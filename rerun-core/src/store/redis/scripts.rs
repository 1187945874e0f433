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

/// The scripts, loaded once at connect and called by their SHA: the form of every transition
/// where the store calls no functions, and the fallback of a function refused before it ran.
pub(super) struct Scripts {
    /// One per transition, in [`Transition::ALL`]'s order.
    scripts: Vec<Script>,
    /// The sources, for `SCRIPT LOAD` at connect.
    pub(super) sources: Vec<String>,
}

/// The transitions, in the order of [`sources`] and of the functions of the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Transition {
    Claim,
    Complete,
    Release,
    Renew,
    MarkUnknown,
    Forget,
    Inspect,
}

impl Transition {
    /// Every transition, in order.
    pub(super) const ALL: [Transition; 7] = [
        Transition::Claim,
        Transition::Complete,
        Transition::Release,
        Transition::Renew,
        Transition::MarkUnknown,
        Transition::Forget,
        Transition::Inspect,
    ];

    /// The transition's name, as its `.lua` file and its function are named.
    pub(super) fn name(self) -> &'static str {
        match self {
            Transition::Claim => "claim",
            Transition::Complete => "complete",
            Transition::Release => "release",
            Transition::Renew => "renew",
            Transition::MarkUnknown => "mark_unknown",
            Transition::Forget => "forget",
            Transition::Inspect => "inspect",
        }
    }

    /// The transition's own code, a chunk that reads `KEYS` and `ARGV` and returns the reply,
    /// and for the claim the replay fast path that goes before the shared code (replay.lua).
    pub(super) fn code(self) -> (Option<String>, &'static str) {
        let code = match self {
            Transition::Claim => include_str!("claim.lua"),
            Transition::Complete => include_str!("complete.lua"),
            Transition::Release => include_str!("release.lua"),
            Transition::Renew => include_str!("renew.lua"),
            Transition::MarkUnknown => include_str!("mark_unknown.lua"),
            Transition::Forget => include_str!("forget.lua"),
            Transition::Inspect => include_str!("inspect.lua"),
        };
        let replay = (self == Transition::Claim)
            .then(|| include_str!("replay.lua").replace("@FORMAT_BYTE@", &FORMAT.to_string()));
        (replay, code)
    }
}

/// The shared layout code every transition uses (prelude.lua); its version is the format.
pub(super) fn prelude() -> String {
    include_str!("prelude.lua").replace("@FORMAT@", &SCHEMA_VERSION.to_string())
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        let prelude = prelude();
        let sources: Vec<String> = Transition::ALL
            .iter()
            .map(|t| {
                // The claim reads the record first and returns a completed one as it is
                // stored, before the shared code is built (see replay.lua).
                let (replay, code) = t.code();
                let mut source = replay.map(|r| r + "\n").unwrap_or_default();
                // Every script carries the shared layout code.
                source.push_str(&prelude);
                source.push('\n');
                source.push_str(code);
                source
            })
            .collect();
        Scripts {
            scripts: sources.iter().map(|s| Script::new(s)).collect(),
            sources,
        }
    }

    /// The script of a transition.
    pub(super) fn get(&self, t: Transition) -> &Script {
        // Built from `Transition::ALL`, whose order is the enum's: every index is there.
        &self.scripts[t as usize]
    }
}

/// One argument of a script: bytes as they are, or a number in decimal (as the scripts
/// compare fences: `tostring` of what they stored).
#[derive(Clone, Copy)]
pub(super) enum Arg<'a> {
    Bytes(&'a [u8]),
    Num(u64),
    /// A number as a record stores it: at least 16 digits, zero-padded, so that a script
    /// compares it with a record's field as bytes, or writes it into one, without converting
    /// it (complete.lua).
    Field(u64),
}

impl Arg<'_> {
    /// At least as many bytes as the argument takes on the wire (a number: its longest
    /// decimal), so that a command can be sized before it is written.
    pub(super) fn len_bound(&self) -> usize {
        match self {
            Arg::Bytes(b) => b.len(),
            Arg::Num(_) | Arg::Field(_) => 20,
        }
    }
}

impl redis::ToRedisArgs for Arg<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        match self {
            Arg::Bytes(b) => b.write_redis_args(out),
            Arg::Num(n) => n.write_redis_args(out),
            Arg::Field(n) => out.write_arg(padded_fence(*n).digits()),
        }
    }
}

/// A fence's digits, zero-padded to the record's 16 (a fence that needs more keeps them all).
pub(super) struct PaddedFence {
    buf: [u8; 20],
    len: usize,
}

impl PaddedFence {
    pub(super) fn digits(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

pub(super) fn padded_fence(n: u64) -> PaddedFence {
    use std::io::Write;
    let mut buf = [0u8; 20];
    let mut rest = &mut buf[..];
    // Twenty bytes hold every u64's digits, so the write cannot run out of room.
    let _ = write!(rest, "{n:016}");
    let len = 20 - rest.len();
    PaddedFence { buf, len }
}

/// The arguments of `claim.lua`: one string packing the fingerprint, the once flag, the lease
/// and the holder (see the script), then the fence to steal only when there is one. The
/// server makes a Lua string of every argument on every call, a replay's included, which only
/// reads the record: three arguments cost a replay 8% of the server's throughput over one
/// (`redis-benchmark`, pipelined, a function that only `GET`s), so the claim's own fields
/// travel as one, which the script cuts apart only when it claims.
pub(super) struct ClaimArgs {
    packed: smallvec::SmallVec<[u8; 192]>,
    steal: Option<u64>,
}

/// [`ClaimArgs`] as the arguments a script call takes.
pub(super) struct ClaimArgList<'a> {
    args: [Arg<'a>; 2],
    len: usize,
}

impl<'a> std::ops::Deref for ClaimArgList<'a> {
    type Target = [Arg<'a>];
    fn deref(&self) -> &[Arg<'a>] {
        &self.args[..self.len]
    }
}

impl ClaimArgs {
    /// The arguments, borrowed.
    pub(super) fn list(&self) -> ClaimArgList<'_> {
        ClaimArgList {
            args: [Arg::Bytes(&self.packed), Arg::Num(self.steal.unwrap_or(0))],
            len: if self.steal.is_some() { 2 } else { 1 },
        }
    }
}

/// The arguments of `claim.lua` for `req`, claimed by `holder` (encoded, at most
/// [`MAX_HOLDER`](super::layout::MAX_HOLDER) bytes, which the store checks before): see
/// [`ClaimArgs`]. The packed string is `1` for an at-most-once claim or `0`, the lease in
/// microseconds as 16 digits (zero-padded; [`MAX_SPAN_US`] has 16), then the tail of the
/// record a claim writes, which the script copies as it is: the fingerprint (32 bytes), the
/// holder's length in 4 digits and the holder.
pub(super) fn claim_args(req: &ClaimRequest<'_>, holder: &str) -> ClaimArgs {
    let mut packed = smallvec::SmallVec::new();
    packed.push(if req.once { b'1' } else { b'0' });
    packed.extend_from_slice(padded_fence(span_us(req.lease)).digits());
    packed.extend_from_slice(&req.fingerprint.0);
    let len = holder.len();
    packed
        .extend([len / 1000 % 10, len / 100 % 10, len / 10 % 10, len % 10].map(|d| b'0' + d as u8));
    packed.extend_from_slice(holder.as_bytes());
    ClaimArgs {
        packed,
        steal: req.steal,
    }
}

/// The arguments of `complete.lua`: the claim's fence as the record stores it, the result,
/// and how long to keep it, rounded down to a whole millisecond (Redis' expiry has no finer
/// one, and a record is never kept longer than asked), once in milliseconds for `PX` and once
/// in microseconds as the record's expiry field stores it.
pub(super) fn complete_args(fence: u64, result: &[u8], ttl: Duration) -> [Arg<'_>; 4] {
    let ms = span_us(ttl) / 1000;
    [
        Arg::Field(fence),
        Arg::Bytes(result),
        Arg::Num(ms),
        Arg::Field(ms * 1000),
    ]
}

/// A lease or ttl in whole microseconds, capped (see [`MAX_SPAN_US`]).
pub(super) fn span_us(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_SPAN_US)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transition_has_its_script_at_its_index() {
        let scripts = Scripts::new();
        assert_eq!(scripts.sources.len(), Transition::ALL.len());
        for (i, t) in Transition::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i, "{t:?} is out of order in Transition::ALL");
            let (_, code) = t.code();
            assert!(scripts.sources[i].ends_with(code), "{t:?}");
            assert_eq!(
                scripts.get(*t).get_hash(),
                Script::new(&scripts.sources[i]).get_hash()
            );
        }
    }

    #[test]
    fn a_claim_packs_its_fields_where_the_script_cuts_them_and_sends_a_steal_alone() {
        use redis::ToRedisArgs;
        let key = crate::Key::from_parts("s", "k");
        let fingerprint = crate::Fingerprint([7; 32]);
        let holder = crate::Holder::current();
        let encoded = holder.encode();
        for (once, steal, lease, lease_digits) in [
            (false, None, Duration::from_millis(1500), "0000000001500000"),
            (true, None, Duration::ZERO, "0000000000000000"),
            (false, Some(42), Duration::MAX, "3153600000000000"),
            (true, Some(42), Duration::from_secs(30), "0000000030000000"),
        ] {
            let req = ClaimRequest {
                key: &key,
                fingerprint: &fingerprint,
                holder: &holder,
                lease,
                once,
                steal,
            };
            let packed = claim_args(&req, &encoded);
            let sent: Vec<Vec<u8>> = packed
                .list()
                .iter()
                .flat_map(|a| a.to_redis_args())
                .collect();
            let claim = &sent[0];
            // claim.lua: string.sub(packed, 1, 1), (2, 17), the tail (18): fingerprint (18,
            // 49), the holder's length, the holder (54).
            assert_eq!(claim[0], if once { b'1' } else { b'0' });
            assert_eq!(&claim[1..17], lease_digits.as_bytes(), "{lease:?}");
            assert_eq!(claim[17..49], fingerprint.0[..]);
            assert_eq!(&claim[49..53], format!("{:04}", encoded.len()).as_bytes());
            assert_eq!(&claim[53..], encoded.as_bytes());
            let tail: Vec<&[u8]> = sent[1..].iter().map(Vec::as_slice).collect();
            match steal {
                Some(_) => assert_eq!(tail, [&b"42"[..]]),
                None => assert!(tail.is_empty(), "once {once}"),
            }
        }
    }

    #[test]
    fn a_completion_sends_its_ttl_in_whole_milliseconds_twice() {
        use redis::ToRedisArgs;
        for (ttl, ms, field) in [
            (Duration::ZERO, "0", "0000000000000000"),
            (Duration::from_micros(999), "0", "0000000000000000"),
            (Duration::from_micros(1_999), "1", "0000000000001000"),
            (Duration::from_secs(60), "60000", "0000000060000000"),
            (Duration::MAX, "3153600000000", "3153600000000000"),
        ] {
            let sent: Vec<Vec<u8>> = complete_args(7, b"r\0", ttl)
                .iter()
                .flat_map(|a| a.to_redis_args())
                .collect();
            let sent: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
            assert_eq!(
                sent,
                [
                    &b"0000000000000007"[..],
                    b"r\0",
                    ms.as_bytes(),
                    field.as_bytes()
                ],
                "{ttl:?}"
            );
        }
    }

    #[test]
    fn a_fence_is_sent_as_the_record_stores_it() {
        for (fence, sent) in [
            (0, "0000000000000000"),
            (7, "0000000000000007"),
            (1_733_097_600_123_456, "1733097600123456"),
            (9_007_199_254_740_991, "9007199254740991"),
            (10_000_000_000_000_000, "10000000000000000"),
            (u64::MAX, "18446744073709551615"),
        ] {
            assert_eq!(padded_fence(fence).digits(), sent.as_bytes(), "{fence}");
        }
    }
}
