//! The SQL of [`super::PostgresStore`], and why each statement is shaped as it is.
//!
//! Every statement is one autocommit round trip. Times come from the server (`now()`, the
//! statement's start in autocommit), never from the caller. Fences come from one sequence per
//! table, so they grow per key across release, takeover, `forget` and purging.

use std::fmt::Write as _;

/// The schema version this build writes; a table with a newer one is refused.
pub const SCHEMA_VERSION: i64 = 1;

/// The statements a connection prepares, by index into [`Sql::text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stmt {
    Claim,
    Complete,
    Release,
    Renew,
    MarkUnknown,
    Forget,
    Inspect,
    Scan,
    Purge,
}

impl Stmt {
    /// How many statements there are.
    pub(crate) const COUNT: usize = 9;

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// A table's identifiers, validated and quoted.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// The records table: `"schema"."table"` or `"table"`.
    pub records: String,
    /// The version table.
    pub meta: String,
    /// The fence sequence.
    pub fence_seq: String,
    /// The purge index, unqualified (an index lives in its table's schema).
    pub expires_index: String,
    /// `"schema"` when one was given.
    pub schema: Option<String>,
    /// `schema.table` as the user wrote it, for messages.
    pub display: String,
}

/// Checks that `name` is a plain SQL identifier that leaves room for rerun's suffixes.
pub(crate) fn valid_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    // 63 bytes is PostgreSQL's identifier limit; the longest suffix rerun adds is `_expires`.
    name.len() <= 63 - "_expires".len()
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Names {
    /// Names for `table` in `schema`; both must already be valid identifiers.
    pub(crate) fn new(schema: Option<&str>, table: &str) -> Names {
        let qualify = |name: &str| match schema {
            Some(s) => format!("\"{s}\".\"{name}\""),
            None => format!("\"{name}\""),
        };
        Names {
            records: qualify(table),
            meta: qualify(&format!("{table}_meta")),
            fence_seq: qualify(&format!("{table}_fence")),
            expires_index: format!("\"{table}_expires\""),
            schema: schema.map(|s| format!("\"{s}\"")),
            display: match schema {
                Some(s) => format!("{s}.{table}"),
                None => table.to_owned(),
            },
        }
    }

    /// The DDL, run once under an advisory lock inside one transaction (see
    /// [`super::pool`]'s migration), so that many instances starting at once against an empty
    /// database cannot race `CREATE TABLE IF NOT EXISTS` into a duplicate-type error.
    ///
    /// `scope` and `id` are `bytea`: a key may hold any character, NUL included, which `text`
    /// cannot store, and byte order is the order scans page in. The table's fill factor leaves
    /// room on each page so that completing a claim is a HOT update that touches no index.
    pub(crate) fn schema_ddl(&self) -> String {
        let Names {
            records: table,
            meta,
            fence_seq,
            expires_index,
            ..
        } = self;
        let mut ddl = String::new();
        if let Some(schema) = &self.schema {
            let _ = writeln!(ddl, "CREATE SCHEMA IF NOT EXISTS {schema};");
        }
        let _ = write!(
            ddl,
            "CREATE TABLE IF NOT EXISTS {meta} (
                name  text PRIMARY KEY,
                value bigint NOT NULL
            );
            INSERT INTO {meta} (name, value) VALUES
                ('schema_version', {SCHEMA_VERSION}),
                ('codec_version', {codec})
                ON CONFLICT (name) DO NOTHING;
            CREATE SEQUENCE IF NOT EXISTS {fence_seq} AS bigint;
            CREATE TABLE IF NOT EXISTS {table} (
                scope       bytea       NOT NULL,
                id          bytea       NOT NULL,
                status      text        NOT NULL,
                fence       bigint      NOT NULL,
                fingerprint bytea       NOT NULL,
                holder      text,
                once        boolean     NOT NULL,
                lease_until timestamptz,
                expires_at  timestamptz,
                result      bytea,
                PRIMARY KEY (scope, id)
            ) WITH (fillfactor = 80);
            CREATE INDEX IF NOT EXISTS {expires_index} ON {table} (expires_at)
                WHERE status = 'completed';",
            codec = crate::codec::CODEC_VERSION,
        );
        ddl
    }

    /// Whether the three relations exist: `true` lets `connect` skip the locked DDL.
    pub(crate) fn exists_query(&self) -> String {
        format!(
            "SELECT to_regclass('{meta}') IS NOT NULL AND to_regclass('{table}') IS NOT NULL \
             AND to_regclass('{seq}') IS NOT NULL",
            meta = self.meta.replace('\'', "''"),
            table = self.records.replace('\'', "''"),
            seq = self.fence_seq.replace('\'', "''"),
        )
    }

    /// Raises the recorded codec version to `$1` (never lowers it).
    pub(crate) fn raise_codec_version(&self) -> String {
        format!(
            "UPDATE {} SET value = $1 WHERE name = 'codec_version' AND value < $1",
            self.meta
        )
    }

    /// The versions recorded in the meta table.
    pub(crate) fn versions_query(&self) -> String {
        format!(
            "SELECT name, value FROM {} WHERE name IN ('schema_version', 'codec_version')",
            self.meta
        )
    }
}

/// `x` may be claimed by the request (`$3` fingerprint, `$5` once, `$7` the fence to steal or
/// NULL), on the server's clock: [`crate::record::decide`] as one boolean expression (a `once`
/// call honours a completed record even past its ttl, while it exists). `IS TRUE` at each use
/// turns the NULLs of absent columns into "no".
fn claimable(x: &str) -> String {
    format!(
        "({x}.status = 'released' \
          OR ({x}.status = 'completed' AND {x}.expires_at <= now() AND NOT $5) \
          OR ({x}.fingerprint = $3 AND ({x}.status = 'unknown' \
              OR ({x}.status = 'in_progress' AND ({x}.lease_until <= now() OR {x}.fence = $7)))))"
    )
}

/// The text of every statement for one table.
#[derive(Debug)]
pub(crate) struct Sql {
    texts: [String; Stmt::COUNT],
}

impl Sql {
    pub(crate) fn new(n: &Names) -> Sql {
        let t = &n.records;
        let fenced = "WHERE scope = $1 AND id = $2 AND fence = $3 AND status = 'in_progress'";
        let view_columns = "scope, id, status, fence, fingerprint, holder, once, \
            CASE WHEN status = 'in_progress' AND lease_until > now() \
                 THEN (extract(epoch FROM lease_until - now()) * 1000000)::bigint END, \
            CASE WHEN status = 'completed' AND expires_at > now() \
                 THEN (extract(epoch FROM expires_at - now()) * 1000000)::bigint END, \
            result";
        let claim = format!(
            // Parameters: $1 scope, $2 id, $3 fingerprint, $4 holder, $5 once,
            // $6 lease in microseconds, $7 the fence to steal (NULL: none).
            //
            // `cur` reads the record in this statement's snapshot. When it shows a completed
            // record, a mismatch or a live holder, the INSERT below selects no row: the
            // statement writes nothing, takes no row lock and no transaction id, so a repeated
            // call costs one read-only round trip and no WAL flush, and replays never queue
            // behind each other.
            //
            // When `cur` shows the key absent or claimable, the INSERT runs. A concurrent
            // claim may have changed the row since the snapshot, so ON CONFLICT re-checks on
            // the newest row version, which it locks: the update happens only if that version
            // is still the one `cur` saw (same fence and status: compare-and-set) and is still
            // claimable. Two racing claims therefore cannot both win, and the abandoned
            // attempt this claim reports (from `cur`) is exactly the one it replaced. If the
            // check fails, `claimed` is empty while `cur` looks claimable (or is empty): the
            // caller re-runs the statement on a fresh snapshot.
            //
            // nextval() sits in the INSERT's select list, so a fence is drawn only when a
            // claim is attempted; a drawn fence that loses the race is skipped, which keeps
            // fences growing.
            "WITH cur AS (
                SELECT status, fence, fingerprint, holder, once, lease_until, expires_at, result
                  FROM {t} WHERE scope = $1 AND id = $2
             ),
             claimed AS (
                INSERT INTO {t} AS r (scope, id, status, fence, fingerprint, holder, once,
                                      lease_until, expires_at, result)
                SELECT $1, $2, 'in_progress', nextval('{seq}'), $3, $4, $5,
                       now() + $6::float8 * interval '1 microsecond', NULL, NULL
                 WHERE NOT EXISTS (SELECT 1 FROM cur WHERE {cur_claimable} IS NOT TRUE)
                ON CONFLICT (scope, id) DO UPDATE
                   SET status = 'in_progress', fence = EXCLUDED.fence,
                       fingerprint = EXCLUDED.fingerprint, holder = EXCLUDED.holder,
                       once = EXCLUDED.once, lease_until = EXCLUDED.lease_until,
                       expires_at = NULL, result = NULL
                 WHERE r.fence = (SELECT fence FROM cur)
                   AND r.status = (SELECT status FROM cur)
                   AND {r_claimable} IS TRUE
                RETURNING fence
             )
             SELECT (SELECT fence FROM claimed),
                    cur.status, cur.fence, cur.fingerprint = $3, cur.holder, cur.once,
                    CASE WHEN cur.lease_until > now()
                         THEN (extract(epoch FROM cur.lease_until - now()) * 1000000)::bigint END,
                    cur.expires_at <= now(),
                    CASE WHEN cur.status = 'completed' AND cur.fingerprint = $3
                              AND (cur.expires_at > now() OR $5) THEN cur.result END,
                    cur.lease_until IS NOT NULL
               FROM (SELECT 1) AS one LEFT JOIN cur ON true",
            seq = n.fence_seq.replace('\'', "''"),
            cur_claimable = claimable("cur"),
            r_claimable = claimable("r"),
        );
        let texts = [
            claim,
            // Every fenced statement names the claim's fence and `in_progress` in its WHERE:
            // a zombie whose claim was taken over (or completed, released, forgotten) matches
            // no row, and zero rows is `LeaseLost`.
            format!(
                "UPDATE {t} SET status = 'completed', holder = NULL, lease_until = NULL, \
                 result = $4, expires_at = now() + $5::float8 * interval '1 microsecond' {fenced}"
            ),
            format!("UPDATE {t} SET status = 'released', holder = NULL, lease_until = NULL {fenced}"),
            format!(
                "UPDATE {t} SET lease_until = now() + $4::float8 * interval '1 microsecond' {fenced}"
            ),
            format!("UPDATE {t} SET status = 'unknown', lease_until = NULL {fenced}"),
            format!("DELETE FROM {t} WHERE scope = $1 AND id = $2"),
            format!("SELECT {view_columns} FROM {t} WHERE scope = $1 AND id = $2"),
            format!(
                "SELECT {view_columns} FROM {t} WHERE $3::boolean OR (scope, id) > ($1, $2) \
                 ORDER BY scope, id LIMIT $4"
            ),
            // SKIP LOCKED: a row being claimed right now is not purged under its claimer (and
            // two purgers do not queue); the outer condition re-checks the locked version.
            format!(
                "DELETE FROM {t} WHERE (scope, id) IN (
                    SELECT scope, id FROM {t} WHERE status = 'completed' AND expires_at <= now()
                     LIMIT $1 FOR UPDATE SKIP LOCKED)
                   AND status = 'completed' AND expires_at <= now()"
            ),
        ];
        Sql { texts }
    }

    pub(crate) fn text(&self, stmt: Stmt) -> &str {
        &self.texts[stmt.index()]
    }
}

/// A stable advisory-lock id for one table's migration.
pub(crate) fn migration_lock_id(names: &Names) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("rerun schema {}", names.records).as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert!(valid_identifier("rerun_records"));
        assert!(valid_identifier("_x1"));
        assert!(!valid_identifier(""));
        assert!(!valid_identifier("1abc"));
        assert!(!valid_identifier("a-b"));
        assert!(!valid_identifier("a\"b"));
        assert!(!valid_identifier(&"a".repeat(60)));
    }

    #[test]
    fn names_are_quoted() {
        let n = Names::new(Some("app"), "recs");
        assert_eq!(n.records, "\"app\".\"recs\"");
        assert_eq!(n.fence_seq, "\"app\".\"recs_fence\"");
        assert!(n
            .schema_ddl()
            .contains("CREATE SCHEMA IF NOT EXISTS \"app\""));
        let n = Names::new(None, "recs");
        assert_eq!(n.meta, "\"recs_meta\"");
        assert!(!n.schema_ddl().contains("CREATE SCHEMA"));
    }
}
