//! The harness over the `quickstart` example: a welcome email keyed by the webhook's event id,
//! and an at-most-once charge, both on the process-wide store.
//!
//! The quickstart's functions use the process-wide store, which a process sets once: this test
//! binary points `RERUN_STORE` at one SQLite file (inherited by the harness's child processes),
//! and each fresh world uses its own keys (named after its directory). Mailer and bank are in
//! memory: the in-process mode counts their effects across a crash; the real-kill mode checks
//! what survives a SIGKILL (the store's record and the result).

use std::sync::Once;

use rerun_core::testing::{SafeToRerun, WorldDir};
use rerun_core::{Key, Status};
use rerun_examples::quickstart::{charge, send_welcome_email, Bank, Mailer, Order, Signup};

/// Points the process-wide store at a file shared with this process's harness children.
fn shared_store() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RERUN_STORE").is_none() {
            let path = std::env::temp_dir()
                .join(format!("rerun-tests-quickstart-{}", std::process::id()))
                .join("rerun.sqlite3");
            // Set before any thread of this binary reads the variable (this is the only place).
            std::env::set_var("RERUN_STORE", format!("sqlite:{}", path.display()));
        }
    });
}

struct Shop {
    id: String,
    mailer: Mailer,
    bank: Bank,
}

fn shop(dir: &WorldDir) -> Result<Shop, std::io::Error> {
    shared_store();
    let id = dir
        .path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(Shop {
        id,
        mailer: Mailer::default(),
        bank: Bank::default(),
    })
}

fn record(scope: &'static str, id: &str) -> Option<Status> {
    let store = rerun_core::global().ok()?;
    rerun_tests::status_of(store, &Key::new(scope, id))
}

fn welcome(s: &Shop) -> Result<String, rerun_examples::AppError> {
    let signup = Signup {
        event_id: s.id.clone(),
        email: "ada@example.com".into(),
    };
    send_welcome_email(&signup, &s.mailer)
}

fn pay(s: &Shop) -> Result<u64, rerun_examples::AppError> {
    let order = Order {
        id: s.id.clone(),
        cents: 4200,
    };
    // The receipt id counts the bank's charges in this process; the amount is what matters.
    charge(&order, &s.bank).map(|r| r.cents)
}

#[test]
fn welcome_email_is_safe_to_rerun() {
    let in_process = SafeToRerun::new("quickstart.welcome_email", shop, welcome, |s: &Shop| {
        (s.mailer.count(), record("quickstart.welcome_email", &s.id))
    })
    .in_process_only()
    .check();
    rerun_tests::print_sweep(&in_process);
    let killed = SafeToRerun::new(
        "quickstart.welcome_email.killed",
        shop,
        welcome,
        |s: &Shop| record("quickstart.welcome_email", &s.id),
    )
    .real_kill_only()
    .check();
    rerun_tests::print_sweep(&killed);
    in_process.assert_passed();
    killed.assert_passed();
}

#[test]
fn charge_is_at_most_once() {
    let in_process = SafeToRerun::new("quickstart.charge", shop, pay, |s: &Shop| {
        (s.bank.count(), record("quickstart.charge", &s.id))
    })
    .in_process_only()
    .check();
    rerun_tests::print_sweep(&in_process);
    let killed = SafeToRerun::new("quickstart.charge.killed", shop, pay, |s: &Shop| {
        record("quickstart.charge", &s.id)
    })
    .real_kill_only()
    .check();
    rerun_tests::print_sweep(&killed);
    in_process.assert_passed();
    killed.assert_passed();
}
