//! Every row of the ack policy (contract 14), on real brokers: NATS JetStream and RabbitMQ.
//! Each test runs on both; a broker whose URL variable is unset is skipped with a notice.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{pull, AckPolicy};
use common::{eventually, unique, Broker, Rig};
use futures::future::BoxFuture;
use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use rerun_core::record::ClaimRequest;
use rerun_core::{Error, Holder, Idempotent, MemoryStore, Reconciled, Store};
use rerun_queue::amqp::AmqpConsumer;
use rerun_queue::nats::JetStreamConsumer;
use rerun_queue::{handler, Handled, Message, Policy, Settings};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[rerun(scope = "acks.order")]
struct Order {
    #[rerun(key)]
    id: String,
    cents: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[rerun(scope = "acks.charge", once)]
struct Charge {
    #[rerun(key)]
    id: String,
}

fn body<T: Serialize>(t: &T) -> Vec<u8> {
    serde_json::to_vec(t).expect("json")
}

fn order(id: &str) -> Vec<u8> {
    body(&Order {
        id: id.into(),
        cents: 100,
    })
}

fn fast() -> Settings {
    Settings::new().max_in_flight(4).policy(
        Policy::new()
            .in_progress_delay(Duration::from_millis(200))
            .backoff(Duration::from_millis(200), Duration::from_secs(1)),
    )
}

async fn rig(broker: Broker, tag: &str) -> Option<Rig> {
    // The consumers' warnings (dead letters name their message) show with --nocapture.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("rerun_queue=warn")
        .with_test_writer()
        .try_init();
    let url = broker.url()?;
    Some(Rig::create(broker, &url, &unique(tag)).await)
}

/// Runs a consumer until `done` holds (or 15 s), then stops it.
async fn consume_until<H, F, Fut>(
    rig: &Rig,
    handler: H,
    settings: Settings,
    done: F,
) -> rerun_queue::Report
where
    H: rerun_queue::Handler,
    F: FnMut() -> Fut + Send,
    Fut: std::future::Future<Output = bool> + Send,
{
    let stop = async move {
        eventually(Duration::from_secs(15), done).await;
        // A delivery taken from the queue (AMQP counts it as gone) settles just after.
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    rig.consume(handler, settings, stop).await
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod nats {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Broker::Nats).await })*
        }
        mod amqp {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Broker::Amqp).await })*
        }
    };
}

on_both!(
    acks_what_ran_and_what_replayed,
    in_progress_comes_back_later,
    retryable_errors_back_off_then_ack,
    dead_letters_what_no_retry_fixes,
    poison_does_not_block_the_others,
    unknown_outcome_reconciled_or_dead_lettered,
    slow_handler_keeps_its_message,
    a_panicking_handler_is_retried_then_dead_lettered,
    one_at_a_time_every_message_comes_in_turn,
    any_count_of_handlers_is_taken,
    a_message_waiting_out_its_backoff_does_not_hold_up_shutdown,
);

/// A message whose handler failed and that waits out a long backoff (AMQP holds the delivery
/// meanwhile) is handed back as soon as the consumer stops fetching: the shutdown does not
/// wait the grace for it.
async fn a_message_waiting_out_its_backoff_does_not_hold_up_shutdown(broker: Broker) {
    let Some(rig) = rig(broker, "backoff-stop").await else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let h = handler::typed(Arc::new(MemoryStore::new()), move |_: Order| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Err::<u64, _>(Error::store_msg(None, "the database is restarting"))
        }
    });
    let settings = Settings::new()
        .grace(Duration::from_secs(20))
        .policy(Policy::new().backoff(Duration::from_secs(60), Duration::from_secs(60)));
    rig.publish(&order("o-backoff"), Some("m-backoff")).await;
    let started = Instant::now();
    let report = consume_until(&rig, h, settings, || {
        let r = runs.load(Ordering::SeqCst);
        async move { r >= 1 }
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the shutdown waited {:?} (grace 20 s)",
        started.elapsed()
    );
    assert_eq!(report.redelivered, 1, "{report:?}");
    rig.cleanup().await;
}

/// Row 1: ran and recorded → ack; the same event again (another message id) → replayed, ack.
async fn acks_what_ran_and_what_replayed(broker: Broker) {
    let Some(rig) = rig(broker, "ack").await else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let deliveries = Arc::new(AtomicUsize::new(0));
    let (r, d) = (runs.clone(), deliveries.clone());
    let h = handler::typed(Arc::new(MemoryStore::new()), move |o: Order| {
        // Called for every delivery; the future runs only when the key is claimed.
        d.fetch_add(1, Ordering::SeqCst);
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(o.cents)
        }
    });
    rig.publish(&order("o-1"), Some("m-1")).await;
    rig.publish(&order("o-1"), Some("m-2")).await;
    // One at a time, so the second copy finds the first recorded (not in progress).
    let report = consume_until(&rig, h, fast().max_in_flight(1), || async {
        deliveries.load(Ordering::SeqCst) >= 2 && rig.outstanding().await == 0
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!((report.ran, report.replayed), (1, 1), "{report:?}");
    assert_eq!(rig.outstanding().await, 0);
    rig.cleanup().await;
}

/// One message in flight at a time: each is fetched as the one before it is settled, and
/// none waits on a timer for its turn. (A count of messages to come kept across JetStream pull
/// requests could be left one too high when a message overtook its request's
/// acknowledgement, and then nothing was fetched until a 35-second timer. 2,000 messages in a
/// row give that race 2,000 chances; it stalled one run in three.)
async fn one_at_a_time_every_message_comes_in_turn(broker: Broker) {
    const MESSAGES: usize = 2_000;
    let Some(rig) = rig(broker, "turns").await else {
        return;
    };
    let items: Vec<_> = (0..MESSAGES)
        .map(|i| (order(&format!("o-{i}")), Some(format!("m-{i}"))))
        .collect();
    rig.publish_all(&items).await;
    let h = handler::typed(Arc::new(MemoryStore::new()), |o: Order| async move {
        Ok::<_, Error>(o.cents)
    });
    let report = consume_until(&rig, h, fast().max_in_flight(1), || async {
        rig.outstanding().await == 0
    })
    .await;
    assert_eq!(report.ran, MESSAGES as u64, "{report:?}");
    assert_eq!(rig.outstanding().await, 0);
    rig.cleanup().await;
}

/// `max_in_flight(usize::MAX)` runs as `Settings::MAX_IN_FLIGHT` handlers: no count a caller
/// can pass stops the consumer.
async fn any_count_of_handlers_is_taken(broker: Broker) {
    let Some(rig) = rig(broker, "many").await else {
        return;
    };
    for i in 0..3 {
        rig.publish(&order(&format!("o-{i}")), Some(&format!("m-{i}")))
            .await;
    }
    let h = handler::typed(Arc::new(MemoryStore::new()), |o: Order| async move {
        Ok::<_, Error>(o.cents)
    });
    let report = consume_until(&rig, h, fast().max_in_flight(usize::MAX), || async {
        rig.outstanding().await == 0
    })
    .await;
    assert_eq!(report.ran, 3, "{report:?}");
    rig.cleanup().await;
}

/// Row 2: another consumer holds the key → redelivered after a pause, then replayed once the
/// holder recorded its result.
async fn in_progress_comes_back_later(broker: Broker) {
    let Some(rig) = rig(broker, "busy").await else {
        return;
    };
    let store = Arc::new(MemoryStore::new());
    let event = Order {
        id: "o-busy".into(),
        cents: 100,
    };
    let (release, released) = oneshot::channel::<()>();
    let call = event.call().expect("call");
    let holder_store = store.clone();
    let holder = tokio::spawn(async move {
        call.run_async(&*holder_store, async move {
            let _ = released.await;
            Ok::<_, Error>(100u64)
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let h = handler::typed(store, move |o: Order| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(o.cents)
        }
    });
    rig.publish(&body(&event), Some("m-busy")).await;
    let started = Instant::now();
    let mut release = Some(release);
    let report = consume_until(&rig, h, fast(), || {
        if started.elapsed() > Duration::from_millis(900) {
            if let Some(tx) = release.take() {
                let _ = tx.send(());
            }
        }
        let rig = &rig;
        let late = started.elapsed() > Duration::from_millis(1000);
        async move { late && rig.outstanding().await == 0 }
    })
    .await;
    let held = holder.await.expect("holder task").expect("holder call");
    assert!(!held.replayed);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the holder ran the body, not the consumer"
    );
    assert!(report.redelivered >= 2, "{report:?}");
    assert!(report.redelivered <= 8, "not a hot loop: {report:?}");
    assert_eq!(report.replayed, 1, "{report:?}");
    rig.cleanup().await;
}

/// Row 3: a retryable error → redelivered with growing delays, then acked once it succeeds.
async fn retryable_errors_back_off_then_ack(broker: Broker) {
    let Some(rig) = rig(broker, "retry").await else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let h = handler::typed(Arc::new(MemoryStore::new()), move |o: Order| {
        let r = r.clone();
        async move {
            if r.fetch_add(1, Ordering::SeqCst) < 2 {
                Err(Error::store_msg(None, "the database is restarting"))
            } else {
                Ok(o.cents)
            }
        }
    });
    rig.publish(&order("o-retry"), Some("m-retry")).await;
    let started = Instant::now();
    let report = consume_until(&rig, h, fast(), || {
        let r = runs.load(Ordering::SeqCst);
        let rig = &rig;
        async move { r >= 3 && rig.outstanding().await == 0 }
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!((report.ran, report.redelivered), (1, 2), "{report:?}");
    // 200 ms, then 400 ms (AMQP classic counts stay at 2, so at least 200 + 200 there).
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    rig.cleanup().await;
}

/// Row 4: payload mismatch, corrupt record, non-retryable error, undecodable body, no message
/// id → each dead-lettered (JetStream: a copy on the dead-letter subject, then `Term`; AMQP:
/// reject to the dead-letter exchange), and never retried.
async fn dead_letters_what_no_retry_fixes(broker: Broker) {
    let Some(rig) = rig(broker, "dead").await else {
        return;
    };
    let store = Arc::new(MemoryStore::new());
    // A record of o-mismatch with another payload.
    let other = Order {
        id: "o-mismatch".into(),
        cents: 1,
    };
    other
        .call()
        .expect("call")
        .run_async(&*store, async { Ok::<_, Error>(1u64) })
        .await
        .expect("planted");
    // A corrupt record of o-corrupt: completed with bytes that are no record.
    let corrupt = Order {
        id: "o-corrupt".into(),
        cents: 100,
    };
    let key = corrupt.idempotency_key();
    let fp = corrupt.fingerprint().expect("fingerprint");
    let holder = Holder::current();
    let claimed = Store::claim(
        &*store,
        &ClaimRequest {
            key: &key,
            fingerprint: &fp,
            holder: &holder,
            lease: Duration::from_secs(30),
            once: false,
            steal: None,
        },
    )
    .expect("claim");
    let rerun_core::record::ClaimResponse::Claimed(claim) = claimed else {
        panic!("not claimed: {claimed:?}")
    };
    Store::complete(
        &*store,
        &claim,
        b"\xffnot a record",
        Duration::from_secs(60),
    )
    .expect("complete");

    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let h = handler::typed(store.clone(), move |o: Order| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            if o.id == "o-fatal" {
                Err(Error::config("this order can never be handled"))
            } else {
                Ok(o.cents)
            }
        }
    });
    rig.publish(&order("o-mismatch"), Some("m-1")).await;
    rig.publish(&order("o-corrupt"), Some("m-2")).await;
    rig.publish(&order("o-fatal"), Some("m-3")).await;
    rig.publish(b"{\"id\": 42", Some("m-4")).await;
    rig.publish(&order("o-fine"), Some("m-5")).await;
    let report = consume_until(&rig, h, fast(), || async {
        rig.outstanding().await == 0 && rig.dead_letters().await >= 4
    })
    .await;
    assert_eq!(report.dead_lettered, 4, "{report:?}");
    assert_eq!(report.ran, 1, "{report:?}");
    assert_eq!(report.redelivered, 0, "nothing retried: {report:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2, "o-fatal once, o-fine once");
    assert_eq!(rig.dead_letters().await, 4);

    // Keyed by message id: a message without one is dead-lettered.
    let by_id = handler::by_message_id(store, "acks.by_id", |m: Message| async move {
        Ok::<_, Error>(m.body().len())
    });
    rig.publish(b"no id", None).await;
    rig.publish(b"with id", Some("m-6")).await;
    let report = consume_until(&rig, by_id, fast(), || async {
        rig.outstanding().await == 0 && rig.dead_letters().await >= 5
    })
    .await;
    assert_eq!((report.ran, report.dead_lettered), (1, 1), "{report:?}");
    rig.cleanup().await;
}

/// A poison message (undecodable, and one failing retryably for ever) must not block the
/// others, even with one handler in flight.
async fn poison_does_not_block_the_others(broker: Broker) {
    let Some(rig) = rig(broker, "poison").await else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let h = handler::typed(Arc::new(MemoryStore::new()), move |o: Order| {
        let r = r.clone();
        async move {
            if o.id == "o-sick" {
                return Err(Error::store_msg(None, "always failing"));
            }
            r.fetch_add(1, Ordering::SeqCst);
            Ok(o.cents)
        }
    });
    rig.publish(b"\x00\x01 poison", Some("p-1")).await;
    rig.publish(&order("o-sick"), Some("p-2")).await;
    for i in 0..10 {
        rig.publish(&order(&format!("o-{i}")), Some(&format!("m-{i}")))
            .await;
    }
    let settings = Settings::new().max_in_flight(1).policy(
        Policy::new()
            .backoff(Duration::from_millis(300), Duration::from_secs(2))
            .max_deliveries(Some(4)),
    );
    let report = consume_until(&rig, h, settings, || {
        let n = runs.load(Ordering::SeqCst);
        let rig = &rig;
        async move { n >= 10 && rig.dead_letters().await >= 2 && rig.outstanding().await == 0 }
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 10, "{report:?}");
    assert_eq!(report.ran, 10, "{report:?}");
    assert_eq!(
        report.dead_lettered, 2,
        "the undecodable one, and the sick one after 4 deliveries: {report:?}"
    );
    rig.cleanup().await;
}

/// Row 5: an earlier `once` attempt died mid-body → reconciled when the handler has
/// `reconcile` (then acked), dead-lettered when it has not.
async fn unknown_outcome_reconciled_or_dead_lettered(broker: Broker) {
    let Some(rig) = rig(broker, "unknown").await else {
        return;
    };
    let store = Arc::new(MemoryStore::new());
    for id in ["c-1", "c-2"] {
        let c = Charge { id: id.into() };
        let key = c.idempotency_key();
        let fp = c.fingerprint().expect("fingerprint");
        let holder = Holder::current();
        let claimed = Store::claim(
            &*store,
            &ClaimRequest {
                key: &key,
                fingerprint: &fp,
                holder: &holder,
                lease: Duration::from_secs(30),
                once: true,
                steal: None,
            },
        )
        .expect("claim");
        let rerun_core::record::ClaimResponse::Claimed(claim) = claimed else {
            panic!("not claimed")
        };
        Store::mark_unknown(&*store, &claim).expect("unknown");
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let plain = handler::typed(store.clone(), move |_: Charge| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>("charged".to_owned())
        }
    });
    rig.publish(&body(&Charge { id: "c-1".into() }), Some("m-1"))
        .await;
    let report = consume_until(&rig, plain, fast(), || async {
        rig.outstanding().await == 0 && rig.dead_letters().await >= 1
    })
    .await;
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a once body never starts twice"
    );

    let r = runs.clone();
    let reconciled = handler::typed(store, move |_: Charge| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>("charged".to_owned())
        }
    })
    .reconcile(|c: Charge| async move {
        // The provider says the charge went through.
        Ok::<_, Error>(Reconciled::Done(format!("charged {}", c.id)))
    });
    rig.publish(&body(&Charge { id: "c-2".into() }), Some("m-2"))
        .await;
    let report = consume_until(&rig, reconciled, fast(), || async {
        rig.outstanding().await == 0
    })
    .await;
    assert_eq!((report.ran, report.dead_lettered), (1, 0), "{report:?}");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "reconciled as done: the body did not run"
    );
    rig.cleanup().await;
}

/// While a slow handler runs, the broker's redelivery timer is extended (JetStream
/// `AckProgress`): a second consumer never gets the message meanwhile.
async fn slow_handler_keeps_its_message(broker: Broker) {
    let Some(url) = broker.url() else { return };
    let rig = Rig::create_with(broker, &url, &unique("slow"), Duration::from_secs(1)).await;
    let store = Arc::new(MemoryStore::new());
    let starts = Arc::new(AtomicUsize::new(0));
    let make = |starts: Arc<AtomicUsize>| {
        handler::typed(store.clone(), move |o: Order| {
            let starts = starts.clone();
            async move {
                starts.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3500)).await;
                Ok::<_, Error>(o.cents)
            }
        })
    };
    rig.publish(&order("o-slow"), Some("m-slow")).await;
    let done = || async { rig.outstanding().await == 0 };
    let (a, b) = tokio::join!(
        consume_until(&rig, make(starts.clone()), fast(), done),
        consume_until(&rig, make(starts.clone()), fast(), done),
    );
    assert_eq!(starts.load(Ordering::SeqCst), 1, "{a:?} {b:?}");
    assert_eq!(a.ran + b.ran, 1, "{a:?} {b:?}");
    assert_eq!(a.redelivered + b.redelivered, 0, "{a:?} {b:?}");
    rig.cleanup().await;
}

/// A handler that panics is a retryable failure: its message is redelivered with the backoff
/// and dead-lettered after `max_deliveries`, and the others go on (two handler slots, six
/// messages, while the panicking one comes and goes).
async fn a_panicking_handler_is_retried_then_dead_lettered(broker: Broker) {
    let Some(rig) = rig(broker, "panic").await else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let panics = Arc::new(AtomicUsize::new(0));
    let (r, p) = (runs.clone(), panics.clone());
    let h = handler::typed(Arc::new(MemoryStore::new()), move |o: Order| {
        let (r, p) = (r.clone(), p.clone());
        async move {
            if o.id == "o-panic" {
                p.fetch_add(1, Ordering::SeqCst);
                panic!("the handler of {} panicked", o.id);
            }
            r.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(o.cents)
        }
    });
    rig.publish(&order("o-panic"), Some("m-panic")).await;
    for i in 0..6 {
        rig.publish(&order(&format!("o-{i}")), Some(&format!("m-{i}")))
            .await;
    }
    let settings = Settings::new().max_in_flight(2).policy(
        Policy::new()
            .backoff(Duration::from_millis(200), Duration::from_secs(1))
            .max_deliveries(Some(3)),
    );
    let report = consume_until(&rig, h, settings, || {
        let n = runs.load(Ordering::SeqCst);
        let rig = &rig;
        async move { n >= 6 && rig.dead_letters().await >= 1 && rig.outstanding().await == 0 }
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 6, "{report:?}");
    assert_eq!(report.ran, 6, "{report:?}");
    assert_eq!(panics.load(Ordering::SeqCst), 3, "{report:?}");
    assert_eq!(report.redelivered, 2, "{report:?}");
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    assert_eq!(rig.dead_letters().await, 1);
    assert_eq!(rig.outstanding().await, 0);
    rig.cleanup().await;
}

/// JetStream reads a `-NAK` delay as a signed 64-bit count of nanoseconds (292 years). A
/// backoff configured past that (`Duration::MAX`, say) is sent as 100 years: the message
/// waits, and does not come back at once in a hot loop until `max_deliveries`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_backoff_past_what_the_server_reads_still_waits() {
    let Some(rig) = rig(Broker::Nats, "longnak").await else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let h = handler::typed(Arc::new(MemoryStore::new()), move |_: Order| {
        let r = r.clone();
        async move {
            r.fetch_add(1, Ordering::SeqCst);
            Err::<u64, _>(Error::store_msg(None, "the database is restarting"))
        }
    });
    rig.publish(&order("o-long"), Some("m-long")).await;
    let settings = Settings::new().max_in_flight(1).policy(
        Policy::new()
            .backoff(Duration::MAX, Duration::MAX)
            .max_deliveries(Some(5)),
    );
    let started = Instant::now();
    let report = consume_until(&rig, h, settings, || {
        let late = started.elapsed() > Duration::from_millis(1500);
        async move { late }
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{report:?}");
    assert_eq!(
        (report.redelivered, report.dead_lettered),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(rig.dead_letters().await, 0);
    rig.cleanup().await;
}

/// Records the message id and attempt of every delivery it gets, then takes `run` to finish.
struct Recording {
    seen: Arc<Mutex<Vec<(String, u32)>>>,
    run: Duration,
}

impl rerun_queue::Handler for Recording {
    fn handle<'a>(&'a self, m: &'a Message) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            let id = m.id().unwrap_or("").to_owned();
            self.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((id, m.attempt()));
            tokio::time::sleep(self.run).await;
            Handled::Done { replayed: false }
        })
    }
}

/// Handlers that take longer than a pull request lives (its wait, the consumer's
/// `max_expires` of 1 s here, plus the 5 s the client gives the server): nothing is fetched
/// that no handler is free for, so no message is left unread in a request the client then
/// ends, to come back after its `ack_wait` as a second delivery. Two handlers, four messages:
/// each delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_slow_handlers_leave_no_message_fetched_and_unread() {
    let Some(rig) = rig(Broker::Nats, "unread").await else {
        return;
    };
    let stream = rig.js().get_stream(&rig.name).await.expect("stream");
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(format!("{}_short", rig.name)),
            ack_wait: Duration::from_secs(2),
            max_expires: Duration::from_secs(1),
            ..Default::default()
        })
        .await
        .expect("creating the consumer");
    for i in 0..4 {
        rig.publish(&order(&format!("o-{i}")), Some(&format!("m-{i}")))
            .await;
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = Recording {
        seen: seen.clone(),
        run: Duration::from_secs(7),
    };
    // Stopped once the fourth handler started; the grace lets it finish.
    let stop = eventually(Duration::from_secs(40), || {
        let n = seen.lock().map(|s| s.len()).unwrap_or(0);
        async move { n >= 4 }
    });
    let report = JetStreamConsumer::new(consumer, handler)
        .settings(
            Settings::new()
                .max_in_flight(2)
                .grace(Duration::from_secs(20)),
        )
        .run(async {
            stop.await;
        })
        .await
        .expect("consumer run");
    let mut seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    seen.sort();
    let once: Vec<_> = (0..4).map(|i| (format!("m-{i}"), 1)).collect();
    assert_eq!(seen, once, "{report:?}");
    assert_eq!(report.ran, 4, "{report:?}");
    rig.cleanup().await;
}

/// A JetStream consumer that does not take an ack per message is refused before anything is
/// fetched: under `AckPolicy::All` an ack settles earlier messages still being handled,
/// under `AckPolicy::None` a failed message never comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_consumer_without_explicit_acks_is_refused() {
    let Some(rig) = rig(Broker::Nats, "ackpolicy").await else {
        return;
    };
    rig.publish(&order("o-1"), Some("m-1")).await;
    let stream = rig.js().get_stream(&rig.name).await.expect("stream");
    for (tag, policy) in [("all", AckPolicy::All), ("none", AckPolicy::None)] {
        let consumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(format!("{}_{tag}", rig.name)),
                ack_policy: policy,
                ..Default::default()
            })
            .await
            .expect("creating the consumer");
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let h = handler::typed(Arc::new(MemoryStore::new()), move |o: Order| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(o.cents)
            }
        });
        let started = Instant::now();
        let run = JetStreamConsumer::new(consumer, h)
            .run(tokio::time::sleep(Duration::from_secs(2)))
            .await;
        match run {
            Err(rerun_queue::Error::Config(m)) => {
                assert!(m.contains("AckPolicy::Explicit"), "{m}")
            }
            other => panic!("{tag}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(1), "{tag}");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{tag}");
    }
    rig.cleanup().await;
}

/// A publisher's `x-delivery-count` does not make a first delivery a late attempt: a message
/// published with a count of 1000 that fails once is retried, not dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_a_first_delivery_is_the_first_attempt_whatever_its_headers_say() {
    let Some(rig) = rig(Broker::Amqp, "count").await else {
        return;
    };
    let mut headers = FieldTable::default();
    headers.insert("x-delivery-count".into(), AMQPValue::LongLongInt(1000));
    let props = BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id("m-count".into())
        .with_headers(headers);
    rig.channel()
        .basic_publish(
            "",
            &rig.name,
            BasicPublishOptions::default(),
            &order("o-count"),
            props,
        )
        .await
        .expect("publish")
        .await
        .expect("publish confirm");
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let h = handler::typed(Arc::new(MemoryStore::new()), move |o: Order| {
        let r = r.clone();
        async move {
            if r.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(Error::store_msg(None, "the database is restarting"))
            } else {
                Ok(o.cents)
            }
        }
    });
    let report = consume_until(&rig, h, fast(), || {
        let r = runs.load(Ordering::SeqCst);
        let rig = &rig;
        async move { r >= 2 && rig.outstanding().await == 0 }
    })
    .await;
    assert_eq!(
        (report.ran, report.redelivered, report.dead_lettered),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(rig.dead_letters().await, 0);
    rig.cleanup().await;
}

/// A consumer on a channel nobody else holds, stopped while a handler runs: the channel stays
/// open until the handler is done and its delivery acked. (Closed at the stop, RabbitMQ would
/// requeue the delivery mid-handler and the ack would fail.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_a_handler_running_at_shutdown_acks_on_the_consumers_own_channel() {
    let Some(rig) = rig(Broker::Amqp, "ownchannel").await else {
        return;
    };
    rig.publish(&order("o-own"), Some("m-own")).await;
    let conn = Connection::connect(&rig.url, ConnectionProperties::default())
        .await
        .expect("connecting to RabbitMQ");
    let channel = conn.create_channel().await.expect("channel");
    let starts = Arc::new(AtomicUsize::new(0));
    let s = starts.clone();
    let h = handler::typed(Arc::new(MemoryStore::new()), move |o: Order| {
        let s = s.clone();
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Ok::<_, Error>(o.cents)
        }
    });
    let stop = eventually(Duration::from_secs(10), || {
        let n = starts.load(Ordering::SeqCst);
        async move { n >= 1 }
    });
    let report = AmqpConsumer::new(channel, &rig.name, h)
        .settings(fast().grace(Duration::from_secs(10)))
        .run(async {
            stop.await;
        })
        .await
        .expect("consumer run");
    assert_eq!(
        (report.ran, report.settle_failures, report.released),
        (1, 0, 0),
        "{report:?}"
    );
    // The channel is gone now: a delivery left unacked on it would be back in the queue.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rig.outstanding().await, 0);
    assert_eq!(starts.load(Ordering::SeqCst), 1);
    let _ = conn.close(200, "done").await;
    rig.cleanup().await;
}

/// A queue deleted under its consumer (the broker cancels the subscription) ends the run with
/// an error, not as a clean stop: a supervisor restarting failed services must see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_a_subscription_the_broker_cancels_ends_the_run_with_an_error() {
    let Some(rig) = rig(Broker::Amqp, "cancelled").await else {
        return;
    };
    let conn = Connection::connect(&rig.url, ConnectionProperties::default())
        .await
        .expect("connecting to RabbitMQ");
    let channel = conn.create_channel().await.expect("channel");
    let h = handler::typed(Arc::new(MemoryStore::new()), |o: Order| async move {
        Ok::<_, Error>(o.cents)
    });
    let run = tokio::spawn(
        AmqpConsumer::new(channel, &rig.name, h)
            .settings(fast())
            .run(std::future::pending()),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    rig.channel()
        .queue_delete(&rig.name, lapin::options::QueueDeleteOptions::default())
        .await
        .expect("deleting the queue");
    let ended = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the run ended")
        .expect("the run did not panic");
    match ended {
        Err(rerun_queue::Error::Broker { message, .. }) => {
            assert!(message.contains("cancelled the subscription"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let _ = conn.close(200, "done").await;
    rig.cleanup().await;
}

/// A JetStream consumer whose `max_deliver` the server reaches before the policy dead-letters
/// a failing message is refused: the server would stop delivering it without a trace. One
/// whose limit comes after the policy's is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_server_delivery_limit_before_the_policys_is_refused() {
    let Some(rig) = rig(Broker::Nats, "maxdeliver").await else {
        return;
    };
    let stream = rig.js().get_stream(&rig.name).await.expect("stream");
    for (tag, max_deliver, policy, refused) in [
        ("below", 3, Policy::new(), true),
        ("forever", 50, Policy::new().max_deliveries(None), true),
        ("above", 50, Policy::new(), false),
    ] {
        let consumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(format!("{}_{tag}", rig.name)),
                max_deliver,
                ..Default::default()
            })
            .await
            .expect("creating the consumer");
        let h = handler::typed(Arc::new(MemoryStore::new()), |o: Order| async move {
            Ok::<_, Error>(o.cents)
        });
        let run = JetStreamConsumer::new(consumer, h)
            .settings(fast().policy(policy))
            .run(tokio::time::sleep(Duration::from_millis(300)))
            .await;
        match run {
            Err(rerun_queue::Error::Config(m)) if refused => {
                assert!(m.contains("max_deliver"), "{tag}: {m}")
            }
            Ok(_) if !refused => {}
            other => panic!("{tag}: {other:?}"),
        }
    }
    rig.cleanup().await;
}
