//! The pull requests a [`JetStreamConsumer`](super::JetStreamConsumer) makes: at most two at a
//! time, each for no more messages than handlers are free to take.
//!
//! Each request is its own [`pull::Batch`], with its own inbox, and ends when its last message
//! arrived or its time ran out. Nothing is counted across requests: a count of messages still
//! to come that spans requests (the client's continuous pull stream) can be left one too high
//! when a message overtakes the acknowledgement of its own request, and with a batch of one
//! that stops all pulling until the stream's 35-second timer.
//!
//! A message must not wait in a request's buffer while every handler is busy: nothing reads
//! the request then, and once its timer (its wait plus 5 s) has run out the client ends it at
//! the next read, dropping what it holds unread. The server redelivers those only after their
//! ack wait, each counted as a delivery more. So the messages asked for and not yet handed
//! out never outnumber the handlers free to take them (see [`Pulls::next`]).

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

/// Consecutive failed requests after which the consumer gives up: about 70 s of them with
/// [`error_pause`], which outlasts a cluster's leader election and a restart of the server
/// holding a consumer of one replica (each answers every request with an error meanwhile).
const MAX_ERRORS: u32 = 20;

/// Waited after the `errors`th failed request in a row before the next: 500 ms, doubling up
/// to 4 s.
fn error_pause(errors: u32) -> Duration {
    Duration::from_millis(500) * (1u32 << errors.saturating_sub(1).min(3))
}

/// One pull request and the messages still to come on it.
struct Request {
    messages: pull::Batch,
    /// Messages asked for and not yet handed out: still to come, or waiting in the client.
    left: usize,
    /// Whether any message came on it.
    delivered: bool,
    /// When it was made.
    made: Instant,
}

/// The messages of a pull consumer, one request after the other.
pub(super) struct Pulls {
    consumer: PullConsumer,
    /// The most messages asked for in one request.
    batch: usize,
    /// How long each request waits on the server.
    expires: Duration,
    /// The request being read.
    current: Option<Request>,
    /// The request made while the current one still has messages to come.
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

    /// The next message, for a caller whose handlers could start on `free` messages now (the
    /// one asked for included); `Err` once requests have failed [`MAX_ERRORS`] times in a row
    /// (a request that ran its course, with or without messages, ends the row).
    ///
    /// The messages asked for and not yet handed out, the one this call hands out included,
    /// are never more than `free`. So when this returns, those left are no more than the
    /// handlers still free; the free handlers only grow until the next call (handlers
    /// finish; only the caller takes them); and the caller calls again while one is free.
    /// Whenever a message is on its way or waiting in the client, a caller is therefore
    /// reading, and none is left in a request's buffer for its timer to drop.
    pub(super) async fn next(&mut self, free: usize) -> Result<jetstream::Message, Error> {
        loop {
            if self.current.is_none() {
                self.current = self.ahead.take();
            }
            if let Some(count) = self.to_ask(free) {
                let which = match self.current {
                    None => Which::Current,
                    Some(_) => Which::Ahead,
                };
                match self.request(count).await {
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

    /// How many messages to ask for now, if a request is worth making: as many as handlers
    /// are free (`free`) beyond the messages still to come, within a batch. With none to
    /// come, any number; otherwise only once the request being read has half a batch or
    /// less to come (the server hands messages to its requests in turn, so the sooner the
    /// next one is made, the more the two interleave), and for half a batch or more, so
    /// that requests stay few. Two requests at a time at most.
    fn to_ask(&self, free: usize) -> Option<usize> {
        if self.ahead.is_some() {
            return None;
        }
        let half = (self.batch / 2).max(1);
        let coming = self.current.as_ref().map_or(0, |r| r.left);
        if coming > self.batch / 2 {
            return None;
        }
        // At least the message this call hands out.
        let room = free.max(1).saturating_sub(coming).min(self.batch);
        let worth = if coming == 0 { 1 } else { half };
        (room >= worth).then_some(room)
    }

    /// The place of the request `which` names.
    fn slot(&mut self, which: Which) -> &mut Option<Request> {
        match which {
            Which::Current => &mut self.current,
            Which::Ahead => &mut self.ahead,
        }
    }

    /// A new request for `count` messages.
    async fn request(&self, count: usize) -> Result<Request, pull::BatchError> {
        let made = Instant::now();
        let messages = self
            .consumer
            .batch()
            .max_messages(count)
            .expires(self.expires)
            .messages()
            .await?;
        Ok(Request {
            messages,
            left: count,
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
        tokio::time::sleep(error_pause(self.errors)).await;
        Ok(())
    }

    /// Ends the requests; messages already in the client's buffer are handed back at once
    /// (`-NAK`), those still on their way come back after their ack wait.
    pub(super) async fn stop(&mut self) {
        for mut request in [self.current.take(), self.ahead.take()]
            .into_iter()
            .flatten()
        {
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
