//! The order-events consumer on NATS JetStream (`NATS` at `RERUN_EXAMPLE_NATS_URL`, by default
//! `nats://127.0.0.1:4222`).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use async_nats::jetstream::{self, consumer::pull, stream};
use rerun_queue::nats::JetStreamConsumer;

use super::{
    all_done, env_or, events, order_handler, print_summary, settings, with_setup, Counting, Setup,
    DEADLINE,
};
use crate::AppError;

fn broker_error(what: &str, e: impl std::fmt::Display) -> AppError {
    AppError::Service(format!("NATS: {what}: {e}"))
}

/// Runs the demo: a stream of its own, five messages, one consumer until all are handled.
pub fn run(dir: &Path, out: &mut dyn Write) -> Result<(), AppError> {
    super::block_on(async {
        let url = env_or("RERUN_EXAMPLE_NATS_URL", "nats://127.0.0.1:4222");
        let client = async_nats::connect(&url)
            .await
            .map_err(|e| broker_error(&format!("connecting to {url}"), e))?;
        let js = jetstream::new(client);
        with_setup(dir, |setup| async {
            let name = setup.name.clone();
            let result = demo(&js, setup, out).await;
            let _ = js.delete_stream(&name).await;
            result
        })
        .await
    })
}

async fn demo(js: &jetstream::Context, setup: Setup, out: &mut dyn Write) -> Result<(), AppError> {
    let Setup { db, store, name } = setup;
    let subject = format!("{name}.orders");
    let stream = js
        .get_or_create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            ..Default::default()
        })
        .await
        .map_err(|e| broker_error("creating the stream", e))?;
    let consumer = stream
        .get_or_create_consumer(
            &name,
            pull::Config {
                durable_name: Some(name.clone()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| broker_error("creating the consumer", e))?;

    let events = events()?;
    for (body, id) in &events {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        js.publish_with_headers(subject.clone(), headers, body.clone().into())
            .await
            .map_err(|e| broker_error("publishing", e))?
            .await
            .map_err(|e| broker_error("publishing", e))?;
    }

    let done = Arc::new(AtomicU64::new(0));
    let handler = Counting::new(order_handler(store, db.clone()), done.clone());
    let expected = events.len() as u64;
    let run = JetStreamConsumer::new(consumer, handler)
        .settings(settings())
        .run(all_done(done, expected));
    let report = tokio::time::timeout(DEADLINE, run)
        .await
        .map_err(|_| AppError::Service(format!("not all messages handled within {DEADLINE:?}")))?
        .map_err(|e| broker_error("consuming", e))?;
    print_summary(out, "NATS JetStream", events.len(), &report, &db).await
}
