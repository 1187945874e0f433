//! The replies of rerun's scripts, read back into records and claim answers.

use std::time::Duration;

use redis::Value;

use crate::error::{CorruptKind, Error};
use crate::fingerprint::Fingerprint;
use crate::holder::Holder;
use crate::key::Key;
use crate::record::{
    Abandoned, Busy, Claim, ClaimRequest, ClaimResponse, RecordView, Replay, Status,
};

use super::layout::{self, Unreadable};
use super::SCHEMA_VERSION;

/// Whether a claim script's reply grants the claim.
pub(super) fn is_claimed(reply: &Value) -> bool {
    matches!(reply, Value::Int(_)) || items(reply).first().and_then(text) == Some("claimed")
}

/// What a fenced script answered.
pub(super) enum Fenced {
    Ok,
    Lost,
    Version(u32),
}

pub(super) fn newer(key: &Key, found: u32) -> Error {
    Error::corrupt(
        key,
        CorruptKind::UnknownVersion {
            found,
            supported: SCHEMA_VERSION,
        },
    )
}

pub(super) fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

pub(super) fn text(v: &Value) -> Option<&str> {
    bytes(v).and_then(|b| std::str::from_utf8(b).ok())
}

pub(super) fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        _ => text(v)?.parse().ok(),
    }
}

pub(super) fn items(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) | Value::Set(items) => items,
        _ => &[],
    }
}

pub(super) fn unexpected(key: &Key, what: &str, reply: &Value) -> Error {
    Error::store_msg(
        Some(key),
        format!("{what}: Redis answered {reply:?}, which is not a reply of rerun's script"),
    )
}

pub(super) fn parse_version(key: &Key, found: Option<&str>) -> Error {
    let found = found
        .and_then(|f| f.parse::<u64>().ok())
        .map(|f| u32::try_from(f).unwrap_or(u32::MAX))
        .unwrap_or(u32::MAX);
    newer(key, found)
}

/// A completed record the claim script returned as it is stored (replay.lua): replayed when
/// the payload's fingerprint matches, else a mismatch; a damaged record is corrupt.
fn replay_of(req: &ClaimRequest<'_>, raw: &[u8]) -> Result<ClaimResponse, Error> {
    match layout::parse(raw) {
        Ok(r) if r.state == b'c' => {
            if r.fingerprint != &req.fingerprint.0[..] {
                return Ok(ClaimResponse::Mismatch);
            }
            Ok(ClaimResponse::Replay(Replay {
                fence: r.fence,
                result: r.result.to_vec(),
            }))
        }
        Ok(r) => Err(Error::corrupt(
            req.key,
            CorruptKind::Record(format!(
                "the claim script returned a record in state {:?}",
                char::from(r.state)
            )),
        )),
        Err(Unreadable::Newer(found)) => Err(newer(req.key, found)),
        Err(Unreadable::Corrupt(kind)) => Err(Error::corrupt(req.key, kind)),
    }
}

pub(super) fn parse_claim(req: &ClaimRequest<'_>, reply: &Value) -> Result<ClaimResponse, Error> {
    let key = req.key;
    match reply {
        Value::BulkString(raw) => return replay_of(req, raw),
        // Claimed, nothing abandoned: the script's fence, as an integer.
        Value::Int(fence) => {
            let fence = u64::try_from(*fence).map_err(|_| unexpected(key, "claiming", reply))?;
            return Ok(ClaimResponse::Claimed(Claim::granted(req, fence, None)));
        }
        _ => {}
    }
    let parts = items(reply);
    let bad = || unexpected(key, "claiming", reply);
    let tag = parts.first().and_then(text).ok_or_else(bad)?;
    let fence = || parts.get(1).and_then(number).ok_or_else(bad);
    match tag {
        "claimed" => {
            let abandoned = match parts.get(2) {
                None => None,
                Some(v) => Some(Abandoned {
                    fence: number(v).ok_or_else(bad)?,
                    holder: parts.get(3).and_then(text).and_then(Holder::decode),
                    outcome_unknown: parts.get(4).and_then(text) == Some("1"),
                }),
            };
            Ok(ClaimResponse::Claimed(Claim::granted(
                req,
                fence()?,
                abandoned,
            )))
        }
        "replay" => Ok(ClaimResponse::Replay(Replay {
            fence: fence()?,
            result: parts.get(2).and_then(bytes).ok_or_else(bad)?.to_vec(),
        })),
        "mismatch" => Ok(ClaimResponse::Mismatch),
        "busy" => {
            let holder = parts.get(2).and_then(text).unwrap_or("");
            let holder = Holder::decode(holder).ok_or_else(|| {
                Error::corrupt(
                    key,
                    CorruptKind::Record(format!("malformed holder {holder:?}")),
                )
            })?;
            Ok(ClaimResponse::Busy(Busy {
                fence: fence()?,
                holder,
                lease_remaining: Duration::from_micros(
                    parts.get(3).and_then(number).ok_or_else(bad)?,
                ),
            }))
        }
        "version" => Err(parse_version(key, parts.get(1).and_then(text))),
        "corrupt" => Err(Error::corrupt(
            key,
            CorruptKind::Record(parts.get(1).and_then(text).unwrap_or("").to_owned()),
        )),
        _ => Err(bad()),
    }
}

pub(super) fn parse_fenced(key: &Key, reply: &Value) -> Result<Fenced, Error> {
    match text(reply) {
        Some("ok") => Ok(Fenced::Ok),
        Some("lost") => Ok(Fenced::Lost),
        Some(v) if v.starts_with("version:") => {
            match parse_version(key, v.strip_prefix("version:")) {
                Error::Corrupt {
                    kind: CorruptKind::UnknownVersion { found, .. },
                    ..
                } => Ok(Fenced::Version(found)),
                other => Err(other),
            }
        }
        _ => Err(unexpected(key, "updating the record", reply)),
    }
}

/// Builds a view from `inspect.lua`'s reply; `None` for no record (or a tombstone).
pub(super) fn parse_view(
    key: &Key,
    record: &str,
    reply: &Value,
) -> Result<Option<RecordView>, Error> {
    let parts = items(reply);
    let bad = || unexpected(key, "reading the record", reply);
    let now = parts.first().and_then(number).ok_or_else(bad)?;
    let raw = match parts.get(1).and_then(text) {
        Some("none") => return Ok(None),
        Some("record") => parts.get(2).and_then(bytes).ok_or_else(bad)?,
        Some("other") => {
            let kind = parts.get(2).and_then(text).unwrap_or("another type");
            return Err(Error::corrupt(
                key,
                CorruptKind::Record(format!(
                    "the Redis key {record} holds a {kind}, not a rerun record"
                )),
            ));
        }
        _ => return Err(bad()),
    };
    // The key's PTTL; `None` when the key has no expiry.
    let pttl_ms = parts.get(3).and_then(number);
    view_of(key, now, raw, pttl_ms)
}

/// A record's view from its stored bytes, at `now` (Redis' clock, microseconds), with the
/// time its key has left in milliseconds (`None`: no expiry), which is where a completed record
/// that stores its time to live (see prelude.lua) has its times; `None` for a tombstone.
pub(super) fn view_of(
    key: &Key,
    now: u64,
    raw: &[u8],
    pttl_ms: Option<u64>,
) -> Result<Option<RecordView>, Error> {
    let r = match layout::parse(raw) {
        Ok(r) => r,
        Err(Unreadable::Newer(found)) => return Err(newer(key, found)),
        Err(Unreadable::Corrupt(kind)) => return Err(Error::corrupt(key, kind)),
    };
    let corrupt = |msg: String| Error::corrupt(key, CorruptKind::Record(msg));
    let status = match r.state {
        b'p' => Status::InProgress,
        b'c' => Status::Completed,
        b'r' => Status::Released,
        b'u' => Status::Unknown,
        b'f' => return Ok(None),
        other => return Err(corrupt(format!("unknown state {:?}", other as char))),
    };
    let fingerprint = Fingerprint::from_slice(r.fingerprint)
        .ok_or_else(|| corrupt("the fingerprint is not 32 bytes".into()))?;
    let holder = if r.holder.is_empty() {
        None
    } else {
        let s = std::str::from_utf8(r.holder).unwrap_or("");
        Some(Holder::decode(s).ok_or_else(|| corrupt(format!("malformed holder {s:?}")))?)
    };
    let left = |until: u64| (until > now).then(|| Duration::from_micros(until - now));
    // A completion that stored its time to live: Redis' expiry of the key is when it expires,
    // and it changed as long before as the time to live has run down.
    let relative = status == Status::Completed && r.changed == layout::RELATIVE;
    let pttl_us = pttl_ms.map(|ms| ms.saturating_mul(1000));
    let (expires_in, age) = if relative {
        (
            pttl_us.filter(|&us| us > 0).map(Duration::from_micros),
            pttl_us.map(|us| Duration::from_micros(r.expires.saturating_sub(us))),
        )
    } else {
        (
            (status == Status::Completed)
                .then(|| left(r.expires))
                .flatten(),
            (r.changed > 0).then(|| Duration::from_micros(now.saturating_sub(r.changed))),
        )
    };
    Ok(Some(RecordView {
        key: key.clone(),
        status,
        fence: r.fence,
        fingerprint,
        holder,
        once: r.once,
        lease_remaining: (status == Status::InProgress)
            .then(|| left(r.lease_until))
            .flatten(),
        expires_in,
        result: (status == Status::Completed).then(|| r.result.to_vec()),
        age,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_granted_with_nothing_abandoned_is_the_bare_fence() {
        let key = Key::new("s", "k");
        let fp = Fingerprint::of(&1).unwrap_or_else(|e| panic!("{e}"));
        let holder = Holder::current();
        let req = ClaimRequest {
            key: &key,
            fingerprint: &fp,
            holder: &holder,
            lease: Duration::from_secs(30),
            once: false,
            steal: None,
        };
        let reply = Value::Int(1_796_168_993_720_139);
        assert!(is_claimed(&reply));
        match parse_claim(&req, &reply) {
            Ok(ClaimResponse::Claimed(c)) => {
                assert_eq!(c.fence, 1_796_168_993_720_139);
                assert!(c.abandoned.is_none());
            }
            other => panic!("{other:?}"),
        }
        // A negative integer is no fence: an error, not a claim.
        let bad = Value::Int(-1);
        assert!(parse_claim(&req, &bad).is_err());
        // The table form still carries what was abandoned.
        let table = Value::Array(vec![
            Value::BulkString(b"claimed".to_vec()),
            Value::BulkString(b"0000000000000009".to_vec()),
            Value::BulkString(b"0000000000000008".to_vec()),
            Value::BulkString(holder.encode().into_bytes()),
            Value::BulkString(b"1".to_vec()),
        ]);
        assert!(is_claimed(&table));
        match parse_claim(&req, &table) {
            Ok(ClaimResponse::Claimed(c)) => {
                assert_eq!(c.fence, 9);
                let ab = c.abandoned.unwrap_or_else(|| panic!("abandoned"));
                assert_eq!((ab.fence, ab.outcome_unknown), (8, true));
                assert_eq!(ab.holder, Some(holder.clone()));
            }
            other => panic!("{other:?}"),
        }
    }
}
