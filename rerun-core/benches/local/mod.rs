//! The cases shared by the criterion bench and the ratio program for the local stores: rerun's
//! calls, and hand-written baselines doing the same work without rerun.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use rerun_core::clock::{Clock, HostClock};
use rerun_core::record::ClaimRequest;
use rerun_core::{codec, Call, Error, Fingerprint, Holder, Key, MemoryStore, SqliteStore};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

/// A small payload, as a webhook handler would fingerprint.
#[derive(Serialize)]
pub struct Order {
    pub id: u64,
    pub customer: &'static str,
    pub cents: u64,
}

/// A small result.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
pub struct Receipt {
    pub id: u64,
    pub cents: u64,
    pub note: String,
}

pub fn order(id: u64) -> Order {
    Order {
        id,
        customer: "cus_123",
        cents: 4200,
    }
}

pub fn receipt(id: u64) -> Receipt {
    Receipt {
        id,
        cents: 4200,
        note: "charged".into(),
    }
}

pub const SCOPE: &str = "bench.charge";

/// One rerun call of the charge operation.
pub fn rerun_call<S: rerun_core::Store>(store: &S, id: u64, once: bool) -> Receipt {
    let o = order(id);
    let mut call = Call::new(SCOPE, &id).payload(&o);
    if once {
        call = call.once();
    }
    match call.run(store, || Ok::<_, Error>(receipt(id))) {
        Ok(out) => out.value,
        Err(e) => panic!("bench call failed: {e}"),
    }
}

/// The same work by hand with a `Mutex<HashMap>`: key encoding, fingerprint, result encoding
/// and checksum, and on a repeat the comparison and decoding.
#[derive(Default)]
pub struct Baseline {
    map: Mutex<HashMap<Key, (Fingerprint, Vec<u8>)>>,
}

impl Baseline {
    pub fn call(&self, id: u64) -> Receipt {
        let key = Key::new(SCOPE, &id);
        let fp = Fingerprint::of(&order(id)).unwrap_or(Fingerprint::EMPTY);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((stored, bytes)) = map.get(&key) {
            if *stored == fp {
                if let Ok(r) = codec::decode(bytes) {
                    return r;
                }
            }
        }
        let r = receipt(id);
        let bytes = codec::encode(&r).unwrap_or_default();
        map.insert(key, (fp, bytes));
        r
    }
}

/// A connection of a hand-written side, with SqliteStore's file settings (WAL,
/// `synchronous = NORMAL`) and a long busy timeout.
fn connect(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap_or_else(|e| panic!("{e}"));
    conn.busy_timeout(std::time::Duration::from_secs(30)).ok();
    conn.pragma_update(None, "journal_mode", "WAL").ok();
    conn.pragma_update(None, "synchronous", "NORMAL").ok();
    conn
}

/// [`connect`] to a file holding SqliteStore's own schema, created by opening the store.
fn connect_rerun_schema(path: &Path) -> Connection {
    drop(SqliteStore::open(path).unwrap_or_else(|e| panic!("{e}")));
    connect(path)
}

/// The stored result of key `id`, read by `select` (a floor's repeated call), decoded.
fn replayed(c: &Connection, select: &str, id: &str) -> Option<Receipt> {
    let found: Option<Vec<u8>> = c
        .prepare_cached(select)
        .and_then(|mut s| {
            s.query_row(params![SCOPE, id], |r| r.get::<_, Option<Vec<u8>>>(0))
                .optional()
        })
        .ok()
        .flatten()
        .flatten();
    found.and_then(|b| codec::decode(&b).ok())
}

/// A hand-written idempotency layer on raw rusqlite: the statements SqliteStore runs, and the
/// same key, fingerprint and result encoding, without rerun's runtime.
pub struct RawSqlite {
    // A mutex, like SqliteStore's connection pool, so one value can be shared by a thread.
    conn: Mutex<Connection>,
    holder: String,
}

impl RawSqlite {
    pub fn open(path: &Path) -> RawSqlite {
        let conn = connect_rerun_schema(path);
        RawSqlite {
            conn: Mutex::new(conn),
            holder: Holder::current().encode(),
        }
    }

    /// Read the record and the fence floor in one statement, kept open (stepped to its row, not
    /// past it) while the claim is written, so the claim joins the read's snapshot with no
    /// `BEGIN` or `COMMIT`; if the key is free, claim (a fence above the floor), run, and
    /// complete: SqliteStore's statements, writing the values it writes (this boot's id, the
    /// lease's and the expiry's ends read off the host clock, the time of the change).
    pub fn call(&self, n: u64) -> Receipt {
        let id = Key::new(SCOPE, &n).id().to_owned();
        let fp = Fingerprint::of(&order(n))
            .map(|f| f.0.to_vec())
            .unwrap_or_default();
        let c = &*self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let Ok(mut read) = c.prepare_cached(
            "SELECT status, fence, fingerprint, holder, once, boot_id, lease_until, expires_mono, \
             expires_wall, result, scope, id, lease_wall, changed_wall, value FROM rerun_meta \
             LEFT JOIN rerun_records ON scope = ?1 AND id = ?2 WHERE name = 'fence_floor'",
        ) else {
            return receipt(n);
        };
        let Ok(mut rows) = read.query(params![SCOPE, id]) else {
            return receipt(n);
        };
        let Ok(Some(row)) = rows.next() else {
            return receipt(n);
        };
        let stored: Option<Vec<u8>> = row.get(2).ok();
        let result: Option<Vec<u8>> = row.get(9).ok().flatten();
        if let (Some(stored), Some(result)) = (stored, result) {
            if stored == fp {
                if let Ok(r) = codec::decode(&result) {
                    return r;
                }
            }
        }
        let mut fence = row.get::<_, i64>(14).unwrap_or(0) + 1;
        // The values rerun writes: this boot's id, the lease's end on both clocks, the time the
        // record changed state.
        let boot = rerun_core::holder::this_boot();
        let claim = |fence: i64| {
            let now = HostClock.now();
            let lease_ns = 30_000_000_000i64;
            c.prepare_cached(
                "INSERT OR REPLACE INTO rerun_records (scope, id, status, fence, fingerprint, \
                 holder, once, boot_id, lease_until, lease_wall, expires_mono, expires_wall, \
                 result, changed_wall) \
                 VALUES (?1, ?2, 'in_progress', ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, 0, NULL, ?10)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    SCOPE,
                    id,
                    fence,
                    fp,
                    self.holder,
                    false,
                    boot,
                    now.mono_ns as i64 + lease_ns,
                    now.wall_ms + lease_ns / 1_000_000,
                    now.wall_ms
                ])
            })
        };
        let claimed = claim(fence).is_ok();
        drop(rows);
        drop(read);
        if !claimed {
            // Another connection wrote since the read (SQLite refused to upgrade it): claim
            // under the write lock, reading the record and the floor again, as SqliteStore does.
            let locked = || -> rusqlite::Result<i64> {
                c.execute_batch("BEGIN IMMEDIATE")?;
                let top: i64 = c
                    .prepare_cached(
                        "SELECT status, fence, fingerprint, holder, once, boot_id, lease_until, \
                         expires_mono, expires_wall, result, scope, id, lease_wall, changed_wall \
                         FROM rerun_records WHERE scope = ?1 AND id = ?2",
                    )?
                    .query_row(params![SCOPE, id], |r| r.get(1))
                    .optional()?
                    .unwrap_or(0);
                let floor: i64 = c
                    .prepare_cached("SELECT value FROM rerun_meta WHERE name = 'fence_floor'")?
                    .query_row([], |r| r.get(0))?;
                let fence = top.max(floor) + 1;
                claim(fence)?;
                c.execute_batch("COMMIT")?;
                Ok(fence)
            };
            match locked() {
                Ok(f) => fence = f,
                Err(e) => panic!("the hand-written claim failed: {e}"),
            }
        }
        let r = receipt(n);
        let bytes = codec::encode(&r).unwrap_or_default();
        let now = HostClock.now();
        let ttl_ns = 86_400_000_000_000i64;
        c.prepare_cached(
            "UPDATE rerun_records SET status = 'completed', holder = NULL, boot_id = ?4, \
             expires_mono = ?5, expires_wall = ?6, result = ?7, changed_wall = ?8 \
             WHERE scope = ?1 AND id = ?2 AND fence = ?3 AND status = 'in_progress'",
        )
        .and_then(|mut s| {
            s.execute(params![
                SCOPE,
                id,
                fence,
                boot,
                now.mono_ns as i64 + ttl_ns,
                now.wall_ms + ttl_ns / 1_000_000,
                bytes,
                now.wall_ms
            ])
        })
        .ok();
        r
    }
}

/// The simplest client doing the same writes as SqliteStore with none of its guarantees: a
/// fresh call is an `INSERT .. ON CONFLICT DO NOTHING` and an `UPDATE` of the result (each its
/// own transaction, as rerun's claim and completion are); a repeated call is one `SELECT`.
/// Same file settings as SqliteStore (WAL, `synchronous = NORMAL`).
///
/// [`FloorSqlite::open_indexed`] is the same client on a table that also keeps what `recover`
/// and `rerunctl ls --status in-progress` read instead of every record: a `status` column and
/// an index of the open records, which the insert enters and the update leaves (the floor of a
/// store that can find its open claims without walking its completed ones).
pub struct FloorSqlite {
    conn: Mutex<Connection>,
    select: &'static str,
    insert: &'static str,
    update: &'static str,
}

impl FloorSqlite {
    pub fn open(path: &Path) -> FloorSqlite {
        FloorSqlite::with(
            path,
            "CREATE TABLE IF NOT EXISTS floor (scope TEXT NOT NULL, id TEXT NOT NULL, result BLOB, \
             PRIMARY KEY (scope, id)) WITHOUT ROWID",
            [
                "SELECT result FROM floor WHERE scope = ?1 AND id = ?2",
                "INSERT INTO floor (scope, id) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                "UPDATE floor SET result = ?3 WHERE scope = ?1 AND id = ?2",
            ],
        )
    }

    /// The floor with a `status` column and the index of open records (see the type).
    pub fn open_indexed(path: &Path) -> FloorSqlite {
        FloorSqlite::with(
            path,
            "CREATE TABLE IF NOT EXISTS floor_indexed (scope TEXT NOT NULL, id TEXT NOT NULL, \
             status TEXT NOT NULL, result BLOB, PRIMARY KEY (scope, id)) WITHOUT ROWID;
             CREATE INDEX IF NOT EXISTS floor_indexed_open ON floor_indexed (scope, id) \
             WHERE status = 'in_progress'",
            [
                "SELECT result FROM floor_indexed WHERE scope = ?1 AND id = ?2",
                "INSERT INTO floor_indexed (scope, id, status) VALUES (?1, ?2, 'in_progress') \
                 ON CONFLICT DO NOTHING",
                "UPDATE floor_indexed SET status = 'completed', result = ?3 \
                 WHERE scope = ?1 AND id = ?2",
            ],
        )
    }

    fn with(path: &Path, schema: &str, [select, insert, update]: [&'static str; 3]) -> FloorSqlite {
        let conn = connect(path);
        conn.execute_batch(schema).unwrap_or_else(|e| panic!("{e}"));
        FloorSqlite {
            conn: Mutex::new(conn),
            select,
            insert,
            update,
        }
    }

    pub fn call(&self, n: u64) -> Receipt {
        let id = Key::new(SCOPE, &n).id().to_owned();
        let c = &*self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = replayed(c, self.select, &id) {
            return r;
        }
        let inserted = c
            .prepare_cached(self.insert)
            .and_then(|mut s| s.execute(params![SCOPE, id]))
            .unwrap_or(0);
        let r = receipt(n);
        if inserted == 1 {
            let bytes = codec::encode(&r).unwrap_or_default();
            c.prepare_cached(self.update)
                .and_then(|mut s| s.execute(params![SCOPE, id, bytes]))
                .ok();
        }
        r
    }
}

/// The simplest client writing what SqliteStore writes: rerun's whole record (fence,
/// fingerprint, holder, boot id, lease) into SqliteStore's own table and index, by an
/// `INSERT .. ON CONFLICT DO NOTHING` and then the completion's `UPDATE` (each its own
/// transaction); a repeated call is one `SELECT`. What it leaves out is how rerun claims: the
/// read of the record and of the fence floor inside the claim's transaction, which makes the
/// claim atomic against other processes and its fence larger than any deleted record's. The
/// fingerprint and the times are bound as values of rerun's sizes, not computed.
pub struct RecordSqlite {
    conn: Mutex<Connection>,
    holder: String,
    boot_id: String,
}

impl RecordSqlite {
    pub fn open(path: &Path) -> RecordSqlite {
        let conn = connect_rerun_schema(path);
        let holder = Holder::current();
        RecordSqlite {
            conn: Mutex::new(conn),
            boot_id: holder.boot_id.to_string(),
            holder: holder.encode(),
        }
    }

    pub fn call(&self, n: u64) -> Receipt {
        let id = Key::new(SCOPE, &n).id().to_owned();
        let c = &*self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = replayed(
            c,
            "SELECT result FROM rerun_records WHERE scope = ?1 AND id = ?2",
            &id,
        ) {
            return r;
        }
        // Wall-clock milliseconds, and nanoseconds of the size a host's monotonic clock has.
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mono = wall.saturating_mul(1_000);
        let inserted = c
            .prepare_cached(
                "INSERT INTO rerun_records (scope, id, status, fence, fingerprint, holder, once, \
                 boot_id, lease_until, lease_wall, expires_mono, expires_wall, result, \
                 changed_wall) \
                 VALUES (?1, ?2, 'in_progress', 1, ?3, ?4, 0, ?5, ?6, ?7, 0, 0, NULL, ?8) \
                 ON CONFLICT DO NOTHING",
            )
            .and_then(|mut s| {
                s.execute(params![
                    SCOPE,
                    id,
                    &[7u8; 32][..],
                    self.holder,
                    self.boot_id,
                    mono + 30_000_000_000,
                    wall + 30_000,
                    wall
                ])
            })
            .unwrap_or(0);
        let r = receipt(n);
        if inserted == 1 {
            let bytes = codec::encode(&r).unwrap_or_default();
            c.prepare_cached(
                "UPDATE rerun_records SET status = 'completed', holder = NULL, boot_id = ?4, \
                 expires_mono = ?5, expires_wall = ?6, result = ?7, changed_wall = ?8 \
                 WHERE scope = ?1 AND id = ?2 AND fence = ?3 AND status = 'in_progress'",
            )
            .and_then(|mut s| {
                s.execute(params![
                    SCOPE,
                    id,
                    1i64,
                    self.boot_id,
                    mono + 86_400_000_000_000,
                    wall + 86_400_000,
                    bytes,
                    wall
                ])
            })
            .ok();
        }
        r
    }
}

/// Keeps the claim request type in use for documentation of what a call sends.
pub type Request<'a> = ClaimRequest<'a>;

pub fn memory() -> MemoryStore {
    MemoryStore::new()
}
