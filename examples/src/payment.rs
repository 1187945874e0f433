//! An at-most-once charge (`once`) with a `reconcile` function that asks the payment provider
//! what happened when an earlier attempt died mid-charge.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use rerun_core::{idempotent, Reconciled, SqliteStore};
use serde::{Deserialize, Serialize};

use crate::{crash_quietly, AppError};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    pub id: String,
    pub cents: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub charge_id: String,
    pub cents: u64,
}

/// A fake payment provider. Like real ones, it keeps its own ledger of charges, which can be
/// searched by the merchant's reference.
#[derive(Default)]
pub struct Provider {
    ledger: Mutex<BTreeMap<String, Receipt>>,
    calls: Mutex<BTreeMap<String, u32>>,
}

impl Provider {
    fn create_charge(&self, reference: &str, cents: u64) -> Receipt {
        *self
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(reference.to_owned())
            .or_default() += 1;
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        let receipt = Receipt {
            charge_id: format!("ch_{}", ledger.len() + 1),
            cents,
        };
        ledger.insert(reference.to_owned(), receipt.clone());
        receipt
    }
    fn find_charge(&self, reference: &str) -> Option<Receipt> {
        self.ledger
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(reference)
            .cloned()
    }
    /// How many times the card was charged for `reference`.
    pub fn charges_for(&self, reference: &str) -> u32 {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(reference)
            .copied()
            .unwrap_or(0)
    }
}

/// Where a simulated crash strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crash {
    Never,
    BeforeTheProvider,
    AfterTheProviderCharged,
}

pub struct Payments {
    pub store: SqliteStore,
    pub provider: Provider,
    crash: Mutex<Crash>,
}

impl Payments {
    pub fn new(store: SqliteStore) -> Payments {
        Payments {
            store,
            provider: Provider::default(),
            crash: Mutex::new(Crash::Never),
        }
    }

    /// Makes the next charge die at `crash`, as a killed process would.
    pub fn crash_next(&self, crash: Crash) {
        *self.crash.lock().unwrap_or_else(|p| p.into_inner()) = crash;
    }

    fn crash_point(&self, here: Crash) {
        let mut crash = self.crash.lock().unwrap_or_else(|p| p.into_inner());
        if *crash == here {
            *crash = Crash::Never;
            drop(crash);
            panic!("simulated crash: {here:?}");
        }
    }

    /// Called instead of the body when an earlier attempt died after its body started: did the
    /// provider charge the card?
    fn lookup(&self, order: &Order) -> Result<Reconciled<Receipt>, AppError> {
        Ok(match self.provider.find_charge(&order.id) {
            Some(receipt) => Reconciled::Done(receipt),
            None => Reconciled::NotDone,
        })
    }

    /// Charges the order's card at most once.
    #[idempotent(key = order.id, scope = "payment.charge", store = &self.store, once, reconcile = Self::lookup)]
    pub fn charge(&self, order: &Order) -> Result<Receipt, AppError> {
        self.crash_point(Crash::BeforeTheProvider);
        let receipt = self.provider.create_charge(&order.id, order.cents);
        self.crash_point(Crash::AfterTheProviderCharged);
        Ok(receipt)
    }
}

fn describe(result: Option<Result<Receipt, AppError>>) -> String {
    match result {
        None => "the process died".to_owned(),
        Some(Ok(r)) => format!("receipt {} for {} cents", r.charge_id, r.cents),
        Some(Err(e)) => format!("error: {e}"),
    }
}

/// Runs the payment story on a SQLite store in `dir`; returns the payments for inspection.
pub fn run(dir: &Path, out: &mut dyn Write) -> Result<Payments, AppError> {
    let payments = Payments::new(SqliteStore::open(dir.join("rerun.sqlite3"))?);
    let p = &payments;
    writeln!(
        out,
        "payment: an at-most-once charge, reconciled with the provider after a crash"
    )?;

    let a = Order {
        id: "order-1".into(),
        cents: 1999,
    };
    writeln!(
        out,
        "\n{} ({} cents): a charge, then a retry",
        a.id, a.cents
    )?;
    writeln!(out, "  attempt 1: {}", describe(Some(p.charge(&a))))?;
    writeln!(
        out,
        "  attempt 2: {} (replayed)",
        describe(Some(p.charge(&a)))
    )?;
    writeln!(
        out,
        "  the card was charged {} time(s)",
        p.provider.charges_for(&a.id)
    )?;

    let b = Order {
        id: "order-2".into(),
        cents: 4500,
    };
    writeln!(
        out,
        "\n{} ({} cents): the process dies right after the provider charged the card",
        b.id, b.cents
    )?;
    p.crash_next(Crash::AfterTheProviderCharged);
    writeln!(
        out,
        "  attempt 1: {}",
        describe(crash_quietly(|| p.charge(&b)))
    )?;
    writeln!(
        out,
        "  attempt 2: {} (reconcile found the charge at the provider)",
        describe(Some(p.charge(&b)))
    )?;
    writeln!(
        out,
        "  attempt 3: {} (replayed)",
        describe(Some(p.charge(&b)))
    )?;
    writeln!(
        out,
        "  the card was charged {} time(s)",
        p.provider.charges_for(&b.id)
    )?;

    let c = Order {
        id: "order-3".into(),
        cents: 750,
    };
    writeln!(
        out,
        "\n{} ({} cents): the process dies before it reached the provider",
        c.id, c.cents
    )?;
    p.crash_next(Crash::BeforeTheProvider);
    writeln!(
        out,
        "  attempt 1: {}",
        describe(crash_quietly(|| p.charge(&c)))
    )?;
    writeln!(
        out,
        "  attempt 2: {} (reconcile found no charge, so it charged now)",
        describe(Some(p.charge(&c)))
    )?;
    writeln!(
        out,
        "  the card was charged {} time(s)",
        p.provider.charges_for(&c.id)
    )?;
    Ok(payments)
}
