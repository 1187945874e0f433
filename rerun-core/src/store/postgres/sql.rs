//! The SQL of [`super::PostgresStore`], and why each statement is shaped as it is.
//!
//! Every statement is one autocommit round trip. Times come from the server (`now()`, the
//! statement's start in autocommit), never from the caller. Fences come from one sequence per
//! table, so they grow per key across release, takeover, `forget` and purging.

use std::fmt::Write as _;

/// The schema version this build writes; a table with a newer one is refused, an older one is
/// migrated by `connect` (under the migration lock, so many instances starting at once migrate
/// it once).
///
/// 1. rerun 0.1: `scope` and `id` as `bytea`.
/// 2. `scope` and `id` as `text COLLATE "C"` (readable with plain SQL, paged in byte order),
///    `changed_at`, and a partial index of the claims in progress and the unknown outcomes.
///
/// The function `<table>_claim` (its text is `Names::claim_function`) came later without a new
/// version: it changes no record and older builds never call it, so instances of either build
/// share a table. `connect` creates it, under the migration lock, where it is missing.
pub const SCHEMA_VERSION: i64 = 2;

/// The statements a connection prepares, by index into [`Sql::text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stmt {
    Claim,
    Complete,
    Release,
    Renew,
    MarkUnknown,
    Forget,
    ForgetIf,
    Inspect,
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
    /// The function that writes a claim (see [`Names::claim_function`]).
    pub claim_fn: String,
    /// The purge index, unqualified (an index lives in its table's schema).
    pub expires_index: String,
    /// The index of open records (in progress, unknown), unqualified.
    pub open_index: String,
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
            claim_fn: qualify(&format!("{table}_claim")),
            expires_index: format!("\"{table}_expires\""),
            open_index: format!("\"{table}_open\""),
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
    /// `scope` and `id` are `text COLLATE "C"`: an operator reads and selects them with plain
    /// SQL, and the C collation orders them by bytes, the order scans page in. `text` cannot
    /// hold NUL, so a NUL is stored as `\0` and a backslash as `\\` (see [`to_text`]); keys
    /// without either (nearly all) are stored as they are. The partial index `…_open` holds the
    /// few records an operator or `recover` looks for (claims in progress, unknown outcomes), so
    /// finding them never reads the completed ones.
    pub(crate) fn schema_ddl(&self) -> String {
        let Names {
            records: table,
            meta,
            fence_seq,
            expires_index,
            open_index,
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
                scope       text COLLATE \"C\" NOT NULL,
                id          text COLLATE \"C\" NOT NULL,
                status      text        NOT NULL,
                fence       bigint      NOT NULL,
                fingerprint bytea       NOT NULL,
                holder      text,
                once        boolean     NOT NULL,
                lease_until timestamptz,
                expires_at  timestamptz,
                changed_at  timestamptz NOT NULL DEFAULT now(),
                result      bytea,
                PRIMARY KEY (scope, id)
            ) WITH (fillfactor = 80);
            CREATE INDEX IF NOT EXISTS {expires_index} ON {table} (expires_at)
                WHERE status = 'completed';
            CREATE INDEX IF NOT EXISTS {open_index} ON {table} (scope, id)
                WHERE status IN ('in_progress', 'unknown');
            SELECT setval('{seq}', t.m) FROM (SELECT max(fence) AS m FROM {table}) t, {fence_seq} s
                WHERE t.m >= s.last_value AND (t.m > s.last_value OR NOT s.is_called);
            {function_ddl}",
            codec = crate::codec::CODEC_VERSION,
            seq = fence_seq.replace('\'', "''"),
            function_ddl = self.function_ddl(),
        );
        ddl
    }

    /// The function that writes a claim, `CREATE OR REPLACE`d.
    ///
    /// The claim statement reads the record in its snapshot and calls this function only
    /// when that read shows the key absent or claimable; `seen_fence` and `seen_status` are
    /// what it read (NULL: absent). A key read absent is inserted; the insert's `ON CONFLICT
    /// DO NOTHING` waits for a concurrent claim's insert and then leaves it. A record read
    /// claimable is updated only if its newest version, which the update locks, is still the
    /// one the statement read (same fence and status: compare-and-set) and still claimable;
    /// a record deleted meanwhile (forgotten, purged) is not replaced by an insert, which the
    /// caller would take for the takeover of the attempt it read. Two racing claims therefore
    /// cannot both win, and the abandoned attempt the statement reports is exactly the one
    /// replaced. The function returns the new fence, or NULL when the record changed or went
    /// first (the caller then reads again).
    ///
    /// `nextval()` runs only when a claim is attempted; a drawn fence that loses the race is
    /// skipped, which keeps fences growing. `now()` is the calling statement's (one
    /// transaction), so the lease starts on the clock the read was judged by. PL/pgSQL keeps
    /// the statements' plans for the session.
    pub(crate) fn claim_function(&self) -> String {
        let Names {
            records: table,
            fence_seq,
            claim_fn,
            ..
        } = self;
        format!(
            "CREATE OR REPLACE FUNCTION {claim_fn}(
                p_scope text, p_id text, p_fingerprint bytea, p_holder text, p_once boolean,
                p_lease_us double precision, p_steal bigint, p_seen_fence bigint,
                p_seen_status text)
            RETURNS bigint LANGUAGE plpgsql VOLATILE AS $rerun_claim$
            -- rerun claim function version {CLAIM_FUNCTION_VERSION} --
            DECLARE
                claimed_fence bigint;
            BEGIN
                IF p_seen_fence IS NULL THEN
                    INSERT INTO {table} (scope, id, status, fence, fingerprint, holder, once,
                                         lease_until, expires_at, result)
                    VALUES (p_scope, p_id, 'in_progress', nextval('{seq}'), p_fingerprint,
                            p_holder, p_once, now() + p_lease_us * interval '1 microsecond',
                            NULL, NULL)
                    ON CONFLICT (scope, id) DO NOTHING
                    RETURNING fence INTO claimed_fence;
                    RETURN claimed_fence;
                END IF;
                UPDATE {table} AS r
                   -- Above the record's own fence even if the sequence was set back (a table
                   -- restored without it, or copied where its value does not travel).
                   SET status = 'in_progress', fence = greatest(nextval('{seq}'), r.fence + 1),
                       fingerprint = p_fingerprint, holder = p_holder,
                       -- An attempt whose outcome is unknown is taken over at most once.
                       once = p_once OR r.status = 'unknown'
                              OR (r.status = 'in_progress' AND r.once),
                       lease_until = now() + p_lease_us * interval '1 microsecond',
                       expires_at = NULL, result = NULL, changed_at = now()
                 WHERE r.scope = p_scope AND r.id = p_id
                   AND r.fence = p_seen_fence AND r.status = p_seen_status
                   AND {r_claimable} IS TRUE
                RETURNING fence INTO claimed_fence;
                RETURN claimed_fence;
            END $rerun_claim$;",
            seq = fence_seq.replace('\'', "''"),
            r_claimable = claimable("r", "p_fingerprint", "p_once", "p_steal"),
        )
    }

    /// Takes a version-1 table to version 2, inside the caller's transaction (which holds the
    /// migration lock and has seen version 1): `scope` and `id` become text (escaped as
    /// [`to_text`] does, by a function of this session only), `changed_at` and the index of
    /// open records are added, and the version is raised.
    pub(crate) fn migration_1_to_2(&self) -> String {
        let Names {
            records: table,
            meta,
            open_index,
            ..
        } = self;
        format!(
            r#"CREATE OR REPLACE FUNCTION pg_temp.rerun_to_text(b bytea) RETURNS text
                LANGUAGE plpgsql IMMUTABLE AS $f$
                DECLARE
                    done text := '';
                    pos int;
                BEGIN
                    LOOP
                        pos := position('\x00'::bytea in b);
                        IF pos = 0 THEN
                            RETURN done || replace(convert_from(b, 'UTF8'), '\', '\\');
                        END IF;
                        done := done || replace(convert_from(substring(b from 1 for pos - 1), 'UTF8'), '\', '\\') || '\0';
                        b := substring(b from pos + 1);
                    END LOOP;
                END $f$;
            ALTER TABLE {table}
                ALTER COLUMN scope TYPE text COLLATE "C" USING pg_temp.rerun_to_text(scope),
                ALTER COLUMN id TYPE text COLLATE "C" USING pg_temp.rerun_to_text(id),
                ADD COLUMN IF NOT EXISTS changed_at timestamptz NOT NULL DEFAULT now();
            CREATE INDEX IF NOT EXISTS {open_index} ON {table} (scope, id)
                WHERE status IN ('in_progress', 'unknown');
            UPDATE {meta} SET value = 2 WHERE name = 'schema_version' AND value = 1;
            DROP FUNCTION pg_temp.rerun_to_text(bytea);"#
        )
    }

    /// The schema version, read inside the migration's transaction.
    pub(crate) fn schema_version_query(&self) -> String {
        format!(
            "SELECT value FROM {} WHERE name = 'schema_version'",
            self.meta
        )
    }

    /// Whether the three relations exist, whether the claim function does, of this build's
    /// version or a later one (its text names its version), and whether any of the three
    /// does: `connect` creates what is missing, and replaces a function an earlier build made,
    /// never a later build's; a store opened as it is tells a missing table from a partial one.
    pub(crate) fn exists_query(&self) -> String {
        format!(
            "SELECT to_regclass('{meta}') IS NOT NULL AND to_regclass('{table}') IS NOT NULL \
             AND to_regclass('{seq}') IS NOT NULL, {current}, \
             to_regclass('{meta}') IS NOT NULL OR to_regclass('{table}') IS NOT NULL \
             OR to_regclass('{seq}') IS NOT NULL",
            current = self.function_current(),
            meta = self.meta.replace('\'', "''"),
            table = self.records.replace('\'', "''"),
            seq = self.fence_seq.replace('\'', "''"),
        )
    }

    /// Whether the claim function exists, of this build's version or a later one (SQL).
    fn function_current(&self) -> String {
        format!(
            "coalesce((SELECT substring(prosrc from 'rerun claim function version ([0-9]+) --')::int >= {CLAIM_FUNCTION_VERSION} \
             FROM pg_proc WHERE oid = to_regprocedure('{claim}({CLAIM_FUNCTION_ARGS})')), false)",
            claim = self.claim_fn.replace('\'', "''"),
        )
    }

    /// Creates or replaces the claim function unless it is of this build's version or a later
    /// one, checked again here (the caller holds the creation lock, and another instance may
    /// have replaced it since `connect` looked).
    pub(crate) fn function_ddl(&self) -> String {
        format!(
            "DO $rerun_upgrade$ BEGIN IF NOT {current} THEN EXECUTE $rerun_function${function}$rerun_function$; END IF; END $rerun_upgrade$;",
            current = self.function_current(),
            function = self.claim_function(),
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

/// The version the claim function's text names (`-- rerun claim function version N --`): a
/// function without it, or of a lower one, was made by an earlier build, and `connect`
/// replaces it. Version 2 keeps a takeover of an unknown outcome at most once; version 3 draws
/// a takeover's fence above the record's own, whatever the sequence says; version 4 takes over
/// only the record the statement read, never a key deleted since.
const CLAIM_FUNCTION_VERSION: u32 = 4;

/// The argument types of the claim function, as `to_regprocedure` names it.
const CLAIM_FUNCTION_ARGS: &str =
    "text, text, bytea, text, boolean, double precision, bigint, bigint, text";

/// `x` may be claimed by the request (`fp` its fingerprint, `once`, `steal` the fence to steal
/// or NULL), on the server's clock: [`crate::record::decide`] as one boolean expression (a
/// `once` call honours a completed record even past its ttl, while it exists). `IS TRUE` at
/// each use turns the NULLs of absent columns into "no".
fn claimable(x: &str, fp: &str, once: &str, steal: &str) -> String {
    format!(
        "({x}.status = 'released' \
          OR ({x}.status = 'completed' AND {x}.expires_at <= now() AND NOT {once}) \
          OR ({x}.fingerprint = {fp} AND ({x}.status = 'unknown' \
              OR ({x}.status = 'in_progress' AND ({x}.lease_until <= now() OR {x}.fence = {steal})))))"
    )
}

/// The text of every statement for one table.
#[derive(Debug)]
pub(crate) struct Sql {
    texts: [String; Stmt::COUNT],
    names: Names,
}

impl Sql {
    pub(crate) fn new(n: &Names) -> Sql {
        let t = &n.records;
        let fenced = "WHERE scope = $1 AND id = $2 AND fence = $3 AND status = 'in_progress'";
        let view_columns = view_columns(true);
        let claim = format!(
            // Parameters: $1 scope, $2 id, $3 fingerprint, $4 holder, $5 once,
            // $6 lease in microseconds, $7 the fence to steal (NULL: none).
            //
            // A plain read of the record by its primary key, in this statement's snapshot:
            // when it shows a completed record within its ttl or a live holder, the statement
            // writes nothing, takes no lock beyond the read's and no transaction id, so a
            // repeated call costs one read-only round trip, no WAL flush, and a plan as cheap
            // as any `SELECT` by key; replays never queue behind each other.
            //
            // When the read shows the key absent or possibly claimable, the claim function
            // writes the claim, compare-and-set against what was read (see
            // `Names::claim_function`). If a concurrent claim won, the first column is NULL
            // while `cur` looks claimable (or is empty): the caller re-runs the statement on a
            // fresh snapshot.
            //
            // "Possibly claimable" is a cheap superset of `claimable`: the record is absent,
            // or none of its clocks (a lease, an expiry) still runs, or its fence is the one to
            // steal. It leaves out exactly the two frequent answers that must stay plain reads:
            // a completed record within its ttl (a replay or a mismatch) and a live claim (a
            // busy key polled by a waiting duplicate). For the rare rest (a mismatch on an
            // abandoned claim, a `once` call meeting an expired record) the function runs and
            // its own `claimable` check, on the locked row, turns the claim down.
            //
            // The other columns are the record as stored, and the statement's `now()`: the
            // client computes what remains of the lease and whether the ttl ran out, on the
            // server's clock. Each computed column is an expression the executor sets up on
            // every run of the statement, and a repeated call is nothing but this statement.
            "SELECT CASE WHEN COALESCE(cur.lease_until, cur.expires_at, '-infinity') <= now()
                           OR cur.fence = $7
                         THEN {claim_fn}($1, $2, $3, $4, $5, $6, $7, cur.fence, cur.status) END,
                    cur.status, cur.fence, cur.fingerprint = $3, cur.holder, cur.once,
                    cur.lease_until, cur.expires_at, cur.result, now()
               FROM (SELECT 1) AS one LEFT JOIN (
                    SELECT status, fence, fingerprint, holder, once, lease_until, expires_at,
                           result
                      FROM {t} WHERE scope = $1 AND id = $2
               ) AS cur ON true",
            claim_fn = n.claim_fn,
        );
        let texts = [
            claim,
            // Every fenced statement names the claim's fence and `in_progress` in its WHERE:
            // a zombie whose claim was taken over (or completed, released, forgotten) matches
            // no row, and zero rows is `LeaseLost`.
            format!(
                "UPDATE {t} SET status = 'completed', holder = NULL, lease_until = NULL, \
                 result = $4, expires_at = now() + $5::float8 * interval '1 microsecond', \
                 changed_at = now() {fenced}"
            ),
            format!(
                "UPDATE {t} SET status = 'released', holder = NULL, lease_until = NULL, \
                 changed_at = now() {fenced}"
            ),
            format!(
                "UPDATE {t} SET lease_until = now() + $4::float8 * interval '1 microsecond' {fenced}"
            ),
            format!(
                "UPDATE {t} SET status = 'unknown', lease_until = NULL, changed_at = now() {fenced}"
            ),
            format!("DELETE FROM {t} WHERE scope = $1 AND id = $2"),
            format!("DELETE FROM {t} WHERE scope = $1 AND id = $2 AND fence = $3"),
            format!("SELECT {view_columns} FROM {t} WHERE scope = $1 AND id = $2"),
            // SKIP LOCKED: a row being claimed right now is not purged under its claimer (and
            // two purgers do not queue); the outer condition re-checks the locked version.
            format!(
                "DELETE FROM {t} WHERE (scope, id) IN (
                    SELECT scope, id FROM {t} WHERE status = 'completed' AND expires_at <= now()
                     LIMIT $1 FOR UPDATE SKIP LOCKED)
                   AND status = 'completed' AND expires_at <= now()"
            ),
        ];
        Sql {
            texts,
            names: n.clone(),
        }
    }

    pub(crate) fn text(&self, stmt: Stmt) -> &str {
        &self.texts[stmt.index()]
    }

    /// The scan statement of `shape`.
    pub(crate) fn scan(&self, shape: &ScanShape) -> String {
        scan_sql(&self.names, shape)
    }
}

/// The columns of a record as inspect and scan read them, `result` left out (NULL) when
/// `results` is false: scope, id, status, fence, fingerprint, holder, once, lease_until,
/// expires_at, result, changed_at, now(). The times are differenced by the reader: arithmetic
/// on them here would fail the whole statement on one row holding `infinity` (or a time whose
/// distance from now is no `bigint`), and a scan would stop at it.
fn view_columns(results: bool) -> String {
    format!(
        "scope, id, status, fence, fingerprint, holder, once, lease_until, expires_at, \
         {result}, changed_at, now()",
        result = if results { "result" } else { "NULL::bytea" }
    )
}

/// The shape of a filtered scan: which conditions its statement has (their values are
/// parameters). One prepared statement per shape and connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct ScanShape {
    /// `scope >= $p AND scope < $upper` (an upper bound exists).
    pub(crate) prefix_upper: bool,
    /// `scope >= $p` without an upper bound.
    pub(crate) prefix_lower: bool,
    /// `status = ANY($s)`.
    pub(crate) statuses: bool,
    /// Only open states asked for: the open-records index serves the scan.
    pub(crate) open_only: bool,
    /// Leave results out.
    pub(crate) skip_results: bool,
}

/// The scan statement of one shape. Parameters: `$1` scope and `$2` id of the cursor, `$3`
/// true to start from the beginning, `$4` the limit, then in order whichever of
/// `$5` prefix, `$6` upper bound, `$7` statuses the shape uses (numbered consecutively).
pub(crate) fn scan_sql(n: &Names, shape: &ScanShape) -> String {
    let t = &n.records;
    let mut conds = vec!["($3::boolean OR (scope, id) > ($1, $2))".to_owned()];
    let mut next = 5;
    let mut param = || {
        let p = format!("${next}");
        next += 1;
        p
    };
    if shape.prefix_lower || shape.prefix_upper {
        conds.push(format!("scope >= {}", param()));
    }
    if shape.prefix_upper {
        conds.push(format!("scope < {}", param()));
    }
    if shape.open_only {
        // The open-records index's own predicate, so that the planner uses it.
        conds.push("status IN ('in_progress', 'unknown')".to_owned());
    }
    if shape.statuses {
        conds.push(format!("status = ANY({}::text[])", param()));
    }
    format!(
        "SELECT {} FROM {t} WHERE {} ORDER BY scope, id LIMIT $4",
        view_columns(!shape.skip_results),
        conds.join(" AND ")
    )
}

/// A key's scope or id as the `text` columns keep it: a NUL is `\0`, a backslash `\\`;
/// anything else as it is.
pub(crate) fn to_text(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\\', '\0']) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Reads back what [`to_text`] wrote; `None` for text it cannot have written.
pub(crate) fn from_text(s: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !s.contains('\\') {
        return Some(std::borrow::Cow::Borrowed(s));
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next()? {
                '\\' => out.push('\\'),
                '0' => out.push('\0'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(std::borrow::Cow::Owned(out))
}

/// The advisory-lock id `connect` creates rerun's tables under: one for the whole database, so
/// that stores of different tables created at once in a new schema (or one named by
/// `search_path` and one by name) do not race each other's `CREATE … IF NOT EXISTS`. A fixed
/// number (the bytes `rerun\0tc`), apart from every table's [`MIGRATION_LOCK`] (a hash).
pub(crate) const CREATION_LOCK_ID: i64 = i64::from_le_bytes(*b"rerun\0tc");

/// How many bytes `s` takes as [`to_text`] stores it: a NUL or a backslash takes two.
pub(crate) fn text_len(s: &str) -> usize {
    s.len() + s.bytes().filter(|&b| b == b'\\' || b == 0).count()
}

/// Takes one table's migration lock (`$1`: the table's quoted name), an advisory lock whose
/// id is a hash of the table's oid: instances that name one table differently (with its
/// schema, or through `search_path`) take the same lock.
pub(crate) const MIGRATION_LOCK: &str =
    "SELECT pg_advisory_xact_lock(('x' || substr(md5('rerun schema ' || \
     coalesce(to_regclass($1)::oid::text, $1)), 1, 16))::bit(64)::bigint)";

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
    fn text_escapes_round_trip() {
        for s in ["plain", "", "a\\b", "nul\0here", "\\0", "\0\\", "é\\\0"] {
            let stored = to_text(s);
            assert!(!stored.contains('\0'), "{stored:?}");
            assert_eq!(from_text(&stored).as_deref(), Some(s), "{s:?}");
        }
        assert!(matches!(to_text("plain"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(from_text("bad\\x"), None);
        for s in ["plain", "", "a\\b", "nul\0here", "\\0", "\0\\", "é\\\0"] {
            assert_eq!(text_len(s), to_text(s).len(), "{s:?}");
        }
        assert_eq!(from_text("trailing\\"), None);
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
