//! The schema and statements of [`super::SqliteStore`], and why each is shaped as it is.

/// The schema version this build writes; a database with a newer one is refused, an older one
/// is migrated when the store opens it (by the statements of `MIGRATIONS`, step by step).
///
/// 1. rerun 0.1.
/// 2. `lease_wall`: the lease end on the wall clock, for readers of another boot id.
/// 3. `changed_wall` (when the record entered its state) and the index of open records.
/// 4. Fences drawn per key above `fence_floor` (the highest fence of any deleted record)
///    instead of from a store-wide counter, so that a claim writes no page but its key's.
pub const SCHEMA_VERSION: i64 = 4;

/// The statements that take a database from version `n` to `n + 1`, at index `n - 1`. They run
/// inside the `BEGIN IMMEDIATE` transaction of [`SCHEMA`], so that when many processes open an
/// old file at once exactly one migrates it and the others find it migrated.
///
/// The step to 2 also stores the monotonic deadlines rerun 0.1 wrapped negative (it wrote
/// `u64` nanoseconds `as i64`, so a ttl or lease of about 292 years or more came out below
/// zero, and read them back as `u64`) as this build stores "forever", `i64::MAX`: read as
/// signed, they would be corrupt, and purging would take them for expired.
///
/// The step to 4 carries the old counter over as the floor and deletes the counter's row: a
/// process of an earlier build still running draws its fences from that row, so its claims now
/// fail with a store error ("drawing a fence") instead of handing out a fence this build does
/// not know of; its replays keep working.
pub(super) const MIGRATIONS: &[&str] = &[
    "ALTER TABLE rerun_records ADD COLUMN lease_wall INTEGER NOT NULL DEFAULT 0;
     UPDATE rerun_records SET expires_mono = 9223372036854775807 WHERE expires_mono < 0;
     UPDATE rerun_records SET lease_until = 9223372036854775807 WHERE lease_until < 0;
     UPDATE rerun_meta SET value = 2 WHERE name = 'schema_version';",
    "ALTER TABLE rerun_records ADD COLUMN changed_wall INTEGER NOT NULL DEFAULT 0;
     CREATE INDEX IF NOT EXISTS rerun_records_open ON rerun_records (scope, id)
         WHERE status IN ('in_progress', 'unknown');
     UPDATE rerun_meta SET value = 3 WHERE name = 'schema_version';",
    "UPDATE rerun_meta SET value = max(value,
         coalesce((SELECT value FROM rerun_meta WHERE name = 'fence'), 0))
         WHERE name = 'fence_floor';
     DELETE FROM rerun_meta WHERE name = 'fence';
     UPDATE rerun_meta SET value = 4 WHERE name = 'schema_version';",
];

/// Run after the migrations, in their transaction, on every open: a store-wide counter row
/// that an earlier build put back before [`SCHEMA`]'s trigger `rerun_meta_no_counter` was there
/// (and that its processes may have drawn fences from since) is carried into the floor, as the
/// step to 4 carries it, and deleted, so that those processes' claims fail from now on.
pub(super) const REMOVE_COUNTER: &str = "
UPDATE rerun_meta SET value = max(value,
    coalesce((SELECT value FROM rerun_meta WHERE name = 'fence'), 0))
    WHERE name = 'fence_floor';
DELETE FROM rerun_meta WHERE name = 'fence';";

/// Created in one `BEGIN IMMEDIATE` transaction, so that many processes opening a new file at
/// once create it exactly once. `WITHOUT ROWID`: every read is by the primary key, so the
/// record lives in the key's B-tree and a read is one lookup.
///
/// The trigger `rerun_records_floor` raises the fence floor on every deletion, whoever makes it:
/// a process of a build before schema 4 (which deletes without raising it) still running beside
/// this one, or an operator's plain SQL. It came without a new version (an earlier build of
/// schema 4 opens the file as before); `INSERT OR REPLACE` does not fire it (recursive triggers
/// are off), and a deletion of this build raises the floor itself too ([`RAISE_FLOOR`]).
///
/// The trigger `rerun_meta_no_counter` keeps the store-wide counter of schemas 1 to 3 from
/// coming back: a build of those schemas opening the file (an old instance restarting in a
/// rolling upgrade, an old rerunctl) inserts the counter's row at 0 before it reads the version
/// and refuses the file, and its processes still running would then draw fences from 1 again,
/// below fences this build handed out: a takeover could reissue a live claim's fence, and a
/// paused holder's completion would land on its successor's claim.
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rerun_meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO rerun_meta (name, value) VALUES ('schema_version', 4), ('fence_floor', 0);
CREATE TABLE IF NOT EXISTS rerun_records (
    scope        TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    fence        INTEGER NOT NULL,
    fingerprint  BLOB    NOT NULL,
    holder       TEXT,
    once         INTEGER NOT NULL,
    boot_id      TEXT    NOT NULL,
    lease_until  INTEGER NOT NULL,
    expires_mono INTEGER NOT NULL,
    expires_wall INTEGER NOT NULL,
    result       BLOB,
    lease_wall   INTEGER NOT NULL DEFAULT 0,
    changed_wall INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS rerun_records_open ON rerun_records (scope, id)
    WHERE status IN ('in_progress', 'unknown');
CREATE TRIGGER IF NOT EXISTS rerun_records_floor AFTER DELETE ON rerun_records
    WHEN typeof(old.fence) = 'integer'
BEGIN
    UPDATE rerun_meta SET value = old.fence WHERE name = 'fence_floor' AND value < old.fence;
END;
CREATE TRIGGER IF NOT EXISTS rerun_meta_no_counter BEFORE INSERT ON rerun_meta
    WHEN new.name = 'fence'
BEGIN
    SELECT RAISE(IGNORE);
END;
";

/// How many of rerun's two tables the file has (2 in a rerun store), read without creating any.
pub(super) const RERUN_TABLES: &str = "SELECT count(*) FROM sqlite_master \
     WHERE type = 'table' AND name IN ('rerun_meta', 'rerun_records')";

/// The schema version, read after the schema is ensured.
pub(super) const SCHEMA_VERSION_READ: &str =
    "SELECT value FROM rerun_meta WHERE name = 'schema_version'";

/// The columns every read selects, in the order `row::record_of` reads them.
macro_rules! columns {
    () => {
        "status, fence, fingerprint, holder, once, boot_id, lease_until, \
         expires_mono, expires_wall, result, scope, id, lease_wall, changed_wall"
    };
}

/// The read of one record: a constant, so the statement cache is hit without building the text.
pub(super) const READ_ONE: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM rerun_records WHERE scope = ?1 AND id = ?2"
);

/// The read a claim starts with: the record's columns (every one NULL when the key has no
/// record) and, after them, the fence floor, in one row, which there is whenever the floor's own
/// row is. The claim keeps this statement open (it has stepped to the row, not past it) while it
/// writes: SQLite's transaction for the statement is then still open, so the write joins the
/// snapshot the record and the floor were read in, as in a deferred transaction, without a
/// `BEGIN` or a `COMMIT` (the write commits when it finishes). A replay reads and is done.
pub(super) const READ_FOR_CLAIM: &str = concat!(
    "SELECT ",
    columns!(),
    ", value FROM rerun_meta LEFT JOIN rerun_records ON scope = ?1 AND id = ?2 \
     WHERE name = 'fence_floor'"
);

/// The column of [`READ_FOR_CLAIM`]'s row with the record's `id`: NULL when there is no record
/// (a record's `id`, part of its primary key, is never NULL).
pub(super) const READ_FOR_CLAIM_ID: usize = 11;
/// The column of [`READ_FOR_CLAIM`]'s row with the fence floor.
pub(super) const READ_FOR_CLAIM_FLOOR: usize = 14;

/// One page of a filtered scan, in key order: `?1`, `?2` the cursor, `?3` the limit, then the
/// conditions the filter has (scope range `?4`..`?5`, states `?6`…). A scan of open states only
/// repeats the open-records index's own condition, so that SQLite reads that index.
pub(super) fn read_page(
    prefix: bool,
    upper: bool,
    statuses: usize,
    open_only: bool,
    results: bool,
) -> String {
    let mut sql = String::from("SELECT ");
    if results {
        sql.push_str(concat!(columns!()));
    } else {
        sql.push_str(&concat!(columns!()).replacen("result,", "NULL,", 1));
    }
    sql.push_str(" FROM rerun_records WHERE (?1 IS NULL OR (scope, id) > (?1, ?2))");
    if prefix {
        sql.push_str(" AND scope >= ?4");
    }
    if upper {
        sql.push_str(" AND scope < ?5");
    }
    if open_only {
        sql.push_str(" AND status IN ('in_progress', 'unknown')");
    }
    if statuses > 0 {
        let marks: Vec<String> = (0..statuses).map(|i| format!("?{}", 6 + i)).collect();
        sql.push_str(&format!(" AND status IN ({})", marks.join(", ")));
    }
    sql.push_str(" ORDER BY scope, id LIMIT ?3");
    sql
}

/// The highest fence of any deleted record: a claim's fence is above it and above its key's
/// own record's. Fences grow per key across release, takeover, `forget` and purging without a
/// write of their own: a deletion raises the floor in its transaction ([`RAISE_FLOOR`]).
pub(super) const FENCE_FLOOR: &str = "SELECT value FROM rerun_meta WHERE name = 'fence_floor'";

/// Raises the floor to `?1`, the highest fence a deletion in this transaction took away.
pub(super) const RAISE_FLOOR: &str =
    "UPDATE rerun_meta SET value = ?1 WHERE name = 'fence_floor' AND value < ?1";

/// Writes a claim, in the transaction that read the record: one that held the write lock when it
/// read (`BEGIN IMMEDIATE`), or the open read of [`READ_FOR_CLAIM`], which SQLite lets upgrade
/// to a write only when no other connection wrote since the read. Two processes cannot both see
/// the key absent and both claim it.
pub(super) const CLAIM: &str = "INSERT OR REPLACE INTO rerun_records (scope, id, status, fence, \
     fingerprint, holder, once, boot_id, lease_until, lease_wall, expires_mono, expires_wall, \
     result, changed_wall) VALUES (?1, ?2, 'in_progress', ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, 0, NULL, ?10)";

// Every fenced statement names the claim's fence and `in_progress` in its WHERE: a zombie whose
// claim was taken over (or completed, released, forgotten) matches no row, and zero rows is
// `LeaseLost`.

/// Records a result.
pub(super) const COMPLETE: &str =
    "UPDATE rerun_records SET status = 'completed', holder = NULL, boot_id = ?4, \
     expires_mono = ?5, expires_wall = ?6, result = ?7, changed_wall = ?8 \
     WHERE scope = ?1 AND id = ?2 AND fence = ?3 AND status = 'in_progress'";

/// Gives the key back after a failed attempt.
pub(super) const RELEASE: &str = "UPDATE rerun_records SET status = 'released', holder = NULL, \
     changed_wall = ?4 \
     WHERE scope = ?1 AND id = ?2 AND fence = ?3 AND status = 'in_progress'";

/// Extends a lease.
pub(super) const RENEW: &str = "UPDATE rerun_records SET boot_id = ?4, lease_until = ?5, \
     lease_wall = ?6 \
     WHERE scope = ?1 AND id = ?2 AND fence = ?3 AND status = 'in_progress'";

/// Marks an at-most-once attempt's outcome unknown.
pub(super) const MARK_UNKNOWN: &str = "UPDATE rerun_records SET status = 'unknown', \
     changed_wall = ?4 \
     WHERE scope = ?1 AND id = ?2 AND fence = ?3 AND status = 'in_progress'";

/// Forgets a key whatever its state, returning its fence for the floor.
pub(super) const FORGET: &str =
    "DELETE FROM rerun_records WHERE scope = ?1 AND id = ?2 RETURNING fence";

/// Forgets a key only while its latest claim is the one an operator looked at.
pub(super) const FORGET_IF: &str =
    "DELETE FROM rerun_records WHERE scope = ?1 AND id = ?2 AND fence = ?3 RETURNING fence";

/// Deletes completed records past their expiry, returning their fences for the floor: on the
/// monotonic clock for records of this boot, on the wall clock for records of an earlier boot
/// (whose monotonic times mean nothing now) or of an unknown one (an empty boot id, as
/// `LocalRecord::expired` judges it).
pub(super) const PURGE: &str = "DELETE FROM rerun_records WHERE (scope, id) IN (
    SELECT scope, id FROM rerun_records WHERE status = 'completed' AND (
        (boot_id = ?1 AND ?1 <> '' AND expires_mono <= ?2)
        OR ((boot_id <> ?1 OR ?1 = '') AND expires_wall <= ?3))
    LIMIT ?4) RETURNING fence";
