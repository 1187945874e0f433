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

/// The store leaves its file in WAL mode (replays read beside the writer), from a new file and
/// from one another program left in rollback-journal mode.
#[test]
fn the_file_is_left_in_wal_mode() {
    let dir = dir();
    for fresh in [true, false] {
        let path = dir.path().join(format!("wal-{fresh}.sqlite3"));
        if !fresh {
            let other = rusqlite::Connection::open(&path).unwrap();
            let mode: String = other
                .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
                .unwrap();
            assert_eq!(mode, "delete");
        }
        let store = SqliteStore::open(&path).unwrap();
        Call::new("s", "k")
            .run(&store, || Ok::<_, Error>(1))
            .unwrap();
        let raw = rusqlite::Connection::open(&path).unwrap();
        let mode: String = raw
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal", "fresh: {fresh}");
    }
}

#[test]
fn a_file_that_is_not_a_database_is_a_store_error() {
    let dir = dir();
    let path = dir.path().join("garbage.sqlite3");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    // The message names the absolute path and the cause; no retry can fix it.
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("not a database"), "{text}");
    assert!(!err.is_retryable(), "{text}");
}

/// A folder given as the store's path is a configuration error naming it, not a passing
/// shortage to retry for ever (SQLite's `SQLITE_CANTOPEN` says the same of both).
#[test]
fn a_folder_given_as_the_path_is_a_configuration_error() {
    let dir = dir();
    for opened in [
        SqliteStore::open(dir.path()),
        SqliteStore::open_with(dir.path(), SqliteOptions::new().existing_only(true)),
    ] {
        match opened {
            Err(Error::Config { message }) => assert!(
                message.contains("is a folder") && message.contains("rerun.sqlite3"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_folder_that_cannot_be_made_is_a_permanent_error_naming_it() {
    let dir = dir();
    // A regular file where a folder should be: no retry (and no privilege) helps.
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"x").unwrap();
    let err = SqliteStore::open(blocker.join("sub").join("rerun.sqlite3")).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, Error::Store { .. }) && !err.is_retryable(),
        "{text}"
    );
    assert!(
        text.contains(&blocker.join("sub").display().to_string()),
        "{text}"
    );
    // A relative path is reported absolute.
    let cwd = std::env::current_dir().unwrap();
    let relative = SqliteStore::open("").unwrap_err().to_string();
    assert!(
        relative.contains(&cwd.display().to_string()) || relative.contains("path"),
        "{relative}"
    );
}

#[test]
fn enormous_ttls_and_leases_do_not_wrap() {
    use rerun_core::record::{ClaimRequest, ClaimResponse};
    use rerun_core::{Fingerprint, Holder};
    let dir = dir();
    let store = SqliteStore::open(dir.path().join("max.sqlite3")).unwrap();
    let key = Key::new("s", "forever");
    let ClaimResponse::Claimed(claim) = store
        .claim(&ClaimRequest {
            key: &key,
            fingerprint: &Fingerprint::EMPTY,
            holder: &Holder::current(),
            lease: Duration::MAX,
            once: false,
            steal: None,
        })
        .unwrap()
    else {
        panic!("a fresh key is claimed")
    };
    let view = store.inspect(&key).unwrap().unwrap();
    assert!(view.lease_remaining.is_some(), "{view:?}");
    store.renew(&claim, Duration::MAX).unwrap();
    store.complete(&claim, b"result", Duration::MAX).unwrap();
    // Stored as the largest time there is, not wrapped into the past: never purged.
    assert!(store.inspect(&key).unwrap().unwrap().expires_in.is_some());
    assert_eq!(store.purge_expired(100).unwrap(), 0);
    let recovered = rerun_core::recover(&store).unwrap();
    assert_eq!(recovered.purged, 0);
    assert!(store.inspect(&key).unwrap().is_some());
    // Through the runtime, durations past the limit are refused before the store is touched.
    let err = Call::new("s", "too-long")
        .ttl(Duration::MAX)
        .run(&store, || Ok::<_, Error>(1))
        .unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err}");
    assert!(store.inspect(&Key::new("s", "too-long")).unwrap().is_none());
}

#[test]
fn a_database_of_schema_1_is_migrated_when_opened() {
    let dir = dir();
    let path = dir.path().join("v1.sqlite3");
    let old = rusqlite::Connection::open(&path).unwrap();
    // The schema rerun 0.1 wrote, with one completed record.
    old.execute_batch(
        "CREATE TABLE rerun_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
         INSERT INTO rerun_meta VALUES ('schema_version', 1), ('fence', 7);
         CREATE TABLE rerun_records (scope TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL,
             fence INTEGER NOT NULL, fingerprint BLOB NOT NULL, holder TEXT, once INTEGER NOT NULL,
             boot_id TEXT NOT NULL, lease_until INTEGER NOT NULL, expires_mono INTEGER NOT NULL,
             expires_wall INTEGER NOT NULL, result BLOB, PRIMARY KEY (scope, id)) WITHOUT ROWID;",
    )
    .unwrap();
    drop(old);
    let openers: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || SqliteStore::open(&path).map(|_| ()))
        })
        .collect();
    for o in openers {
        o.join().unwrap().unwrap();
    }
    let check = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = check
        .query_row(
            "SELECT value FROM rerun_meta WHERE name = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, rerun_core::store::sqlite::SCHEMA_VERSION);
    let store = SqliteStore::open(&path).unwrap();
    let out = Call::new("s", "k")
        .run(&store, || Ok::<_, Error>(1))
        .unwrap();
    assert!(
        out.fence > 7,
        "fences keep growing across the migration: {}",
        out.fence
    );
}

/// rerun 0.1 stored a monotonic deadline past `i64::MAX` nanoseconds (a ttl or lease of about
/// 292 years or more: "forever") wrapped negative, and read it back as unsigned. The migration
/// stores it as this build does (`i64::MAX`): the record replays instead of being corrupt, and
/// purging does not take it for expired.
#[test]
fn a_schema_1_deadline_stored_negative_is_forever_after_the_migration() {
    let dir = dir();
    // The row a completed call and an open claim leave, as this build writes them.
    let donor_path = dir.path().join("donor.sqlite3");
    let donor = SqliteStore::open(&donor_path).unwrap();
    for id in ["forever", "open"] {
        Call::new("s", id)
            .run(&donor, || Ok::<_, Error>(5u32))
            .unwrap();
    }
    drop(donor);
    let columns = "scope, id, status, fence, fingerprint, holder, once, boot_id, lease_until, \
                   expires_mono, expires_wall, result";
    let donor = rusqlite::Connection::open(&donor_path).unwrap();
    let mut rows = donor
        .prepare(&format!("SELECT {columns} FROM rerun_records"))
        .unwrap();
    let rows: Vec<Vec<rusqlite::types::Value>> = rows
        .query_map([], |r| (0..12).map(|i| r.get(i)).collect())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 2);
    let path = dir.path().join("v1.sqlite3");
    let old = rusqlite::Connection::open(&path).unwrap();
    old.execute_batch(
        "CREATE TABLE rerun_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
         INSERT INTO rerun_meta VALUES ('schema_version', 1), ('fence', 7);
         CREATE TABLE rerun_records (scope TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL,
             fence INTEGER NOT NULL, fingerprint BLOB NOT NULL, holder TEXT, once INTEGER NOT NULL,
             boot_id TEXT NOT NULL, lease_until INTEGER NOT NULL, expires_mono INTEGER NOT NULL,
             expires_wall INTEGER NOT NULL, result BLOB, PRIMARY KEY (scope, id)) WITHOUT ROWID;",
    )
    .unwrap();
    for row in &rows {
        old.execute(
            &format!("INSERT INTO rerun_records ({columns}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"),
            rusqlite::params_from_iter(row),
        )
        .unwrap();
    }
    // 0.1's "forever": `u64::MAX` nanoseconds (saturated) written `as i64`; and a 400-year
    // deadline, wrapped.
    let wrapped = (400u64 * 365 * 24 * 3600 * 1_000_000_000) as i64;
    assert!(wrapped < 0);
    old.execute(
        "UPDATE rerun_records SET expires_mono = -1, expires_wall = 9000000000000000
         WHERE id LIKE '%forever'",
        [],
    )
    .unwrap();
    old.execute(
        "UPDATE rerun_records SET status = 'in_progress', lease_until = ?1, result = NULL,
             expires_mono = 0, expires_wall = 0
         WHERE id LIKE '%open'",
        [wrapped],
    )
    .unwrap();
    drop(old);
    let store = SqliteStore::open(&path).unwrap();
    let again = Call::new("s", "forever").run(&store, || Ok::<_, Error>(6u32));
    assert!(
        matches!(again, Ok(ref o) if o.replayed && o.value == 5),
        "{again:?}"
    );
    assert_eq!(store.purge_expired(100).unwrap(), 0);
    assert!(store.inspect(&Key::new("s", "forever")).unwrap().is_some());
    let open = store.inspect(&Key::new("s", "open"));
    assert!(matches!(open, Ok(Some(_))), "{open:?}");
    let stored: (i64, i64) = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT (SELECT expires_mono FROM rerun_records WHERE id LIKE '%forever'),
                    (SELECT lease_until FROM rerun_records WHERE id LIKE '%open')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(stored, (i64::MAX, i64::MAX));
}

/// A burst of hundreds of short-lived threads, under a low limit of open files: callers queue
/// for the capped pool instead of failing, and the idle pool shrinks afterwards.
#[test]
fn a_burst_of_threads_under_a_low_file_limit_queues_and_shrinks() {
    const ROLE: &str = "RERUN_TEST_SQLITE_BURST";
    if let Ok(path) = std::env::var(ROLE) {
        burst_child(std::path::Path::new(&path));
        return;
    }
    let dir = dir();
    let path = dir.path().join("burst.sqlite3");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "a_burst_of_threads_under_a_low_file_limit_queues_and_shrinks",
            "--exact",
            "--nocapture",
        ])
        .env(ROLE, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("BURST OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A process out of file descriptors cannot open a connection: the call fails retryably
/// (SQLite says "unable to open database file", as it does of a file closed to writing, which
/// no retry fixes), and the next call, with descriptors free again, runs.
#[test]
fn out_of_file_descriptors_a_call_fails_retryably() {
    const ROLE: &str = "RERUN_TEST_SQLITE_EMFILE";
    if let Ok(path) = std::env::var(ROLE) {
        emfile_child(std::path::Path::new(&path));
        return;
    }
    let dir = dir();
    let path = dir.path().join("emfile.sqlite3");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "out_of_file_descriptors_a_call_fails_retryably",
            "--exact",
            "--nocapture",
        ])
        .env(ROLE, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("EMFILE OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn emfile_child(path: &std::path::Path) {
    use nix::sys::resource::{setrlimit, Resource};
    setrlimit(Resource::RLIMIT_NOFILE, 64, 64).unwrap();
    // No idle connection kept: every call opens one.
    let store = SqliteStore::open_with(path, SqliteOptions::new().max_idle(0)).unwrap();
    Call::new("s", "first")
        .run(&store, || Ok::<_, Error>(1))
        .unwrap();
    let mut taken = Vec::new();
    while let Ok(file) = std::fs::File::open("/dev/null") {
        taken.push(file);
    }
    let err = Call::new("s", "k")
        .run(&store, || Ok::<_, Error>(2))
        .unwrap_err();
    println!("out of descriptors: {err}");
    assert!(err.is_retryable(), "{err:?}");
    drop(taken);
    let ran = Call::new("s", "k").run(&store, || Ok::<_, Error>(3));
    assert!(matches!(ran, Ok(ref o) if o.value == 3), "{ran:?}");
    println!("EMFILE OK");
}

fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

fn burst_child(path: &std::path::Path) {
    use nix::sys::resource::{setrlimit, Resource};
    setrlimit(Resource::RLIMIT_NOFILE, 128, 128).unwrap();
    let store = SqliteStore::open(path).unwrap();
    let before = open_files();
    let burst = |round: u32| {
        let failures = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for i in 0..600u32 {
                let (store, failures) = (&store, &failures);
                s.spawn(move || {
                    let r = Call::new("burst", &(round, i)).run(store, || Ok::<_, Error>(i));
                    if let Err(e) = r {
                        eprintln!("call {i}: {e}");
                        failures.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
        });
        failures.load(std::sync::atomic::Ordering::SeqCst)
    };
    let failed = burst(0);
    let first = open_files();
    let failed_again = burst(1);
    let second = open_files();
    let open = store.open_connections();
    println!(
        "failed {failed} + {failed_again}, idle connections {open}, open files {before} -> {first} -> {second}"
    );
    assert_eq!((failed, failed_again), (0, 0));
    assert!(open <= 8, "{open} idle connections stayed open");
    // SQLite keeps the file descriptor of a closed connection while others still hold locks on
    // the file, and reuses it for the next one: bounded by the pool's cap (32), not growing.
    assert!(
        first <= before + 32 + 2 * 8,
        "{first} files open, {before} before"
    );
    assert!(
        second <= first + 2,
        "open files grew from {first} to {second}"
    );
    println!("BURST OK");
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
    let ours = rerun_core::store::sqlite::SCHEMA_VERSION.to_string();
    assert!(text.contains('7') && text.contains(&ours), "{text}");
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

/// A scan reads past a malformed row, page by page (a page of one row that cannot be read
/// still moves the cursor on), and names it.
#[test]
fn a_scan_reads_past_a_malformed_row() {
    let dir = dir();
    let path = dir.path().join("scan.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    for k in ["a", "b", "c"] {
        Call::new("s", k).run(&store, || Ok::<_, Error>(1)).unwrap();
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE rerun_records SET status = 'exploded' WHERE id = ?1",
        [Key::new("s", "b").id()],
    )
    .unwrap();
    let (mut records, mut unreadable, mut cursor) = (Vec::new(), Vec::new(), None);
    loop {
        let page = store.scan(cursor.as_deref(), 1).unwrap();
        records.extend(page.records.into_iter().map(|r| r.key));
        unreadable.extend(page.unreadable);
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(records, [Key::new("s", "a"), Key::new("s", "c")]);
    assert_eq!(unreadable.len(), 1);
    assert_eq!(unreadable[0].key, Key::new("s", "b"));
    assert!(
        unreadable[0].kind.to_string().contains("exploded"),
        "{:?}",
        unreadable[0]
    );
    // Filtered by scope it is there too; by another scope it is not.
    let filter = rerun_core::store::ScanFilter::new().scope_prefix("s");
    assert_eq!(
        store
            .scan_filtered(&filter, None, 10)
            .unwrap()
            .unreadable
            .len(),
        1
    );
    let other = rerun_core::store::ScanFilter::new().scope_prefix("t");
    assert!(store
        .scan_filtered(&other, None, 10)
        .unwrap()
        .unreadable
        .is_empty());
}

/// A row whose key is not text (a blob, or text that is not UTF-8: rerun writes neither, but the
/// table's columns take both) is named unreadable, with what is wrong with it, and the scan reads
/// past it whatever the page size: a page that ends on such a row names its exact bytes.
#[test]
fn a_scan_reads_past_a_key_that_is_not_text() {
    let dir = dir();
    let path = dir.path().join("keys.sqlite3");
    let store = SqliteStore::open(&path).unwrap();
    let keys = ["a", "b", "c"].map(|k| Key::new("s", k));
    for k in ["a", "b", "c"] {
        Call::new("s", k).run(&store, || Ok::<_, Error>(1)).unwrap();
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    let columns = "status, fence, fingerprint, holder, once, boot_id, lease_until, expires_mono, \
                   expires_wall, result, lease_wall, changed_wall";
    // In key order: after scope `s`'s text ids, its blob id; then the scopes `s` as a blob and
    // `\xc3(` as text, which sort after every text scope of valid UTF-8 that starts with `s`.
    let damaged = [
        (
            "'s'",
            "CAST(x'ff' AS TEXT)",
            "its id is text that is not UTF-8 (bytes ff)",
        ),
        ("'s'", "x'00ff'", "its id is a blob (bytes 00ff)"),
        (
            "CAST(x'c328' AS TEXT)",
            "'k'",
            "its scope is text that is not UTF-8 (bytes c328)",
        ),
        ("x'73'", "'k'", "its scope is a blob (bytes 73)"),
    ];
    for (scope, id, _) in damaged {
        conn.execute(
            &format!(
                "INSERT INTO rerun_records (scope, id, {columns}) \
                 SELECT {scope}, {id}, {columns} FROM rerun_records WHERE id = ?1"
            ),
            [keys[0].id()],
        )
        .unwrap();
    }
    let scan = |filter: &rerun_core::store::ScanFilter, limit: usize| {
        let (mut records, mut unreadable, mut cursor) = (Vec::new(), Vec::new(), None);
        for _ in 0..=7 {
            let page = store
                .scan_filtered(filter, cursor.as_deref(), limit)
                .unwrap();
            records.extend(page.records.into_iter().map(|r| r.key));
            unreadable.extend(page.unreadable.into_iter().map(|u| u.kind.to_string()));
            match page.next {
                Some(next) => cursor = Some(next),
                None => return (records, unreadable),
            }
        }
        panic!("a scan of 7 rows in pages of {limit} did not end");
    };
    let all = rerun_core::store::ScanFilter::new();
    for limit in 1..=8 {
        let (records, unreadable) = scan(&all, limit);
        assert_eq!(records, keys, "pages of {limit}");
        assert_eq!(
            unreadable.len(),
            damaged.len(),
            "pages of {limit}: {unreadable:?}"
        );
        for ((_, _, fault), kind) in damaged.iter().zip(&unreadable) {
            assert!(kind.contains(fault), "pages of {limit}: {kind:?}");
        }
    }
    // A scope filter selects by the stored bytes: scope `s` holds the two damaged ids.
    for limit in [1, 2, 10] {
        let (records, unreadable) = scan(&all.clone().scope_prefix("s"), limit);
        assert_eq!(records, keys);
        assert_eq!(unreadable.len(), 2, "{unreadable:?}");
    }
    // The rows are left as they are: nothing was lost, nor written.
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM rerun_records", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 7);
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

/// Filtered scans select by scope prefix and state (the open states through their index),
/// and leave results out when asked.
#[test]
fn filtered_scans_select_by_scope_prefix_and_state() {
    use rerun_core::record::ClaimRequest;
    use rerun_core::store::ScanFilter;
    use rerun_core::{Fingerprint, Holder, Status};
    let dir = dir();
    let store = SqliteStore::open(dir.path().join("scan.sqlite3")).unwrap();
    for scope in ["billing.charge", "billing.refund", "billingx", "mail"] {
        for i in 0..3 {
            Call::new(scope, &i)
                .run(&store, || Ok::<_, Error>(i))
                .unwrap();
        }
        store
            .claim(&ClaimRequest {
                key: &Key::new(scope, "open"),
                fingerprint: &Fingerprint::EMPTY,
                holder: &Holder::current(),
                lease: Duration::from_secs(60),
                once: false,
                steal: None,
            })
            .unwrap();
    }
    let all = |filter: ScanFilter| {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let page = store.scan_filtered(&filter, cursor.as_deref(), 2).unwrap();
            out.extend(page.records);
            match page.next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        out
    };
    assert_eq!(all(ScanFilter::new()).len(), 16);
    let billing = all(ScanFilter::new().scope_prefix("billing."));
    assert_eq!(billing.len(), 8);
    let open = all(ScanFilter::new()
        .status(Status::InProgress)
        .without_results());
    assert_eq!(open.len(), 4);
    assert!(open
        .iter()
        .all(|r| r.age.is_some_and(|a| a < Duration::from_secs(60))));
    let done = all(ScanFilter::new()
        .scope_prefix("mail")
        .status(Status::Completed)
        .without_results());
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|r| r.result.is_none()));
    let both = all(ScanFilter::new()
        .status(Status::InProgress)
        .status(Status::Completed));
    assert_eq!(both.len(), 16);
}

/// A claim writes while its read is still open, which upgrades the read to a write; when another
/// connection holds the write lock (or wrote since the read), SQLite refuses the upgrade and the
/// claim runs again under `BEGIN IMMEDIATE`, waiting for the lock. Two stores that both read the
/// key free while a third connection writes: one claims it, the other finds it busy.
#[test]
fn claims_that_read_a_free_key_while_another_connection_writes_claim_it_once() {
    use rerun_core::record::{ClaimRequest, ClaimResponse};
    use rerun_core::{Fingerprint, Holder};

    let dir = dir();
    let path = dir.path().join("upgrade.sqlite3");
    let (a, b) = (
        SqliteStore::open(&path).unwrap(),
        SqliteStore::open(&path).unwrap(),
    );
    let writer = rusqlite::Connection::open(&path).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    let key = Key::new("s", "k");
    let (fingerprint, holder) = (Fingerprint::EMPTY, Holder::current());
    let req = ClaimRequest {
        key: &key,
        fingerprint: &fingerprint,
        holder: &holder,
        lease: Duration::from_secs(30),
        once: false,
        steal: None,
    };
    let answers = std::thread::scope(|s| {
        let (first, second) = (s.spawn(|| a.claim(&req)), s.spawn(|| b.claim(&req)));
        std::thread::sleep(Duration::from_millis(300));
        // A write the readers' snapshots do not include: their upgrades would be refused even
        // without the lock.
        writer
            .execute_batch(
                "UPDATE rerun_meta SET value = value + 1 WHERE name = 'fence_floor'; COMMIT",
            )
            .unwrap();
        [first.join().unwrap(), second.join().unwrap()]
    });
    let claimed = answers
        .iter()
        .filter(|r| matches!(r, Ok(ClaimResponse::Claimed(_))))
        .count();
    let busy = answers
        .iter()
        .filter(|r| matches!(r, Ok(ClaimResponse::Busy(_))))
        .count();
    assert_eq!((claimed, busy), (1, 1), "{answers:?}");
}

/// A busy timeout past what SQLite's busy handler can wait (`Duration::MAX`, a month) is the
/// longest it can: the store opens, calls run, and a writer waits for a lock another
/// connection gives back.
#[test]
fn a_busy_timeout_past_sqlites_longest_is_its_longest() {
    use rerun_core::store::sqlite::MAX_BUSY_TIMEOUT;
    let dir = dir();
    for (i, timeout) in [
        Duration::MAX,
        Duration::from_secs(30 * 86_400),
        MAX_BUSY_TIMEOUT,
    ]
    .into_iter()
    .enumerate()
    {
        let path = dir.path().join(format!("long{i}.sqlite3"));
        let store =
            SqliteStore::open_with(&path, SqliteOptions::new().busy_timeout(timeout)).unwrap();
        let other = rusqlite::Connection::open(&path).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            other.execute_batch("COMMIT").unwrap();
        });
        let out = Call::new("s", "k")
            .run(&store, || Ok::<_, Error>(i))
            .unwrap();
        assert_eq!(out.value, i);
        release.join().unwrap();
    }
}

/// A clock that runs a write of its own on the reading it is armed for: a claim reads the clock
/// between reading the record and writing its claim, so the write lands in that window.
#[derive(Clone, Default)]
struct Meddling(std::sync::Arc<std::sync::Mutex<Option<Write>>>);

/// What [`Meddling`] runs.
type Write = Box<dyn FnOnce() + Send>;

impl Meddling {
    fn arm(&self, write: impl FnOnce() + Send + 'static) {
        *self.0.lock().unwrap() = Some(Box::new(write));
    }
}

impl rerun_core::clock::Clock for Meddling {
    fn now(&self) -> rerun_core::clock::Now {
        let write = self.0.lock().unwrap().take();
        if let Some(write) = write {
            write();
        }
        rerun_core::clock::HostClock.now()
    }
}

/// A store on a [`Meddling`] clock and another store of the same file, in a new directory.
fn meddled() -> (tempfile::TempDir, Meddling, SqliteStore, SqliteStore) {
    let dir = dir();
    let path = dir.path().join("meddled.sqlite3");
    let clock = Meddling::default();
    let store = SqliteStore::open_with(&path, SqliteOptions::new().clock(clock.clone())).unwrap();
    let other = SqliteStore::open(&path).unwrap();
    (dir, clock, store, other)
}

fn claim_request<'a>(
    key: &'a Key,
    holder: &'a rerun_core::Holder,
) -> rerun_core::record::ClaimRequest<'a> {
    rerun_core::record::ClaimRequest {
        key,
        fingerprint: &rerun_core::Fingerprint::EMPTY,
        holder,
        lease: Duration::from_secs(30),
        once: false,
        steal: None,
    }
}

/// A clock that panics inside a store call (the call runs it on a pooled connection) costs
/// that call and nothing else: the connection is closed and counted so, and a store of one
/// connection still serves the next call.
#[test]
fn a_panic_inside_a_call_gives_its_connection_back_to_the_count() {
    let dir = dir();
    let clock = Meddling::default();
    let store = SqliteStore::open_with(
        dir.path().join("panics.sqlite3"),
        SqliteOptions::new()
            .clock(clock.clone())
            .max_connections(1)
            .busy_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let key = Key::new("s", "k");
    let holder = rerun_core::Holder::current();
    clock.arm(|| panic!("a clock that panics (on purpose)"));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.claim(&claim_request(&key, &holder))
    }));
    assert!(panicked.is_err());
    for _ in 0..3 {
        let answer = store.claim(&claim_request(&key, &holder));
        assert!(answer.is_ok(), "{answer:?}");
    }
    assert!(store.open_connections() <= 1);
}

/// Another process claims the key after this claim read it free and before it writes: the
/// claim's write is refused (it would be made on what it read, which is no longer so), and the
/// claim, made again under the write lock, finds the other holder's live lease. Had the write been
/// a transaction of its own, it would have replaced the other claim and both would run.
#[test]
fn a_claim_made_between_a_claims_read_and_its_write_keeps_the_key() {
    use rerun_core::record::ClaimResponse;
    let (_dir, clock, store, other) = meddled();
    let key = Key::new("s", "k");
    let (mine, theirs) = (rerun_core::Holder::current(), rerun_core::Holder::current());
    let (their_key, their_holder) = (key.clone(), theirs.clone());
    clock.arm(move || {
        let claimed = other
            .claim(&claim_request(&their_key, &their_holder))
            .unwrap();
        assert!(matches!(claimed, ClaimResponse::Claimed(_)), "{claimed:?}");
    });
    let answer = store.claim(&claim_request(&key, &mine)).unwrap();
    let ClaimResponse::Busy(busy) = answer else {
        panic!("the key was claimed twice: {answer:?}");
    };
    assert_eq!(busy.holder, theirs);
    let record = store.inspect(&key).unwrap().unwrap();
    assert_eq!((record.fence, record.holder), (busy.fence, Some(theirs)));
}

/// Another process forgets a record after this claim read the fence floor and before it writes:
/// the claim's fence is still above the forgotten record's, because the claim, refused its write
/// on a floor that moved, draws the fence again under the write lock.
#[test]
fn a_forget_between_a_claims_read_and_its_write_leaves_its_fence_above() {
    use rerun_core::record::ClaimResponse;
    let (_dir, clock, store, other) = meddled();
    let gone = Call::new("s", "gone")
        .run(&other, || Ok::<_, Error>(1))
        .unwrap();
    clock.arm(move || {
        assert!(other.forget(&Key::new("s", "gone")).unwrap());
    });
    let (key, holder) = (Key::new("s", "k"), rerun_core::Holder::current());
    let answer = store.claim(&claim_request(&key, &holder)).unwrap();
    let ClaimResponse::Claimed(claim) = answer else {
        panic!("{answer:?}");
    };
    assert!(
        claim.fence > gone.fence,
        "fence {} is not above the forgotten record's {}",
        claim.fence,
        gone.fence
    );
}
