//! The pull requests a [`JetStreamConsumer`](super::JetStreamConsumer) makes: one batch of
//! messages at a time, the next asked for once half the current one has arrived.
//!
//! Each request is its own [`pull::Batch`], with its own inbox, and ends when its last message
//! arrived or its time ran out. Nothing is counted across requests: a count of messages still
//! to come that spans requests (the client's continuous pull stream) can be left one too high
//! when a message overtakes the acknowledgement of its own request, and with a batch of one
//! that stops all pulling until the stream's 35-second timer.

use std::future::poll_fn;
use std::task::Poll;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{pull, PullConsumer};
use async_nats::jetstream::{self, AckKind};
use futures::{FutureExt, StreamExt};
use rerun_core::printable::escaped;

use crate::error::Error;

/// How long a pull request waits on the server for messages before it ends and is renewed.
/// A request the server lost (it restarted) is noticed by the client within this plus
/// 5 s, so this also bounds how long a consumer sits idle after its server comes back.
const PULL_EXPIRES: Duration = Duration::from_secs(10);

/// Consecutive failed requests after which the consumer gives up (about 10 s of them).
const MAX_ERRORS: u32 = 20;

/// Waited after a failed request before the next.
const ERROR_PAUSE: Duration = Duration::from_millis(500);

/// One pull request and the messages still to come on it.
struct Request {
    messages: pull::Batch,
    /// Messages asked for and not yet arrived.
    left: usize,
    /// Whether any message came on it.
    delivered: bool,
    /// When it was made.
    made: Instant,
}

/// The messages of a pull consumer, one request after the other.
pub(super) struct Pulls {
    consumer: PullConsumer,
    /// Messages asked for per request.
    batch: usize,
    /// How long each request waits on the server.
    expires: Duration,
    /// The request being read.
    current: Option<Request>,
    /// The request made ahead of it, once half of the current one has arrived.
    ahead: Option<Request>,
    /// Failed requests in a row.
    errors: u32,
}

impl Pulls {
    /// Requests of up to `max_in_flight` messages, within the consumer's own limits on a
    /// request (`max_batch`, `max_expires`), which the server enforces by refusing it.
    pub(super) fn new(consumer: PullConsumer, max_in_flight: usize) -> Pulls {
        let config = &consumer.cached_info().config;
        let mut batch = max_in_flight.max(1);
        if let Ok(limit @ 1..) = usize::try_from(config.max_batch) {
            batch = batch.min(limit);
        }
        let expires = if config.max_expires.is_zero() {
            PULL_EXPIRES
        } else {
            PULL_EXPIRES.min(config.max_expires)
        };
        Pulls {
            consumer,
            batch,
            expires,
            current: None,
            ahead: None,
            errors: 0,
        }
    }

    /// The next message; `Err` once requests have failed [`MAX_ERRORS`] times in a row (a
    /// request that ran its course, with or without messages, ends the row).
    pub(super) async fn next(&mut self) -> Result<jetstream::Message, Error> {
        loop {
            if self.current.is_none() {
                self.current = self.ahead.take();
            }
            // The current request, or once half of it has arrived the one ahead of it. With a
            // batch of one nothing is asked for ahead: a message waiting in the client's
            // buffer has its ack wait running while no handler can start on it.
            let missing = match &self.current {
                None => Some(Which::Current),
                Some(r) if self.batch > 1 && r.left <= self.batch / 2 && self.ahead.is_none() => {
                    Some(Which::Ahead)
                }
                Some(_) => None,
            };
            if let Some(which) = missing {
                match self.request().await {
                    Ok(request) => *self.slot(which) = Some(request),
                    Err(e) => {
                        self.failed("making a JetStream pull request", e).await?;
                        continue;
                    }
                }
            }
            let (which, item) = self.poll_both().await;
            let slot = self.slot(which);
            match item {
                Some(Ok(message)) => {
                    if let Some(request) = slot {
                        request.left = request.left.saturating_sub(1);
                        request.delivered = true;
                    }
                    self.errors = 0;
                    return Ok(message);
                }
                Some(Err(e)) => {
                    // A request the server refused or ended with an error status (the consumer
                    // was deleted, a leader changed) is over.
                    *slot = None;
                    self.failed("pulling JetStream messages", e).await?;
                }
                None => {
                    // Over: every message asked for came, or its time ran out. One that ended
                    // empty long before its time was cut (the connection closed, the server
                    // answered at once); in a row, those end the consumer.
                    let cut = slot
                        .take()
                        .is_some_and(|r| !r.delivered && r.made.elapsed() < self.expires / 2);
                    if cut {
                        self.failed(
                            "pulling JetStream messages",
                            "the pull request ended at once",
                        )
                        .await?;
                    } else {
                        self.errors = 0;
                    }
                }
            }
        }
    }

    /// The place of the request `which` names.
    fn slot(&mut self, which: Which) -> &mut Option<Request> {
        match which {
            Which::Current => &mut self.current,
            Which::Ahead => &mut self.ahead,
        }
    }

    /// A new request for a batch.
    async fn request(&self) -> Result<Request, pull::BatchError> {
        let made = Instant::now();
        let messages = self
            .consumer
            .batch()
            .max_messages(self.batch)
            .expires(self.expires)
            .messages()
            .await?;
        Ok(Request {
            messages,
            left: self.batch,
            delivered: false,
            made,
        })
    }

    /// The next thing to come on either request, the current one first.
    async fn poll_both(
        &mut self,
    ) -> (Which, Option<Result<jetstream::Message, async_nats::Error>>) {
        let (current, ahead) = (&mut self.current, &mut self.ahead);
        poll_fn(|cx| {
            if let Some(request) = current {
                if let Poll::Ready(item) = request.messages.poll_next_unpin(cx) {
                    return Poll::Ready((Which::Current, item));
                }
            }
            if let Some(request) = ahead {
                if let Poll::Ready(item) = request.messages.poll_next_unpin(cx) {
                    return Poll::Ready((Which::Ahead, item));
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Counts a failure and pauses; the error once there were too many in a row.
    async fn failed(
        &mut self,
        doing: &'static str,
        error: impl std::fmt::Display,
    ) -> Result<(), Error> {
        self.errors += 1;
        tracing::warn!(error = %escaped(&error.to_string()), "rerun-queue: JetStream pull error");
        if self.errors >= MAX_ERRORS {
            return Err(Error::broker(doing, error));
        }
        tokio::time::sleep(ERROR_PAUSE).await;
        Ok(())
    }

    /// Ends the requests; messages already in the client's buffer are handed back at once
    /// (`-NAK`), those still on their way come back after their ack wait.
    pub(super) async fn stop(self) {
        for mut request in [self.current, self.ahead].into_iter().flatten() {
            while let Some(Some(Ok(message))) = request.messages.next().now_or_never() {
                if let Err(e) = message.ack_with(AckKind::Nak(None)).await {
                    tracing::debug!(error = %escaped(&e.to_string()), "rerun-queue: handing back a fetched message failed; it comes back after its ack wait");
                }
            }
        }
    }
}

/// Which request something came on.
#[derive(Clone, Copy)]
enum Which {
    Current,
    Ahead,
}

#[cfg(test)]
mod tests;
