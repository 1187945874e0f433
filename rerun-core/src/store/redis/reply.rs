//! The replies of rerun's scripts, read back into records and claim answers.

use std::time::Duration;

use redis::Value;

use crate::error::{CorruptKind, Error};
use crate::fingerprint::Fingerprint;
use crate::holder::Holder;
use crate::key::Key;
use crate::record::{
    Abandoned, Busy, Claim, ClaimRequest, ClaimResponse, Fence, RecordView, Replay, Status,
};

use super::SCHEMA_VERSION;

/// Whether a claim script's reply grants the claim.
pub(super) fn is_claimed(reply: &Value) -> bool {
    items(reply).first().and_then(text) == Some("claimed")
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

pub(super) fn parse_claim(req: &ClaimRequest<'_>, reply: &Value) -> Result<ClaimResponse, Error> {
    let key = req.key;
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
    match parts.get(1).and_then(text) {
        Some("none") => return Ok(None),
        Some("hash") => {}
        Some(other) => {
            return Err(Error::corrupt(
                key,
                CorruptKind::Record(format!(
                    "the Redis key {record} holds a {other}, not rerun's hash"
                )),
            ))
        }
        None => return Err(bad()),
    }
    // A missing field is nil to a RESP2 client and `false` to a RESP3 one.
    let field = |i: usize| {
        parts
            .get(i + 2)
            .filter(|v| !matches!(v, Value::Nil | Value::Boolean(false)))
    };
    let corrupt = |msg: &str| Error::corrupt(key, CorruptKind::Record(msg.to_owned()));
    let status = match field(1).and_then(text) {
        None | Some("forgotten") => return Ok(None),
        Some(s) => s,
    };
    let version = field(0)
        .and_then(number)
        .ok_or_else(|| corrupt("the record has no schema version"))?;
    if version > u64::from(SCHEMA_VERSION) {
        return Err(newer(key, u32::try_from(version).unwrap_or(u32::MAX)));
    }
    let status =
        Status::parse(status).ok_or_else(|| corrupt(&format!("unknown status {status:?}")))?;
    let fence: Fence = field(2)
        .and_then(number)
        .ok_or_else(|| corrupt("the record has no fence"))?;
    let fingerprint = field(3)
        .and_then(bytes)
        .and_then(Fingerprint::from_slice)
        .ok_or_else(|| corrupt("the fingerprint is not 32 bytes"))?;
    let holder = match field(4) {
        None => None,
        Some(v) => {
            let s = text(v).unwrap_or("");
            Some(Holder::decode(s).ok_or_else(|| corrupt(&format!("malformed holder {s:?}")))?)
        }
    };
    let left = |i: usize| {
        field(i)
            .and_then(number)
            .filter(|until| *until > now)
            .map(|until| Duration::from_micros(until - now))
    };
    let result = field(8).and_then(bytes).map(<[u8]>::to_vec);
    if status == Status::Completed && result.is_none() {
        return Err(corrupt("a completed record has no result"));
    }
    Ok(Some(RecordView {
        key: key.clone(),
        status,
        fence,
        fingerprint,
        holder,
        once: field(5).and_then(text) == Some("1"),
        lease_remaining: (status == Status::InProgress).then(|| left(6)).flatten(),
        expires_in: (status == Status::Completed).then(|| left(7)).flatten(),
        result: (status == Status::Completed).then_some(result).flatten(),
        age: None,
    }))
}
