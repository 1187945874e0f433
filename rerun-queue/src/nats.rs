//! NATS JetStream (feature `nats`): a pull consumer whose messages run through rerun.
//!
//! | rerun says | the consumer sends |
//! |---|---|
//! | recorded (ran or replayed) | `+ACK` |
//! | `InProgress`, a retryable error, a panic in the handler | `-NAK` with a delay (the policy's in-progress delay, or its backoff) |
//! | mismatch, corrupt, non-retryable, undecodable, unknown outcome | `+TERM` (the server's terminated-message advisory follows), after a copy went to the dead-letter subject if one is set; if the copy cannot be stored, `-NAK` with the policy's backoff instead, to be dead-lettered on a later delivery |
//! | the handler is still running | `+WPI` (in progress) every third of the consumer's `ack_wait` |
//!
//! The message id is the `Nats-Msg-Id` header; the attempt is the consumer's delivery count.
//! A dead-lettered copy's own `Nats-Msg-Id` names the message's stream, sequence and time of
//! storing: a message that comes back after its copy was stored (the consumer died, or its
//! `+TERM` was lost) is dead-lettered again, and the dead-letter stream drops the second copy
//! as a duplicate within its duplicate window (see
//! [`JetStreamConsumer::dead_letter_subject`]).
//! Leave the consumer's `max_deliver` unlimited (the default) and let [`Policy`](crate::Policy)
//! decide when a failing message is given up: a limit the server would reach first (it stops
//! delivering the message without a trace) is refused when the consumer starts.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer};
use async_nats::jetstream::{self, AckKind};
use rerun_core::printable::escaped;

use crate::error::Error;
use crate::handler::Handler;
use crate::message::Message;
use crate::runner::{self, Delivery, Source};
use crate::settings::{Report, Settings};

mod pull;
use pull::Pulls;

/// The header holding the broker's message id.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";
/// The header a dead-lettered copy carries with the reason it was given up.
pub const DEAD_REASON_HEADER: &str = "Rerun-Dead-Letter-Reason";
/// The header a dead-lettered copy carries with the subject it came from.
pub const DEAD_SUBJECT_HEADER: &str = "Rerun-Dead-Letter-Subject";
/// The header a dead-lettered copy carries with the original's message id (its own
/// [`MSG_ID_HEADER`] names the dead letter, see [`JetStreamConsumer::dead_letter_subject`]): a
/// tool that publishes a copy back to be run again restores the original's id from it, or the
/// message runs under a new key.
pub const DEAD_MSG_ID_HEADER: &str = "Rerun-Dead-Letter-Msg-Id";
/// The header a dead-lettered copy carries when it was stored without the message's body,
/// with the body's size in bytes: with the dead-letter headers added, the message was larger
/// than the server's `max_payload`. The copy's own [`MSG_ID_HEADER`] names the original's
/// stream and sequence, where a stream that keeps messages by its limits still holds the body
/// (see [`JetStreamConsumer::dead_letter_subject`]).
pub const DEAD_BODY_OMITTED_HEADER: &str = "Rerun-Dead-Letter-Body-Omitted";

/// A JetStream pull consumer that runs every message through a rerun [`Handler`].
///
/// ```no_run
/// use std::sync::Arc;
/// use async_nats::jetstream::{self, consumer::pull};
/// use rerun_core::{Idempotent, MemoryStore};
/// use rerun_queue::{handler, nats::JetStreamConsumer, shutdown, Settings};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Idempotent)]
/// #[rerun(scope = "shop.order_created")]
/// struct OrderCreated { #[rerun(key)] order_id: String, cents: u64 }
///
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let client = async_nats::connect("nats://127.0.0.1:4222").await?;
/// let js = jetstream::new(client);
/// let stream = js.get_stream("ORDERS").await?;
/// let consumer = stream
///     .get_or_create_consumer("billing", pull::Config {
///         durable_name: Some("billing".into()),
///         ..Default::default()
///     })
///     .await?;
/// let store = Arc::new(MemoryStore::new());
/// let report = JetStreamConsumer::new(consumer, handler::typed(store, |o: OrderCreated| async move {
///         Ok::<_, rerun_core::Error>(o.cents)
///     }))
///     .settings(Settings::new().max_in_flight(32))
///     // Kept by a stream of its own (`ORDERS_DEAD`), so this consumer never reads its copies.
///     .dead_letter_subject(js.clone(), "ORDERS_DEAD.orders")
///     .run(shutdown::terminated())
///     .await?;
/// println!("{} acked", report.acked());
/// # Ok(()) }
/// ```
pub struct JetStreamConsumer<H: ?Sized> {
    consumer: PullConsumer,
    settings: Settings,
    dead_letter: Option<(jetstream::Context, String)>,
    handler: Arc<H>,
}

impl<H: Handler> JetStreamConsumer<H> {
    /// A consumer of `consumer`'s messages, run through `handler`.
    pub fn new(consumer: PullConsumer, handler: H) -> JetStreamConsumer<H> {
        JetStreamConsumer::shared(consumer, Arc::new(handler))
    }
}

impl<H: Handler + ?Sized> JetStreamConsumer<H> {
    /// A consumer with a handler shared with other consumers.
    pub fn shared(consumer: PullConsumer, handler: Arc<H>) -> JetStreamConsumer<H> {
        JetStreamConsumer {
            consumer,
            settings: Settings::new(),
            dead_letter: None,
            handler,
        }
    }

    /// Concurrency, ack policy and shutdown grace.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Before terminating a message, publish a copy to `subject` (through `js`, so a stream
    /// capturing it stores it), with the headers [`DEAD_REASON_HEADER`],
    /// [`DEAD_SUBJECT_HEADER`] and [`DEAD_MSG_ID_HEADER`]. Without it, a terminated message
    /// stays in its stream and the server's `MSG_TERMINATED` advisory (servers from 2.10)
    /// names it.
    ///
    /// The reason header has its control characters escaped and is cut to 1 KiB. A message
    /// whose copy cannot be stored (no stream captures `subject`, the stream is full) is not
    /// terminated: it is redelivered after the policy's backoff and dead-lettered again. A
    /// message too large for the server with these headers added (its `max_payload`) is
    /// copied without its body, and the copy says so in [`DEAD_BODY_OMITTED_HEADER`].
    ///
    /// The copy's own [`MSG_ID_HEADER`] names the message's stream, sequence and time of
    /// storing, the same for every delivery of it. A message that comes back after its copy
    /// was stored (the consumer died before its `+TERM`, or the `+TERM` was lost) is
    /// dead-lettered again, and the dead-letter stream drops the second copy as a duplicate if
    /// it arrives within the stream's duplicate window (2 minutes by default). Outside the
    /// window a second copy is kept: set the window longer than a message takes to come back
    /// and fail again (the consumer's `ack_wait`, plus the time no consumer runs, plus the
    /// handler's own run).
    ///
    /// Keep `subject` out of what this consumer reads (a stream of its own, or a filter that
    /// leaves it out). A copy that reaches it anyway on `subject` and fails again (it carries
    /// [`DEAD_REASON_HEADER`]) is terminated without another copy, logged at `warn`, so a
    /// message never loops through its own copies.
    pub fn dead_letter_subject(
        mut self,
        js: jetstream::Context,
        subject: impl Into<String>,
    ) -> Self {
        self.dead_letter = Some((js, subject.into()));
        self
    }

    /// Consumes until `shutdown` resolves (e.g. [`crate::shutdown::terminated`]): then stops
    /// fetching, lets handlers in flight finish within the grace period, naks what is left
    /// so it is redelivered at once, waits up to 2 s for the last acks to leave the client,
    /// and returns what it did.
    ///
    /// A consumer whose `ack_policy` is not [`AckPolicy::Explicit`] (the default) is refused
    /// with [`Error::Config`]: under `All` an ack would settle earlier messages whose handlers
    /// are still running, under `None` a message whose handler failed would never come back.
    /// So is one whose `max_deliver` the server reaches at or before the policy's
    /// [`delivery_limit`](crate::Policy::delivery_limit): the server would stop delivering a
    /// failing message without a dead letter.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<Report, Error> {
        let info = self.consumer.cached_info();
        if info.config.ack_policy != AckPolicy::Explicit {
            return Err(Error::Config(format!(
                "the JetStream consumer {} has ack_policy {:?}; rerun-queue settles each message \
                 on its own, which needs AckPolicy::Explicit (the default): create the consumer \
                 with ack_policy: AckPolicy::Explicit",
                escaped(&info.name),
                info.config.ack_policy
            )));
        }
        // A server limit on deliveries reached at or before the policy's: the server stops
        // delivering a message that keeps failing, without a dead letter or a `warn`, and it
        // stays in the stream undelivered for ever.
        let max_deliver = info.config.max_deliver;
        let limit = self.settings.policy.delivery_limit();
        if max_deliver > 0 && limit.is_none_or(|n| i64::from(n) >= max_deliver) {
            return Err(Error::Config(format!(
                "the JetStream consumer {} has max_deliver {max_deliver}, which the server reaches \
                 at or before the delivery on which the policy dead-letters a failing message \
                 ({}): the server would stop delivering it without a trace; create the \
                 consumer with max_deliver unset (unlimited), and let Policy::max_deliveries \
                 decide",
                escaped(&info.name),
                match limit {
                    Some(n) => format!("on delivery {n}"),
                    None => "never".to_owned(),
                }
            )));
        }
        let ack_wait = info.config.ack_wait;
        // A third of the ack wait leaves two chances for a progress signal to arrive in time.
        let progress_every = if ack_wait.is_zero() {
            Duration::from_secs(10)
        } else {
            ack_wait / 3
        };
        let source = Pull {
            pulls: Pulls::new(self.consumer, self.settings.max_in_flight),
            progress_every,
            dead_letter: self.dead_letter.map(Arc::new),
            client: None,
        };
        runner::run(source, self.handler, self.settings, shutdown).await
    }
}

/// The longest [`JetStreamConsumer::run`] waits, once its handlers are done, for the acks they
/// sent to leave the client.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

struct Pull {
    pulls: Pulls,
    progress_every: Duration,
    dead_letter: Option<Arc<(jetstream::Context, String)>>,
    /// The client the messages came through, which sends their acks.
    client: Option<async_nats::Client>,
}

impl Source for Pull {
    type Delivery = JsDelivery;

    async fn next(&mut self, free: usize) -> Option<Result<JsDelivery, Error>> {
        let next = self.pulls.next(free).await.map(|m| {
            if self.client.is_none() {
                self.client = Some(m.context.client());
            }
            JsDelivery::new(m, self.progress_every, self.dead_letter.clone())
        });
        Some(next)
    }

    async fn stop(&mut self) {
        self.pulls.stop().await;
    }

    async fn finish(self) {
        // An ack is queued in the client and written by its connection task later: an
        // application that exits as soon as `run` returns would lose the last ones, and their
        // messages would run again after their ack wait.
        let Some(client) = self.client else {
            return;
        };
        match tokio::time::timeout(FLUSH_WAIT, client.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %escaped(&e.to_string()), "rerun-queue: could not flush the last acks; their messages come back after their ack wait")
            }
            Err(_) => {
                tracing::warn!(wait = ?FLUSH_WAIT, "rerun-queue: the last acks did not leave the client in time; their messages may come back after their ack wait")
            }
        }
    }
}

/// The longest `-NAK` delay sent: 100 years. The server reads the delay as a signed 64-bit count
/// of nanoseconds (292 years) and takes a longer one (a backoff of `Duration::MAX`) as no delay
/// at all, so the message would come straight back; it also adds the delay to the present in
/// nanoseconds since 1970, which 100 years from now still fits.
const MAX_NAK_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The most bytes of a reason a dead-lettered copy's header carries.
const MAX_REASON_BYTES: usize = 1024;

/// `value` as a header value: control characters and line separators escaped (the client
/// writes header values as they are, so a CR LF in a reason would end its header and start
/// another, such as a `Nats-Msg-Id` that makes the dead-letter stream drop the copy as a
/// duplicate), and cut to [`MAX_REASON_BYTES`] on a character boundary.
fn header_value(value: &str) -> String {
    const CUT: &str = "...";
    // Escaping only lengthens: what lies past the cap's worth of input is cut anyway.
    let mut take = value.len().min(MAX_REASON_BYTES);
    while !value.is_char_boundary(take) {
        take -= 1;
    }
    let mut out = escaped(&value[..take]).into_owned();
    if take < value.len() || out.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES - CUT.len();
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str(CUT);
    }
    out
}

/// The bytes `headers` take on the wire, which the server counts toward its `max_payload`:
/// the version line, a `name: value` line a value, and the blank line that ends them.
fn headers_len(headers: &async_nats::HeaderMap) -> usize {
    const VERSION_LINE: usize = "NATS/1.0\r\n".len();
    const END: usize = "\r\n".len();
    let lines: usize = headers
        .iter()
        .flat_map(|(name, values)| {
            let name: &str = name.as_ref();
            values
                .iter()
                .map(move |value| name.len() + ": ".len() + value.as_str().len() + END)
        })
        .sum();
    VERSION_LINE + lines + END
}

/// The `Nats-Msg-Id` of a message's dead-lettered copy: the stream, the message's sequence in
/// it and when the stream stored it. Every delivery of one message gives the same id, and no
/// other message's copy has it; so when a message comes back after its copy was stored (its
/// `+TERM` was lost, or the consumer died between the two), the dead-letter stream drops the
/// second copy as a duplicate within its duplicate window (see
/// [`JetStreamConsumer::dead_letter_subject`]).
fn dead_letter_id(info: &jetstream::message::Info<'_>) -> String {
    format!(
        "rerun-dead-letter:{}:{}:{}",
        info.stream,
        info.stream_sequence,
        info.published.unix_timestamp_nanos()
    )
}

struct JsDelivery {
    inner: jetstream::Message,
    message: Message,
    progress_every: Duration,
    dead_letter: Option<Arc<(jetstream::Context, String)>>,
}

impl JsDelivery {
    fn new(
        inner: jetstream::Message,
        progress_every: Duration,
        dead_letter: Option<Arc<(jetstream::Context, String)>>,
    ) -> JsDelivery {
        let mut message = Message::new(inner.subject.to_string(), inner.payload.clone());
        // Looked up by the standard name: a header parsed off the wire is keyed by it, and a
        // lookup by the string would miss it.
        let id = inner
            .headers
            .as_ref()
            .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID));
        if let Some(id) = id {
            message = message.with_id(id.as_str());
        }
        if let Ok(info) = inner.info() {
            message = message.with_attempt(u32::try_from(info.delivered).unwrap_or(u32::MAX));
        }
        JsDelivery {
            inner,
            message,
            progress_every,
            dead_letter,
        }
    }

    async fn send(&self, kind: AckKind) -> Result<(), String> {
        self.inner.ack_with(kind).await.map_err(|e| e.to_string())
    }

    /// Stores the message's copy on the dead-letter subject, if one is set.
    async fn store_copy(&self, reason: &str) -> Result<(), String> {
        let Some(target) = &self.dead_letter else {
            return Ok(());
        };
        let (js, subject) = &**target;
        // A copy that failed again where it was put (its consumer reads the dead-letter
        // subject too) is terminated there: copying it again would feed the consumer its own
        // copies. A copy sent back to be run again (another subject) is copied as any message.
        let is_own_copy = self.message.subject() == subject.as_str()
            && self
                .inner
                .headers
                .as_ref()
                .is_some_and(|h| h.get(DEAD_REASON_HEADER).is_some());
        if is_own_copy {
            tracing::warn!(
                message = %self.message.describe(),
                "rerun-queue: a dead-lettered copy failed again; it is terminated without another copy (read the dead-letter subject from a stream or consumer of its own)"
            );
            return Ok(());
        }
        // The copy's `Nats-Msg-Id` names this message's place in its stream, never the
        // original's id (the dead-letter stream may be the original's own, and must not
        // drop the copy as a duplicate of it). The id and the subject came off the wire as
        // a header and a subject, which hold no line breaks; the reason may quote the body
        // (a decoding error does), so it is escaped.
        let mut headers = async_nats::HeaderMap::new();
        match self.inner.info() {
            Ok(info) => {
                headers.insert(async_nats::header::NATS_MESSAGE_ID, dead_letter_id(&info));
            }
            Err(e) => tracing::debug!(
                message = %self.message.describe(),
                error = %escaped(&e.to_string()),
                "rerun-queue: no JetStream metadata; the dead-lettered copy has no id of its own"
            ),
        }
        if let Some(id) = self.message.id() {
            headers.insert(DEAD_MSG_ID_HEADER, id);
        }
        headers.insert(DEAD_REASON_HEADER, header_value(reason));
        headers.insert(DEAD_SUBJECT_HEADER, self.message.subject());
        // The server closes the connection of a client that publishes more than its
        // `max_payload` (headers and body), and the copy, never stored, would be tried again
        // on every delivery. The copy's headers are not the original's, so a body that fit
        // may not fit any more: such a copy goes without it.
        let max_payload = js.client().server_info().max_payload;
        let mut body = self.inner.payload.clone();
        if max_payload > 0 && headers_len(&headers).saturating_add(body.len()) > max_payload {
            tracing::warn!(
                message = %self.message.describe(),
                bytes = body.len(),
                max_payload,
                "rerun-queue: the message with the dead-letter headers is larger than the server takes; its copy is stored without the body"
            );
            headers.insert(DEAD_BODY_OMITTED_HEADER, body.len().to_string());
            body = bytes::Bytes::new();
            if headers_len(&headers) > max_payload {
                return Err(format!(
                    "the dead-letter headers alone are larger than the server's max_payload ({max_payload} bytes)"
                ));
            }
        }
        let published = js
            .publish_with_headers(subject.clone(), headers, body)
            .await
            .map_err(|e| e.to_string())?;
        published.await.map_err(|e| e.to_string())?;
        Ok(())
    }
}

impl Delivery for JsDelivery {
    fn message(&self) -> &Message {
        &self.message
    }
    async fn ack(&self) -> Result<(), String> {
        self.send(AckKind::Ack).await
    }
    async fn redeliver(&self, after: Duration, _failed: bool) -> Result<(), String> {
        self.send(AckKind::Nak(Some(after.min(MAX_NAK_DELAY))))
            .await
    }
    async fn dead_letter(&self, reason: &str) -> Result<(), String> {
        // Terminated only once the copy is stored: a crash in between redelivers it, and the
        // copy's id keeps the next delivery's copy out of the dead-letter stream.
        self.store_copy(reason).await?;
        self.send(AckKind::Term).await
    }
    async fn release(&self) -> Result<(), String> {
        self.send(AckKind::Nak(None)).await
    }
    fn progress_every(&self) -> Option<Duration> {
        Some(self.progress_every)
    }
    async fn progress(&self) -> Result<(), String> {
        self.send(AckKind::Progress).await
    }
}

#[cfg(test)]
mod tests;
