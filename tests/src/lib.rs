//! Cross-crate acceptance tests: the safe-to-rerun harness over every example (`tests/`), with
//! the helpers they share.

use rerun_core::testing::{Mode, Report};
use rerun_core::{Key, Status, Store};

/// The status of `key`'s record in `store`: what a rerun left behind, without fences or
/// timestamps (which differ between runs that converge).
pub fn status_of<S: Store + ?Sized>(store: &S, key: &Key) -> Option<Status> {
    store.inspect(key).ok().flatten().map(|r| r.status)
}

/// Prints a report with the duration of its sweeps, for the test log.
pub fn print_sweep(report: &Report) {
    println!("{report}");
    println!(
        "sweep of {} points: in process {:?}, SIGKILL {:?}, total {:?}",
        report.points().len(),
        report.elapsed_in(Mode::InProcess),
        report.elapsed_in(Mode::RealKill),
        report.elapsed()
    );
}
