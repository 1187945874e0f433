//! Store faults of the embedded store (reliability 16): a lock held past the busy timeout, a
//! file that is not a database, a newer schema, a malformed row, many processes' threads
//! creating one new file at once. Each is a typed error; nothing is lost or invented.

use std::time::Duration;

use rerun_core::store::sqlite::SqliteOptions;
use rerun_core::{Call, Error, Key, SqliteStore, Store};

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temp dir")
}

#[test]
fn a_lock_held_past_the_busy_timeout_is_a_retryable_store_error() {
    let dir = dir();
    let path = dir.path().join("busy.sqlite3");
    let store = SqliteStore::open_with(
        &path,
        SqliteOptions::new().busy_timeout(Duration::from_millis(100)),
    )
    .unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let err = Call::new("s", "k")
        .run(&store, || Ok::<_, Error>(1))
        .unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("locked"), "{err}");
    assert_eq!(err.key(), Some(&Key::new("s", "k")));
    other.execute_batch("COMMIT").unwrap();
    // After recovery the state converges: the call runs once and is then replayed.
    let first = Call::new("s", "k")
        .run(&store, || Ok::<_, Error>(1))
        .unwrap();
    let again = Call::new("s", "k")
        .run(&store, || Ok::<_, Error>(2))
        .unwrap();
    assert_eq!(
        (first.value, first.replayed, again.value, again.replayed),
        (1, false, 1, true)
    );
}

#[test]
fn a_file_that_is_not_a_database_is_a_store_error() {
    let dir = dir();
    let path = dir.path().join("garbage.sqlite3");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    assert!(err.to_string().contains("garbage.sqlite3"), "{err}");
}

#[test]
fn a_newer_schema_is_refused_with_both_versions() {
    let dir = dir();
    let path = dir.path().join("newer.sqlite3");
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE rerun_meta SET value = 7 WHERE name = 'schema_version'",
        [],
    )
    .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains('7') && text.contains('1'), "{text}");
}

#[test]
fn a_malformed_row_is_corrupt_and_left_untouched() {
    let dir = dir();
    let path = dir.path().join("row.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    Call::new("s", "k")
        .run(&store, || Ok::<_, Error>(1))
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE rerun_records SET status = 'exploded'", [])
        .unwrap();
    let mut ran = false;
    let err = Call::new("s", "k").run(&store, || {
        ran = true;
        Ok::<_, Error>(2)
    });
    assert!(matches!(err, Err(Error::Corrupt { .. })), "{err:?}");
    assert!(!ran);
    let status: String = conn
        .query_row("SELECT status FROM rerun_records", [], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "exploded");
    // Only an explicit forget lets the key run again.
    assert!(store.forget(&Key::new("s", "k")).unwrap());
    assert_eq!(
        Call::new("s", "k")
            .run(&store, || Ok::<_, Error>(3))
            .unwrap()
            .value,
        3
    );
}

#[test]
fn many_openers_of_a_new_file_create_the_schema_once() {
    let dir = dir();
    let path = dir.path().join("nested/folders/new.sqlite3");
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| SqliteStore::open(&path)))
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
    });
    let conn = rusqlite::Connection::open(&path).unwrap();
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM rerun_meta", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 2);
}

#[test]
fn once_claims_restore_normal_durability_afterwards() {
    let dir = dir();
    let store = SqliteStore::open(dir.path().join("durable.sqlite3")).unwrap();
    Call::new("s", "once")
        .once()
        .run(&store, || Ok::<_, Error>(1))
        .unwrap();
    // Replayable claims after a once claim still commit without a full sync: measured by the
    // benchmarks; here, every call of both kinds keeps working on the pooled connections.
    for i in 0..20u32 {
        let once = Call::new("s", &i)
            .once()
            .run(&store, || Ok::<_, Error>(i))
            .unwrap();
        let replayable = Call::new("r", &i)
            .run(&store, || Ok::<_, Error>(i))
            .unwrap();
        assert_eq!((once.value, replayable.value), (i, i));
    }
}
