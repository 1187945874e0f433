//! The code of docs/safe-to-rerun.md, compiled and run: a webhook handler that charged twice
//! when the webhook was redelivered, caught by the harness, then fixed.

use std::path::PathBuf;

use rerun_core::testing::{Effects, SafeToRerun, Verdict, WorldDir};
use rerun_core::{idempotent, Error, Reconciled, SqliteStore};
use serde::{Deserialize, Serialize};

// --- guide: world ---
/// The payment provider, as the test sees it: it keeps every charge, and logs each one as an
/// effect that must never happen twice.
struct Provider {
    charges: PathBuf,
    effects: Effects,
}

impl Provider {
    /// Charges the card: a new charge every time it is called, as a real provider does.
    fn charge(&self, order: &str, cents: u64) -> Result<String, Error> {
        self.effects.record("card.charged", order);
        let id = format!("ch_{}", self.all().len() + 1);
        std::fs::write(self.charges.join(&id), format!("{order} {cents}"))
            .map_err(|e| Error::store(None, "the provider failed", e))?;
        Ok(id)
    }

    /// Every charge: `(id, order, cents)`.
    fn all(&self) -> Vec<(String, String, u64)> {
        let mut all: Vec<_> = std::fs::read_dir(&self.charges)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| {
                let text = std::fs::read_to_string(e.path()).ok()?;
                let (order, cents) = text.split_once(' ')?;
                let id = e.file_name().to_string_lossy().into_owned();
                Some((id, order.to_owned(), cents.parse().ok()?))
            })
            .collect();
        all.sort();
        all
    }

    /// Asks the provider whether an order was charged (providers have such a lookup).
    fn find_charge(&self, order: &str) -> Option<String> {
        self.all().into_iter().find(|c| c.1 == order).map(|c| c.0)
    }
}

struct Shop {
    store: SqliteStore,
    provider: Provider,
}

/// Builds the shop in the harness's directory, or reopens what a killed run left there.
fn shop(dir: &WorldDir) -> Result<Shop, Error> {
    let charges = dir.join("charges");
    std::fs::create_dir_all(&charges).map_err(|e| Error::store(None, "setting up", e))?;
    Ok(Shop {
        store: dir.sqlite_store()?,
        provider: Provider {
            charges,
            effects: dir.effects(),
        },
    })
}

/// The webhook's event.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CheckoutCompleted {
    id: String,
    order: String,
    cents: u64,
}

fn event() -> CheckoutCompleted {
    CheckoutCompleted {
        id: "evt_1".into(),
        order: "ord_1".into(),
        cents: 2500,
    }
}
// --- end ---

// --- guide: naive ---
/// The handler as first written: every delivery charges.
fn on_checkout_naive(shop: &Shop, event: &CheckoutCompleted) -> Result<String, Error> {
    shop.provider.charge(&event.order, event.cents)
}

#[test]
fn naive_handler_charges_twice() {
    let report = SafeToRerun::new(
        "checkout (naive)",
        shop,
        |shop: &Shop| on_checkout_naive(shop, &event()),
        |shop: &Shop| shop.provider.all(),
    )
    .check();
    println!("{report}");
    assert!(!report.passed());
}
// --- end ---

// --- guide: keyed ---
/// A key makes a redelivery replay the first result, but the charge is still replayable: a
/// crash after the charge and before its result is recorded charges again.
#[idempotent(key = event.id, scope = "shop.checkout", store = &shop.store, skip(shop))]
fn on_checkout_keyed(shop: &Shop, event: &CheckoutCompleted) -> Result<String, Error> {
    shop.provider.charge(&event.order, event.cents)
}

#[test]
fn keyed_handler_still_charges_twice_after_a_crash() {
    let report = SafeToRerun::new(
        "checkout (keyed)",
        shop,
        |shop: &Shop| on_checkout_keyed(shop, &event()),
        |shop: &Shop| shop.provider.all(),
    )
    .check();
    println!("{report}");
    let failed: Vec<String> = report
        .failures()
        .filter_map(|c| c.point.as_ref().map(|p| format!("{} {p}", c.mode.label())))
        .collect();
    assert_eq!(
        failed,
        [
            "in process rerun.body_returned",
            "SIGKILL rerun.body_returned"
        ]
    );
    assert!(report
        .failures()
        .all(|c| c.verdict == Verdict::DuplicateEffect));
}
// --- end ---

// --- guide: fixed ---
/// At most once, and when a crash leaves the outcome unknown, ask the provider.
#[idempotent(
    key = event.id,
    scope = "shop.checkout",
    store = &shop.store,
    skip(shop),
    once,
    reconcile = already_charged
)]
fn on_checkout(shop: &Shop, event: &CheckoutCompleted) -> Result<String, Error> {
    let receipt = shop.provider.charge(&event.order, event.cents)?;
    rerun_core::checkpoint!("charged");
    Ok(receipt)
}

/// Called instead of the body when an earlier attempt died after it started.
fn already_charged(shop: &Shop, event: &CheckoutCompleted) -> Result<Reconciled<String>, Error> {
    Ok(match shop.provider.find_charge(&event.order) {
        Some(receipt) => Reconciled::Done(receipt),
        None => Reconciled::NotDone,
    })
}

#[test]
fn fixed_handler_is_safe_to_rerun() {
    let report = SafeToRerun::new(
        "checkout",
        shop,
        |shop: &Shop| on_checkout(shop, &event()),
        |shop: &Shop| shop.provider.all(),
    )
    .require_convergence()
    .check();
    println!("{report}");
    report.assert_passed();
}
// --- end ---

/// The guide shows this file's code: keep the two the same.
#[test]
fn the_guide_shows_this_code() {
    let guide = include_str!("../../docs/safe-to-rerun.md");
    let this = include_str!("harness_guide.rs");
    let mut blocks = 0;
    for part in this.split(concat!("// --- ", "guide: ")).skip(1) {
        let Some((_, rest)) = part.split_once('\n') else {
            continue;
        };
        let Some((code, _)) = rest.split_once(concat!("// --- ", "end ---")) else {
            continue;
        };
        assert!(
            guide.contains(code.trim_end()),
            "docs/safe-to-rerun.md lacks:\n{code}"
        );
        blocks += 1;
    }
    assert_eq!(blocks, 4);
}
