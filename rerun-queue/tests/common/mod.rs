//! The brokers of the tests: a unique stream or queue per test, publishing, counting what is
//! left and what was dead-lettered, and deleting it all afterwards, even when the test panics
//! (the rig and [`Leftovers`] clean up when dropped).
#![allow(dead_code)]

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeleteOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use rerun_queue::{Handler, Report, Settings};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broker {
    Nats,
    Amqp,
}

impl Broker {
    pub fn name(self) -> &'static str {
        match self {
            Broker::Nats => "nats",
            Broker::Amqp => "amqp",
        }
    }
    pub fn parse(s: &str) -> Broker {
        if s == "amqp" {
            Broker::Amqp
        } else {
            Broker::Nats
        }
    }
    fn url_var(self) -> &'static str {
        match self {
            Broker::Nats => "RERUN_TEST_NATS_URL",
            Broker::Amqp => "RERUN_TEST_AMQP_URL",
        }
    }
    /// The broker's URL, or `None` (with a notice) when its variable is unset.
    pub fn url(self) -> Option<String> {
        rerun_core::testing::service_url(self.url_var())
    }
}

/// A name no other test, process or run uses.
pub fn unique(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "rq_{tag}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// One test's stream (NATS) or queue (AMQP), its dead letters, and a connection to it.
pub struct Rig {
    pub broker: Broker,
    pub url: String,
    pub name: String,
    pub ack_wait: Duration,
    nats: Option<jetstream::Context>,
    amqp: Option<(Connection, Channel)>,
    /// Whether dropping the rig deletes its stream or queues (the rig that created them).
    owns: bool,
    cleaned: AtomicBool,
}

impl Rig {
    /// Creates `name`'s stream or queue (ack wait 2 s on NATS).
    pub async fn create(broker: Broker, url: &str, name: &str) -> Rig {
        Rig::create_with(broker, url, name, Duration::from_secs(2)).await
    }

    pub async fn create_with(broker: Broker, url: &str, name: &str, ack_wait: Duration) -> Rig {
        let mut rig = Rig::open(broker, url, name).await;
        rig.ack_wait = ack_wait;
        rig.owns = true;
        match broker {
            Broker::Nats => {
                let js = rig.js();
                js.get_or_create_stream(stream::Config {
                    name: name.to_owned(),
                    subjects: vec![format!("{name}.in")],
                    ..Default::default()
                })
                .await
                .expect("creating the stream");
                js.get_or_create_stream(stream::Config {
                    name: format!("{name}_dead"),
                    subjects: vec![format!("{name}.dead")],
                    ..Default::default()
                })
                .await
                .expect("creating the dead-letter stream");
                let s = js.get_stream(name).await.expect("stream");
                s.create_consumer(pull::Config {
                    durable_name: Some(name.to_owned()),
                    ack_wait,
                    ..Default::default()
                })
                .await
                .expect("creating the consumer");
            }
            Broker::Amqp => {
                rerun_queue::amqp::declare_queue(rig.channel(), name)
                    .await
                    .expect("declaring the queue");
            }
        }
        rig
    }

    /// Connects to an existing rig's broker (in a child process).
    pub async fn open(broker: Broker, url: &str, name: &str) -> Rig {
        let mut rig = Rig {
            broker,
            url: url.to_owned(),
            name: name.to_owned(),
            ack_wait: Duration::from_secs(2),
            nats: None,
            amqp: None,
            owns: false,
            cleaned: AtomicBool::new(false),
        };
        match broker {
            Broker::Nats => {
                let client = async_nats::connect(url).await.expect("connecting to NATS");
                rig.nats = Some(jetstream::new(client));
            }
            Broker::Amqp => {
                let conn = Connection::connect(url, ConnectionProperties::default())
                    .await
                    .expect("connecting to RabbitMQ");
                let channel = conn.create_channel().await.expect("channel");
                channel
                    .confirm_select(ConfirmSelectOptions::default())
                    .await
                    .expect("confirms");
                rig.amqp = Some((conn, channel));
            }
        }
        rig
    }

    pub fn js(&self) -> &jetstream::Context {
        self.nats.as_ref().expect("a NATS rig")
    }

    pub fn channel(&self) -> &Channel {
        &self.amqp.as_ref().expect("an AMQP rig").1
    }

    /// Publishes `body` with the broker message id `id`, and waits for the broker to store it.
    pub async fn publish(&self, body: &[u8], id: Option<&str>) {
        match self.broker {
            Broker::Nats => {
                let mut headers = async_nats::HeaderMap::new();
                if let Some(id) = id {
                    headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
                }
                self.js()
                    .publish_with_headers(
                        format!("{}.in", self.name),
                        headers,
                        body.to_vec().into(),
                    )
                    .await
                    .expect("publish")
                    .await
                    .expect("publish ack");
            }
            Broker::Amqp => {
                let mut props = BasicProperties::default().with_delivery_mode(2);
                if let Some(id) = id {
                    props = props.with_message_id(id.into());
                }
                self.channel()
                    .basic_publish("", &self.name, BasicPublishOptions::default(), body, props)
                    .await
                    .expect("publish")
                    .await
                    .expect("publish confirm");
            }
        }
    }

    /// Publishes many bodies, waiting for all the broker's confirmations at the end.
    pub async fn publish_all(&self, items: &[(Vec<u8>, Option<String>)]) {
        match self.broker {
            Broker::Nats => {
                let mut acks = Vec::with_capacity(items.len());
                for (body, id) in items {
                    let mut headers = async_nats::HeaderMap::new();
                    if let Some(id) = id {
                        headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
                    }
                    acks.push(
                        self.js()
                            .publish_with_headers(
                                format!("{}.in", self.name),
                                headers,
                                body.clone().into(),
                            )
                            .await
                            .expect("publish"),
                    );
                }
                for ack in acks {
                    ack.await.expect("publish ack");
                }
            }
            Broker::Amqp => {
                let mut confirms = Vec::with_capacity(items.len());
                for (body, id) in items {
                    let mut props = BasicProperties::default().with_delivery_mode(2);
                    if let Some(id) = id {
                        props = props.with_message_id(id.as_str().into());
                    }
                    confirms.push(
                        self.channel()
                            .basic_publish(
                                "",
                                &self.name,
                                BasicPublishOptions::default(),
                                body,
                                props,
                            )
                            .await
                            .expect("publish"),
                    );
                }
                for c in confirms {
                    c.await.expect("publish confirm");
                }
            }
        }
    }

    /// Runs a consumer of the rig with `handler` until `stop` resolves.
    pub async fn consume<H: Handler>(
        &self,
        handler: H,
        settings: Settings,
        stop: impl Future<Output = ()> + Send,
    ) -> Report {
        match self.broker {
            Broker::Nats => {
                let s = self.js().get_stream(&self.name).await.expect("stream");
                let consumer: jetstream::consumer::PullConsumer =
                    s.get_consumer(&self.name).await.expect("consumer");
                rerun_queue::nats::JetStreamConsumer::new(consumer, handler)
                    .settings(settings)
                    .dead_letter_subject(self.js().clone(), format!("{}.dead", self.name))
                    .run(stop)
                    .await
                    .expect("consumer run")
            }
            Broker::Amqp => {
                // Its own channel, as a consumer process would have.
                let (conn, _) = self.amqp.as_ref().expect("an AMQP rig");
                let channel = conn.create_channel().await.expect("channel");
                let report =
                    rerun_queue::amqp::AmqpConsumer::new(channel.clone(), &self.name, handler)
                        .settings(settings)
                        .run(stop)
                        .await
                        .expect("consumer run");
                let _ = channel.close(200, "done").await;
                report
            }
        }
    }

    /// Messages not yet acked: pending and in flight (NATS); ready (AMQP: unacked ones count
    /// only once their consumer's channel is gone).
    pub async fn outstanding(&self) -> u64 {
        match self.broker {
            Broker::Nats => {
                let s = self.js().get_stream(&self.name).await.expect("stream");
                let mut c: jetstream::consumer::PullConsumer =
                    s.get_consumer(&self.name).await.expect("consumer");
                let info = c.info().await.expect("consumer info");
                info.num_pending + info.num_ack_pending as u64
            }
            Broker::Amqp => self.queue_count(&self.name).await,
        }
    }

    /// Messages dead-lettered.
    pub async fn dead_letters(&self) -> u64 {
        match self.broker {
            Broker::Nats => {
                let mut s = self
                    .js()
                    .get_stream(format!("{}_dead", self.name))
                    .await
                    .expect("dead stream");
                s.info().await.expect("stream info").state.messages
            }
            Broker::Amqp => self.queue_count(&format!("{}.dead", self.name)).await,
        }
    }

    async fn queue_count(&self, queue: &str) -> u64 {
        let q = self
            .channel()
            .queue_declare(
                queue,
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("passive declare");
        u64::from(q.message_count())
    }

    /// Deletes the streams, or the queues and exchange (dropping the rig does it otherwise).
    pub async fn cleanup(&self) {
        self.cleaned.store(true, Ordering::SeqCst);
        match self.broker {
            Broker::Nats => delete_streams(self.js(), &self.name).await,
            Broker::Amqp => delete_queues(self.channel(), &self.name).await,
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if !self.owns || self.cleaned.load(Ordering::SeqCst) {
            return;
        }
        let (broker, url, name) = (self.broker, self.url.clone(), self.name.clone());
        on_own_runtime(async move {
            match broker {
                Broker::Nats => {
                    if let Ok(client) = async_nats::connect(&url).await {
                        delete_streams(&jetstream::new(client), &name).await;
                    }
                }
                Broker::Amqp => {
                    let Ok(conn) = Connection::connect(&url, ConnectionProperties::default()).await
                    else {
                        return;
                    };
                    if let Ok(ch) = conn.create_channel().await {
                        delete_queues(&ch, &name).await;
                    }
                    let _ = conn.close(200, "cleaned up").await;
                }
            }
        });
    }
}

async fn delete_streams(js: &jetstream::Context, name: &str) {
    let _ = js.delete_stream(name).await;
    let _ = js.delete_stream(format!("{name}_dead")).await;
}

async fn delete_queues(ch: &Channel, name: &str) {
    let _ = ch.queue_delete(name, QueueDeleteOptions::default()).await;
    let _ = ch
        .queue_delete(&format!("{name}.dead"), QueueDeleteOptions::default())
        .await;
    let _ = ch
        .exchange_delete(&format!("{name}.dlx"), ExchangeDeleteOptions::default())
        .await;
}

/// Runs `work` to completion on a runtime of its own in a thread of its own, so a `Drop` can
/// clean up from inside a test's runtime, panicking or not; failures are ignored.
pub fn on_own_runtime<F: Future<Output = ()> + Send + 'static>(work: F) {
    let thread = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(async move {
                let _ = tokio::time::timeout(Duration::from_secs(10), work).await;
            });
        }
    });
    let _ = thread.join();
}

/// What a test created outside the brokers, removed when dropped (also while panicking): a
/// PostgreSQL schema, with CASCADE, so a store's table, meta table and fence sequence and the
/// application's tables in it all go, and the Redis keys under a prefix.
#[derive(Default)]
pub struct Leftovers {
    /// PostgreSQL URL and schema.
    pub schema: Option<(String, String)>,
    /// Redis URL and key prefix.
    pub redis: Option<(String, String)>,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        if let Some((url, schema)) = self.schema.take() {
            on_own_runtime(async move {
                if let Ok((client, conn)) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                {
                    tokio::spawn(conn);
                    let _ = client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                        .await;
                }
            });
        }
        if let Some((url, prefix)) = self.redis.take() {
            let script = format!(
                "redis-cli -u '{url}' --scan --pattern '{prefix}*' | xargs -r redis-cli -u '{url}' DEL > /dev/null"
            );
            let _ = std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .status();
        }
    }
}

/// Waits until `check` holds, polling every 50 ms, at most `limit`.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
