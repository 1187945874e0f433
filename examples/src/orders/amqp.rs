//! The order-events consumer on RabbitMQ (at `RERUN_EXAMPLE_AMQP_URL`, by default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeleteOptions, QueueDeleteOptions,
};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use rerun_queue::amqp::{declare_queue, AmqpConsumer};

use super::{
    all_done, env_or, events, order_handler, print_summary, settings, with_setup, Counting, Setup,
    DEADLINE,
};
use crate::AppError;

fn broker_error(what: &str, e: impl std::fmt::Display) -> AppError {
    AppError::Service(format!("RabbitMQ: {what}: {e}"))
}

/// Runs the demo: a queue of its own (with its dead-letter exchange and queue), five messages,
/// one consumer until all are handled.
pub fn run(dir: &Path, out: &mut dyn Write) -> Result<(), AppError> {
    super::block_on(async {
        let url = env_or(
            "RERUN_EXAMPLE_AMQP_URL",
            "amqp://guest:guest@127.0.0.1:5672/%2f",
        );
        let conn = Connection::connect(&url, ConnectionProperties::default())
            .await
            .map_err(|e| broker_error(&format!("connecting to {url}"), e))?;
        let channel = conn
            .create_channel()
            .await
            .map_err(|e| broker_error("opening a channel", e))?;
        let result = with_setup(dir, |setup| async {
            let name = setup.name.clone();
            let result = demo(&conn, &channel, setup, out).await;
            delete_queue(&channel, &name).await;
            result
        })
        .await;
        let _ = conn.close(200, "done").await;
        result
    })
}

/// Deletes the queue, its dead-letter queue and its dead-letter exchange.
async fn delete_queue(channel: &Channel, name: &str) {
    let _ = channel
        .queue_delete(name, QueueDeleteOptions::default())
        .await;
    let _ = channel
        .queue_delete(&format!("{name}.dead"), QueueDeleteOptions::default())
        .await;
    let _ = channel
        .exchange_delete(&format!("{name}.dlx"), ExchangeDeleteOptions::default())
        .await;
}

async fn demo(
    conn: &Connection,
    channel: &Channel,
    setup: Setup,
    out: &mut dyn Write,
) -> Result<(), AppError> {
    let Setup { db, store, name } = setup;
    declare_queue(channel, &name)
        .await
        .map_err(|e| broker_error("declaring the queue", e))?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| broker_error("publisher confirms", e))?;

    let events = events()?;
    for (body, id) in &events {
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(id.as_str().into());
        channel
            .basic_publish("", &name, BasicPublishOptions::default(), body, props)
            .await
            .map_err(|e| broker_error("publishing", e))?
            .await
            .map_err(|e| broker_error("publishing", e))?;
    }

    // The consumer has a channel of its own, as a consumer process would.
    let consuming = conn
        .create_channel()
        .await
        .map_err(|e| broker_error("opening a channel", e))?;
    let done = Arc::new(AtomicU64::new(0));
    let handler = Counting::new(order_handler(store, db.clone()), done.clone());
    let expected = events.len() as u64;
    let run = AmqpConsumer::new(consuming.clone(), name.as_str(), handler)
        .settings(settings())
        .run(all_done(done, expected));
    let report = tokio::time::timeout(DEADLINE, run)
        .await
        .map_err(|_| AppError::Service(format!("not all messages handled within {DEADLINE:?}")))?
        .map_err(|e| broker_error("consuming", e))?;
    let _ = consuming.close(200, "done").await;
    print_summary(out, "RabbitMQ", events.len(), &report, &db).await
}
