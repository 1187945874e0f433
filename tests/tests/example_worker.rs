//! The harness over the `worker` example: a job worker over a SQLite queue, killed at every
//! crash point of a full run of the queue (six jobs), then started again.

use rerun_core::testing::{SafeToRerun, WorldDir};
use rerun_examples::worker::{invoices_per_job, open_queue, work};
use rerun_examples::AppError;

/// The queue's state: invoices sent per job, and each job's status.
#[derive(Debug, PartialEq)]
struct Queue {
    invoices_per_job: Vec<(i64, i64)>,
    statuses: Vec<(i64, String)>,
}

fn observe(dir: &WorldDir) -> Queue {
    let read = || -> Result<Queue, AppError> {
        let queue = open_queue(dir.path())?;
        let mut stmt = queue.prepare("SELECT id, status FROM jobs ORDER BY id")?;
        let statuses = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(Queue {
            invoices_per_job: invoices_per_job(&queue)?,
            statuses,
        })
    };
    read().unwrap_or_else(|e| Queue {
        invoices_per_job: Vec::new(),
        statuses: vec![(-1, e.to_string())],
    })
}

#[test]
fn worker_is_safe_to_rerun() {
    let report = SafeToRerun::new(
        "worker",
        |dir: &WorldDir| Ok::<_, AppError>(dir.clone()),
        // The number of jobs this run did differs between a run and its rerun by design; the
        // queue's state is what must converge.
        |dir: &WorldDir| work(dir.path(), &mut std::io::sink(), None, &|| {}).map(|_done| ()),
        observe,
    )
    .check();
    rerun_tests::print_sweep(&report);
    report.assert_passed();
}
