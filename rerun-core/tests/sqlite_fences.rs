//! SQLite schema 4: fences drawn per key above a floor that deletions raise, and the migration
//! from the store-wide counter of schema 3.

use std::time::Duration;

use rerun_core::clock::ManualClock;
use rerun_core::record::Status;
use rerun_core::store::sqlite::SqliteOptions;
use rerun_core::{Call, Error, Fingerprint, Holder, Key, SqliteStore, Store};

fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// A purged record's fence is below every later fence of its key, and of every new key.
#[test]
fn fences_stay_above_a_purged_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerun.sqlite3");
    let clock = ManualClock::new();
    let store = SqliteStore::open_with(&path, SqliteOptions::new().clock(clock.clone())).unwrap();
    let key = Key::new("purge", "k");
    let mut fences = Vec::new();
    for round in 0..3 {
        let out = Call::new("purge", "k")
            .ttl(Duration::from_secs(10))
            .run(&store, || Ok::<_, Error>(round))
            .unwrap();
        assert!(!out.replayed);
        fences.push(out.fence);
        clock.advance(Duration::from_secs(11));
        assert_eq!(store.purge_expired(100).unwrap(), 1);
        assert!(store.inspect(&key).unwrap().is_none());
    }
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(
        count(
            &conn,
            "SELECT value FROM rerun_meta WHERE name = 'fence_floor'"
        ),
        i64::try_from(fences[2]).unwrap()
    );
    let other = Call::new("purge", "other")
        .run(&store, || Ok::<_, Error>(9))
        .unwrap();
    assert!(other.fence > fences[2]);
}

/// A record deleted by something other than this build (a process of an earlier build, which
/// deletes without raising the floor, or an operator's plain SQL) raises the floor all the
/// same: the key's next claim draws a fence above the deleted one, and the holder of the
/// deleted claim cannot complete over it.
#[test]
fn a_deletion_by_plain_sql_raises_the_floor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerun.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    let key = Key::new("plain", "k");
    let fp = Fingerprint::of(&()).unwrap();
    let holder = Holder::current();
    let request = rerun_core::record::ClaimRequest {
        key: &key,
        fingerprint: &fp,
        holder: &holder,
        lease: Duration::from_secs(60),
        once: false,
        steal: None,
    };
    let rerun_core::record::ClaimResponse::Claimed(first) = store.claim(&request).unwrap() else {
        panic!("not claimed")
    };
    let conn = rusqlite::Connection::open(&path).unwrap();
    // What a build before schema 4 runs to forget or purge.
    conn.execute("DELETE FROM rerun_records", []).unwrap();
    let rerun_core::record::ClaimResponse::Claimed(second) = store.claim(&request).unwrap() else {
        panic!("not claimed again")
    };
    assert!(
        second.fence > first.fence,
        "{} then {}",
        first.fence,
        second.fence
    );
    assert!(matches!(
        store.complete(&first, b"stale", Duration::from_secs(60)),
        Err(Error::LeaseLost { .. })
    ));
    store
        .complete(&second, b"fresh", Duration::from_secs(60))
        .unwrap();
}

/// A claim writes no page but its key's: the floor is only read.
#[test]
fn a_claim_leaves_the_floor_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerun.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    for i in 0..20u32 {
        Call::new("floor", &i)
            .run(&store, || Ok::<_, Error>(i))
            .unwrap();
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert_eq!(
        count(
            &conn,
            "SELECT value FROM rerun_meta WHERE name = 'fence_floor'"
        ),
        0
    );
    // A forget raises it to the forgotten fence; a forget of nothing leaves it.
    let key = Key::new("floor", &3u32);
    let fence = store.inspect(&key).unwrap().unwrap().fence;
    assert!(!store.forget(&Key::new("floor", "never")).unwrap());
    assert!(store.forget(&key).unwrap());
    assert_eq!(
        count(
            &conn,
            "SELECT value FROM rerun_meta WHERE name = 'fence_floor'"
        ),
        i64::try_from(fence).unwrap()
    );
}

/// A record whose fence was damaged can still be forgotten, which is how an operator clears it.
#[test]
fn a_record_with_a_damaged_fence_can_be_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerun.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    let first = Call::new("damaged", "k")
        .run(&store, || Ok::<_, Error>(1))
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE rerun_records SET fence = 'x'", [])
        .unwrap();
    let key = Key::new("damaged", "k");
    assert!(matches!(store.inspect(&key), Err(Error::Corrupt { .. })));
    assert!(store.forget(&key).unwrap());
    let again = Call::new("damaged", "k")
        .run(&store, || Ok::<_, Error>(2))
        .unwrap();
    assert!(!again.replayed && again.value == 2);
    assert!(again.fence >= first.fence);
}

/// A floor edited away or into something else is `Corrupt`: no claim is written, a completed
/// record still replays.
#[test]
fn a_damaged_floor_is_corrupt_and_nothing_is_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerun.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    Call::new("floor", "done")
        .run(&store, || Ok::<_, Error>(1))
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    for damage in [
        "UPDATE rerun_meta SET value = -1 WHERE name = 'fence_floor'",
        "UPDATE rerun_meta SET value = 'x' WHERE name = 'fence_floor'",
        "DELETE FROM rerun_meta WHERE name = 'fence_floor'",
    ] {
        conn.execute(damage, []).unwrap();
        let mut ran = false;
        let err = Call::new("floor", "new").run(&store, || {
            ran = true;
            Ok::<_, Error>(2)
        });
        assert!(
            matches!(err, Err(Error::Corrupt { .. })),
            "{damage}: {err:?}"
        );
        assert!(!ran);
        assert!(store.inspect(&Key::new("floor", "new")).unwrap().is_none());
        let replay = Call::new("floor", "done")
            .run(&store, || Ok::<_, Error>(3))
            .unwrap();
        assert!(replay.replayed && replay.value == 1);
    }
}

/// The schema rerun wrote before fences had a floor: a store-wide counter.
const SCHEMA_3: &str = "
CREATE TABLE rerun_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO rerun_meta VALUES ('schema_version', 3), ('fence', 41);
CREATE TABLE rerun_records (
    scope TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL, fence INTEGER NOT NULL,
    fingerprint BLOB NOT NULL, holder TEXT, once INTEGER NOT NULL, boot_id TEXT NOT NULL,
    lease_until INTEGER NOT NULL, expires_mono INTEGER NOT NULL, expires_wall INTEGER NOT NULL,
    result BLOB, lease_wall INTEGER NOT NULL DEFAULT 0, changed_wall INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, id)) WITHOUT ROWID;
CREATE INDEX rerun_records_open ON rerun_records (scope, id)
    WHERE status IN ('in_progress', 'unknown');
";

#[test]
fn a_schema_3_file_is_migrated_and_the_earlier_builds_fence_draw_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.sqlite3");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(SCHEMA_3).unwrap();
    // Written by the earlier build: a completed record, and a claim held on another host.
    let (done, held) = (Key::new("v3", "done"), Key::new("v3", "held"));
    let result = rerun_core::codec::encode(&7u32).unwrap();
    let mut remote = Holder::current();
    remote.host = "sqlite-fences.remote.invalid".into();
    let insert = "INSERT INTO rerun_records (scope, id, status, fence, fingerprint, holder, once, \
         boot_id, lease_until, expires_mono, expires_wall, result, lease_wall, changed_wall) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 'another-boot', 0, 0, ?7, ?8, ?9, 1)";
    let fp = Fingerprint::EMPTY;
    let far = i64::MAX / 2;
    conn.execute(
        insert,
        rusqlite::params![
            done.scope(),
            done.id(),
            "completed",
            40,
            &fp.0[..],
            None::<String>,
            far,
            result,
            0
        ],
    )
    .unwrap();
    conn.execute(
        insert,
        rusqlite::params![
            held.scope(),
            held.id(),
            "in_progress",
            41,
            &fp.0[..],
            remote.encode(),
            0,
            None::<Vec<u8>>,
            far
        ],
    )
    .unwrap();

    let openers: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || SqliteStore::open(&path).map(drop))
        })
        .collect();
    for o in openers {
        o.join().unwrap().unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        count(
            &conn,
            "SELECT value FROM rerun_meta WHERE name = 'schema_version'"
        ),
        rerun_core::store::sqlite::SCHEMA_VERSION
    );
    assert_eq!(
        count(
            &conn,
            "SELECT value FROM rerun_meta WHERE name = 'fence_floor'"
        ),
        41
    );
    // The earlier build's fence draw finds no counter: its claims fail instead of handing out
    // a fence this build does not know of.
    let drawn: Result<i64, _> = conn.query_row(
        "UPDATE rerun_meta SET value = value + 1 WHERE name = 'fence' RETURNING value",
        [],
        |r| r.get(0),
    );
    assert!(
        matches!(drawn, Err(rusqlite::Error::QueryReturnedNoRows)),
        "{drawn:?}"
    );
    let view = store.inspect(&held).unwrap().unwrap();
    assert_eq!((view.status, view.fence), (Status::InProgress, 41));
    let replay = Call::new("v3", "done")
        .run(&store, || Ok::<_, Error>(8u32))
        .unwrap();
    assert!(replay.replayed && replay.value == 7);
    let fresh = Call::new("v3", "new")
        .run(&store, || Ok::<_, Error>(1u32))
        .unwrap();
    assert!(fresh.fence > 41, "{}", fresh.fence);
}

/// An earlier build opening a schema-4 file inserts its store-wide fence counter (at 0) before
/// it reads the version and refuses the file; the row must not come back, or that build's
/// processes still running would draw fences from 1 again, below this build's.
#[test]
fn an_earlier_build_opening_the_file_cannot_bring_its_fence_counter_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerun.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    let first = Call::new("counter", "k")
        .run(&store, || Ok::<_, Error>(1))
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    // What rerun 0.1 ran on opening any file.
    conn.execute_batch(
        "BEGIN IMMEDIATE;
         INSERT OR IGNORE INTO rerun_meta (name, value) VALUES ('schema_version', 1), ('fence', 0);
         COMMIT;",
    )
    .unwrap();
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM rerun_meta WHERE name = 'fence'"
        ),
        0
    );
    // Its fence draw finds no counter to draw from.
    let drawn: Option<i64> = conn
        .query_row(
            "UPDATE rerun_meta SET value = value + 1 WHERE name = 'fence' RETURNING value",
            [],
            |r| r.get(0),
        )
        .ok();
    assert_eq!(drawn, None);
    // This build goes on as before: a new claim's fence is above the first.
    store.forget(&Key::new("counter", "k")).unwrap();
    let second = Call::new("counter", "k")
        .run(&store, || Ok::<_, Error>(2))
        .unwrap();
    assert!(second.fence > first.fence);
}

/// A file whose counter row an earlier build put back before this build's trigger was there
/// (and whose processes drew fences from it since) has it carried into the floor and removed
/// when this build opens the file.
#[test]
fn a_counter_row_put_back_before_the_trigger_is_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerun.sqlite3");
    let first = {
        let store = SqliteStore::open(&path).unwrap();
        Call::new("counter", "k")
            .run(&store, || Ok::<_, Error>(1))
            .unwrap()
    };
    let conn = rusqlite::Connection::open(&path).unwrap();
    // As a file of this schema was before the trigger: the row back, drawn from up to a fence
    // above every fence of this build's.
    let above = i64::try_from(first.fence).unwrap() + 1_000;
    conn.execute_batch(&format!(
        "DROP TRIGGER rerun_meta_no_counter;
         INSERT INTO rerun_meta (name, value) VALUES ('fence', {above});"
    ))
    .unwrap();
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM rerun_meta WHERE name = 'fence'"
        ),
        0
    );
    assert_eq!(
        count(
            &conn,
            "SELECT value FROM rerun_meta WHERE name = 'fence_floor'"
        ),
        above
    );
    let next = Call::new("counter", "other")
        .run(&store, || Ok::<_, Error>(2))
        .unwrap();
    assert!(i64::try_from(next.fence).unwrap() > above);
}
