//! A job worker over a SQLite queue table. The first worker dies halfway (after sending an
//! invoice, before marking its job done); the next one converges on start-up and finishes the
//! queue without sending any invoice twice.

use std::io::Write;
use std::path::Path;

use rerun_core::{idempotent, SqliteStore};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::AppError;

/// A job of the queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub id: i64,
    pub customer: String,
    pub cents: i64,
}

/// Opens the queue (creating it with six jobs the first time).
pub fn open_queue(dir: &Path) -> Result<Connection, AppError> {
    let db = Connection::open(dir.join("queue.sqlite3"))?;
    db.busy_timeout(std::time::Duration::from_secs(5))?;
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS jobs (
             id       INTEGER PRIMARY KEY,
             customer TEXT    NOT NULL,
             cents    INTEGER NOT NULL,
             status   TEXT    NOT NULL DEFAULT 'pending'
         );
         CREATE TABLE IF NOT EXISTS outbox (
             seq     INTEGER PRIMARY KEY AUTOINCREMENT,
             job_id  INTEGER NOT NULL UNIQUE,
             message TEXT    NOT NULL
         );
         INSERT OR IGNORE INTO jobs (id, customer, cents) VALUES
             (1, 'ada', 1200), (2, 'grace', 800), (3, 'alan', 4100),
             (4, 'edsger', 300), (5, 'barbara', 990), (6, 'ken', 2500);",
    )?;
    Ok(db)
}

/// The effect that must not happen twice: an invoice email, which lands in the outbox.
///
/// The outbox row is unique per job, so a worker that dies after writing it but before rerun
/// records the result converges on the rerun: the second insert does nothing.
#[idempotent(key = job.id, scope = "worker.send_invoice", store = store, skip(queue))]
pub fn send_invoice(
    store: &SqliteStore,
    job: &Job,
    queue: &Connection,
) -> Result<String, AppError> {
    queue.execute(
        "INSERT INTO outbox (job_id, message) VALUES (?1, ?2) ON CONFLICT (job_id) DO NOTHING",
        params![job.id, format!("invoice for {} cents", job.cents)],
    )?;
    Ok(format!("invoice #{} sent to {}", job.id, job.customer))
}

/// Takes the next pending job and marks it running.
fn next_job(queue: &Connection) -> Result<Option<Job>, AppError> {
    Ok(queue
        .query_row(
            "UPDATE jobs SET status = 'running'
             WHERE id = (SELECT id FROM jobs WHERE status = 'pending' ORDER BY id LIMIT 1)
             RETURNING id, customer, cents",
            [],
            |r| {
                Ok(Job {
                    id: r.get(0)?,
                    customer: r.get(1)?,
                    cents: r.get(2)?,
                })
            },
        )
        .optional()?)
}

/// Runs a worker until the queue is empty. `die_after_sending` names a job after whose invoice
/// the worker dies (`die` is how: `abort` in the program, a panic in tests).
pub fn work(
    dir: &Path,
    out: &mut dyn Write,
    die_after_sending: Option<i64>,
    die: &dyn Fn(),
) -> Result<usize, AppError> {
    let store = SqliteStore::open(dir.join("rerun.sqlite3"))?;
    let queue = open_queue(dir)?;
    // Converge on start-up: one worker serves this queue, so a job still `running` was left by a
    // worker that died. It goes back to `pending` and runs again from its own row; the invoice
    // it may have sent is deduplicated by its key.
    let stale = queue.execute(
        "UPDATE jobs SET status = 'pending' WHERE status = 'running'",
        [],
    )?;
    if stale > 0 {
        writeln!(
            out,
            "start-up: {stale} job(s) left running by a dead worker, back to pending"
        )?;
    }
    let mut done = 0;
    while let Some(job) = next_job(&queue)? {
        let before = outbox_len(&queue)?;
        let sent = send_invoice(&store, &job, &queue)?;
        let how = if outbox_len(&queue)? > before {
            "sent"
        } else {
            "already sent before: replayed"
        };
        writeln!(out, "job {}: {sent} ({how})", job.id)?;
        if die_after_sending == Some(job.id) {
            writeln!(
                out,
                "job {}: the worker dies before marking the job done",
                job.id
            )?;
            out.flush()?;
            die();
        }
        queue.execute("UPDATE jobs SET status = 'done' WHERE id = ?1", [job.id])?;
        done += 1;
    }
    Ok(done)
}

/// The number of invoices sent.
pub fn outbox_len(queue: &Connection) -> Result<i64, AppError> {
    Ok(queue.query_row("SELECT count(*) FROM outbox", [], |r| r.get(0))?)
}

/// The number of invoices sent per job, for checking that none was sent twice.
pub fn invoices_per_job(queue: &Connection) -> Result<Vec<(i64, i64)>, AppError> {
    let mut stmt = queue.prepare(
        "SELECT jobs.id, count(outbox.seq) FROM jobs LEFT JOIN outbox ON outbox.job_id = jobs.id
         GROUP BY jobs.id ORDER BY jobs.id",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}
