//! The consumer loop both adapters share: bounded handlers in flight, the ack policy, lease
//! keep-alive towards the broker, and graceful shutdown.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use rerun_core::printable::escaped;
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinError, JoinSet};

use crate::error::Error;
use crate::failure::{Failure, FailureKind, Handled};
use crate::handler::Handler;
use crate::message::Message;
use crate::policy::Action;
use crate::settings::{Report, Settings};

/// One delivery, as a broker adapter settles it.
pub(crate) trait Delivery: Send + Sync + 'static {
    /// The message.
    fn message(&self) -> &Message;
    /// Acknowledges the delivery.
    fn ack(&self) -> impl Future<Output = Result<(), String>> + Send;
    /// Hands the message back, to come again after `after` (returns once it is handed back,
    /// which for a broker without delayed redelivery is after the delay). `failed`: its handler
    /// failed, which a broker that tells failures from other returns (RabbitMQ 4.3's quorum
    /// queues) counts toward its delivery limit; a message whose key is in progress elsewhere
    /// did not fail.
    fn redeliver(
        &self,
        after: Duration,
        failed: bool,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// Terminates or dead-letters the message.
    fn dead_letter(&self, reason: &str) -> impl Future<Output = Result<(), String>> + Send;
    /// Hands the message back at once (shutdown).
    fn release(&self) -> impl Future<Output = Result<(), String>> + Send;
    /// Tells the broker the handler is still working; `None` where it has no timer.
    fn progress_every(&self) -> Option<Duration>;
    /// Extends the broker's redelivery timer.
    fn progress(&self) -> impl Future<Output = Result<(), String>> + Send;
}

/// Where deliveries come from.
pub(crate) trait Source: Send {
    type Delivery: Delivery;
    /// The next delivery; `None` when the subscription ended. `free`: how many deliveries
    /// handlers could start on now, the one this call is for included. It can only grow
    /// until this call returns (handlers finish; nothing else takes their slots), and the
    /// caller calls again while any slot is free: a source that never has more deliveries
    /// on their way than `free` has none waiting unread in its client while every handler
    /// is busy.
    fn next(
        &mut self,
        free: usize,
    ) -> impl Future<Output = Option<Result<Self::Delivery, Error>>> + Send;
    /// Stops fetching; deliveries fetched but never handed out are given back. The source
    /// is kept until the handlers of its deliveries are done, since they settle them
    /// through it (an AMQP channel closes when the last of its handles is dropped, and
    /// RabbitMQ then requeues every delivery on it).
    fn stop(&mut self) -> impl Future<Output = ()> + Send;
    /// The handlers are done and their deliveries settled: sees that what they sent reaches
    /// the broker, and lets the source go.
    fn finish(self) -> impl Future<Output = ()> + Send;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Running,
    /// Fetching stopped: a message held for a delayed redelivery is handed back at once (no
    /// handler runs on it), so that it does not hold the shutdown up for its delay.
    Draining,
    /// Grace is over: cut handlers short and give their messages back.
    Abort,
}

// Every count of handlers `Settings` allows is a semaphore's worth of permits.
const _: () = assert!(crate::Settings::MAX_IN_FLIGHT <= Semaphore::MAX_PERMITS);

/// Runs `source` until `shutdown` resolves or the subscription ends.
pub(crate) async fn run<Src, H>(
    mut source: Src,
    handler: Arc<H>,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<Report, Error>
where
    Src: Source,
    H: Handler + ?Sized,
{
    let report = Arc::new(Mutex::new(Report::default()));
    let slots = Arc::new(Semaphore::new(settings.max_in_flight));
    let (phase_tx, phase_rx) = watch::channel(Phase::Running);
    let mut tasks = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut ended: Result<(), Error> = Ok(());
    loop {
        // A slot first, so that nothing is fetched that no handler can start on.
        let slot = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        // The slot just taken and those still free. Only this loop takes slots, so the count
        // cannot fall before the delivery is handed out.
        let free = slots.available_permits().saturating_add(1);
        let next = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            next = source.next(free) => next,
        };
        // Reap finished tasks so the set stays small.
        while let Some(done) = tasks.try_join_next() {
            reaped(done);
        }
        let delivery = match next {
            None => break,
            Some(Ok(delivery)) => delivery,
            Some(Err(e)) => {
                ended = Err(e);
                break;
            }
        };
        let handler = handler.clone();
        let report = report.clone();
        let policy = settings.policy;
        let phase = phase_rx.clone();
        tasks.spawn(async move {
            let verdict = process(&delivery, &*handler, phase.clone()).await;
            let Some(handled) = verdict else {
                settle_released(&delivery, &report).await;
                return;
            };
            // The handler is done: its slot goes to the next message while this one waits
            // for a delayed redelivery.
            drop(slot);
            let attempt = delivery.message().attempt();
            let action = policy.decide(&handled, attempt);
            // Should the dead letter fail, the message comes back after the backoff.
            let retry_after = policy.backoff_after(attempt);
            settle(&delivery, &handled, action, retry_after, &report, phase).await;
        });
    }
    let _ = phase_tx.send(Phase::Draining);
    source.stop().await;
    // Stop fetching is done; in-flight handlers get the grace period to finish.
    let drained = tokio::time::timeout(settings.grace, async {
        while let Some(done) = tasks.join_next().await {
            reaped(done);
        }
    })
    .await;
    if drained.is_err() {
        tracing::info!(
            in_flight = tasks.len(),
            "rerun-queue: shutdown grace is over; handlers still running are cut short and their messages handed back"
        );
        let _ = phase_tx.send(Phase::Abort);
        while let Some(done) = tasks.join_next().await {
            reaped(done);
        }
    }
    source.finish().await;
    ended?;
    let report = *report.lock().unwrap_or_else(|p| p.into_inner());
    Ok(report)
}

/// A task's end: a handler's panic is caught in it, so a panic here is the runner's own.
fn reaped(done: Result<(), JoinError>) {
    if let Err(e) = done {
        if e.is_panic() {
            tracing::error!(error = %e, "rerun-queue: a message's task panicked while settling it; the message may be left unsettled");
        }
    }
}

/// What a panic says, if it says it in words.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Runs the handler, telling the broker it is still working every so often; `None` when the
/// shutdown cut it short.
///
/// A panicking handler is a retryable failure: left unsettled, its message would wait for the
/// broker's timer (JetStream: back every `ack_wait`, without backoff, never dead-lettered;
/// RabbitMQ: held until the channel closes, filling the prefetch window).
async fn process<D: Delivery, H: Handler + ?Sized>(
    delivery: &D,
    handler: &H,
    mut phase: watch::Receiver<Phase>,
) -> Option<Handled> {
    let message = delivery.message();
    // `handle` is called inside the caught future, so a panic before it returns its future is
    // caught too. Nothing the handler shares with the runner outlives the panic: the message
    // is only read, and a rerun call gives its claim back when its future is dropped.
    let work = AssertUnwindSafe(async move { handler.handle(message).await }).catch_unwind();
    let mut work = std::pin::pin!(work);
    let every = delivery.progress_every();
    loop {
        let tick = async {
            match every {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            handled = &mut work => {
                return Some(handled.unwrap_or_else(|panic| {
                    let what = panic_message(&*panic);
                    tracing::error!(message = %message.describe(), panic = what, "rerun-queue: the handler panicked; this counts as a retryable failure (redelivered with the backoff, dead-lettered after max_deliveries)");
                    Handled::Failed(Failure::new(
                        FailureKind::Retryable,
                        format!("the handler panicked: {what}"),
                    ))
                }));
            }
            _ = tick => {
                // The broker would redeliver the message to another consumer when its timer
                // runs out; rerun's lease is being renewed meanwhile, so this handler is alive.
                if let Err(e) = delivery.progress().await {
                    tracing::debug!(message = %delivery.message().describe(), error = %escaped(&e), "rerun-queue: could not extend the redelivery timer");
                }
            }
            _ = aborted(&mut phase) => {
                // Dropping the handler future gives rerun's claim back (or leaves it to its
                // lease): the message comes back and the next delivery runs it again.
                return None;
            }
        }
    }
}

async fn aborted(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p >= Phase::Abort).await;
}

async fn draining(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|p| *p >= Phase::Draining).await;
}

fn count(report: &Mutex<Report>, f: impl FnOnce(&mut Report)) {
    f(&mut report.lock().unwrap_or_else(|p| p.into_inner()));
}

/// Hands the message back to come again after `after`, or at once if the consumer starts
/// shutting down meanwhile.
async fn redeliver<D: Delivery>(
    delivery: &D,
    after: Duration,
    failed: bool,
    report: &Mutex<Report>,
    phase: &mut watch::Receiver<Phase>,
) -> Result<(), String> {
    let r = tokio::select! {
        r = delivery.redeliver(after, failed) => r,
        // A delayed requeue does not hold a shutdown up.
        _ = draining(phase) => delivery.release().await,
    };
    if r.is_ok() {
        count(report, |r| r.redelivered += 1);
    }
    r
}

/// Settles a handled delivery as `action` says; a dead letter that fails is redelivered after
/// `retry_after`.
async fn settle<D: Delivery>(
    delivery: &D,
    handled: &Handled,
    action: Action,
    retry_after: Duration,
    report: &Mutex<Report>,
    mut phase: watch::Receiver<Phase>,
) {
    let message = delivery.message();
    let result = match action {
        Action::Ack => {
            let replayed = matches!(handled, Handled::Done { replayed: true });
            let r = delivery.ack().await;
            if r.is_ok() {
                count(report, |r| {
                    if replayed {
                        r.replayed += 1
                    } else {
                        r.ran += 1
                    }
                });
            }
            r
        }
        Action::Redeliver(after) => {
            let failed = match handled {
                Handled::Failed(f) => {
                    tracing::debug!(message = %message.describe(), reason = %escaped(&f.to_string()), ?after, "rerun-queue: redelivering later");
                    !matches!(f.kind, FailureKind::InProgress { .. })
                }
                Handled::Done { .. } => false,
            };
            redeliver(delivery, after, failed, report, &mut phase).await
        }
        Action::DeadLetter => {
            let reason = match handled {
                Handled::Failed(f) => f.reason.clone(),
                Handled::Done { .. } => String::from("done"),
            };
            tracing::warn!(
                subject = %escaped(message.subject()),
                message_id = %escaped(message.id().unwrap_or("")),
                attempt = message.attempt(),
                reason = %escaped(&reason),
                "rerun-queue: message dead-lettered: {}",
                message.describe()
            );
            match delivery.dead_letter(&reason).await {
                Ok(()) => {
                    count(report, |r| r.dead_lettered += 1);
                    Ok(())
                }
                Err(e) => {
                    // Neither kept as a dead letter nor terminated. Left unsettled, it would
                    // come back whenever the broker's timer ran out, for ever and without
                    // backoff; handed back with the backoff, a later delivery dead-letters it
                    // again, and it is never dropped unseen.
                    count(report, |r| r.settle_failures += 1);
                    tracing::warn!(
                        message = %message.describe(),
                        error = %escaped(&e),
                        after = ?retry_after,
                        "rerun-queue: could not dead-letter the message; it is redelivered later to be dead-lettered again"
                    );
                    redeliver(delivery, retry_after, true, report, &mut phase).await
                }
            }
        }
    };
    if let Err(e) = result {
        count(report, |r| r.settle_failures += 1);
        tracing::warn!(message = %message.describe(), error = %escaped(&e), ?action, "rerun-queue: the broker did not take the settlement; the message will be redelivered (and replayed if it was recorded)");
    }
}

async fn settle_released<D: Delivery>(delivery: &D, report: &Mutex<Report>) {
    match delivery.release().await {
        Ok(()) => count(report, |r| r.released += 1),
        Err(e) => {
            count(report, |r| r.settle_failures += 1);
            tracing::warn!(message = %delivery.message().describe(), error = %escaped(&e), "rerun-queue: could not hand an unfinished message back; the broker redelivers it when its timer runs out");
        }
    }
}
