//! RabbitMQ over AMQP 0-9-1 (feature `amqp`, on `lapin`): a consumer whose deliveries run
//! through rerun.
//!
//! | rerun says | the consumer does |
//! |---|---|
//! | recorded (ran or replayed) | `basic.ack` |
//! | `InProgress`, a retryable error, a panic in the handler | holds the delivery for the policy's delay (the handler slot is freed), then requeues it: a redelivery after a pause, never a hot loop (a failure with `basic.reject`, `InProgress` with `basic.nack`) |
//! | mismatch, corrupt, non-retryable, undecodable, unknown outcome | `basic.reject` without requeue: the queue's dead-letter exchange (`x-dead-letter-exchange`) receives it |
//!
//! The message id is the `message_id` property. The attempt is 1 for a first delivery,
//! whatever its headers say (a publisher can set `x-delivery-count` too); a redelivery's is
//! `x-delivery-count` + 1 on quorum queues, and 2 on classic queues, where a `max_deliveries`
//! above 2 therefore never dead-letters a message that keeps failing: use a quorum queue.
//! [`declare_queue`] declares a queue with its dead-letter exchange and queue.
//!
//! RabbitMQ has no redelivery timer to extend: an unacked delivery stays with its consumer
//! until the channel closes (or the broker's `consumer_timeout`, 30 min by default, runs out).
//! So a delivery is held for a delay until at most [`MAX_HOLD`] (15 min) after it came (its
//! handler's run counts), then requeued.
//!
//! On RabbitMQ 4.0 and later a quorum queue has a delivery limit of 20 by default. On 4.0 to
//! 4.2 every requeue counts: a message whose key another consumer holds for long (a holder on
//! another host that died, until its lease ends) is requeued about once a second and would be
//! dead-lettered by the broker itself, without rerun's `warn`. Give such queues a
//! `delivery-limit` policy well above the requeues a lease can cause (or `-1`, none). From 4.3
//! only `basic.reject` counts, which the consumer sends for failures alone.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
    BasicRejectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, ExchangeKind};
use rerun_core::printable::escaped;

use crate::error::Error;
use crate::handler::Handler;

/// The longest a delivery is kept, from when it came (its handler's run included), before it
/// is requeued: half the broker's default `consumer_timeout` (30 min), which also runs from
/// the delivery. A delivery held past that timeout closes the whole channel, with every other
/// delivery on it; a longer delay (a backoff of hours, `Duration::MAX`) is served as a
/// requeue every 15 minutes.
pub const MAX_HOLD: Duration = Duration::from_secs(15 * 60);
use crate::message::Message;
use crate::runner::{self, Delivery, Source};
use crate::settings::{Report, Settings};

/// The names [`declare_queue`] declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The work queue.
    pub queue: String,
    /// Its dead-letter exchange (`<queue>.dlx`, fanout).
    pub dead_letter_exchange: String,
    /// The queue bound to it (`<queue>.dead`), holding what was dead-lettered.
    pub dead_letter_queue: String,
}

/// Declares the durable quorum queue `queue` with a dead-letter exchange `<queue>.dlx` and a
/// queue `<queue>.dead` bound to it, so that rejected messages are kept. Idempotent: declaring
/// again with the same arguments is a no-op.
///
/// A quorum queue counts deliveries (`x-delivery-count`), which the ack policy uses for its
/// backoff and its `max_deliveries`.
///
/// ```no_run
/// # async fn f(channel: lapin::Channel) -> Result<(), rerun_queue::Error> {
/// let topology = rerun_queue::amqp::declare_queue(&channel, "orders").await?;
/// assert_eq!(topology.dead_letter_queue, "orders.dead");
/// # Ok(()) }
/// ```
pub async fn declare_queue(channel: &Channel, queue: &str) -> Result<Topology, Error> {
    let topology = Topology {
        queue: queue.to_owned(),
        dead_letter_exchange: format!("{queue}.dlx"),
        dead_letter_queue: format!("{queue}.dead"),
    };
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .exchange_declare(
            &topology.dead_letter_exchange,
            ExchangeKind::Fanout,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(|e| {
            Error::broker(
                format!("declaring exchange {}", topology.dead_letter_exchange),
                e,
            )
        })?;
    channel
        .queue_declare(&topology.dead_letter_queue, durable, FieldTable::default())
        .await
        .map_err(|e| Error::broker(format!("declaring queue {}", topology.dead_letter_queue), e))?;
    channel
        .queue_bind(
            &topology.dead_letter_queue,
            &topology.dead_letter_exchange,
            "",
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| Error::broker(format!("binding queue {}", topology.dead_letter_queue), e))?;
    let mut args = FieldTable::default();
    args.insert(
        ShortString::from("x-queue-type"),
        AMQPValue::LongString("quorum".into()),
    );
    args.insert(
        ShortString::from("x-dead-letter-exchange"),
        AMQPValue::LongString(topology.dead_letter_exchange.as_str().into()),
    );
    channel
        .queue_declare(queue, durable, args)
        .await
        .map_err(|e| Error::broker(format!("declaring queue {queue}"), e))?;
    Ok(topology)
}

/// A RabbitMQ consumer that runs every delivery through a rerun [`Handler`].
///
/// ```no_run
/// use std::sync::Arc;
/// use lapin::{Connection, ConnectionProperties};
/// use rerun_core::{Idempotent, MemoryStore};
/// use rerun_queue::{amqp, handler, shutdown, Settings};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Idempotent)]
/// #[rerun(scope = "shop.order_created")]
/// struct OrderCreated { #[rerun(key)] order_id: String, cents: u64 }
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let conn = Connection::connect("amqp://guest:guest@127.0.0.1:5672/%2f", ConnectionProperties::default()).await?;
/// let channel = conn.create_channel().await?;
/// amqp::declare_queue(&channel, "orders").await?;
/// let store = Arc::new(MemoryStore::new());
/// let report = amqp::AmqpConsumer::new(channel, "orders", handler::typed(store, |o: OrderCreated| async move {
///         Ok::<_, rerun_core::Error>(o.cents)
///     }))
///     .settings(Settings::new().max_in_flight(32))
///     .run(shutdown::terminated())
///     .await?;
/// println!("{} acked", report.acked());
/// # Ok(()) }
/// ```
pub struct AmqpConsumer<H: ?Sized> {
    channel: Channel,
    queue: String,
    tag: String,
    settings: Settings,
    handler: Arc<H>,
}

impl<H: Handler> AmqpConsumer<H> {
    /// A consumer of `queue` on `channel`, run through `handler`.
    pub fn new(channel: Channel, queue: impl Into<String>, handler: H) -> AmqpConsumer<H> {
        AmqpConsumer::shared(channel, queue, Arc::new(handler))
    }
}

impl<H: Handler + ?Sized> AmqpConsumer<H> {
    /// A consumer with a handler shared with other consumers.
    pub fn shared(channel: Channel, queue: impl Into<String>, handler: Arc<H>) -> AmqpConsumer<H> {
        AmqpConsumer {
            channel,
            queue: queue.into(),
            tag: String::new(),
            settings: Settings::new(),
            handler,
        }
    }

    /// Concurrency, ack policy and shutdown grace.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The consumer tag (default: one the broker makes up).
    pub fn consumer_tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = tag.into();
        self
    }

    /// Consumes until `shutdown` resolves (e.g. [`crate::shutdown::terminated`]): then cancels
    /// the subscription, lets handlers in flight finish within the grace period, requeues
    /// what is left, and returns what it did. The channel stays open until then, since the
    /// handlers settle their deliveries on it; it closes as `run` returns, unless the
    /// application holds a clone of it.
    ///
    /// The channel's prefetch is set to twice `max_in_flight`: a message waiting out its
    /// redelivery delay holds a prefetch slot but no handler slot, so a few failing messages
    /// do not stop the others.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<Report, Error> {
        let prefetch =
            u16::try_from(self.settings.max_in_flight.saturating_mul(2)).unwrap_or(u16::MAX);
        self.channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await
            .map_err(|e| Error::broker("setting the channel's prefetch", e))?;
        let consumer = self
            .channel
            .basic_consume(
                &self.queue,
                &self.tag,
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| Error::broker(format!("consuming from queue {}", self.queue), e))?;
        let source = Consume {
            queue: self.queue.to_string(),
            tag: consumer.tag().to_string(),
            consumer,
            channel: self.channel,
        };
        runner::run(source, self.handler, self.settings, shutdown).await
    }
}

struct Consume {
    channel: Channel,
    consumer: lapin::Consumer,
    queue: String,
    tag: String,
}

impl Source for Consume {
    type Delivery = AmqpDelivery;

    async fn next(&mut self, _free: usize) -> Option<Result<AmqpDelivery, Error>> {
        // The broker sends no more than the channel's prefetch, whoever reads.
        match self.consumer.next().await {
            Some(Ok(d)) => Some(Ok(AmqpDelivery::new(d))),
            Some(Err(e)) => Some(Err(Error::broker("receiving a delivery", e))),
            // Only `stop` cancels the consumer, and the runner stops reading before it: a
            // stream that ends here was cancelled by the broker (the queue was deleted, or its
            // node went down), which a supervisor must see as a failure, not a clean stop.
            None => Some(Err(Error::broker(
                format!("consuming from queue {}", self.queue),
                "the broker cancelled the subscription (was the queue deleted, or its node stopped?)",
            ))),
        }
    }

    async fn stop(&mut self) {
        if let Err(e) = self
            .channel
            .basic_cancel(&self.tag, BasicCancelOptions::default())
            .await
        {
            tracing::warn!(error = %escaped(&e.to_string()), "rerun-queue: could not cancel the AMQP consumer");
        }
        // Deliveries already sent to this consumer and never handed to a handler go back at
        // once instead of waiting for the channel to close.
        while let Ok(Some(Ok(d))) =
            tokio::time::timeout(Duration::from_millis(200), self.consumer.next()).await
        {
            let _ = d
                .acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await;
        }
    }

    async fn finish(self) {
        // Dropped only now: the channel closes with its last handle, and RabbitMQ would
        // requeue the deliveries still unacked on it, those of handlers still running.
        drop(self);
    }
}

struct AmqpDelivery {
    inner: lapin::message::Delivery,
    message: Message,
    /// When it came: RabbitMQ's `consumer_timeout` runs from then.
    arrived: Instant,
}

/// The attempt a delivery is: a first delivery is the first whatever its headers say (the
/// publisher may have set `x-delivery-count`, which a quorum queue writes only on a
/// redelivery and a classic queue never); a redelivery is the quorum queue's count plus one,
/// or 2 where there is none.
fn attempt(inner: &lapin::message::Delivery) -> u32 {
    if !inner.redelivered {
        return 1;
    }
    match delivery_count(&inner.properties) {
        Some(n) => n.saturating_add(1),
        None => 2,
    }
}

/// How long to hold a delivery that `held` has passed since it came, for a redelivery after
/// `after`: never past [`MAX_HOLD`] since it came.
fn hold(after: Duration, held: Duration) -> Duration {
    after.min(MAX_HOLD.saturating_sub(held))
}

/// What an acker did: `Ok(false)` is nothing sent (the delivery was settled already, or its
/// channel is closed or recovering), and the broker still holds the message.
fn sent(done: lapin::Result<bool>) -> Result<(), String> {
    match done {
        Ok(true) => Ok(()),
        Ok(false) => Err(String::from(
            "nothing was sent: the delivery was settled already, or its channel is closed or recovering",
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The delivery count of a quorum queue's message, from its headers.
fn delivery_count(properties: &lapin::BasicProperties) -> Option<u32> {
    let headers = properties.headers().as_ref()?;
    let value = headers.inner().get("x-delivery-count")?;
    let n = match value {
        AMQPValue::LongLongInt(n) => u32::try_from(*n).ok()?,
        AMQPValue::LongInt(n) => u32::try_from(*n).ok()?,
        AMQPValue::LongUInt(n) => *n,
        AMQPValue::ShortInt(n) => u32::try_from(*n).ok()?,
        AMQPValue::ShortUInt(n) => u32::from(*n),
        _ => return None,
    };
    Some(n)
}

impl AmqpDelivery {
    fn new(inner: lapin::message::Delivery) -> AmqpDelivery {
        let arrived = Instant::now();
        let mut message = Message::new(inner.routing_key.as_str(), inner.data.clone())
            .with_attempt(attempt(&inner));
        if let Some(id) = inner.properties.message_id() {
            message = message.with_id(id.as_str());
        }
        AmqpDelivery {
            inner,
            message,
            arrived,
        }
    }

    /// Requeues the delivery: a failure with `basic.reject`, which RabbitMQ 4.3 and later
    /// count toward a quorum queue's delivery limit (and `x-delivery-count`); any other return
    /// with `basic.nack`, which they do not count. Earlier versions count both on quorum
    /// queues.
    async fn requeue(&self, failed: bool) -> Result<(), String> {
        let done = match failed {
            true => {
                self.inner
                    .acker
                    .reject(BasicRejectOptions { requeue: true })
                    .await
            }
            false => {
                self.inner
                    .acker
                    .nack(BasicNackOptions {
                        requeue: true,
                        ..BasicNackOptions::default()
                    })
                    .await
            }
        };
        sent(done)
    }
}

impl Delivery for AmqpDelivery {
    fn message(&self) -> &Message {
        &self.message
    }
    async fn ack(&self) -> Result<(), String> {
        sent(self.inner.acker.ack(BasicAckOptions::default()).await)
    }
    async fn redeliver(&self, after: Duration, failed: bool) -> Result<(), String> {
        // AMQP has no delayed requeue: hold the delivery (it is not redelivered to anyone
        // while held), then requeue it; never past the broker's `consumer_timeout`, which
        // counts the handler's run too.
        tokio::time::sleep(hold(after, self.arrived.elapsed())).await;
        self.requeue(failed).await
    }
    async fn dead_letter(&self, _reason: &str) -> Result<(), String> {
        sent(
            self.inner
                .acker
                .reject(BasicRejectOptions { requeue: false })
                .await,
        )
    }
    async fn release(&self) -> Result<(), String> {
        self.requeue(false).await
    }
    fn progress_every(&self) -> Option<Duration> {
        None
    }
    async fn progress(&self) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
