//! The run algorithm, written once for sync and async calls.
//!
//! [`drive`] is an `async fn` generic over a [`Backend`]: the sync backend calls a [`Store`]'s
//! blocking methods (its futures are always ready, so a sync call completes in one poll), the
//! async backend awaits an [`AsyncStore`]. Every branch of contract section 3 lives here once.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::checkpoint::{self, Point};
use crate::codec;
use crate::error::{AfterBody, Error};
use crate::fingerprint::Fingerprint;
use crate::holder::{Holder, Liveness};
use crate::key::Key;
use crate::record::{Claim, ClaimRequest, ClaimResponse, Fence, RecordView, Status};
use crate::runtime::in_span::InSpan;
use crate::runtime::keeper::{keeper, sleep, Job, Keeper, LeaseState, RETRY_PAUSES};
use crate::runtime::telemetry::{self, Report, Verdict};
use crate::runtime::{Options, Outcome, Reconciled};
use crate::store::{AsyncStore, Store};

/// The store operations one call needs, sync or async.
pub(crate) trait Backend {
    /// Whether a claim dropped without finishing is given back on the keeper thread (async:
    /// a destructor cannot await) or inline (sync: the thread is unwinding and may block).
    const GIVE_BACK_IN_BACKGROUND: bool;
    fn claim<'a>(
        &'a self,
        req: &'a ClaimRequest<'a>,
    ) -> impl Future<Output = Result<ClaimResponse, Error>> + Send + 'a;
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        result: &'a [u8],
        ttl: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a;
    fn release<'a>(
        &'a self,
        claim: &'a Claim,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a;
    fn mark_unknown<'a>(
        &'a self,
        claim: &'a Claim,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a;
    fn inspect<'a>(
        &'a self,
        key: &'a Key,
    ) -> impl Future<Output = Result<Option<RecordView>, Error>> + Send + 'a;
    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send;
    fn shared(&self) -> Arc<dyn Store>;
    /// The store's kind, for spans and metrics.
    fn kind(&self) -> &'static str;
}

pub(crate) struct SyncBackend<'s, S: ?Sized>(pub &'s S);
pub(crate) struct AsyncBackend<'s, S: ?Sized>(pub &'s S);

impl<S: Store + ?Sized> Backend for SyncBackend<'_, S> {
    const GIVE_BACK_IN_BACKGROUND: bool = false;
    fn claim<'a>(
        &'a self,
        req: &'a ClaimRequest<'a>,
    ) -> impl Future<Output = Result<ClaimResponse, Error>> + Send + 'a {
        std::future::ready(self.0.claim(req))
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        result: &'a [u8],
        ttl: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        std::future::ready(self.0.complete(claim, result, ttl))
    }
    fn release<'a>(
        &'a self,
        claim: &'a Claim,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        std::future::ready(self.0.release(claim))
    }
    fn mark_unknown<'a>(
        &'a self,
        claim: &'a Claim,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        std::future::ready(self.0.mark_unknown(claim))
    }
    fn inspect<'a>(
        &'a self,
        key: &'a Key,
    ) -> impl Future<Output = Result<Option<RecordView>, Error>> + Send + 'a {
        std::future::ready(self.0.inspect(key))
    }
    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
        std::thread::sleep(d);
        std::future::ready(())
    }
    fn shared(&self) -> Arc<dyn Store> {
        self.0.shared()
    }
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
}

impl<S: AsyncStore + ?Sized> Backend for AsyncBackend<'_, S> {
    const GIVE_BACK_IN_BACKGROUND: bool = true;
    fn claim<'a>(
        &'a self,
        req: &'a ClaimRequest<'a>,
    ) -> impl Future<Output = Result<ClaimResponse, Error>> + Send + 'a {
        self.0.claim_async(req)
    }
    fn complete<'a>(
        &'a self,
        claim: &'a Claim,
        result: &'a [u8],
        ttl: Duration,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        self.0.complete_async(claim, result, ttl)
    }
    fn release<'a>(
        &'a self,
        claim: &'a Claim,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        self.0.release_async(claim)
    }
    fn mark_unknown<'a>(
        &'a self,
        claim: &'a Claim,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'a {
        self.0.mark_unknown_async(claim)
    }
    fn inspect<'a>(
        &'a self,
        key: &'a Key,
    ) -> impl Future<Output = Result<Option<RecordView>, Error>> + Send + 'a {
        self.0.inspect_async(key)
    }
    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
        sleep(d)
    }
    fn shared(&self) -> Arc<dyn Store> {
        self.0.shared()
    }
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
}

/// The claim loop's state: what to ask the store next.
struct Attempt<'k> {
    key: &'k Key,
    fingerprint: Fingerprint,
    holder: Holder,
    options: Options,
    steal: Option<Fence>,
    /// When the first claim was sent: the wait for a busy key counts from it (one clock read
    /// serves both, and a replay reads no other).
    started: Option<Instant>,
    backoff: Duration,
}

enum Step<T> {
    Claimed(Claim),
    Done(Result<Outcome<T>, Error>),
    Retry,
    Sleep(Duration),
}

impl<'k> Attempt<'k> {
    fn request(&self) -> ClaimRequest<'_> {
        ClaimRequest {
            key: self.key,
            fingerprint: &self.fingerprint,
            holder: &self.holder,
            lease: self.options.lease_duration(),
            once: self.options.is_once(),
            steal: self.steal,
        }
    }

    fn step<T: DeserializeOwned>(&mut self, response: ClaimResponse) -> Step<T> {
        match response {
            ClaimResponse::Claimed(claim) => Step::Claimed(claim),
            ClaimResponse::Replay(replay) => Step::Done(
                codec::decode(&replay.result)
                    .map(|value| Outcome {
                        value,
                        replayed: true,
                        fence: replay.fence,
                    })
                    .map_err(|kind| Error::corrupt(self.key, kind)),
            ),
            ClaimResponse::Mismatch => Step::Done(Err(Error::PayloadMismatch {
                key: self.key.clone(),
            })),
            ClaimResponse::Busy(busy) => {
                // A holder on this host whose process is provably gone is taken over at once,
                // with the next fence, instead of waiting out its lease.
                if self.steal != Some(busy.fence) && busy.holder.liveness() == Liveness::Dead {
                    self.steal = Some(busy.fence);
                    return Step::Retry;
                }
                let now = Instant::now();
                let deadline = self
                    .options
                    .wait_duration()
                    .zip(self.started)
                    .map(|(wait, from)| crate::clock::later(from, wait));
                match deadline {
                    Some(deadline) if now < deadline => {
                        let pause = self.backoff.min(deadline - now);
                        self.backoff = (self.backoff * 2).min(Duration::from_millis(50));
                        Step::Sleep(pause)
                    }
                    _ => Step::Done(Err(Error::InProgress {
                        key: self.key.clone(),
                        holder: Box::new(busy.holder),
                        lease_ends_in: busy.lease_remaining,
                    })),
                }
            }
        }
    }
}

/// A claim being worked on. Dropped while armed (a panic, a dropped future), it gives the key
/// back: released if the function is replayable, marked unknown if it is `once`.
struct Held {
    store: Arc<dyn Store>,
    claim: Claim,
    /// The keeper that renews the lease, as found when the claim was made: a settle on
    /// another thread (an async call moved between workers) must reach the same one, even
    /// where threads have keepers of their own (a child forked while the process lock was
    /// held, see `process`), whose watch ids would name other claims.
    keeper: &'static Keeper,
    watch: Option<u64>,
    armed: bool,
    in_background: bool,
    /// What the destructor does with an armed claim: release it, whatever its mode, once the
    /// body has failed (its effect did not happen); otherwise release a replayable claim and
    /// mark a `once` claim's outcome unknown.
    release_on_drop: bool,
}

impl Held {
    fn new(
        store: Arc<dyn Store>,
        claim: Claim,
        lease: Duration,
        sent: Instant,
        in_background: bool,
    ) -> Held {
        let keeper = keeper();
        let watch = Some(keeper.watch(store.clone(), claim.clone(), lease, sent));
        Held {
            store,
            claim,
            keeper,
            watch,
            armed: true,
            in_background,
            release_on_drop: false,
        }
    }

    /// Stops renewal, and has the destructor release the claim, a `once` claim too, if the
    /// caller is dropped before it finishes the claim itself: the body failed, so its effect
    /// did not happen. [`Held::disarm`] when the claim is finished.
    fn release_on_drop(&mut self) {
        if let Some(id) = self.watch.take() {
            self.keeper.unwatch(id);
        }
        self.release_on_drop = true;
    }

    /// The caller finished the claim: the destructor leaves it.
    fn disarm(&mut self) {
        self.armed = false;
    }

    /// Stops renewal and disarms the destructor: the caller finishes the claim itself. Says
    /// what the lease went through meanwhile.
    fn settle(&mut self) -> LeaseState {
        self.armed = false;
        match self.watch.take() {
            Some(id) => self.keeper.unwatch(id),
            None => LeaseState::default(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.settle();
        let job = if self.claim.once && !self.release_on_drop {
            Job::MarkUnknown(self.store.clone(), self.claim.clone())
        } else {
            Job::Release(self.store.clone(), self.claim.clone())
        };
        if self.in_background {
            self.keeper.submit(job);
        } else {
            let result = match &job {
                Job::Release(s, c) => s.release(c),
                Job::MarkUnknown(s, c) => s.mark_unknown(c),
            };
            if let Err(e) = result {
                tracing::warn!(key = %telemetry::key_field(&self.claim.key), error = %telemetry::error_field(&e), "rerun: could not give back the claim of an interrupted call; its lease will end it");
            }
        }
    }
}

/// Gives a settled claim back after a failure; a failure to do so is healed by the lease.
async fn give_back<B: Backend>(backend: &B, held: &mut Held) {
    held.settle();
    let result = if held.claim.once {
        backend.mark_unknown(&held.claim).await
    } else {
        backend.release(&held.claim).await
    };
    match result {
        Ok(()) => checkpoint::hit(Point::Released),
        Err(e) => {
            tracing::warn!(key = %telemetry::key_field(&held.claim.key), error = %telemetry::error_field(&e), "rerun: could not give back the claim; its lease will end it")
        }
    }
}

/// Records `value` as the claim's result.
async fn record<B: Backend, T: Serialize + DeserializeOwned>(
    backend: &B,
    held: &mut Held,
    value: T,
    ttl: Duration,
) -> Result<Outcome<T>, Error> {
    // Checked before anything is written: a value that would not replay exactly as itself is
    // refused now, not found `Corrupt` (or different) on a later call.
    let bytes = match codec::encode_checked(&value) {
        Ok(bytes) => bytes,
        Err(e) => {
            give_back(backend, held).await;
            return Err(Error::Codec {
                key: held.claim.key.clone(),
                what: "the result",
                message: e.to_string(),
            });
        }
    };
    let lease = held.settle();
    let completed = complete(backend, &held.claim, &bytes, ttl, &lease, &mut held.armed).await;
    match completed {
        Ok(()) => {
            checkpoint::hit(Point::Recorded);
            Ok(Outcome {
                value,
                replayed: false,
                fence: held.claim.fence,
            })
        }
        // The lease could not be kept up (the store hung, or the claim was taken over) and
        // the completion did not go through: the claim is lost as far as this attempt knows.
        // Not a result the store refused before sending it (`Codec`, too large): that refusal
        // holds whatever became of the lease, and called lost it would be retried in vain.
        Err(e) if lease.lost() && !matches!(e, Error::LeaseLost { .. } | Error::Codec { .. }) => {
            tracing::warn!(key = %telemetry::key_field(&held.claim.key), fence = held.claim.fence, error = %telemetry::error_field(&e), "rerun: the result could not be recorded after the lease lapsed");
            Err(Error::LeaseLost {
                key: held.claim.key.clone(),
            })
        }
        Err(e) => {
            // A claim whose completion failed is given back so the next call need not wait
            // out the lease: a replayable one released; a `once` one marked unknown (its body
            // ran), but only when the store refused the result before sending it (`Codec`): a
            // completion that timed out may still land, and marking it unknown first would
            // lose a result that was about to be recorded.
            let sent_nothing = matches!(e, Error::Codec { .. });
            match (held.claim.once, &e) {
                (_, Error::LeaseLost { .. }) => {}
                (false, _) => {
                    let _ = backend.release(&held.claim).await;
                }
                (true, _) if sent_nothing => {
                    let _ = backend.mark_unknown(&held.claim).await;
                }
                (true, _) => {}
            }
            Err(e.after_body(match held.claim.once {
                true => AfterBody::Once,
                false => AfterBody::Replayable,
            }))
        }
    }
}

/// A failed completion is tried again only when it failed within this (and within a sixth of
/// the lease, which bounds the store's time limit for it to a third): an answer (a closed
/// connection, a server restarting), not a store that let its time limit run out, which would
/// likely hold up the next attempt as long.
const QUICK_FAILURE: Duration = Duration::from_millis(500);

/// Sends the completion, and again after [`RETRY_PAUSES`] while it fails quickly with an error
/// the store calls passing and the lease still holds: a connection that died while the body
/// ran (a server restart, a failover, an idle connection closed by a proxy) would otherwise
/// cost a result that was about to be recorded, and leave a `once` key unknown.
///
/// A completion is fenced, so another attempt can record nothing but this claim's result. An
/// attempt whose answer was lost may have landed, and then the next one is refused as
/// `LeaseLost`: the record says which. Completed with this claim's fence, the result is
/// recorded; another claim's, the lease was lost; gone or unreadable, nobody can say, and the
/// first failure is the answer. While it waits between attempts the claim is armed (`armed`),
/// so that a call dropped there (a timeout around it, an aborted task) gives it back through
/// the keeper: fenced too, so refused if an attempt landed after all.
async fn complete<B: Backend>(
    backend: &B,
    claim: &Claim,
    result: &[u8],
    ttl: Duration,
    lease: &LeaseState,
    armed: &mut bool,
) -> Result<(), Error> {
    let attempt = || {
        telemetry::store_op(
            backend.kind(),
            "complete",
            backend.complete(claim, result, ttl),
        )
    };
    let quick = QUICK_FAILURE.min(claim.lease / 6);
    let mut sent = Instant::now();
    let mut outcome = attempt().await;
    let mut first_failure = None;
    for pause in RETRY_PAUSES {
        let again = matches!(&outcome, Err(e) if e.is_retryable() && !matches!(e, Error::LeaseLost { .. }))
            && sent.elapsed() < quick
            && lease.holds_for(pause);
        if !again {
            break;
        }
        if let Err(e) = &outcome {
            tracing::debug!(key = %telemetry::key_field(&claim.key), error = %telemetry::error_field(e), "rerun: recording the result failed; trying again");
        }
        *armed = true;
        backend.sleep(pause).await;
        *armed = false;
        let failed = std::mem::replace(&mut outcome, Ok(()));
        if first_failure.is_none() {
            first_failure = failed.err();
        }
        sent = Instant::now();
        outcome = attempt().await;
    }
    match (outcome, first_failure) {
        (Err(Error::LeaseLost { key }), Some(first)) => match backend.inspect(&claim.key).await {
            Ok(Some(r)) if r.fence == claim.fence && r.status == Status::Completed => Ok(()),
            Ok(Some(_)) => Err(Error::LeaseLost { key }),
            _ => Err(first),
        },
        (outcome, _) => outcome,
    }
}

/// Runs one call: claim-or-fetch, then the body (or the reconcile function), then record; and
/// tells an [`observe`](crate::observe) in progress what it did.
pub(crate) async fn drive<B, T, E, R, RF, F, FF>(
    backend: &B,
    key: &Key,
    fingerprint: Fingerprint,
    options: Options,
    reconcile: Option<R>,
    body: F,
) -> Result<Outcome<T>, E>
where
    B: Backend,
    T: Serialize + DeserializeOwned,
    E: From<Error>,
    R: FnOnce() -> RF,
    RF: Future<Output = Result<Reconciled<T>, E>>,
    F: FnOnce() -> FF,
    FF: Future<Output = Result<T, E>>,
{
    let started = telemetry::clock();
    let span = tracing::debug_span!(
        "rerun.call",
        scope = %key.scope(),
        key = tracing::field::Empty,
        outcome = tracing::field::Empty,
        fence = tracing::field::Empty,
        store = backend.kind(),
    );
    if !span.is_disabled() {
        span.record("key", telemetry::id_field(key));
    }
    let mut report = Report::default();
    // The call's future (its body's state included) is made in the slot it is pinned in and
    // never moves: a wrapper that owned it would copy it into itself. The slot's wrapper still
    // drops it inside the span, so a call dropped midway (a cancelled task, a panic) gives its
    // claim back inside the span.
    let out = {
        let call = std::pin::pin!(Some(run(
            backend,
            key,
            fingerprint,
            options,
            reconcile,
            body,
            &mut report,
        )));
        InSpan::new(&span, call).await
    };
    span.record("outcome", report.verdict.as_str());
    if let Some(fence) = report.fence {
        span.record("fence", fence);
    }
    telemetry::call_finished(key, report.verdict, started);
    checkpoint::note_call_end(match &out {
        Ok(_) => checkpoint::CallEnd::Returned,
        Err(_) if report.body_failed => checkpoint::CallEnd::BodyFailed,
        Err(_) => checkpoint::CallEnd::Failed {
            unknown: report.verdict == Verdict::Unknown,
        },
    });
    crate::runtime::observe::note(
        out.as_ref()
            .ok()
            .map(|o| crate::runtime::observe::Observed {
                replayed: o.replayed,
                fence: o.fence,
            }),
    );
    out
}

/// [`drive`] without the span: what the call did goes into `report`.
async fn run<B, T, E, R, RF, F, FF>(
    backend: &B,
    key: &Key,
    fingerprint: Fingerprint,
    options: Options,
    reconcile: Option<R>,
    body: F,
    report: &mut Report,
) -> Result<Outcome<T>, E>
where
    B: Backend,
    T: Serialize + DeserializeOwned,
    E: From<Error>,
    R: FnOnce() -> RF,
    RF: Future<Output = Result<Reconciled<T>, E>>,
    F: FnOnce() -> FF,
    FF: Future<Output = Result<T, E>>,
{
    let mut attempt = Attempt {
        key,
        fingerprint,
        holder: Holder::current(),
        options,
        steal: None,
        started: None,
        backoff: Duration::from_millis(1),
    };
    let kind = backend.kind();
    let mut waited = false;
    let (mut claim, sent) = loop {
        // The lease is granted after this moment; the keeper counts it from here.
        let sent = Instant::now();
        attempt.started.get_or_insert(sent);
        let request = attempt.request();
        let response = match telemetry::store_op(kind, "claim", backend.claim(&request)).await {
            Ok(response) => response,
            Err(e) => {
                report.verdict = Verdict::of(&e);
                // Read back only after a quick failure (a connection that died): one that took
                // the store's time limit would likely take it again, doubling the caller's wait.
                let quick = QUICK_FAILURE.min(request.lease / 6);
                if matches!(e, Error::Store { .. }) && e.is_retryable() && sent.elapsed() < quick {
                    give_back_lost_claim(backend, &attempt).await;
                }
                return Err(E::from(e));
            }
        };
        match attempt.step::<T>(response) {
            Step::Claimed(claim) => break (claim, sent),
            Step::Done(result) => {
                match &result {
                    Ok(o) => {
                        report.fence = Some(o.fence);
                        report.verdict = if waited {
                            Verdict::Waited
                        } else {
                            Verdict::Replayed
                        };
                    }
                    Err(e) => {
                        report.verdict = Verdict::of(e);
                        if let Error::Corrupt { kind, .. } = e {
                            tracing::warn!(%kind, "rerun: the stored record is corrupt; it was left untouched and the body did not run");
                        }
                    }
                }
                return result.map_err(E::from);
            }
            Step::Retry => {}
            Step::Sleep(pause) => {
                waited = true;
                backend.sleep(pause).await
            }
        }
    };
    report.fence = Some(claim.fence);
    if let Some(abandoned) = &claim.abandoned {
        let reason = if attempt.steal == Some(abandoned.fence) {
            "dead_holder"
        } else {
            "lease_end"
        };
        telemetry::takeover(key, reason);
        tracing::info!(
            reason,
            fence = claim.fence,
            previous_fence = abandoned.fence,
            previous_holder = ?abandoned.holder,
            "rerun: took over an earlier attempt that did not finish"
        );
    }
    let ttl = options.ttl_duration();
    let unknown = claim.abandoned.as_ref().is_some_and(|a| a.outcome_unknown);
    // Taken over from an at-most-once attempt whose outcome is unknown, the claim is
    // at-most-once too, whatever this call's mode: if this call panics, is dropped or fails to
    // record, the key goes back to unknown, never released for a rerun.
    claim.once |= unknown;
    let lease = options.lease_duration();
    let mut held = Held::new(
        backend.shared(),
        claim,
        lease,
        sent,
        B::GIVE_BACK_IN_BACKGROUND,
    );
    let answered_in = sent.elapsed();
    if answered_in >= lease {
        // The store answered after the lease it granted could have ended (a lock wait, a
        // replica that lagged, a stalled connection): another caller may already have taken
        // the key over, so the body must not start. Given back as it was found: released (its
        // body never began), or unknown again if it took over an unknown outcome.
        tracing::warn!(
            answered_in = ?answered_in,
            lease = ?lease,
            "rerun: the store granted the claim only after its lease could have ended; the body did not run and the claim was given back"
        );
        if unknown {
            give_back_unknown(backend, &mut held).await;
        } else {
            release_unrun(backend, &mut held).await;
        }
        let e = Error::store_msg(
            Some(key),
            format!(
                "the store granted the claim after {}, past its lease of {}: the body did not run; retry the call",
                crate::error::rounded(answered_in),
                crate::error::rounded(lease)
            ),
        );
        report.verdict = Verdict::of(&e);
        return Err(e.into());
    }
    checkpoint::hit(Point::Claimed);

    if unknown {
        // An earlier `once` attempt died after its body may have started.
        let Some(reconcile) = reconcile else {
            tracing::warn!("rerun: an earlier at-most-once attempt died after its body started: its outcome is unknown; give the function a reconcile function, or check by hand and forget the key");
            give_back_unknown(backend, &mut held).await;
            report.verdict = Verdict::Unknown;
            return Err(Error::OutcomeUnknown { key: key.clone() }.into());
        };
        // The earlier attempt may have sent its effect just before it died (a request in a
        // socket, a statement not yet run): let it land before the reconcile looks. The claim
        // is ours meanwhile, and renewed.
        let settle = options.settle_duration();
        #[cfg(feature = "testing")]
        let settle = crate::testing::harness::settle::current().unwrap_or(settle);
        if !settle.is_zero() {
            backend.sleep(settle).await;
        }
        match reconcile().await {
            Ok(Reconciled::Done(value)) => {
                tracing::info!(
                    "rerun: an unknown outcome was reconciled as done; its result is recorded"
                );
                let out = record(backend, &mut held, value, ttl).await;
                report.verdict = match &out {
                    Ok(_) => Verdict::Reconciled,
                    Err(e) => Verdict::of(e),
                };
                return Ok(out?);
            }
            Ok(Reconciled::NotDone) => {
                tracing::info!(
                    "rerun: an unknown outcome was reconciled as not done; the body runs"
                );
            }
            Err(e) => {
                report.body_failed = true;
                give_back_unknown(backend, &mut held).await;
                report.verdict = Verdict::Unknown;
                return Err(e);
            }
        }
    }

    checkpoint::hit(Point::BodyStarted);
    // A sync body runs inside this poll, on this thread, so it can learn its fence.
    let in_body =
        (!B::GIVE_BACK_IN_BACKGROUND).then(|| checkpoint::InBody::enter(held.claim.fence));
    let result = body().await;
    drop(in_body);
    checkpoint::hit(Point::BodyReturned);
    report.body_failed = result.is_err();
    match result {
        Ok(value) => {
            let out = record(backend, &mut held, value, ttl).await;
            report.verdict = match &out {
                Ok(_) => Verdict::Ran,
                Err(e) => Verdict::of(e),
            };
            Ok(out?)
        }
        Err(e) => {
            if release_unrun(backend, &mut held).await {
                checkpoint::hit(Point::Released);
                tracing::info!("rerun: the body failed; the claim was given back, and the next call runs afresh");
            }
            report.verdict = Verdict::Failed;
            Err(e)
        }
    }
}

/// Releases a claim whose body's effect did not happen (the body failed, or never began), a
/// `once` claim too: left to its lease instead, a `once` claim would end as an unknown outcome,
/// refused until an operator forgets it. Until the release is answered the claim stays armed
/// for release, so a call dropped meanwhile hands it to the keeper; a release that fails is
/// handed to the keeper too, which tries again. Whether it was released here.
async fn release_unrun<B: Backend>(backend: &B, held: &mut Held) -> bool {
    held.release_on_drop();
    let released =
        telemetry::store_op(backend.kind(), "release", backend.release(&held.claim)).await;
    held.disarm();
    match released {
        Ok(()) => true,
        // Taken over meanwhile (its lease lapsed): nothing of this attempt's to give back.
        Err(Error::LeaseLost { .. }) => false,
        Err(e) => {
            tracing::warn!(key = %telemetry::key_field(&held.claim.key), error = %telemetry::error_field(&e), "rerun: could not release a claim whose body had no effect; trying again in the background");
            held.keeper
                .submit(Job::Release(held.store.clone(), held.claim.clone()));
            false
        }
    }
}

/// After a claim that failed as a passing store failure: a claim the store wrote but whose
/// answer was lost (the connection died after the commit, the server restarted before its
/// reply left) stands in the store held by this attempt, which nobody renews or finishes, and
/// would keep the key busy until its lease ran out. Read back, such a record is given back at
/// once: released, or for `once` marked unknown (what its lease running out would have left:
/// the claim may have taken over an earlier attempt whose body ran). A record of any other
/// holder (the attempt id tells this call's from every other) is left alone, and so is
/// everything when the store cannot be read: the lease ends such a claim, as before.
///
/// Read only after a claim that failed quickly (within the completion's [`QUICK_FAILURE`]):
/// a claim that ran out of time is likely still on its way to the store (a statement the
/// server runs after the client gave up on it), where a read would not find it, and a read
/// would make the caller wait for the store's time limit a second time. Such a claim, and one
/// dropped while in flight, is ended by its lease.
async fn give_back_lost_claim<B: Backend>(backend: &B, attempt: &Attempt<'_>) {
    // Equal holders are one attempt only where the process's identity is known: without a
    // boot id, a PID namespace and a start time (no `/proc`), two processes of one pid on
    // two hosts of one name would draw the same attempt ids.
    let me = &attempt.holder;
    if me.boot_id.is_empty() || me.pid_ns == 0 || me.start_time == 0 {
        return;
    }
    let Ok(Some(record)) = backend.inspect(attempt.key).await else {
        return;
    };
    if record.status != Status::InProgress || record.holder.as_ref() != Some(&attempt.holder) {
        return;
    }
    let claim = Claim {
        key: attempt.key.clone(),
        fence: record.fence,
        holder: attempt.holder.clone(),
        once: record.once,
        lease: attempt.options.lease_duration(),
        abandoned: None,
    };
    let given_back = match claim.once {
        true => backend.mark_unknown(&claim).await,
        false => backend.release(&claim).await,
    };
    match given_back {
        Ok(()) => {
            tracing::info!(key = %telemetry::key_field(&claim.key), "rerun: a claim whose answer was lost was found held by this call and given back")
        }
        Err(e) => {
            tracing::warn!(key = %telemetry::key_field(&claim.key), error = %telemetry::error_field(&e), "rerun: a claim whose answer was lost could not be given back; its lease will end it")
        }
    }
}

/// Leaves the record in the unknown state (whatever the function's mode: the earlier attempt
/// was `once`).
async fn give_back_unknown<B: Backend>(backend: &B, held: &mut Held) {
    held.settle();
    if let Err(e) = backend.mark_unknown(&held.claim).await {
        tracing::warn!(key = %telemetry::key_field(&held.claim.key), error = %telemetry::error_field(&e), "rerun: could not mark the outcome unknown; the lease will");
    }
}
