//! Throughput of a rerun consumer against the same consumer acking without rerun, on each
//! broker, for fresh events and for duplicates (every event published again under a new
//! message id). One run; prints a Markdown table.
//!
//! ```text
//! RERUN_TEST_NATS_URL=nats://127.0.0.1:4222 \
//! RERUN_TEST_AMQP_URL='amqp://guest:guest@127.0.0.1:5672/%2f' \
//! RERUN_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo bench -p rerun-queue --all-features --bench queue_ratios
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{eventually, unique, Broker, Leftovers, Rig};
use futures::future::BoxFuture;
use rerun_core::{DynStore, Error, Idempotent, MemoryStore, PostgresStore};
use rerun_queue::{handler, Handled, Handler, Message, Settings};
use serde::{Deserialize, Serialize};

const EVENTS: usize = 2_000;

#[derive(Serialize, Deserialize, Idempotent)]
#[rerun(scope = "bench.order_created")]
struct OrderCreated {
    #[rerun(key)]
    event_id: String,
    cents: i64,
}

/// The same work, acked without rerun.
struct Plain(Arc<AtomicU64>);

impl Handler for Plain {
    fn handle<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            let _: Result<OrderCreated, _> = serde_json::from_slice(message.body());
            self.0.fetch_add(1, Ordering::Relaxed);
            Handled::Done { replayed: false }
        })
    }
}

fn events(tag: &str) -> Vec<(Vec<u8>, Option<String>)> {
    (0..EVENTS)
        .map(|i| {
            let e = OrderCreated {
                event_id: format!("evt-{i}"),
                cents: i as i64,
            };
            (
                serde_json::to_vec(&e).unwrap_or_default(),
                Some(format!("{tag}-{i}")),
            )
        })
        .collect()
}

/// Publishes the events to a stream or queue of their own, then consumes them all; events per
/// second of the consuming.
///
/// Each measurement has its own JetStream consumer: a pull subscription that ended leaves its
/// pull requests on the server until they expire, and messages delivered to them come back only
/// after the ack wait, which would slow whichever measurement came next.
async fn measure<H: Handler>(
    broker: Broker,
    url: &str,
    items: &[(Vec<u8>, Option<String>)],
    h: H,
) -> f64 {
    let rig = Rig::create(broker, url, &unique("bench")).await;
    rig.publish_all(items).await;
    let started = Instant::now();
    let report = rig
        .consume(h, Settings::new().max_in_flight(32), async {
            eventually(Duration::from_secs(120), || async {
                rig.outstanding().await == 0
            })
            .await;
        })
        .await;
    let secs = started.elapsed().as_secs_f64();
    rig.cleanup().await;
    (report.acked() as f64) / secs
}

fn main() {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("no runtime: {e}");
            return;
        }
    };
    rt.block_on(async {
        let pg = std::env::var("RERUN_TEST_POSTGRES_URL").ok();
        println!("| broker | store | events | without rerun (ev/s) | rerun, fresh (ev/s) | rerun, duplicates (ev/s) |");
        println!("|---|---|---|---|---|---|");
        for broker in [Broker::Nats, Broker::Amqp] {
            let Some(url) = broker.url() else { continue };
            let schema = unique("bench");
            // Drops the store's schema at the end of the broker's turn, or on a panic.
            let _leftovers = Leftovers {
                schema: pg.clone().map(|pg| (pg, schema.clone())),
                redis: None,
            };
            let stores: Vec<(&str, Arc<dyn DynStore>)> = {
                let mut v: Vec<(&str, Arc<dyn DynStore>)> =
                    vec![("memory", Arc::new(MemoryStore::new()))];
                if let Some(pg) = &pg {
                    let (pg, schema) = (pg.clone(), schema.clone());
                    let store = tokio::task::spawn_blocking(move || {
                        PostgresStore::builder(&pg).schema(schema).connect()
                    })
                    .await;
                    if let Ok(Ok(store)) = store {
                        v.push(("postgres", Arc::new(store)));
                    }
                }
                v
            };
            for (kind, store) in stores {
                let plain = measure(broker, &url, &events("plain"), Plain(Arc::new(AtomicU64::new(0)))).await;
                let work = |e: OrderCreated| async move { Ok::<_, Error>(e.cents) };
                let fresh = measure(broker, &url, &events("fresh"), handler::typed(store.clone(), work)).await;
                let dup = measure(broker, &url, &events("dup"), handler::typed(store.clone(), work)).await;
                println!(
                    "| {} | {kind} | {EVENTS} | {plain:.0} | {fresh:.0} ({:.0}%) | {dup:.0} ({:.0}%) |",
                    broker.name(),
                    100.0 * fresh / plain,
                    100.0 * dup / plain
                );
            }
        }
    });
}
