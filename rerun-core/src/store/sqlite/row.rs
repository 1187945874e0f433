//! Reading a record row back.

use rusqlite::types::ValueRef;
use rusqlite::Row;

use crate::error::CorruptKind;
use crate::fingerprint::Fingerprint;
use crate::holder::{this_boot, Holder};
use crate::record::{LocalRecord, Status};

/// Reads a row's record columns (0..=9, 12 and 13) without allocating for the columns it only inspects.
pub(super) fn record_of(r: &Row<'_>) -> Result<LocalRecord, CorruptKind> {
    read_record(r, Columns::All)
}

/// [`record_of`] of a row whose result was left out of the query.
pub(super) fn record_of_shape(
    r: &Row<'_>,
    without_result: bool,
) -> Result<LocalRecord, CorruptKind> {
    read_record(
        r,
        if without_result {
            Columns::WithoutResult
        } else {
            Columns::All
        },
    )
}

/// [`record_of`] for a claim's decision, which is all the record is read for: a completed
/// record's holder, lease and age columns are left unread (zero and `None` in the record). A
/// completed record is judged on its fingerprint and expiry and answered with its fence and
/// result, so those columns are never used, and a replay (the most frequent claim) reads
/// four fewer.
pub(super) fn claim_record_of(r: &Row<'_>) -> Result<LocalRecord, CorruptKind> {
    read_record(r, Columns::ForClaim)
}

/// Which columns [`read_record`] reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Columns {
    All,
    /// All but the result, which the query left out.
    WithoutResult,
    /// What a claim's decision reads: all of them, except a completed record's holder, lease
    /// and age.
    ForClaim,
}

fn read_record(r: &Row<'_>, columns: Columns) -> Result<LocalRecord, CorruptKind> {
    let bad = |what: &str| CorruptKind::Record(format!("the {what} column is malformed"));
    let text = |i: usize, what: &str| match r.get_ref(i) {
        Ok(ValueRef::Text(t)) => std::str::from_utf8(t).map_err(|_| bad(what)),
        _ => Err(bad(what)),
    };
    let int = |i: usize, what: &str| r.get::<_, i64>(i).map_err(|_| bad(what));
    let status_text = text(0, "status")?;
    let status = Status::parse(status_text)
        .ok_or_else(|| CorruptKind::Record(format!("unknown status {status_text:?}")))?;
    let live = !(columns == Columns::ForClaim && status == Status::Completed);
    let fingerprint = match r.get_ref(2) {
        Ok(ValueRef::Blob(b)) => Fingerprint::from_slice(b),
        _ => None,
    }
    .ok_or_else(|| CorruptKind::Record("the fingerprint is not 32 bytes".into()))?;
    let holder = match live.then(|| r.get_ref(3)) {
        None | Some(Ok(ValueRef::Null)) => None,
        Some(Ok(ValueRef::Text(t))) => Some(
            std::str::from_utf8(t)
                .ok()
                .and_then(Holder::decode)
                .ok_or_else(|| bad("holder"))?,
        ),
        Some(_) => return Err(bad("holder")),
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
    if status == Status::Completed && result.is_none() && columns != Columns::WithoutResult {
        return Err(CorruptKind::Record(
            "a completed record has no result".into(),
        ));
    }
    let unsigned =
        |i: usize, what: &str| int(i, what).and_then(|v| u64::try_from(v).map_err(|_| bad(what)));
    let (lease_until_ns, lease_until_wall_ms, changed_wall_ms) = if live {
        (
            unsigned(6, "lease_until")?,
            int(12, "lease_wall")?,
            int(13, "changed_wall")?,
        )
    } else {
        (0, 0, 0)
    };
    Ok(LocalRecord {
        status,
        fence: unsigned(1, "fence")?,
        fingerprint,
        holder,
        once: int(4, "once")? != 0,
        boot_id,
        lease_until_ns,
        lease_until_wall_ms,
        changed_wall_ms,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rusqlite::{params, Connection};

    use super::*;
    use crate::clock::Now;
    use crate::key::Key;
    use crate::record::{decide, ClaimRequest};
    use crate::store::sqlite::sql;

    /// A database with rerun's schema and one record of `status`, written by another boot when
    /// `other_boot`.
    fn with_record(status: &str, other_boot: bool) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(sql::SCHEMA).unwrap();
        let fp = Fingerprint::of(&1).unwrap();
        let holder =
            (status == "in_progress" || status == "unknown").then(|| Holder::current().encode());
        let result = (status == "completed").then(|| vec![1u8, 2, 3]);
        let boot = if other_boot {
            "another boot"
        } else {
            this_boot()
        };
        conn.execute(
            "INSERT INTO rerun_records (scope, id, status, fence, fingerprint, holder, once, \
             boot_id, lease_until, lease_wall, expires_mono, expires_wall, result, changed_wall) \
             VALUES ('s', 'k', ?1, 7, ?2, ?3, 0, ?4, 5000, 6000, 9000, 10000, ?5, 4000)",
            params![status, &fp.0[..], holder, boot, result],
        )
        .unwrap();
        conn
    }

    fn read_both(conn: &Connection) -> (LocalRecord, Result<LocalRecord, CorruptKind>) {
        let mut stmt = conn.prepare(sql::READ_FOR_CLAIM).unwrap();
        let mut rows = stmt.query(params!["s", "k"]).unwrap();
        let row = rows.next().unwrap().unwrap();
        (claim_record_of(row).unwrap(), record_of(row))
    }

    /// A claim decides the same on the record it reads as on the whole record, for every state,
    /// on either boot, at every moment around the record's deadlines, for every request.
    #[test]
    fn a_claim_decides_on_its_columns_as_on_the_whole_record() {
        let key = Key::new("s", "k");
        let holder = Holder::current();
        let fps = [Fingerprint::of(&1).unwrap(), Fingerprint::of(&2).unwrap()];
        for status in ["in_progress", "completed", "released", "unknown"] {
            for other_boot in [false, true] {
                let (claimed, whole) = read_both(&with_record(status, other_boot));
                let whole = whole.unwrap();
                if status == "completed" {
                    assert_eq!(claimed.holder, None);
                    assert_eq!(
                        (claimed.lease_until_ns, claimed.lease_until_wall_ms),
                        (0, 0)
                    );
                    assert_eq!((claimed.fence, &claimed.result), (7, &whole.result));
                } else {
                    assert_eq!(claimed, whole, "{status}");
                }
                for mono_ns in [0, 4999, 5000, 8999, 9000, 20_000] {
                    for wall_ms in [0, 5999, 6000, 9999, 10_000, 20_000] {
                        let now = Now { mono_ns, wall_ms };
                        for fingerprint in &fps {
                            for (once, steal) in [(false, None), (true, None), (false, Some(7))] {
                                let req = ClaimRequest {
                                    key: &key,
                                    fingerprint,
                                    holder: &holder,
                                    lease: Duration::from_secs(1),
                                    once,
                                    steal,
                                };
                                assert_eq!(
                                    decide(Some(&claimed), &req, now, this_boot()),
                                    decide(Some(&whole), &req, now, this_boot()),
                                    "{status} {other_boot} {now:?} {once} {steal:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The columns a claim leaves unread are those of a completed record only: damaged there, they
    /// do not stop a replay; damaged in an open claim, they are still corrupt.
    #[test]
    fn only_a_completed_records_unused_columns_go_unread() {
        for (status, corrupt_for_claim) in [("completed", false), ("in_progress", true)] {
            let conn = with_record(status, false);
            conn.execute("UPDATE rerun_records SET lease_wall = 'x'", [])
                .unwrap();
            let mut stmt = conn.prepare(sql::READ_FOR_CLAIM).unwrap();
            let mut rows = stmt.query(params!["s", "k"]).unwrap();
            let row = rows.next().unwrap().unwrap();
            assert_eq!(claim_record_of(row).is_err(), corrupt_for_claim, "{status}");
            assert!(record_of(row).is_err(), "{status}");
        }
    }
}
