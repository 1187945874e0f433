//! Stores opened as they are (`existing_only`, `rerun_core::open_url_existing`): nothing is
//! created, migrated, raised or switched, and a store that is missing or of another schema is
//! `Error::Config`. SQLite always; PostgreSQL when `RERUN_TEST_POSTGRES_URL` is set.
#![cfg(all(feature = "sqlite", feature = "postgres", feature = "testing"))]

mod postgres_common;

use std::path::Path;
use std::time::Duration;

use postgres_common::{claimed, fresh, psql, request, unique_table, url, with_param, Table};
use rerun_core::store::postgres::{PostgresStore, SCHEMA_VERSION};
use rerun_core::store::sqlite::{SqliteOptions, SqliteStore};
use rerun_core::{Error, Fingerprint, Holder, Key, Store};

const LONG: Duration = Duration::from_secs(60);

fn config_message<T>(r: Result<T, Error>) -> String {
    match r {
        Err(Error::Config { message, .. }) => message,
        Err(e) => panic!("expected Error::Config, got {e:?}"),
        Ok(_) => panic!("expected Error::Config, got a store"),
    }
}

fn existing_sqlite(path: &Path) -> Result<SqliteStore, Error> {
    SqliteStore::open_with(path, SqliteOptions::new().existing_only(true))
}

fn raw_sqlite(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).expect("a raw SQLite connection")
}

fn journal_mode(path: &Path) -> String {
    raw_sqlite(path)
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("the journal mode")
}

fn tables(path: &Path) -> Vec<String> {
    let conn = raw_sqlite(path);
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .expect("a statement");
    let names = stmt
        .query_map([], |r| r.get(0))
        .expect("the tables")
        .collect::<Result<Vec<String>, _>>()
        .expect("the tables");
    names
}

#[test]
fn sqlite_missing_files_and_folders_are_refused_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/folder/rerun.sqlite3");
    let msg = config_message(existing_sqlite(&path));
    assert!(msg.contains("does not exist"), "{msg}");
    assert!(!dir.path().join("no").exists());
    let url = format!("sqlite:{}", path.display());
    config_message(rerun_core::open_url_existing(&url));
    assert!(!dir.path().join("no").exists());
    // A folder is not a store either.
    config_message(existing_sqlite(dir.path()));
}

#[test]
fn sqlite_other_programs_databases_are_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.sqlite3");
    raw_sqlite(&path)
        .execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY)")
        .unwrap();
    let msg = config_message(existing_sqlite(&path));
    assert!(msg.contains("no rerun store"), "{msg}");
    assert_eq!(tables(&path), ["users"]);
    assert_eq!(journal_mode(&path), "delete");
}

#[test]
fn sqlite_journal_mode_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerun.sqlite3");
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(journal_mode(&path), "wal");
    raw_sqlite(&path)
        .query_row("PRAGMA journal_mode = DELETE", [], |r| {
            r.get::<_, String>(0)
        })
        .unwrap();
    let msg = config_message(existing_sqlite(&path));
    assert!(
        msg.contains("journal mode") && msg.contains("delete"),
        "{msg}"
    );
    assert_eq!(journal_mode(&path), "delete");
    // Opened normally, it is switched to WAL, as before.
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(journal_mode(&path), "wal");
}

#[test]
fn sqlite_older_and_newer_schemas_are_refused_unmigrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerun.sqlite3");
    drop(SqliteStore::open(&path).unwrap());
    let set = |v: i64| {
        raw_sqlite(&path)
            .execute(
                "UPDATE rerun_meta SET value = ?1 WHERE name = 'schema_version'",
                [v],
            )
            .unwrap();
    };
    let version = || -> i64 {
        raw_sqlite(&path)
            .query_row(
                "SELECT value FROM rerun_meta WHERE name = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    let current = rerun_core::store::sqlite::SCHEMA_VERSION;
    set(current - 1);
    let msg = config_message(existing_sqlite(&path));
    assert!(
        msg.contains("older") && msg.contains("starting a service of this release"),
        "{msg}"
    );
    assert_eq!(version(), current - 1);
    set(current + 1);
    let msg = config_message(existing_sqlite(&path));
    assert!(msg.contains("newer"), "{msg}");
    assert_eq!(version(), current + 1);
}

#[test]
fn sqlite_existing_stores_open_and_work() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rerun.sqlite3");
    let key = Key::new("billing.charge", "ord_1");
    rerun_core::Call::with_key(key.clone())
        .run(&SqliteStore::open(&path).unwrap(), || Ok::<_, Error>(7u32))
        .unwrap();
    let store = existing_sqlite(&path).unwrap();
    assert!(store.inspect(&key).unwrap().is_some());
    assert!(store.forget(&key).unwrap());
    let url = format!("sqlite:{}", path.display());
    let store = rerun_core::open_url_existing(&url).unwrap();
    assert_eq!(store.kind(), "sqlite");
}

fn pg_value(url: &str, sql: &str) -> Option<String> {
    psql(url, sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .next()
        .and_then(|row| row.into_iter().next().flatten())
}

/// Drops a schema a failing test made.
struct Schema {
    url: String,
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        let _ = psql(
            &self.url,
            &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name),
        );
    }
}

fn pg_existing(url: &str, table: &str) -> Result<PostgresStore, Error> {
    PostgresStore::builder(url)
        .table(table)
        .existing_only(true)
        .connect()
}

#[test]
fn postgres_missing_tables_and_schemas_are_refused_not_created() {
    let Some(url) = url() else { return };
    let table = unique_table("missing");
    let schema = unique_table("schema");
    // Dropped even if a failure made them.
    let _table = Table {
        url: url.clone(),
        name: table.clone(),
    };
    let _schema = Schema {
        url: url.clone(),
        name: schema.clone(),
    };
    let msg = config_message(pg_existing(&url, &table));
    assert!(
        msg.contains(&table) && msg.contains("no rerun table"),
        "{msg}"
    );
    let exists = |name: &str| {
        pg_value(
            &url,
            &format!("SELECT to_regclass('\"{name}\"') IS NOT NULL"),
        )
    };
    assert_eq!(exists(&table).as_deref(), Some("f"));
    assert_eq!(exists(&format!("{table}_meta")).as_deref(), Some("f"));
    assert_eq!(
        pg_value(
            &url,
            &format!("SELECT count(*) FROM pg_proc WHERE proname = '{table}_claim'")
        )
        .as_deref(),
        Some("0")
    );
    // Through the URL, in a schema that does not exist either.
    let with_schema = with_param(
        &with_param(&url, &format!("rerun_schema={schema}")),
        &format!("rerun_table={table}"),
    );
    let msg = config_message(rerun_core::open_url_existing(&with_schema));
    assert!(msg.contains(&schema), "{msg}");
    assert_eq!(
        pg_value(
            &url,
            &format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{schema}'")
        )
        .as_deref(),
        Some("0")
    );
}

/// A table whose meta table or fence sequence was dropped is not a missing store: its records
/// may still be there, and an operator's tool must not read it as empty.
#[test]
fn postgres_partial_tables_are_told_from_missing_ones() {
    let Some(url) = url() else { return };
    let (store, table) = fresh(&url, "partial");
    let name = table.name.clone();
    drop(store);
    psql(&url, &format!("DROP TABLE \"{name}_meta\"")).unwrap();
    let msg = config_message(pg_existing(&url, &name));
    assert!(
        msg.contains("incomplete") && !msg.contains("no rerun table"),
        "{msg}"
    );
    assert_eq!(
        pg_value(
            &url,
            &format!("SELECT to_regclass('\"{name}_meta\"') IS NOT NULL")
        )
        .as_deref(),
        Some("f"),
        "the meta table was made again"
    );
}

#[test]
fn postgres_older_codec_versions_and_claim_functions_are_left_alone() {
    let Some(url) = url() else { return };
    let (store, table) = fresh(&url, "codec");
    let name = table.name.clone();
    let key = Key::new("billing.charge", "ord_1");
    let (fp, holder) = (Fingerprint::EMPTY, Holder::current());
    let c = claimed(store.claim(&request(&key, &fp, &holder, LONG)));
    store.complete(&c, b"r", LONG).unwrap();
    drop(store);
    let codec = || {
        pg_value(
            &url,
            &format!("SELECT value FROM \"{name}_meta\" WHERE name = 'codec_version'"),
        )
    };
    let current = i64::from(rerun_core::codec::CODEC_VERSION);
    psql(
        &url,
        &format!(
            "UPDATE \"{name}_meta\" SET value = {} WHERE name = 'codec_version'; DROP FUNCTION \"{name}_claim\"",
            current - 1
        ),
    )
    .unwrap();
    let older = (current - 1).to_string();
    let store = pg_existing(&url, &name).unwrap();
    assert_eq!(codec().as_deref(), Some(older.as_str()));
    // Reads and the operator's writes work; the claim function is not made again.
    assert!(store.inspect(&key).unwrap().is_some());
    assert_eq!(store.scan(None, 10).unwrap().records.len(), 1);
    assert!(store.forget(&key).unwrap());
    assert_eq!(store.purge_expired(10).unwrap(), 0);
    assert_eq!(
        pg_value(
            &url,
            &format!("SELECT count(*) FROM pg_proc WHERE proname = '{name}_claim'")
        )
        .as_deref(),
        Some("0")
    );
    assert_eq!(codec().as_deref(), Some(older.as_str()));
    drop(store);
    // Through the URL too.
    let through_url = with_param(&url, &format!("rerun_table={name}"));
    drop(rerun_core::open_url_existing(&through_url).unwrap());
    assert_eq!(codec().as_deref(), Some(older.as_str()));
    // Opened normally, the table is taken to this build's, as before.
    drop(rerun_core::open_url(&through_url).unwrap());
    assert_eq!(codec(), Some(current.to_string()));
}

#[test]
fn postgres_results_are_not_written_below_this_builds_codec() {
    let Some(url) = url() else { return };
    let (store, table) = fresh(&url, "nowrite");
    drop(store);
    let name = table.name.clone();
    let current = i64::from(rerun_core::codec::CODEC_VERSION);
    psql(
        &url,
        &format!(
            "UPDATE \"{name}_meta\" SET value = {} WHERE name = 'codec_version'",
            current - 1
        ),
    )
    .unwrap();
    let store = pg_existing(&url, &name).unwrap();
    let key = Key::new("billing.charge", "ord_2");
    let (fp, holder) = (Fingerprint::EMPTY, Holder::current());
    let c = claimed(store.claim(&request(&key, &fp, &holder, LONG)));
    let msg = match store.complete(&c, b"r", LONG) {
        Err(Error::Codec { message, .. }) => message,
        other => panic!("expected a refusal before sending (Error::Codec), got {other:?}"),
    };
    assert!(msg.contains("codec version"), "{msg}");
    store.release(&c).unwrap();
}

#[test]
fn postgres_other_schema_versions_are_refused_unmigrated() {
    let Some(url) = url() else { return };
    let (store, table) = fresh(&url, "schema1");
    drop(store);
    let name = table.name.clone();
    let version = || {
        pg_value(
            &url,
            &format!("SELECT value FROM \"{name}_meta\" WHERE name = 'schema_version'"),
        )
    };
    for (set, words) in [
        (
            1,
            ["older", "migrate it by starting a service of this release"],
        ),
        (SCHEMA_VERSION + 1, ["newer", "upgrade rerun"]),
    ] {
        psql(
            &url,
            &format!("UPDATE \"{name}_meta\" SET value = {set} WHERE name = 'schema_version'"),
        )
        .unwrap();
        let msg = config_message(pg_existing(&url, &name));
        for word in words {
            assert!(msg.contains(word) && msg.contains(&name), "{msg}");
        }
        assert_eq!(version(), Some(set.to_string()));
    }
}
