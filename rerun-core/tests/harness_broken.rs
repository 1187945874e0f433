//! Deliberately broken operations: the harness must catch them, and say so in its report.

use std::path::PathBuf;

use rerun_core::testing::{Effects, SafeToRerun, Verdict, WorldDir};
use rerun_core::{Call, Error, SqliteStore};

struct App {
    store: SqliteStore,
    counter: PathBuf,
    effects: Effects,
}

fn app(dir: &WorldDir) -> Result<App, Error> {
    Ok(App {
        store: dir.sqlite_store()?,
        counter: dir.join("visits"),
        effects: dir.effects(),
    })
}

fn visits(app: &App) -> u64 {
    std::fs::read_to_string(&app.counter)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// Broken: counts a visit with no key, so every redelivery counts again.
fn count_visit(app: &App) -> Result<u64, Error> {
    let n = visits(app) + 1;
    std::fs::write(&app.counter, n.to_string()).map_err(|e| Error::store(None, "counting", e))?;
    Ok(n)
}

#[derive(Debug, PartialEq)]
struct Counter {
    visits: u64,
}

#[test]
fn counter_without_a_key_is_caught() {
    let report = SafeToRerun::new("visits.count", app, count_visit, |a: &App| Counter {
        visits: visits(a),
    })
    .check();
    let text = report.to_string();
    println!("{text}");
    assert!(!report.passed());
    // No key, no runtime: the operation passes no crash point; running it twice is enough.
    assert!(report.points().is_empty());
    let expected = "\
safe-to-rerun: visits.count (test counter_without_a_key_is_caught)
crash points of a clean run: none (no rerun call or checkpoint! on the thread that ran it)
  FAILED  run twice in a row

run twice in a row: running it twice ended in another state than running it once
    run once       | run twice
    returned Ok(1) ≠ returned Ok(2)
    Counter {      | Counter {
        visits: 1, ≠     visits: 2,
    }              | }
FAILED: 0 of 1 checks ok (in process 0, SIGKILL 0) in ";
    assert!(text.starts_with(expected), "report was:\n{text}");
}

/// Broken: sends the receipt email before claiming the key, so a redelivery sends it again.
fn email_then_claim(app: &App) -> Result<String, Error> {
    app.effects.record("email.sent", "receipt:ord_1");
    Call::new("shop.receipt", "ord_1")
        .run(&app.store, || Ok::<_, Error>("queued".to_owned()))
        .map(|o| o.value)
}

#[derive(Debug, PartialEq)]
struct Sent {
    emails: usize,
}

#[test]
fn effect_before_the_claim_is_caught_in_every_mode() {
    let report = SafeToRerun::new("shop.receipt", app, email_then_claim, |a: &App| Sent {
        emails: a.effects.count("email.sent", "receipt:ord_1"),
    })
    .check();
    let text = report.to_string();
    println!("{text}");
    assert!(!report.passed());
    assert_eq!(report.points().len(), 4);
    // Every check sees the email twice: in a row, after a crash in process, after SIGKILL.
    assert_eq!(report.checks().len(), 1 + 4 + 4);
    assert!(report
        .checks()
        .iter()
        .all(|c| c.verdict == Verdict::DuplicateEffect));
    for line in [
        "  FAILED  run twice in a row",
        "  FAILED  in process  crash at rerun.claimed",
        "  FAILED  SIGKILL     crash at rerun.recorded",
        "crash at `rerun.body_started` (SIGKILL): a non-replayable effect happened twice",
        "    effect \"email.sent\" for key \"receipt:ord_1\" happened 2 times (at most once allowed)",
        "    clean run             | crash at rerun.claimed, then rerun",
        "        emails: 1,        ≠     emails: 2,",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

/// Broken: replayable, but its body charges a card; a crash after the charge and before the
/// result is recorded charges again. The fix is `.once()` (and a reconcile function).
fn charge_replayable(app: &App) -> Result<u64, Error> {
    Call::new("shop.charge", "ord_1")
        .run(&app.store, || {
            app.effects.record("card.charged", "ord_1");
            Ok::<_, Error>(500)
        })
        .map(|o| o.value)
}

#[test]
fn replayable_charge_is_caught_at_the_points_after_the_charge() {
    let report = SafeToRerun::new("shop.charge", app, charge_replayable, |a: &App| {
        a.effects.count("card.charged", "ord_1")
    })
    .check();
    println!("{report}");
    let failed: Vec<String> = report
        .failures()
        .map(|c| {
            format!(
                "{} {}",
                c.mode.label(),
                c.point.as_ref().map(|p| p.to_string()).unwrap_or_default()
            )
        })
        .collect();
    // Crashing before the body is harmless; after it (before the record), the charge repeats.
    assert_eq!(
        failed,
        [
            "in process rerun.body_returned",
            "SIGKILL rerun.body_returned"
        ]
    );
    assert!(report.to_string().contains(
        "crash at `rerun.body_returned` (in process): a non-replayable effect happened twice"
    ));
}

/// A clean run that rerun itself fails (here a scope with a tab, which it refuses) is no
/// reference: the report fails, saying why, instead of comparing the same failure on every
/// rerun.
#[test]
fn a_clean_run_that_rerun_fails_is_no_reference() {
    let report = SafeToRerun::new(
        "broken.scope",
        app,
        |app: &App| {
            Call::new("broken\tscope", "k")
                .run(&app.store, || Ok::<_, Error>(1u32))
                .map(|o| o.value)
        },
        |_: &App| (),
    )
    .in_process_only()
    .check();
    let text = report.to_string();
    assert!(!report.passed(), "{text}");
    assert!(
        text.contains("the clean run failed with rerun's own error"),
        "{text}"
    );
}

/// A body that ran and returned rerun's `Error` as its own result is compared as usual: its
/// clean run passed crash points, and every rerun fails the same way.
#[test]
fn a_body_that_returns_reruns_error_is_compared_as_usual() {
    let report = SafeToRerun::new(
        "declined.charge",
        app,
        |app: &App| {
            Call::new("declined.charge", "ord_1")
                .run(&app.store, || {
                    Err::<u32, _>(Error::store(
                        None,
                        "charging",
                        std::io::Error::other("card declined"),
                    ))
                })
                .map(|o| o.value)
        },
        |_: &App| (),
    )
    .in_process_only()
    .check();
    report.assert_passed();
}

/// A clean run that passed crash points and then failed in rerun (here a second call whose
/// scope rerun refuses, after a first that ran) is no reference either.
#[test]
fn a_clean_run_that_rerun_fails_after_some_points_is_no_reference() {
    let report = SafeToRerun::new(
        "broken.second",
        app,
        |app: &App| {
            Call::new("broken.first", "k").run(&app.store, || Ok::<_, Error>(1u32))?;
            Call::new("broken\tsecond", "k")
                .run(&app.store, || Ok::<_, Error>(2u32))
                .map(|o| o.value)
        },
        |_: &App| (),
    )
    .in_process_only()
    .check();
    let text = report.to_string();
    assert!(!report.points().is_empty(), "{text}");
    assert!(!report.passed(), "{text}");
    assert!(
        text.contains("the clean run failed with rerun's own error"),
        "{text}"
    );
}

/// An application's error type that wraps rerun's, as `thiserror`'s `#[error(transparent)]`
/// or an `anyhow::Error` does.
#[derive(Debug)]
struct AppError(Error);

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the application failed: {}", self.0)
    }
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError(e)
    }
}

/// A result no store can record: it refuses to be encoded.
#[derive(Debug, PartialEq, serde::Deserialize)]
struct Unrecordable;

impl serde::Serialize for Unrecordable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("this value cannot be recorded"))
    }
}

/// rerun's own failure of the clean run is no reference whatever error type the operation
/// wraps it in: refused before the claim (a scope rerun refuses), or after the body ran (a
/// result it cannot record, so that every rerun runs the body again and still "converges").
#[test]
fn a_clean_run_that_rerun_fails_is_no_reference_whatever_the_error_type() {
    let refused = SafeToRerun::new(
        "wrapped.scope",
        app,
        |app: &App| {
            Call::new("wrapped\tscope", "k")
                .run(&app.store, || Ok::<_, AppError>(1u32))
                .map(|o| o.value)
        },
        |_: &App| (),
    )
    .in_process_only()
    .check();
    let text = refused.to_string();
    assert!(!refused.passed(), "{text}");
    assert!(
        text.contains("the clean run failed with rerun's own error"),
        "{text}"
    );

    let unrecorded = SafeToRerun::new(
        "wrapped.result",
        app,
        |app: &App| {
            Call::new("wrapped.result", "k")
                .run(&app.store, || Ok::<_, AppError>(Unrecordable))
                .map(|o| o.value)
        },
        |_: &App| (),
    )
    .in_process_only()
    .check();
    let text = unrecorded.to_string();
    assert!(!unrecorded.points().is_empty(), "{text}");
    assert!(!unrecorded.passed(), "{text}");
    assert!(
        text.contains("the clean run failed with rerun's own error"),
        "{text}"
    );
}
