//! The examples' operations, called directly: each converges when run again and after a crash.

use rerun_core::SqliteStore;
use rerun_examples::{crash_quietly, payment, startup, webhook, worker, AppError};

#[test]
fn webhook_credits_each_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let balances = webhook::run(dir.path(), &mut Vec::new()).unwrap();
    assert_eq!(balances.get("cus_ada"), Some(&3000));
    let store = SqliteStore::open(dir.path().join("rerun.sqlite3")).unwrap();
    let body = r#"{"id":"evt_1","customer":"cus_ada","amount_cents":2500,"delivered_at":9}"#;
    assert_eq!(webhook::receive(&store, body).0, 200);
    assert_eq!(webhook::balances().get("cus_ada"), Some(&3000));
}

#[test]
fn payment_charges_each_card_once() {
    let dir = tempfile::tempdir().unwrap();
    let payments = payment::run(dir.path(), &mut Vec::new()).unwrap();
    for order in ["order-1", "order-2", "order-3"] {
        assert_eq!(payments.provider.charges_for(order), 1, "{order}");
    }
    // A crash on a fresh order, then two retries.
    let order = payment::Order {
        id: "order-4".into(),
        cents: 10,
    };
    payments.crash_next(payment::Crash::AfterTheProviderCharged);
    assert!(crash_quietly(|| payments.charge(&order)).is_none());
    let a = payments.charge(&order).unwrap();
    assert_eq!(payments.charge(&order).unwrap(), a);
    assert_eq!(payments.provider.charges_for("order-4"), 1);
}

#[test]
fn worker_converges_after_dying_halfway() {
    let dir = tempfile::tempdir().unwrap();
    let died = crash_quietly(|| {
        worker::work(dir.path(), &mut Vec::new(), Some(2), &|| {
            panic!("the worker dies")
        })
    });
    assert!(died.is_none());
    let done = worker::work(dir.path(), &mut Vec::new(), None, &|| {}).unwrap();
    assert_eq!(done, 5, "jobs 2 to 6");
    // A third start finds nothing to do and sends nothing.
    assert_eq!(
        worker::work(dir.path(), &mut Vec::new(), None, &|| {}).unwrap(),
        0
    );
    let queue = worker::open_queue(dir.path()).unwrap();
    let per_job = worker::invoices_per_job(&queue).unwrap();
    assert_eq!(per_job, (1..=6).map(|j| (j, 1)).collect::<Vec<_>>());
}

#[test]
fn startup_migrates_once() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(startup::run(dir.path(), &mut Vec::new()).unwrap(), 1);
    let again = startup::start_instance(dir.path()).unwrap();
    assert_eq!(again.backfilled, 3);
    assert_eq!(
        startup::MIGRATION_RUNS.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[test]
fn errors_read_well() {
    let e = AppError::Refused("card declined".into());
    assert_eq!(e.to_string(), "card declined");
}
