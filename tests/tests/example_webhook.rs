//! The harness over the `webhook` example: `charge.succeeded` events credit a balance, once per
//! event id, through `#[derive(Idempotent)]` and `Handle`.
//!
//! The example keeps its ledger in a process-wide map in memory: the in-process mode checks them
//! across a crash; the real-kill mode checks what survives a SIGKILL (the store's record and the
//! HTTP answer).

use std::convert::Infallible;

use rerun_core::testing::{SafeToRerun, WorldDir};
use rerun_core::{Error, Key, SqliteStore, Status};
use rerun_examples::webhook::{balances, receive, LEDGER};

const EVENT: &str =
    r#"{"id":"evt_1","customer":"cus_ada","amount_cents":2500,"delivered_at":1000}"#;

/// A fresh endpoint: its store, and the balances emptied (they are process-wide).
fn endpoint(dir: &WorldDir) -> Result<SqliteStore, Error> {
    LEDGER.lock().unwrap_or_else(|p| p.into_inner()).clear();
    dir.sqlite_store()
}

fn deliver(store: &SqliteStore) -> Result<(u16, String), Infallible> {
    Ok(receive(store, EVENT))
}

fn record(store: &SqliteStore) -> Option<Status> {
    rerun_tests::status_of(store, &Key::new("stripe.charge_succeeded", "evt_1"))
}

#[test]
fn webhook_is_safe_to_rerun_in_process() {
    let report = SafeToRerun::new(
        "webhook.charge_succeeded",
        endpoint,
        deliver,
        |s: &SqliteStore| (balances(), record(s)),
    )
    .in_process_only()
    .check();
    rerun_tests::print_sweep(&report);
    report.assert_passed();
}

#[test]
fn webhook_is_safe_to_rerun_after_sigkill() {
    let report = SafeToRerun::new("webhook.charge_succeeded.killed", endpoint, deliver, record)
        .real_kill_only()
        .check();
    rerun_tests::print_sweep(&report);
    report.assert_passed();
}
