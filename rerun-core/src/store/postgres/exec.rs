//! The store operations, written once as `async fn`s over one [`Session`]: the sync half runs
//! them on a connection's own runtime, the async half awaits them.

use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::error::{CorruptKind, Error};
use crate::fingerprint::Fingerprint;
use crate::holder::Holder;
use crate::key::Key;
use crate::record::{
    Abandoned, Busy, Claim, ClaimRequest, ClaimResponse, RecordView, Replay, Status,
};
use crate::store::postgres::error::store_error;
use crate::store::postgres::pool::Session;
use crate::store::postgres::sql::{from_text, to_text, ScanShape, Sql, Stmt};
use crate::store::{decode_cursor, encode_cursor, ScanFilter, ScanPage, Unreadable};

/// How often a claim re-runs its statement when a concurrent claim changed the record between
/// the statement's snapshot and its row lock. Each re-run sees a newer snapshot; running out
/// means the key is being claimed faster than one round trip, which is a store failure.
const CLAIM_RACES: usize = 16;

/// Durations are sent as microseconds in a `float8` (exact up to 285 years); longer ones are
/// cut to 100 years, which keeps `now() + interval` inside PostgreSQL's timestamp range.
fn micros(d: Duration) -> f64 {
    const CAP: u128 = 100 * 365 * 24 * 3600 * 1_000_000;
    d.as_micros().min(CAP) as f64
}

/// One store operation.
pub(crate) enum Op<'a> {
    Claim(&'a ClaimRequest<'a>),
    Complete(&'a Claim, &'a [u8], Duration),
    Release(&'a Claim),
    Renew(&'a Claim, Duration),
    MarkUnknown(&'a Claim),
    Forget(&'a Key),
    ForgetIf(&'a Key, u64),
    Inspect(&'a Key),
    Scan(&'a ScanFilter, Option<&'a str>, usize),
    Purge(usize),
}

/// What an [`Op`] returns.
pub(crate) enum Reply {
    Claim(ClaimResponse),
    Done,
    Forgot(bool),
    Record(Option<RecordView>),
    Page(ScanPage),
    Purged(u64),
}

/// A driver error, and whether it broke the connection.
pub(crate) struct Failure {
    pub(crate) error: Error,
    pub(crate) broken: bool,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure {
            error,
            broken: false,
        }
    }
}

impl<'a> Op<'a> {
    /// The key the operation concerns, for messages.
    pub(crate) fn key(&self) -> Option<&'a Key> {
        match self {
            Op::Claim(r) => Some(r.key),
            Op::Complete(c, ..) | Op::Release(c) | Op::Renew(c, _) | Op::MarkUnknown(c) => {
                Some(&c.key)
            }
            Op::Forget(k) | Op::ForgetIf(k, _) | Op::Inspect(k) => Some(k),
            Op::Scan(..) | Op::Purge(_) => None,
        }
    }

    /// The lease of the claim the operation is made for, if any: it bounds the call.
    pub(crate) fn lease(&self) -> Option<Duration> {
        match self {
            Op::Complete(c, ..) | Op::Release(c) | Op::MarkUnknown(c) => Some(c.lease),
            Op::Renew(_, lease) => Some(*lease),
            _ => None,
        }
    }

    /// What the operation does, in words, for messages.
    pub(crate) fn what(&self) -> &'static str {
        match self {
            Op::Claim(_) => "claiming the key",
            Op::Complete(..) => "recording the result",
            Op::Release(_) => "releasing the claim",
            Op::Renew(..) => "renewing the lease",
            Op::MarkUnknown(_) => "marking the outcome unknown",
            Op::Forget(_) | Op::ForgetIf(..) => "forgetting the key",
            Op::Inspect(_) => "reading the record",
            Op::Scan(..) => "scanning records",
            Op::Purge(_) => "purging expired records",
        }
    }

    fn fail(&self, e: tokio_postgres::Error) -> Failure {
        let broken = crate::store::postgres::pool::is_connection_error(&e);
        Failure {
            error: store_error(self.key(), format!("PostgreSQL: {}", self.what()), e),
            broken,
        }
    }
}

/// Runs one operation on a session.
pub(crate) async fn exec(session: &mut Session, sql: &Sql, op: Op<'_>) -> Result<Reply, Failure> {
    match op {
        Op::Claim(req) => claim(session, sql, &op, req).await.map(Reply::Claim),
        Op::Complete(c, result, ttl) => {
            let ttl = micros(ttl);
            fenced(session, sql, &op, Stmt::Complete, c, &[&result, &ttl]).await
        }
        Op::Release(c) => fenced(session, sql, &op, Stmt::Release, c, &[]).await,
        Op::Renew(c, lease) => {
            let lease = micros(lease);
            fenced(session, sql, &op, Stmt::Renew, c, &[&lease]).await
        }
        Op::MarkUnknown(c) => fenced(session, sql, &op, Stmt::MarkUnknown, c, &[]).await,
        Op::Forget(key) => {
            let stmt = session
                .statement(sql, Stmt::Forget)
                .await
                .map_err(|e| op.fail(e))?;
            let n = session
                .client
                .execute(&stmt, &[&to_text(key.scope()), &to_text(key.id())])
                .await
                .map_err(|e| op.fail(e))?;
            Ok(Reply::Forgot(n > 0))
        }
        Op::ForgetIf(key, fence) => {
            let stmt = session
                .statement(sql, Stmt::ForgetIf)
                .await
                .map_err(|e| op.fail(e))?;
            let fence = fence_param(key, fence)?;
            let n = session
                .client
                .execute(&stmt, &[&to_text(key.scope()), &to_text(key.id()), &fence])
                .await
                .map_err(|e| op.fail(e))?;
            Ok(Reply::Forgot(n > 0))
        }
        Op::Inspect(key) => {
            let stmt = session
                .statement(sql, Stmt::Inspect)
                .await
                .map_err(|e| op.fail(e))?;
            let row = session
                .client
                .query_opt(&stmt, &[&to_text(key.scope()), &to_text(key.id())])
                .await
                .map_err(|e| op.fail(e))?;
            Ok(Reply::Record(row.map(|r| view(&r)).transpose()?))
        }
        Op::Scan(filter, cursor, limit) => {
            let after = cursor.map(decode_text_cursor).transpose()?;
            let limit = limit.max(1);
            // The range of stored scopes that start with the stored prefix: escaping keeps
            // prefixes (no escape is a prefix of another), so it holds exactly the scopes that
            // start with the prefix.
            let prefix = filter.scope_prefix.as_deref().map(to_text);
            let upper = prefix.as_deref().and_then(crate::store::upper_bound);
            let open = [Status::InProgress, Status::Unknown];
            let shape = ScanShape {
                prefix_upper: upper.is_some(),
                prefix_lower: filter.scope_prefix.is_some() && upper.is_none(),
                statuses: !filter.statuses.is_empty(),
                open_only: !filter.statuses.is_empty()
                    && filter.statuses.iter().all(|s| open.contains(s)),
                skip_results: filter.skip_results,
            };
            let stmt = session
                .scan_statement(sql, &shape)
                .await
                .map_err(|e| op.fail(e))?;
            let from_start = after.is_none();
            let (scope, id) = after.unwrap_or_default();
            let limit_param = i64::try_from(limit).unwrap_or(i64::MAX);
            let statuses: Vec<&str> = filter.statuses.iter().map(|s| s.as_str()).collect();
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&scope, &id, &from_start, &limit_param];
            if let Some(prefix) = &prefix {
                params.push(prefix);
            }
            if let Some(upper) = &upper {
                params.push(upper);
            }
            if shape.statuses {
                params.push(&statuses);
            }
            let rows = session
                .client
                .query(&stmt, &params)
                .await
                .map_err(|e| op.fail(e))?;
            let mut page = ScanPage::default();
            for row in &rows {
                // Read past a damaged row: one must not hide the others.
                match view(row) {
                    Ok(record) => page.records.push(record),
                    Err(e) => page.unreadable.push(Unreadable::of(e)?),
                }
            }
            // The next page starts after the last row as stored, damaged or not.
            page.next = (rows.len() == limit)
                .then(|| rows.last().map(text_cursor))
                .flatten();
            Ok(Reply::Page(page))
        }
        Op::Purge(limit) => {
            let stmt = session
                .statement(sql, Stmt::Purge)
                .await
                .map_err(|e| op.fail(e))?;
            let limit = limit.min(i64::MAX as usize) as i64;
            let n = session
                .client
                .execute(&stmt, &[&limit])
                .await
                .map_err(|e| op.fail(e))?;
            Ok(Reply::Purged(n))
        }
    }
}

/// A fenced update: exactly one row changes, or the claim was lost.
async fn fenced(
    session: &mut Session,
    sql: &Sql,
    op: &Op<'_>,
    which: Stmt,
    claim: &Claim,
    extra: &[&(dyn ToSql + Sync)],
) -> Result<Reply, Failure> {
    let stmt = session
        .statement(sql, which)
        .await
        .map_err(|e| op.fail(e))?;
    let fence = fence_param(&claim.key, claim.fence)?;
    let (scope, id) = (to_text(claim.key.scope()), to_text(claim.key.id()));
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&scope, &id, &fence];
    params.extend_from_slice(extra);
    let n = session
        .client
        .execute(&stmt, &params)
        .await
        .map_err(|e| op.fail(e))?;
    if n == 1 {
        Ok(Reply::Done)
    } else {
        Err(Error::LeaseLost {
            key: claim.key.clone(),
        }
        .into())
    }
}

fn fence_param(key: &Key, fence: u64) -> Result<i64, Error> {
    i64::try_from(fence).map_err(|_| {
        Error::corrupt(
            key,
            CorruptKind::Record(format!("fence {fence} is beyond PostgreSQL's bigint")),
        )
    })
}

async fn claim(
    session: &mut Session,
    sql: &Sql,
    op: &Op<'_>,
    req: &ClaimRequest<'_>,
) -> Result<ClaimResponse, Failure> {
    let key = req.key;
    let stmt = session
        .statement(sql, Stmt::Claim)
        .await
        .map_err(|e| op.fail(e))?;
    let holder = req.holder.encode();
    let lease = micros(req.lease);
    let steal = req.steal.map(|f| fence_param(key, f)).transpose()?;
    let (scope, id) = (to_text(key.scope()), to_text(key.id()));
    let fingerprint = &req.fingerprint.0[..];
    for _ in 0..CLAIM_RACES {
        let row = session
            .client
            .query_one(
                &stmt,
                &[
                    &scope,
                    &id,
                    &fingerprint,
                    &holder,
                    &req.once,
                    &lease,
                    &steal,
                ],
            )
            .await
            .map_err(|e| op.fail(e))?;
        if let Some(answer) = answer(key, req, &row)? {
            return Ok(answer);
        }
    }
    Err(Error::store_msg(
        Some(key),
        format!(
            "PostgreSQL: claiming the key: the record changed under {CLAIM_RACES} concurrent claims in a row"
        ),
    )
    .into())
}

fn col<'r, T: tokio_postgres::types::FromSql<'r>>(
    key: &Key,
    row: &'r Row,
    i: usize,
) -> Result<T, Error> {
    row.try_get(i).map_err(|e| {
        Error::corrupt(
            key,
            CorruptKind::Record(format!("column {i} has an unexpected type: {e}")),
        )
    })
}

/// A `timestamptz` as the server sends it: microseconds since 2000-01-01 UTC, `infinity` and
/// `-infinity` as the largest and smallest `i64`. Only compared and subtracted, never turned
/// into a calendar time, so no value of the column can make it fail.
#[derive(Clone, Copy, Debug)]
struct PgTime(i64);

impl PgTime {
    /// How long after `now` this time is; `None` when it is not later.
    fn after(self, now: PgTime) -> Option<Duration> {
        let us = i128::from(self.0) - i128::from(now.0);
        (us > 0).then(|| Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX)))
    }

    /// How long before this time `then` was; zero when it was not earlier.
    fn since(self, then: PgTime) -> Duration {
        self.after(then).unwrap_or(Duration::ZERO)
    }
}

impl<'a> tokio_postgres::types::FromSql<'a> for PgTime {
    fn from_sql(
        _: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<PgTime, Box<dyn std::error::Error + Sync + Send>> {
        let bytes: [u8; 8] = raw
            .try_into()
            .map_err(|_| format!("a timestamptz of {} bytes, not 8", raw.len()))?;
        Ok(PgTime(i64::from_be_bytes(bytes)))
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        *ty == tokio_postgres::types::Type::TIMESTAMPTZ
    }
}

/// Reads the claim statement's row; `None` means a concurrent claim won the race between the
/// snapshot and the row lock, and the statement must run again.
fn answer(key: &Key, req: &ClaimRequest<'_>, row: &Row) -> Result<Option<ClaimResponse>, Error> {
    let claimed: Option<i64> = col(key, row, 0)?;
    // Text columns borrowed from the row: only a replayed result is copied out of it.
    let status: Option<&str> = col(key, row, 1)?;
    let fence: Option<i64> = col(key, row, 2)?;
    let holder: Option<&str> = col(key, row, 4)?;
    let once: Option<bool> = col(key, row, 5)?;
    let status = match status {
        None => None,
        Some(s) => Some(Status::parse(s).ok_or_else(|| {
            Error::corrupt(key, CorruptKind::Record(format!("unknown status {s:?}")))
        })?),
    };
    let fence = fence.map(|f| f as u64);
    if let Some(new_fence) = claimed {
        // The compare-and-set in the statement guarantees `cur` is the version replaced.
        let abandoned = match (status, fence) {
            (Some(Status::InProgress), Some(f)) => Some(Abandoned {
                fence: f,
                holder: holder.and_then(Holder::decode),
                outcome_unknown: once.unwrap_or(false),
            }),
            (Some(Status::Unknown), Some(f)) => Some(Abandoned {
                fence: f,
                holder: holder.and_then(Holder::decode),
                outcome_unknown: true,
            }),
            _ => None,
        };
        return Ok(Some(ClaimResponse::Claimed(Claim::granted(
            req,
            new_fence as u64,
            abandoned,
        ))));
    }
    let (Some(status), Some(fence)) = (status, fence) else {
        // Absent in the snapshot, but inserted by a concurrent claim before ours.
        return Ok(None);
    };
    let same: Option<bool> = col(key, row, 3)?;
    let lease_until: Option<PgTime> = col(key, row, 6)?;
    let expires_at: Option<PgTime> = col(key, row, 7)?;
    let result: Option<Vec<u8>> = col(key, row, 8)?;
    let now: PgTime = col(key, row, 9)?;
    // Judged on the server's clock, as the statement's `now()` saw it.
    let lease_left = lease_until.and_then(|until| until.after(now));
    let expired = expires_at.map(|at| at.0 <= now.0);
    let has_lease = lease_until.is_some();
    // A record the statement cannot judge (no expiry on a completed record, no lease on an
    // in-progress one) is not a reason to run again, nor a passing failure: it is corrupt.
    let missing = |what: &str| {
        Error::corrupt(
            key,
            CorruptKind::Record(format!(
                "the {status:?} record has no {what}",
                status = status
            )),
        )
    };
    match status {
        Status::Completed if expired.is_none() => return Err(missing("expiry")),
        Status::InProgress if !has_lease => return Err(missing("lease")),
        _ => {}
    }
    Ok(match status {
        Status::Released => None,
        // A `once` call replays a completed record even past its ttl (decide's table).
        Status::Completed if !req.once && expired.unwrap_or(true) => None,
        _ if same != Some(true) => Some(ClaimResponse::Mismatch),
        Status::Completed => match result {
            Some(result) => Some(ClaimResponse::Replay(Replay { fence, result })),
            None => {
                return Err(Error::corrupt(
                    key,
                    CorruptKind::Record("a completed record has no result".into()),
                ))
            }
        },
        Status::Unknown => None,
        Status::InProgress => match lease_left {
            Some(left) if req.steal != Some(fence) => {
                let holder = match holder {
                    Some(h) => Holder::decode(h).ok_or_else(|| {
                        Error::corrupt(key, CorruptKind::Record(format!("malformed holder {h:?}")))
                    })?,
                    None => {
                        return Err(Error::corrupt(
                            key,
                            CorruptKind::Record("an in-progress record has no holder".into()),
                        ))
                    }
                };
                Some(ClaimResponse::Busy(Busy {
                    fence,
                    holder,
                    lease_remaining: left,
                }))
            }
            _ => None,
        },
    })
}

/// Marks a cursor that holds a key as the table stores it (escaped; see [`to_text`]).
const TEXT_CURSOR: char = '~';

/// The cursor after a scan row: its key's columns as stored, so that a row whose key does not
/// decode is still passed (a cursor of a decoded key would be escaped again, and sort before it).
fn text_cursor(row: &Row) -> String {
    let scope: String = row.try_get(0).unwrap_or_default();
    let id: String = row.try_get(1).unwrap_or_default();
    format!(
        "{TEXT_CURSOR}{}",
        encode_cursor(&Key::from_parts(scope, id))
    )
}

/// A scan cursor as the key's stored columns: [`text_cursor`]'s, or a plain
/// [`encode_cursor`] of a key (escaped here).
fn decode_text_cursor(cursor: &str) -> Result<(String, String), Error> {
    match cursor.strip_prefix(TEXT_CURSOR) {
        Some(stored) => {
            let k = decode_cursor(stored)?;
            Ok((k.scope().to_owned(), k.id().to_owned()))
        }
        None => {
            let k = decode_cursor(cursor)?;
            Ok((
                to_text(k.scope()).into_owned(),
                to_text(k.id()).into_owned(),
            ))
        }
    }
}

/// Reads an inspect/scan row.
fn view(row: &Row) -> Result<RecordView, Error> {
    let scope: String = row.try_get(0).unwrap_or_default();
    let id: String = row.try_get(1).unwrap_or_default();
    let key = match (from_text(&scope), from_text(&id)) {
        (Some(s), Some(i)) => Key::from_parts(s.into_owned(), i.into_owned()),
        _ => {
            return Err(Error::corrupt(
                &Key::from_parts(scope.clone(), id.clone()),
                CorruptKind::ForeignKey(
                    "it has a backslash that is not an escape (shown as stored)".into(),
                ),
            ))
        }
    };
    let status: String = col(&key, row, 2)?;
    let status = Status::parse(&status).ok_or_else(|| {
        Error::corrupt(
            &key,
            CorruptKind::Record(format!("unknown status {status:?}")),
        )
    })?;
    let fence: i64 = col(&key, row, 3)?;
    let fingerprint: Vec<u8> = col(&key, row, 4)?;
    let fingerprint = Fingerprint::from_slice(&fingerprint).ok_or_else(|| {
        Error::corrupt(
            &key,
            CorruptKind::Record("the fingerprint is not 32 bytes".into()),
        )
    })?;
    let holder: Option<String> = col(&key, row, 5)?;
    let holder = match holder {
        None => None,
        Some(h) => Some(Holder::decode(&h).ok_or_else(|| {
            Error::corrupt(&key, CorruptKind::Record(format!("malformed holder {h:?}")))
        })?),
    };
    let once: bool = col(&key, row, 6)?;
    let lease_until: Option<PgTime> = col(&key, row, 7)?;
    let expires_at: Option<PgTime> = col(&key, row, 8)?;
    let result: Option<Vec<u8>> = col(&key, row, 9)?;
    let changed_at: PgTime = col(&key, row, 10)?;
    let now: PgTime = col(&key, row, 11)?;
    // On the server's clock, as the statement's `now()` saw it.
    let lease_remaining = lease_until
        .filter(|_| status == Status::InProgress)
        .and_then(|until| until.after(now));
    let expires_in = expires_at
        .filter(|_| status == Status::Completed)
        .and_then(|at| at.after(now));
    let age = Some(now.since(changed_at));
    Ok(RecordView {
        key,
        status,
        fence: fence as u64,
        fingerprint,
        holder,
        once,
        lease_remaining,
        expires_in,
        result,
        age,
    })
}

#[cfg(test)]
mod tests {
    use super::PgTime;
    use std::time::Duration;

    #[test]
    fn time_left_is_a_difference_of_server_times_and_never_overflows() {
        let now = PgTime(1_000);
        assert_eq!(PgTime(1_500).after(now), Some(Duration::from_micros(500)));
        assert_eq!(PgTime(1_000).after(now), None, "ends now: not left");
        assert_eq!(PgTime(999).after(now), None);
        // `infinity` and `-infinity` as PostgreSQL sends them.
        assert_eq!(
            PgTime(i64::MAX).after(PgTime(i64::MIN)),
            Some(Duration::from_micros(u64::MAX))
        );
        assert_eq!(PgTime(i64::MIN).after(PgTime(i64::MAX)), None);
        assert_eq!(now.since(PgTime(400)), Duration::from_micros(600));
        assert_eq!(now.since(PgTime(i64::MAX)), Duration::ZERO);
        assert_eq!(
            PgTime(i64::MAX).since(PgTime(i64::MIN)),
            Duration::from_micros(u64::MAX)
        );
    }
}
