//! Reading a record row back.

use rusqlite::types::ValueRef;
use rusqlite::Row;

use crate::error::CorruptKind;
use crate::fingerprint::Fingerprint;
use crate::holder::{this_boot, Holder};
use crate::record::{LocalRecord, Status};

/// Reads a row's record columns (0..=9, 12 and 13) without allocating for the columns it only inspects.
pub(super) fn record_of(r: &Row<'_>) -> Result<LocalRecord, CorruptKind> {
    record_of_shape(r, false)
}

/// [`record_of`] of a row whose result was left out of the query.
pub(super) fn record_of_shape(
    r: &Row<'_>,
    without_result: bool,
) -> Result<LocalRecord, CorruptKind> {
    let bad = |what: &str| CorruptKind::Record(format!("the {what} column is malformed"));
    let text = |i: usize, what: &str| match r.get_ref(i) {
        Ok(ValueRef::Text(t)) => std::str::from_utf8(t).map_err(|_| bad(what)),
        _ => Err(bad(what)),
    };
    let int = |i: usize, what: &str| r.get::<_, i64>(i).map_err(|_| bad(what));
    let status_text = text(0, "status")?;
    let status = Status::parse(status_text)
        .ok_or_else(|| CorruptKind::Record(format!("unknown status {status_text:?}")))?;
    let fingerprint = match r.get_ref(2) {
        Ok(ValueRef::Blob(b)) => Fingerprint::from_slice(b),
        _ => None,
    }
    .ok_or_else(|| CorruptKind::Record("the fingerprint is not 32 bytes".into()))?;
    let holder = match r.get_ref(3) {
        Ok(ValueRef::Null) => None,
        Ok(ValueRef::Text(t)) => Some(
            std::str::from_utf8(t)
                .ok()
                .and_then(Holder::decode)
                .ok_or_else(|| bad("holder"))?,
        ),
        _ => return Err(bad("holder")),
    };
    let boot = text(5, "boot_id")?;
    let boot_id = if boot == this_boot() {
        std::borrow::Cow::Borrowed(this_boot())
    } else {
        std::borrow::Cow::Owned(boot.to_owned())
    };
    let result = match r.get_ref(9) {
        Ok(ValueRef::Null) => None,
        Ok(ValueRef::Blob(b)) => Some(b.to_vec()),
        _ => return Err(bad("result")),
    };
    if status == Status::Completed && result.is_none() && !without_result {
        return Err(CorruptKind::Record(
            "a completed record has no result".into(),
        ));
    }
    let unsigned =
        |i: usize, what: &str| int(i, what).and_then(|v| u64::try_from(v).map_err(|_| bad(what)));
    Ok(LocalRecord {
        status,
        fence: unsigned(1, "fence")?,
        fingerprint,
        holder,
        once: int(4, "once")? != 0,
        boot_id,
        lease_until_ns: unsigned(6, "lease_until")?,
        lease_until_wall_ms: int(12, "lease_wall")?,
        changed_wall_ms: int(13, "changed_wall")?,
        expires_mono_ns: unsigned(7, "expires_mono")?,
        expires_wall_ms: int(8, "expires_wall")?,
        result,
    })
}

/// A monotonic time for an INTEGER column: SQLite integers are signed 64-bit, so a time past
/// `i64::MAX` nanoseconds (an enormous ttl) is stored as `i64::MAX` instead of wrapping negative.
pub(super) fn to_sql_ns(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}
