//! A reconcile looks at the world only after an earlier attempt's effects have had time to land.
//!
//! A process that dies mid-body can leave its effect on the way: a statement already in the
//! database's socket runs, and commits, after the process is gone. A holder found dead is taken
//! over at once; a reconcile that looked at once would miss that effect, answer `NotDone`, and
//! the effect would happen twice. With the store, the database and the signal real:
//! `RERUN_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo test -p rerun-core
//! --all-features --test reconcile_settle`.

#[cfg(feature = "postgres")]
mod postgres_common;

#[cfg(feature = "postgres")]
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rerun_core::{Call, Error, MemoryStore, Reconciled, DEFAULT_SETTLE};

/// The rerun of a `once` send whose reconcile counts what was sent: calls `looked` once it has
/// counted, and sends when it counted nothing.
fn send_again(
    store: &MemoryStore,
    call: Call,
    sent: &AtomicU32,
    looked: impl FnOnce(),
) -> rerun_core::Outcome<()> {
    call.once()
        .run_reconciled(
            store,
            || {
                let seen = sent.load(Ordering::SeqCst);
                looked();
                Ok::<_, Error>(match seen {
                    0 => Reconciled::NotDone,
                    _ => Reconciled::Done(()),
                })
            },
            || {
                sent.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(())
            },
        )
        .unwrap()
}

/// A body that hands its effect to something slower than itself, then dies: the effect lands
/// after the death, and the next call's reconcile sees it.
#[test]
fn an_effect_still_on_its_way_when_the_attempt_died_is_seen_by_the_reconcile() {
    let store = MemoryStore::new();
    let sent = Arc::new(AtomicU32::new(0));
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Call::new("mail", "welcome").once().run(&store, || {
            let sent = sent.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                sent.fetch_add(1, Ordering::SeqCst);
            });
            panic!("the process died with the mail on its way");
            #[allow(unreachable_code)]
            Ok::<_, Error>(())
        })
    }));
    assert!(died.is_err());
    let t0 = Instant::now();
    let out = send_again(&store, Call::new("mail", "welcome"), &sent, || {});
    assert!(t0.elapsed() >= DEFAULT_SETTLE);
    assert!(!out.replayed);
    assert_eq!(sent.load(Ordering::SeqCst), 1, "the mail was sent once");
}

/// Without the wait the same death sends the effect twice: what the wait is for. The late
/// effect is held until the reconcile has looked, so the order is certain.
#[test]
fn without_a_settle_time_the_reconcile_can_miss_the_effect() {
    let store = MemoryStore::new();
    let sent = Arc::new(AtomicU32::new(0));
    let (looked, look) = std::sync::mpsc::channel::<()>();
    let late = std::thread::spawn({
        let sent = sent.clone();
        move || {
            let _ = look.recv();
            sent.fetch_add(1, Ordering::SeqCst);
        }
    });
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Call::new("mail", "welcome")
            .once()
            .run(&store, || -> Result<(), Error> { panic!("died") })
    }));
    assert!(died.is_err());
    let call = Call::new("mail", "welcome").settle(Duration::ZERO);
    send_again(&store, call, &sent, || {
        let _ = looked.send(());
    });
    late.join().unwrap();
    assert_eq!(sent.load(Ordering::SeqCst), 2);
}

#[test]
fn a_settle_time_past_the_longest_duration_is_a_config_error() {
    let store = MemoryStore::new();
    let err = Call::new("mail", "welcome")
        .once()
        .settle(Duration::MAX)
        .run(&store, || Ok::<_, Error>(()))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Config { message, .. } if message.contains("settle")),
        "{err:?}"
    );
}

static SENT_BY_MACRO: AtomicU32 = AtomicU32::new(0);

fn counted(_store: &&MemoryStore, _id: &&str, _die: &bool) -> Result<Reconciled<()>, Error> {
    Ok(match SENT_BY_MACRO.load(Ordering::SeqCst) {
        0 => Reconciled::NotDone,
        _ => Reconciled::Done(()),
    })
}

/// `settle = "…"` of `#[idempotent]` reaches the call: here a wait longer than the default.
#[rerun_core::idempotent(key = id, store = store, skip(die), once, reconcile = counted, settle = "1500ms")]
fn send(store: &MemoryStore, id: &str, die: bool) -> Result<(), Error> {
    if die {
        panic!("the process died mid-send");
    }
    SENT_BY_MACRO.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[test]
fn the_settle_argument_of_the_attribute_sets_the_wait() {
    let store = MemoryStore::new();
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        send(&store, "welcome", true)
    }));
    assert!(died.is_err());
    let t0 = Instant::now();
    send(&store, "welcome", false).unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(SENT_BY_MACRO.load(Ordering::SeqCst), 1);
}

#[derive(serde::Serialize, rerun_core::Idempotent)]
#[rerun(once, reconcile = delivered, settle = "0s")]
struct Delivered {
    #[rerun(key)]
    id: String,
}

fn delivered(_: &Delivered) -> Result<Reconciled<()>, Error> {
    Ok(Reconciled::NotDone)
}

#[derive(serde::Serialize, rerun_core::Idempotent)]
#[rerun(once, reconcile = delivered_default)]
struct DeliveredByDefault {
    #[rerun(key)]
    id: String,
}

fn delivered_default(_: &DeliveredByDefault) -> Result<Reconciled<()>, Error> {
    Ok(Reconciled::NotDone)
}

#[test]
fn the_settle_argument_of_the_derive_sets_the_wait() {
    use rerun_core::Idempotent as _;
    let now = Delivered { id: "a".into() };
    assert_eq!(now.options().settle_duration(), Duration::ZERO);
    let default = DeliveredByDefault { id: "a".into() };
    assert_eq!(default.options().settle_duration(), DEFAULT_SETTLE);
}

#[cfg(feature = "postgres")]
const ROLE: &str = "RERUN_SETTLE_ROLE";
#[cfg(feature = "postgres")]
const TEST: &str =
    "a_statement_a_killed_holder_left_in_the_database_socket_is_seen_by_the_reconcile";

#[cfg(feature = "postgres")]
/// The child: claims the key, sends an insert the server takes half a second to run, and
/// SIGKILLs itself once the statement is on its way.
fn dying_child(url: &str, table: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
    });
    let store = rerun_core::PostgresStore::builder(url)
        .table(table)
        .connect()
        .unwrap();
    let sql = format!("INSERT INTO {table}_sent SELECT 'order-1' FROM pg_sleep(0.5)");
    let _ = Call::new("receipt", "order-1")
        .once()
        .run(&store, move || -> Result<(), Error> {
            rt.spawn(async move { client.execute(sql.as_str(), &[]).await });
            // Time to write the statement; the server is running it when the process dies.
            std::thread::sleep(Duration::from_millis(100));
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            unreachable!("SIGKILL")
        });
}

#[cfg(feature = "postgres")]
#[test]
fn a_statement_a_killed_holder_left_in_the_database_socket_is_seen_by_the_reconcile() {
    let Some(url) = postgres_common::url() else {
        return;
    };
    if std::env::var(ROLE).is_ok() {
        let table = std::env::var("RERUN_SETTLE_TABLE").unwrap_or_default();
        dying_child(&url, &table);
        return;
    }
    let (store, table) = postgres_common::fresh(&url, "settle");
    let sent = format!("{}_sent", table.name);
    let side = postgres_common::Side::connect(&url);
    side.exec(&format!("CREATE TABLE {sent} (order_id text NOT NULL)"));
    let _sent_table = postgres_common::Table {
        url: url.clone(),
        name: sent.clone(),
    };
    let count_sql = format!("SELECT count(*) FROM {sent}");
    let count = |rows: Vec<Vec<Option<String>>>| -> i64 {
        rows[0][0].as_deref().unwrap_or("0").parse().unwrap()
    };
    let status = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, "1")
        .env("RERUN_SETTLE_TABLE", &table.name)
        .status()
        .unwrap();
    assert!(!status.success(), "the child was to die mid-body");
    // The child is gone; its insert is still running on the server.
    assert_eq!(
        count(side.exec(&count_sql)),
        0,
        "the statement landed before the child died"
    );
    let t0 = Instant::now();
    let out = Call::new("receipt", "order-1")
        .once()
        .run_reconciled(
            &store,
            || {
                let rows = postgres_common::psql(&url, &count_sql)
                    .map_err(|e| Error::store_msg(None, e))?;
                Ok::<_, Error>(match count(rows) {
                    0 => Reconciled::NotDone,
                    _ => Reconciled::Done(()),
                })
            },
            || {
                postgres_common::psql(&url, &format!("INSERT INTO {sent} VALUES ('order-1')"))
                    .map_err(|e| Error::store_msg(None, e))?;
                Ok::<_, Error>(())
            },
        )
        .unwrap();
    // Taken over at once (the holder is provably gone, where its lease had 30 s left), and
    // reconciled after the settle time (only a reconcile waits it).
    let took = t0.elapsed();
    assert!(
        took >= DEFAULT_SETTLE,
        "the call did not reconcile: {took:?}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(!out.replayed);
    // Once the dead child's statement has finished, whenever that is.
    let running = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' \
         AND query LIKE '%{sent}%pg_sleep%' AND pid <> pg_backend_pid()"
    );
    let waited = Instant::now();
    while count(side.exec(&running)) > 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the child's statement still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(count(side.exec(&count_sql)), 1, "the receipt was sent once");
}

/// A call without `once` that takes over an at-most-once attempt's unknown outcome keeps the
/// claim at most once: when its reconcile panics, the key goes back to unknown, never released
/// for a rerun of the body.
#[cfg(feature = "testing")]
#[test]
fn a_replayable_call_on_an_unknown_outcome_leaves_it_unknown_when_it_panics() {
    use rerun_core::record::Status;
    use rerun_core::{Fingerprint, Key, Store};
    let store = MemoryStore::new();
    let key = Key::new("settle.mode", "k");
    rerun_core::testing::leave_unknown(&store, &key, &Fingerprint::EMPTY)
        .unwrap_or_else(|e| panic!("{e}"));
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Call::new("settle.mode", "k")
            .settle(Duration::ZERO)
            .run_reconciled(
                &store,
                || -> Result<Reconciled<u32>, Error> { panic!("the reconcile function panicked") },
                || Ok(1u32),
            )
    }));
    assert!(ran.is_err(), "the panic reaches the caller");
    // The claim is given back in the background: unknown again, soon, and never released.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let status = store
            .inspect(&key)
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|v| v.status);
        assert_ne!(status, Some(Status::Released), "released for a rerun");
        if status == Some(Status::Unknown) {
            break;
        }
        assert!(Instant::now() < until, "still {status:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let again = Call::new("settle.mode", "k").run(&store, || Ok::<_, Error>(2u32));
    assert!(
        matches!(again, Err(Error::OutcomeUnknown { .. })),
        "{again:?}"
    );
}
