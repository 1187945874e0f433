//! The safe-to-rerun harness over correct operations on SQLite, in both modes.

use std::path::PathBuf;
use std::time::Duration;

use rerun_core::testing::{Effects, Mode, Report, SafeToRerun, Verdict, WorldDir};
use rerun_core::{Call, Error, Key, Reconciled, SqliteStore, Status, Store, DEFAULT_SETTLE};

/// A shop: its idempotency store, its orders on disk, and the card network's log of charges.
struct Shop {
    store: SqliteStore,
    orders: PathBuf,
    effects: Effects,
}

fn shop(dir: &WorldDir) -> Result<Shop, Error> {
    let orders = dir.join("orders");
    std::fs::create_dir_all(&orders).map_err(|e| Error::store(None, "creating orders", e))?;
    Ok(Shop {
        store: dir.sqlite_store()?,
        orders,
        effects: dir.effects(),
    })
}

/// What a shop looks like: every order file, the charges made, and the store's records
/// (status only: fences and timestamps differ between runs that converge).
#[derive(Debug, PartialEq)]
struct Seen {
    orders: Vec<(String, String)>,
    charges: usize,
    records: Vec<(String, Option<Status>)>,
}

fn seen(shop: &Shop, keys: &[Key]) -> Seen {
    let mut orders: Vec<(String, String)> = std::fs::read_dir(&shop.orders)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    (e.file_name().to_string_lossy().into_owned(), text)
                })
                .collect()
        })
        .unwrap_or_default();
    orders.sort();
    Seen {
        orders,
        charges: shop.effects.count("card.charged", "ord_1"),
        records: keys
            .iter()
            .map(|k| {
                let status = shop.store.inspect(k).ok().flatten().map(|r| r.status);
                (k.to_string(), status)
            })
            .collect(),
    }
}

/// Replayable: marks the order shipped. Writing a file with fixed content converges, so a
/// body that runs again after a crash is harmless.
fn ship(shop: &Shop) -> Result<String, Error> {
    Call::new("shop.ship", "ord_1")
        .payload(&("ord_1", 2u32))
        .run(&shop.store, || {
            let path = shop.orders.join("ord_1");
            std::fs::write(&path, "packed").map_err(|e| Error::store(None, "packing", e))?;
            rerun_core::checkpoint!("packed");
            std::fs::write(&path, "shipped").map_err(|e| Error::store(None, "shipping", e))?;
            Ok("tracking-123".to_owned())
        })
        .map(|o| o.value)
}

#[test]
fn replayable_operation_converges_in_both_modes() {
    let keys = [Key::new("shop.ship", "ord_1")];
    let report = SafeToRerun::new("shop.ship", shop, ship, |s: &Shop| seen(s, &keys)).check();
    println!("{report}");
    report.assert_passed();
    let names: Vec<String> = report.points().iter().map(|p| p.to_string()).collect();
    assert_eq!(
        names,
        [
            "rerun.claimed",
            "rerun.body_started",
            "packed",
            "rerun.body_returned",
            "rerun.recorded"
        ]
    );
    // One twice-check, then every point in process and by SIGKILL.
    assert_eq!(report.checks().len(), 1 + 2 * names.len());
    assert!(report
        .checks()
        .iter()
        .all(|c| c.verdict == Verdict::Converged));
    println!(
        "real-kill sweep of {} points: {:?}",
        names.len(),
        report.elapsed_in(Mode::RealKill)
    );
}

/// The card network's record of a charge, which a reconcile function can ask for.
fn charged(shop: &Shop) -> Option<String> {
    std::fs::read_to_string(shop.orders.join("ord_1.charge")).ok()
}

/// At most once, with a reconcile function: the charge never happens twice, and a crash
/// after it started converges by asking the card network.
fn charge(shop: &Shop) -> Result<String, Error> {
    Call::new("shop.charge", "ord_1")
        .payload(&500u64)
        .once()
        .run_reconciled(
            &shop.store,
            || Ok(charged(shop).map_or(Reconciled::NotDone, Reconciled::Done)),
            || {
                shop.effects.record("card.charged", "ord_1");
                std::fs::write(shop.orders.join("ord_1.charge"), "ch_1")
                    .map_err(|e| Error::store(None, "charging", e))?;
                rerun_core::checkpoint!("charged");
                Ok("ch_1".to_owned())
            },
        )
        .map(|o| o.value)
}

#[test]
fn once_operation_with_reconcile_converges_in_both_modes() {
    let keys = [Key::new("shop.charge", "ord_1")];
    let report = SafeToRerun::new("shop.charge", shop, charge, |s: &Shop| seen(s, &keys))
        .require_convergence()
        .check();
    println!("{report}");
    report.assert_passed();
    assert_eq!(report.points().len(), 5);
}

/// A world of files has every effect in place when its rerun starts, so the harness can give
/// the calls no settle time: the reruns that reconcile then do not wait. Without it, each waits
/// the call's own settle time (what the test above pays, a second per point).
#[test]
fn the_harness_settle_time_replaces_the_calls_own() {
    let keys = [Key::new("shop.charge", "ord_1")];
    let run = |name: &str, settle: Option<Duration>| {
        let harness = SafeToRerun::new(name, shop, charge, |s: &Shop| seen(s, &keys))
            .in_process_only()
            .require_convergence();
        let report = match settle {
            Some(settle) => harness.settle(settle),
            None => harness,
        }
        .check();
        report.assert_passed();
        report
    };
    let waiting = run("shop.charge.waiting", None);
    let prompt = run("shop.charge.prompt", Some(Duration::ZERO));
    let took = |report: &Report, point: &str| {
        report
            .checks()
            .iter()
            .find(|c| c.point.as_ref().is_some_and(|p| p.name == point))
            .map(|c| c.elapsed)
    };
    // The points after the body started leave the outcome unknown: their reruns reconcile.
    for point in ["rerun.body_started", "charged", "rerun.body_returned"] {
        let (waited, prompt) = (took(&waiting, point), took(&prompt, point));
        assert!(
            waited.is_some_and(|t| t >= DEFAULT_SETTLE),
            "{point}: {waited:?}"
        );
        assert!(
            prompt.is_some_and(|t| t < DEFAULT_SETTLE),
            "{point}: {prompt:?}"
        );
    }
    // A settle time no call would accept fails the report instead of hanging the test.
    let endless = SafeToRerun::new("shop.charge.endless", shop, charge, |s: &Shop| {
        seen(s, &keys)
    })
    .settle(Duration::MAX)
    .check();
    assert!(!endless.passed());
    assert!(
        endless.to_string().contains("longer than rerun's maximum"),
        "{endless}"
    );
}

/// At most once, without reconcile: a crash after the claim leaves the outcome unknown, which
/// the harness accepts (the charge happened at most once) unless convergence is required.
fn charge_unreconciled(shop: &Shop) -> Result<String, Error> {
    Call::new("shop.charge", "ord_1")
        .once()
        .run(&shop.store, || {
            shop.effects.record("card.charged", "ord_1");
            Ok("ch_1".to_owned())
        })
        .map(|o| o.value)
}

#[test]
fn once_operation_without_reconcile_is_at_most_once() {
    let keys = [Key::new("shop.charge", "ord_1")];
    let report = SafeToRerun::new(
        "shop.charge.unreconciled",
        shop,
        charge_unreconciled,
        |s: &Shop| seen(s, &keys),
    )
    .check();
    println!("{report}");
    report.assert_passed();
    let unknown: Vec<String> = report
        .checks()
        .iter()
        .filter(|c| c.verdict == Verdict::OutcomeUnknown)
        .filter_map(|c| c.point.as_ref().map(|p| format!("{} {p}", c.mode.label())))
        .collect();
    // Crashed after the claim and before the result was recorded: unknown, in both modes.
    for mode in ["in process", "SIGKILL"] {
        for point in ["rerun.claimed", "rerun.body_started", "rerun.body_returned"] {
            assert!(unknown.contains(&format!("{mode} {point}")), "{unknown:?}");
        }
    }
    assert!(report.checks().iter().all(|c| c.duplicates.is_empty()));
}

/// Keys that differ only in a tab, a line break or a backslash are different effects, each
/// reported as it was recorded.
#[test]
fn effects_keep_keys_that_differ_in_tabs_and_line_breaks_apart() {
    let world = WorldDir::temporary("effects-fields").expect("a world directory");
    let effects = world.effects();
    let keys = ["a\tb", "a b", "a\nb", "a\\tb", "a\\", "a\r\n"];
    for key in keys {
        effects.record("mail\tsent", key);
    }
    for key in keys {
        assert_eq!(effects.count("mail\tsent", key), 1, "{key:?}");
    }
    assert!(
        effects.duplicates().is_empty(),
        "{:?}",
        effects.duplicates()
    );
    effects.record("mail\tsent", "a\tb");
    let twice = effects.duplicates();
    assert_eq!(twice.len(), 1, "{twice:?}");
    assert_eq!(
        (twice[0].effect.as_str(), twice[0].key.as_str()),
        ("mail\tsent", "a\tb")
    );
    world.remove();
}
