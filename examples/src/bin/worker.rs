//! `cargo run -p rerun-examples --bin worker`
//!
//! Starts a worker process that dies halfway through the queue (it aborts, as a `kill -9`
//! would leave it), then a second worker that converges and finishes the queue.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use rerun_examples::{worker, AppError};

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // The first worker: `worker --first-worker DIR` dies after sending the invoice of job 3.
    if let [_, flag, dir] = args.as_slice() {
        if flag == "--first-worker" {
            let mut out = std::io::stdout().lock();
            return match worker::work(Path::new(dir), &mut out, Some(3), &|| std::process::abort())
            {
                Ok(_) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("worker failed: {e}");
                    std::process::ExitCode::FAILURE
                }
            };
        }
    }
    rerun_examples::run_main("worker", story)
}

fn story(dir: &Path, out: &mut dyn Write) -> Result<(), AppError> {
    writeln!(
        out,
        "worker: a job queue in SQLite; each job sends one invoice"
    )?;
    worker::open_queue(dir)?;
    writeln!(out, "\nworker 1 starts")?;
    let first = Command::new(std::env::current_exe()?)
        .arg("--first-worker")
        .arg(dir)
        .output()?;
    for line in String::from_utf8_lossy(&first.stdout).lines() {
        writeln!(out, "  {line}")?;
    }
    let died = !first.status.success();
    writeln!(
        out,
        "worker 1 {}",
        if died {
            "died halfway"
        } else {
            "finished (it was meant to die)"
        }
    )?;

    writeln!(out, "\nworker 2 starts")?;
    let mut log = Vec::new();
    let done = worker::work(dir, &mut log, None, &|| {})?;
    for line in String::from_utf8_lossy(&log).lines() {
        writeln!(out, "  {line}")?;
    }
    writeln!(out, "worker 2 finished {done} job(s)")?;

    let queue = worker::open_queue(dir)?;
    writeln!(out, "\ninvoices sent per job:")?;
    for (job, count) in worker::invoices_per_job(&queue)? {
        writeln!(out, "  job {job}: {count}")?;
    }
    Ok(())
}
