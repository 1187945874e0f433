//! The README's main example: a webhook delivered three times and a double-clicked "Pay"
//! button, on the embedded SQLite store, with the body of each operation running once.

use std::io::Write;
use std::path::Path;
use std::sync::{Barrier, Mutex};

use rerun_core::{idempotent, SqliteStore};
use serde::{Deserialize, Serialize};

use crate::AppError;

/// The body of a "user signed up" webhook. The sender redelivers it until it sees our `200 OK`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Signup {
    pub event_id: String,
    pub email: String,
}

/// An order the user pays for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    pub id: String,
    pub cents: u64,
}

/// What the bank gives back for a charge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub id: String,
    pub cents: u64,
}

/// A mail service: every `send` is an email in someone's inbox.
#[derive(Default)]
pub struct Mailer {
    pub sent: Mutex<Vec<String>>,
}

impl Mailer {
    fn send(&self, to: &str) -> String {
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        sent.push(to.to_owned());
        format!("msg-{}", sent.len())
    }
    pub fn count(&self) -> usize {
        self.sent.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A bank: every `charge` takes money from a card.
#[derive(Default)]
pub struct Bank {
    pub charges: Mutex<Vec<u64>>,
}

impl Bank {
    fn charge(&self, cents: u64) -> Receipt {
        // A real bank takes its time; the second click arrives meanwhile.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut charges = self.charges.lock().unwrap_or_else(|p| p.into_inner());
        charges.push(cents);
        Receipt {
            id: format!("rcpt-{}", charges.len()),
            cents,
        }
    }
    pub fn count(&self) -> usize {
        self.charges.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Sends the welcome email of a signup, once per event, however often the webhook arrives.
/// An email cannot be unsent, so it is `once`: a crash mid-send is never followed by a second
/// email on its own.
#[idempotent(key = event.event_id, scope = "quickstart.welcome_email", once, skip(mailer))]
pub fn send_welcome_email(event: &Signup, mailer: &Mailer) -> Result<String, AppError> {
    Ok(mailer.send(&event.email))
}

/// Charges an order at most once: a second click waits for the first and gets its receipt.
#[idempotent(key = order.id, scope = "quickstart.charge", once, wait = "5s", skip(bank))]
pub fn charge(order: &Order, bank: &Bank) -> Result<Receipt, AppError> {
    if order.cents == 0 {
        return Err(AppError::Refused("nothing to charge".into()));
    }
    Ok(bank.charge(order.cents))
}

/// What the quickstart observed, for tests.
#[derive(Debug, PartialEq, Eq)]
pub struct Report {
    pub emails_sent: usize,
    pub charges: usize,
    pub forged_refused: bool,
}

/// Runs the story with the process-wide store set to a SQLite file in `dir`.
///
/// `rerun_core::init` can be called once per process: call `run` once.
pub fn run(dir: &Path, out: &mut dyn Write) -> Result<Report, AppError> {
    // Without this line rerun uses SQLite at `.rerun/rerun.sqlite3` under the current directory;
    // the example uses a fresh file so that every run tells the same story.
    rerun_core::init(SqliteStore::open(dir.join("rerun.sqlite3"))?)?;
    writeln!(
        out,
        "rerun quickstart: state-changing code that is safe to run twice"
    )?;
    writeln!(out, "(store: the embedded SQLite store, in a fresh file)")?;
    writeln!(out)?;

    let mailer = Mailer::default();
    let signup = Signup {
        event_id: "evt_001".into(),
        email: "ada@example.com".into(),
    };
    writeln!(
        out,
        "1. A signup webhook arrives three times: the sender did not see our 200 OK."
    )?;
    for delivery in 1..=3 {
        let before = mailer.count();
        let message = send_welcome_email(&signup, &mailer)?;
        let what = if mailer.count() > before {
            "sent the welcome email"
        } else {
            "already handled: replayed the recorded result, no email sent"
        };
        writeln!(out, "   delivery {delivery}: {what} ({message})")?;
    }
    writeln!(out, "   emails in ada's inbox: {}", mailer.count())?;
    writeln!(out)?;

    writeln!(
        out,
        "2. The user double-clicks \"Pay\": two requests for one order at the same moment."
    )?;
    let bank = Bank::default();
    let order = Order {
        id: "order-42".into(),
        cents: 4200,
    };
    let both_clicked = Barrier::new(2);
    let receipts: Vec<Result<Receipt, AppError>> = std::thread::scope(|s| {
        let clicks: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    both_clicked.wait();
                    charge(&order, &bank)
                })
            })
            .collect();
        clicks
            .into_iter()
            .map(|c| {
                c.join()
                    .unwrap_or_else(|_| Err(AppError::Refused("a click crashed".into())))
            })
            .collect()
    });
    for (click, receipt) in receipts.into_iter().enumerate() {
        let receipt = receipt?;
        writeln!(
            out,
            "   click {}: receipt {} for {} cents",
            click + 1,
            receipt.id,
            receipt.cents
        )?;
    }
    writeln!(out, "   charges the bank made: {}", bank.count())?;
    writeln!(out)?;

    writeln!(
        out,
        "3. A forged redelivery: the same event id with another body."
    )?;
    let forged = Signup {
        email: "mallory@example.com".into(),
        ..signup
    };
    let forged_refused = match send_welcome_email(&forged, &mailer) {
        Err(AppError::Rerun(e)) if e.kind_name() == "payload_mismatch" => {
            writeln!(out, "   refused: {e}")?;
            true
        }
        Ok(_) | Err(_) => {
            writeln!(out, "   was not refused")?;
            false
        }
    };
    writeln!(out, "   emails in the inboxes: {}", mailer.count())?;
    writeln!(out)?;
    writeln!(
        out,
        "Every operation ran its body once. Run it again: the same story, from a fresh store."
    )?;
    Ok(Report {
        emails_sent: mailer.count(),
        charges: bank.count(),
        forged_refused,
    })
}
