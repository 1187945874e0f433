//! rerunctl opens stores as they are: it creates no table, file or schema, migrates nothing,
//! raises no codec version, switches no journal mode and starts no upgrade sweep; it reads a
//! store that does not exist yet as an empty one, with a warning, and refuses (exit 2, naming
//! the store) one of another schema version.

mod common;

use std::path::Path;

use rerun_core::{Call, Error};

use common::{ctl, on, pg, redis_con, unique, Backend};

/// One number a query on the raw PostgreSQL client answers.
fn pg_number(base: &str, sql: String) -> i64 {
    let n = pg(base, |c| async move {
        let row = c.query_one(&sql, &[]).await?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    });
    n as i64
}

/// One record, `billing.charge` `ord_1`.
fn seed(store: &Backend) {
    Call::new("billing.charge", "ord_1")
        .run(&*store.open(), || Ok::<_, Error>(7u32))
        .expect("a record");
}

/// Every command, and what it must do on a store that does not exist yet, with and without
/// `--json`: (arguments, exit status). The commands that read see an empty store; `recover`
/// and `purge`, which set out to change it, are refused (a recovery of a mistyped path that
/// "recovered nothing" with success would leave the claims it was meant for stuck).
const ON_NOTHING: &[(&[&str], i32)] = &[
    (&["ls"], 0),
    (&["stats"], 0),
    (&["show", "billing.charge", "evt_42"], 1),
    (&["forget", "billing.charge", "evt_42", "--yes"], 1),
    (
        &["forget", "billing.charge", "evt_42", "--yes", "--force"],
        1,
    ),
    (&["recover"], 2),
    (&["recover", "--dry-run"], 2),
    (&["purge"], 2),
];

/// What a command run on a store that does not exist must print: a command that reads, one
/// warning on stderr naming the store (`shown`), and, with `--json`, the command's own
/// document, empty; a command that changes, an error naming it.
fn check_run_on_nothing(args: &[&str], json: bool, run: &common::Run, shown: &str) {
    if matches!(args[0], "recover" | "purge") {
        assert!(
            run.stderr.contains("nothing exists at")
                && run.stderr.contains(shown)
                && run.stderr.contains("nothing was created"),
            "{args:?}: {run:#?}"
        );
        if json {
            let doc = run.json();
            assert_eq!(doc["error"]["kind"], "usage", "{doc:#}");
        }
        return;
    }
    assert!(
        run.stderr.contains("warning: nothing exists at")
            && run.stderr.contains(shown)
            && run.stderr.contains("nothing was created"),
        "{args:?}: {run:#?}"
    );
    assert_eq!(
        run.stderr.matches("warning:").count(),
        1,
        "{args:?}: one warning: {run:#?}"
    );
    if !json {
        return;
    }
    let doc = run.json();
    match args[0] {
        "ls" => {
            assert_eq!(doc["count"], 0, "{doc:#}");
            assert_eq!(doc["records"], serde_json::json!([]), "{doc:#}");
            assert_eq!(doc["unreadable"], serde_json::json!([]), "{doc:#}");
        }
        "stats" => {
            assert_eq!(doc["total"], 0, "{doc:#}");
            assert_eq!(doc["by_status"]["in_progress"], 0, "{doc:#}");
            assert_eq!(doc["scopes"], serde_json::json!([]), "{doc:#}");
        }
        _ => assert_eq!(doc["error"]["kind"], "not_found", "{doc:#}"),
    }
    assert!(
        doc["store"].as_str().is_some_and(|s| s.contains(shown))
            || doc["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(shown)),
        "{doc:#}"
    );
}

/// A PostgreSQL table that does not exist reads as an empty store, with a warning: nothing is
/// created (no table, sequence, function or schema).
#[test]
fn a_missing_postgres_table_reads_as_empty_and_is_not_created() {
    let Some(base) = rerun_core::testing::service_url("RERUN_TEST_POSTGRES_URL") else {
        return;
    };
    let table = unique("ctl_missing");
    let schema = unique("ctl_nosuch");
    let sep = if base.contains('?') { '&' } else { '?' };
    let in_public = format!("{base}{sep}rerun_table={table}");
    let in_no_schema = format!("{base}{sep}rerun_table={table}&rerun_schema={schema}");
    let exists = || {
        pg_number(
            &base,
            format!(
                "SELECT count(*) FROM pg_class WHERE relname IN ('{table}', '{table}_meta', '{table}_fence')"
            ),
        ) + pg_number(
            &base,
            format!("SELECT count(*) FROM pg_proc WHERE proname = '{table}_claim'"),
        ) + pg_number(
            &base,
            format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{schema}'"),
        )
    };
    for url in [&in_public, &in_no_schema] {
        for (args, code) in ON_NOTHING {
            for json in [false, true] {
                let mut all = vec!["--store", url.as_str()];
                all.extend_from_slice(args);
                if json {
                    all.push("--json");
                }
                let run = ctl(all).run();
                let made = exists();
                if made > 0 {
                    // Dropped before failing, so that a failure leaves nothing behind.
                    pg(&base, |c| {
                        let sql = format!(
                            "DROP TABLE IF EXISTS \"{table}\", \"{table}_meta\"; DROP SEQUENCE IF EXISTS \"{table}_fence\"; DROP FUNCTION IF EXISTS \"{table}_claim\"; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                        );
                        async move { c.batch_execute(&sql).await.map(|()| 0) }
                    });
                }
                assert_eq!(made, 0, "rerunctl {args:?} created something: {run:#?}");
                let run = run.expect(*code);
                check_run_on_nothing(args, json, &run, &table);
            }
        }
    }
}

/// A SQLite file that does not exist (the default `.rerun/rerun.sqlite3` included) reads as an
/// empty store, with a warning: no file or folder is created.
#[test]
fn a_missing_sqlite_file_reads_as_empty_and_is_not_created() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("no/such/rerun.sqlite3");
    let url = format!("sqlite:{}", path.display());
    for (args, code) in ON_NOTHING {
        for json in [false, true] {
            let mut all: Vec<&str> = args.to_vec();
            if json {
                all.push("--json");
            }
            // Named by --store, by RERUN_STORE, and the default under the current directory.
            let flag = ctl(["--store", url.as_str()].iter().chain(&all)).run();
            let env = ctl(&all).env("RERUN_STORE", &url).run();
            let default = ctl(&all).dir(dir.path()).run();
            for (run, shown) in [
                (flag, "no/such/rerun.sqlite3"),
                (env, "no/such/rerun.sqlite3"),
                (default, ".rerun/rerun.sqlite3"),
            ] {
                let run = run.expect(*code);
                check_run_on_nothing(args, json, &run, shown);
            }
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "rerunctl {all:?} created {left:?}");
        }
    }
    // Where something other than a store file is, it is refused, as a store that is unusable.
    let run = ctl(["ls"])
        .env("RERUN_STORE", &format!("sqlite:{}", dir.path().display()))
        .run()
        .expect(2);
    assert!(run.stderr.contains("is a folder"), "{run:#?}");
}

#[test]
fn an_older_codec_version_on_postgres_is_left_as_it_is() {
    let Some(store) = Backend::postgres() else {
        return;
    };
    let Backend::Postgres { base, table, .. } = &store else {
        return;
    };
    seed(&store);
    let current = i64::from(rerun_core::codec::CODEC_VERSION);
    pg(base, |c| {
        let sql = format!(
            "UPDATE \"{table}_meta\" SET value = {} WHERE name = 'codec_version'",
            current - 1
        );
        async move { c.batch_execute(&sql).await.map(|()| 0) }
    });
    let codec = || {
        pg_number(
            base,
            format!("SELECT value FROM \"{table}_meta\" WHERE name = 'codec_version'"),
        )
    };
    assert_eq!(on(&store, &["ls", "--json"]).expect(0).json()["count"], 1);
    assert_eq!(codec(), current - 1);
    on(&store, &["stats"]).expect(0);
    on(&store, &["show", "billing.charge", "ord_1"]).expect(0);
    on(&store, &["purge"]).expect(0);
    on(&store, &["forget", "billing.charge", "ord_1", "--yes"]).expect(0);
    assert_eq!(codec(), current - 1);
}

#[test]
fn a_postgres_table_of_an_older_schema_is_refused_not_migrated() {
    let Some(store) = Backend::postgres() else {
        return;
    };
    let Backend::Postgres { base, table, .. } = &store else {
        return;
    };
    pg(base, |c| {
        let sql = format!("UPDATE \"{table}_meta\" SET value = 1 WHERE name = 'schema_version'");
        async move { c.batch_execute(&sql).await.map(|()| 0) }
    });
    let run = on(&store, &["ls"]).expect(2);
    assert!(
        run.stderr.contains(table.as_str())
            && run.stderr.contains("schema version 1")
            && run
                .stderr
                .contains("migrate it by starting a service of this release first"),
        "{run:#?}"
    );
    let version = pg_number(
        base,
        format!("SELECT value FROM \"{table}_meta\" WHERE name = 'schema_version'"),
    );
    assert_eq!(version, 1);
}

fn journal_mode(path: &Path) -> String {
    rusqlite::Connection::open(path)
        .and_then(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
        .expect("the journal mode")
}

#[test]
fn a_sqlite_file_in_rollback_journal_mode_is_not_switched_to_wal() {
    let store = Backend::sqlite();
    let Backend::Sqlite { path, .. } = &store else {
        return;
    };
    seed(&store);
    rusqlite::Connection::open(path)
        .and_then(|c| {
            c.query_row("PRAGMA journal_mode = DELETE", [], |r| {
                r.get::<_, String>(0)
            })
        })
        .expect("rollback journal");
    let run = on(&store, &["ls"]).expect(2);
    assert!(run.stderr.contains("journal mode"), "{run:#?}");
    assert_eq!(journal_mode(path), "delete");
}

#[test]
fn a_sqlite_file_of_another_program_gets_no_tables() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("app.sqlite3");
    rusqlite::Connection::open(&path)
        .and_then(|c| c.execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY)"))
        .expect("another program's database");
    let url = format!("sqlite:{}", path.display());
    let run = ctl(["--store", url.as_str(), "ls"]).run().expect(2);
    assert!(run.stderr.contains("no rerun store"), "{run:#?}");
    let tables: Vec<String> = rusqlite::Connection::open(&path)
        .and_then(|c| {
            let mut stmt = c.prepare("SELECT name FROM sqlite_master ORDER BY name")?;
            let names = stmt
                .query_map([], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>();
            names
        })
        .expect("the tables");
    assert_eq!(tables, ["users"]);
    assert_eq!(journal_mode(&path), "delete");
}

#[test]
fn a_sqlite_store_of_an_older_schema_is_refused_not_migrated() {
    let store = Backend::sqlite();
    let Backend::Sqlite { path, .. } = &store else {
        return;
    };
    let older = rerun_core::store::sqlite::SCHEMA_VERSION - 1;
    let set = |c: &rusqlite::Connection| {
        c.execute(
            "UPDATE rerun_meta SET value = ?1 WHERE name = 'schema_version'",
            [older],
        )
    };
    rusqlite::Connection::open(path)
        .and_then(|c| set(&c))
        .expect("an older version");
    let run = on(&store, &["ls"]).expect(2);
    assert!(run.stderr.contains("older"), "{run:#?}");
    let version: i64 = rusqlite::Connection::open(path)
        .and_then(|c| {
            c.query_row(
                "SELECT value FROM rerun_meta WHERE name = 'schema_version'",
                [],
                |r| r.get(0),
            )
        })
        .expect("the version");
    assert_eq!(version, older);
}

#[test]
fn redis_stores_are_not_swept() {
    let Some(store) = Backend::redis() else {
        return;
    };
    let Backend::Redis { base, prefix, .. } = &store else {
        return;
    };
    on(&store, &["ls"]).expect(0);
    on(&store, &["stats"]).expect(0);
    // A sweep, had one started, would have had time to end its pass.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut con = redis_con(base);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut con)
        .expect("KEYS");
    assert!(keys.is_empty(), "{keys:?}");
}
