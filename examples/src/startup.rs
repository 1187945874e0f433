//! A one-time start-up step: a schema migration with a literal key. Two instances of the
//! service start at the same moment; the migration runs once, the other instance waits for it
//! and gets its result, and a later restart skips it.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;

use rerun_core::{idempotent, SqliteStore};
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use crate::AppError;

/// How many times the migration's body ran in this process.
pub static MIGRATION_RUNS: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Migrated {
    pub backfilled: usize,
}

/// The application's database, as it was before version 3.
pub fn open_app_db(dir: &Path) -> Result<Connection, AppError> {
    let db = Connection::open(dir.join("app.sqlite3"))?;
    db.busy_timeout(std::time::Duration::from_secs(10))?;
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS customers (name TEXT PRIMARY KEY, spent_cents INTEGER NOT NULL);
         INSERT OR IGNORE INTO customers (name, spent_cents) VALUES ('ada', 12000), ('grace', 800), ('alan', 41000);",
    )?;
    Ok(db)
}

/// Version 3 adds loyalty points and backfills them. The step is keyed with a literal: one record
/// for the whole deployment. `ALTER TABLE … ADD COLUMN` fails if it runs twice, so the body
/// first looks at what is there: an instance that died after committing but before rerun
/// recorded the step leaves the column behind, and the rerun must converge, not fail.
#[idempotent(key = "migrate-v3", scope = "startup.migrate", store = store, skip(db), wait = "30s")]
pub fn migrate_v3(store: &SqliteStore, db: &Connection) -> Result<Migrated, AppError> {
    MIGRATION_RUNS.fetch_add(1, Ordering::SeqCst);
    // One transaction: if the process dies midway, nothing of it stays and the next start
    // runs it afresh. Immediate: it takes the write lock before reading, waiting (busy
    // timeout) for the other instance's writes; a deferred one would fail "database is
    // locked" when it tries to write after another connection has.
    let tx = rusqlite::Transaction::new_unchecked(db, rusqlite::TransactionBehavior::Immediate)?;
    let has_points: bool = tx.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('customers') WHERE name = 'points'",
        [],
        |r| r.get(0),
    )?;
    if !has_points {
        tx.execute(
            "ALTER TABLE customers ADD COLUMN points INTEGER NOT NULL DEFAULT 0",
            [],
        )?;
    }
    let backfilled = tx.execute("UPDATE customers SET points = spent_cents / 100", [])?;
    tx.commit()?;
    Ok(Migrated { backfilled })
}

/// One instance's start-up: open its own connections, migrate, serve.
pub fn start_instance(dir: &Path) -> Result<Migrated, AppError> {
    let store = open_store(dir)?;
    let db = open_app_db(dir)?;
    migrate_v3(&store, &db)
}

/// Opens the rerun store; instances starting together may both create the file, safely.
fn open_store(dir: &Path) -> Result<SqliteStore, AppError> {
    Ok(SqliteStore::open(dir.join("rerun.sqlite3"))?)
}

/// Runs the story in `dir`; returns how many times the migration body ran.
pub fn run(dir: &Path, out: &mut dyn Write) -> Result<u32, AppError> {
    MIGRATION_RUNS.store(0, Ordering::SeqCst);
    open_app_db(dir)?;
    writeln!(
        out,
        "startup: migration v3 (add loyalty points), keyed \"migrate-v3\""
    )?;
    writeln!(out, "\ntwo instances start at the same moment:")?;
    let both_start = Barrier::new(2);
    let results: Vec<Result<Migrated, AppError>> = std::thread::scope(|s| {
        let instances: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    both_start.wait();
                    start_instance(dir)
                })
            })
            .collect();
        instances
            .into_iter()
            .map(|i| {
                i.join()
                    .unwrap_or_else(|_| Err(AppError::Refused("an instance crashed".into())))
            })
            .collect()
    });
    for (name, result) in ["A", "B"].into_iter().zip(results) {
        let migrated = result?;
        writeln!(
            out,
            "  instance {name}: schema is at v3 ({} customers backfilled)",
            migrated.backfilled
        )?;
    }
    writeln!(
        out,
        "  the migration ran {} time(s)",
        MIGRATION_RUNS.load(Ordering::SeqCst)
    )?;

    writeln!(out, "\ninstance A restarts:")?;
    let again = start_instance(dir)?;
    writeln!(
        out,
        "  schema is at v3 ({} customers backfilled, the recorded result)",
        again.backfilled
    )?;
    let runs = MIGRATION_RUNS.load(Ordering::SeqCst);
    writeln!(out, "  the migration ran {runs} time(s) in all")?;

    let db = open_app_db(dir)?;
    let points: i64 = db.query_row("SELECT points FROM customers WHERE name = 'ada'", [], |r| {
        r.get(0)
    })?;
    writeln!(out, "\nada has {points} loyalty points")?;
    Ok(runs)
}
