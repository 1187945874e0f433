//! The harness over the `payment` example: an at-most-once charge with `reconcile`.
//!
//! The example's payment provider keeps its ledger in memory, so only the in-process mode can
//! count its charges across a crash; the real-kill mode checks what survives a SIGKILL (the
//! store's record and the returned receipt).

use rerun_core::testing::{SafeToRerun, WorldDir};
use rerun_core::{Key, Status};
use rerun_examples::payment::{Order, Payments};
use rerun_examples::AppError;

fn payments(dir: &WorldDir) -> Result<Payments, AppError> {
    Ok(Payments::new(dir.sqlite_store()?))
}

fn order() -> Order {
    Order {
        id: "order-1".into(),
        cents: 1999,
    }
}

fn record(p: &Payments) -> Option<Status> {
    rerun_tests::status_of(&p.store, &Key::new("payment.charge", "order-1"))
}

#[test]
fn charge_is_safe_to_rerun_in_process() {
    let report = SafeToRerun::new(
        "payment.charge",
        payments,
        |p: &Payments| p.charge(&order()),
        |p: &Payments| (p.provider.charges_for("order-1"), record(p)),
    )
    .in_process_only()
    .require_convergence()
    .check();
    rerun_tests::print_sweep(&report);
    report.assert_passed();
}

#[test]
fn charge_is_safe_to_rerun_after_sigkill() {
    let report = SafeToRerun::new(
        "payment.charge.killed",
        payments,
        |p: &Payments| p.charge(&order()),
        record,
    )
    .real_kill_only()
    .require_convergence()
    .check();
    rerun_tests::print_sweep(&report);
    report.assert_passed();
}
