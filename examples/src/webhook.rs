//! A Stripe-like webhook endpoint: `charge.succeeded` events credit a customer's balance, once
//! per event id, however often the sender redelivers; a forged redelivery (same id, other body)
//! is refused.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use rerun_core::{Handle, Idempotent, SqliteStore, Store};
use serde::{Deserialize, Serialize};

use crate::AppError;

/// The event as the sender posts it.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[rerun(scope = "stripe.charge_succeeded", ttl = "7d")]
pub struct ChargeSucceeded {
    /// The sender's event id: the dedupe key.
    #[rerun(key)]
    pub id: String,
    pub customer: String,
    pub amount_cents: u64,
    /// When this delivery was sent: differs between redeliveries, so it is not fingerprinted.
    #[rerun(skip)]
    pub delivered_at: u64,
}

/// The ledger of credits, one entry per event id: the state the handler changes. A balance is
/// the sum of a customer's credits, so writing an event's credit again changes nothing.
pub static LEDGER: Mutex<BTreeMap<String, (String, u64)>> = Mutex::new(BTreeMap::new());

fn ledger() -> std::sync::MutexGuard<'static, BTreeMap<String, (String, u64)>> {
    LEDGER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every customer's balance.
pub fn balances() -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (customer, cents) in ledger().values() {
        *out.entry(customer.clone()).or_insert(0) += cents;
    }
    out
}

/// What handling an event did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credited {
    pub customer: String,
    pub balance_cents: u64,
}

impl Handle for ChargeSucceeded {
    type Output = Credited;
    type Error = AppError;
    fn handle(&self) -> Result<Credited, AppError> {
        // Keyed by the event id, so a handler that dies after crediting but before rerun records
        // the result converges on the rerun instead of crediting twice.
        ledger().insert(self.id.clone(), (self.customer.clone(), self.amount_cents));
        Ok(Credited {
            customer: self.customer.clone(),
            balance_cents: balances().get(&self.customer).copied().unwrap_or(0),
        })
    }
}

/// The endpoint: parses the body and handles it idempotently. Returns the HTTP status to send
/// back and a line saying what happened.
pub fn receive<S: Store>(store: &S, body: &str) -> (u16, String) {
    let event: ChargeSucceeded = match serde_json::from_str(body) {
        Ok(event) => event,
        Err(e) => return (400, format!("bad request: {e}")),
    };
    match event.run(store) {
        Ok(credited) => (
            200,
            format!(
                "{}'s balance is {} cents",
                credited.customer, credited.balance_cents
            ),
        ),
        Err(AppError::Rerun(e)) if e.kind_name() == "payload_mismatch" => (
            409,
            format!(
                "refused, the body differs from the first delivery of {}",
                event.id
            ),
        ),
        Err(AppError::Rerun(e)) if e.is_retryable() => (503, format!("try again later: {e}")),
        Err(e) => (500, e.to_string()),
    }
}

/// Runs the deliveries on a SQLite store in `dir`; returns the final balances.
pub fn run(dir: &Path, out: &mut dyn Write) -> Result<BTreeMap<String, u64>, AppError> {
    ledger().clear();
    let store = SqliteStore::open(dir.join("rerun.sqlite3"))?;
    let deliveries = [
        (
            "first delivery",
            r#"{"id":"evt_1","customer":"cus_ada","amount_cents":2500,"delivered_at":1000}"#,
        ),
        (
            "redelivery (our 200 got lost)",
            r#"{"id":"evt_1","customer":"cus_ada","amount_cents":2500,"delivered_at":1060}"#,
        ),
        (
            "redelivery (an hour later)",
            r#"{"id":"evt_1","customer":"cus_ada","amount_cents":2500,"delivered_at":4600}"#,
        ),
        (
            "forged: same id, other amount",
            r#"{"id":"evt_1","customer":"cus_ada","amount_cents":990000,"delivered_at":4700}"#,
        ),
        (
            "a new event",
            r#"{"id":"evt_2","customer":"cus_ada","amount_cents":500,"delivered_at":5000}"#,
        ),
        ("not an event", r#"{"hello":"world"}"#),
    ];
    writeln!(
        out,
        "webhook: charge.succeeded events credit a balance once per event id"
    )?;
    for (what, body) in deliveries {
        let (status, said) = receive(&store, body);
        writeln!(out, "  {what:<31} -> {status} {said}")?;
    }
    let balances = balances();
    for (customer, cents) in &balances {
        writeln!(
            out,
            "final balance of {customer}: {cents} cents (2500 + 500, each credited once)"
        )?;
    }
    Ok(balances)
}
