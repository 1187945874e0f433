//! [`IdempotencyService`]: what the layer does with each request, and its response future.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Request, Response, StatusCode};
use http_body::Body;
use rerun_core::problem::Problem;
use rerun_core::{Call, Error, Key};
use tower_service::Service;

use crate::body::{
    read_request, read_response, BoxError, Captured, ReadError, RequestBody, ResponseBody,
};
use crate::fingerprint;
use crate::key::{IdempotencyKey, KeyError};
use crate::layer::IdempotencyLayer;
use crate::record::Recorded;

/// The service [`IdempotencyLayer`] wraps around an inner service.
#[derive(Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    config: Arc<IdempotencyLayer>,
}

impl<S> std::fmt::Debug for IdempotencyService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyService")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S> IdempotencyService<S> {
    pub(crate) fn new(inner: S, config: Arc<IdempotencyLayer>) -> Self {
        IdempotencyService { inner, config }
    }
}

/// The response future of [`IdempotencyService`].
pub struct ResponseFuture<R, E> {
    inner: Pin<Box<dyn Future<Output = Result<R, E>> + Send>>,
}

impl<R, E> std::fmt::Debug for ResponseFuture<R, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<R, E> Future for ResponseFuture<R, E> {
    type Output = Result<R, E>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for IdempotencyService<S>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let config = &self.config;
        if !config.methods.contains(req.method()) {
            return pass(self.inner.call(req.map(RequestBody::streaming)));
        }
        let key = match IdempotencyKey::from_headers(req.headers(), &config.header) {
            Ok(Some(key)) => key,
            Ok(None) if config.required => return ready(KeyError::Missing.problem()),
            Ok(None) => return pass(self.inner.call(req.map(RequestBody::streaming))),
            Err(e) => return ready(e.problem()),
        };
        // The service driven to readiness goes with this request; a clone takes its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture {
            inner: Box::pin(handle(config.clone(), inner, req, key)),
        }
    }
}

/// A request passed through: the inner service's response, its body untouched.
fn pass<F, B, E>(fut: F) -> ResponseFuture<Response<ResponseBody<B>>, E>
where
    F: Future<Output = Result<Response<B>, E>> + Send + 'static,
{
    ResponseFuture {
        inner: Box::pin(async move { Ok(fut.await?.map(ResponseBody::streaming)) }),
    }
}

/// A problem answered at once.
fn ready<B: Send + 'static, E: Send + 'static>(
    problem: Problem,
) -> ResponseFuture<Response<ResponseBody<B>>, E> {
    let response = problem.into_response();
    ResponseFuture {
        inner: Box::pin(std::future::ready(Ok(response))),
    }
}

/// Why the handler's run is not recorded. Each but `Rerun` comes after the handler started:
/// a replayable call's claim is then released, a `once` call's left unknown.
enum Failure<E, B> {
    /// rerun said no (in progress, mismatch, store down, …): its problem is the response.
    Rerun(Error),
    /// The inner service failed.
    Inner(E),
    /// A response returned as it is, unrecorded: a 5xx, an event stream, one over `max_body`.
    Pass(Response<ResponseBody<B>>),
    /// The handler's response body failed partway.
    BodyFailed,
    /// The handler panicked.
    Panicked,
}

impl<E, B> From<Error> for Failure<E, B> {
    fn from(e: Error) -> Self {
        Failure::Rerun(e)
    }
}

/// Rerun's key of a request: the layer's scope; the principal and the route (each tagged, so
/// that no name can equal their absence) and the client's key.
fn rerun_key(
    scope: std::borrow::Cow<'static, str>,
    principal: Option<&str>,
    route: Option<&str>,
    key: &IdempotencyKey,
) -> Key {
    Key::new(
        scope,
        &(
            principal.is_some(),
            principal.unwrap_or(""),
            route.is_some(),
            route.unwrap_or(""),
            key.as_str(),
        ),
    )
}

/// The route the request matched (axum's `MatchedPath`, e.g. `/payments/{id}`), if known.
fn route_of(parts: &http::request::Parts) -> Option<&str> {
    #[cfg(feature = "axum")]
    {
        parts
            .extensions
            .get::<axum::extract::MatchedPath>()
            .map(|m| m.as_str())
    }
    #[cfg(not(feature = "axum"))]
    {
        let _ = parts;
        None
    }
}

/// A request with a key: read, fingerprinted, then run once (to completion even if the client
/// hangs up), recorded and returned, or replayed.
async fn handle<S, ReqBody, ResBody>(
    config: Arc<IdempotencyLayer>,
    mut inner: S,
    req: Request<ReqBody>,
    key: IdempotencyKey,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let (mut parts, body) = req.into_parts();
    let body = match read_request(&parts.headers, body, config.max_body).await {
        Ok(body) => body,
        Err(e @ (ReadError::TooLarge | ReadError::OverOuterLimit)) => {
            let limit = match e {
                ReadError::TooLarge => format!(
                    "the {} bytes this service reads for a request with an idempotency key",
                    config.max_body
                ),
                _ => "what this service accepts".to_owned(),
            };
            return Ok(Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("the request body is larger than {limit}"),
            )
            .into_response());
        }
        Err(ReadError::Failed(e)) => {
            tracing::debug!(error = %e, "rerun-http: the request body could not be read");
            return Ok(Problem::new(
                StatusCode::BAD_REQUEST,
                "body_unreadable",
                "the request body could not be read; send the request again",
            )
            .into_response());
        }
    };
    let principal = config.principal.as_ref().and_then(|p| p(&parts));
    let rerun_key = rerun_key(
        config.scope.clone(),
        principal.as_deref(),
        route_of(&parts),
        &key,
    );
    let fingerprint = match fingerprint::of(&parts, &body, &config.fingerprint_headers, &rerun_key)
    {
        Ok(fingerprint) => fingerprint,
        Err(e) => return Ok(problem_of(&e)),
    };
    let store = match config.store.resolve() {
        Ok(store) => store,
        Err(e) => return Ok(problem_of(&e)),
    };
    // A `once` handler that started may have had its effect: when its answer cannot be
    // recorded (a panic, an error, a 5xx, a stream, a body over `max_body` or one that
    // failed), its key is left unknown, never released (see `unless_left`).
    let once = config.options.is_once();
    let unknown = Error::outcome_unknown(&rerun_key);
    let record_key = rerun_key.clone();
    let call = Call::with_key(rerun_key)
        .fingerprint(fingerprint)
        .options(config.options);
    // The key the layer read, for the handler (the `IdempotencyKey` extractor takes it from
    // here, whichever header the layer reads it from).
    parts.extensions.insert(key);
    let req = Request::from_parts(parts, RequestBody::buffered(body));
    let max_body = config.max_body;
    // The response as the handler gave it (its status, headers, extensions and version, its
    // body read whole), which this request's client gets; the record is what a replay gets.
    // One the store refuses (larger than the store's own limit on results) is still returned,
    // as one over `max_body` is, unrecorded.
    let answered: Arc<Mutex<Option<Response<ResponseBody<ResBody>>>>> = Arc::default();
    let kept = answered.clone();
    let (leave, left) = tokio::sync::oneshot::channel();
    // Polled on this request's task; if the client hangs up and the future is dropped, the
    // rest of it (handler, record) goes on on a task of its own, and the retry replays it.
    let run = CatchPanic(Box::pin(rerun_core::runtime::detach(async move {
        let call = call.run_async(store.get(), async move {
            let failure = match CatchPanic(Box::pin(inner.call(req))).await {
                Ok(Ok(response)) => match capture(response, max_body).await {
                    Ok((recorded, live)) => {
                        *kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(live);
                        return Ok(recorded);
                    }
                    Err(failure) => failure,
                },
                Ok(Err(e)) => Failure::Inner(e),
                Err(()) => Failure::Panicked,
            };
            // A `once` request the service answered "not processed" (425, 429) had no effect:
            // its claim is released like a replayable one's, not left unknown.
            if !once || matches!(&failure, Failure::Pass(r) if not_processed(r.status())) {
                return Err(failure);
            }
            // The runtime releases the claim of a body that returns an error, and a retry
            // would run this handler again: the failure leaves by another way, and the body
            // never returns.
            let _ = leave.send(failure);
            std::future::pending().await
        });
        match unless_left(call, left).await {
            Ok(out) => out,
            Err(failure) => Err(failure),
        }
    })));
    let result = run.await;
    let live = answered.lock().unwrap_or_else(|p| p.into_inner()).take();
    match result {
        Ok(Ok(outcome)) => match live.filter(|_| !outcome.replayed) {
            // The handler ran for this request: its client gets the handler's own response.
            Some(response) => Ok(response),
            // Only a record written by hand fails here; its key is not run again (as for any
            // corrupt record, until it is forgotten).
            None => match outcome.value.into_response(outcome.replayed) {
                Ok(response) => Ok(response),
                Err(kind) => Ok(problem_of(&Error::corrupt(&record_key, kind))),
            },
        },
        // The store refused to keep the response (its limit on results is below `max_body`):
        // the client gets it all the same, unrecorded, and the key was given back (released,
        // or unknown for a `once` handler), as for a response over `max_body`.
        Ok(Err(Failure::Rerun(e)))
            if matches!(
                e,
                Error::Codec {
                    what: "the result",
                    ..
                }
            ) =>
        {
            match live {
                Some(response) => {
                    tracing::info!(error = %rerun_core::telemetry::error_field(&e), "rerun-http: the store would not record the response; it was returned unrecorded");
                    Ok(response)
                }
                None => Ok(problem_of(&e)),
            }
        }
        // The store failed after the handler answered (its answer could not be recorded, even
        // sent again): the client gets the handler's answer, as it would without the layer; a
        // problem in its place would hide the result of a request that was processed (a
        // payment's id) and invite a retry that runs it again. The key was given back (released,
        // or unknown for a `once` handler) as far as the store allowed.
        Ok(Err(Failure::Rerun(e))) if matches!(e, Error::Store { .. }) => match live {
            Some(response) => {
                tracing::warn!(error = %rerun_core::telemetry::error_field(&e), "rerun-http: the handler's answer could not be recorded; it was returned unrecorded");
                Ok(response)
            }
            None => Ok(problem_of(&e)),
        },
        // Any other (`LeaseLost`: another attempt took the key over, and its answer, not this
        // one's, is the key's): a problem, never an answer the key's record contradicts.
        Ok(Err(Failure::Rerun(e))) => Ok(problem_of(&e)),
        // A `once` request answered "not processed": released, as the body returned.
        Ok(Err(Failure::Pass(response))) if once && not_processed(response.status()) => {
            Ok(response)
        }
        Ok(Err(Failure::Panicked)) if once => {
            tracing::error!(
                "rerun-http: an at-most-once handler panicked; its outcome is unknown and it will not run again for this key"
            );
            Ok(problem_of(&unknown))
        }
        Ok(Err(failure)) if once => {
            tracing::warn!(
                "rerun-http: an at-most-once handler's answer was not recorded; its outcome is unknown and it will not run again for this key"
            );
            match failure {
                Failure::Pass(response) => Ok(response),
                Failure::Inner(e) => Err(e),
                Failure::BodyFailed | Failure::Panicked => Ok(problem_of(&unknown)),
                Failure::Rerun(e) => Ok(problem_of(&e)),
            }
        }
        Ok(Err(Failure::Pass(response))) => Ok(response),
        Ok(Err(Failure::Inner(e))) => Err(e),
        Ok(Err(Failure::BodyFailed)) => Ok(Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "response_failed",
            "the response could not be produced and nothing was recorded for its idempotency key; retry it with the same key",
        )
        .into_response()),
        Ok(Err(Failure::Panicked)) => {
            tracing::error!(
                "rerun-http: the handler panicked; its key was released and nothing was recorded"
            );
            Ok(handler_failed())
        }
        Err(()) if once => {
            // A panic outside the handler (in reading its response, say): its claim was
            // marked unknown as the panic unwound through the call.
            tracing::error!(
                "rerun-http: an at-most-once request did not finish; its outcome is unknown and its handler will not run again for this key"
            );
            Ok(problem_of(&unknown))
        }
        Err(()) => {
            // A panic outside the handler (in reading its response, say): its claim was
            // released as the panic unwound through the call.
            tracing::error!("rerun-http: the request did not finish; nothing was recorded");
            Ok(handler_failed())
        }
    }
}

fn handler_failed<B>() -> Response<ResponseBody<B>> {
    Problem::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "handler_failed",
        "the request failed and nothing was recorded for its idempotency key; retry it with the same key",
    )
    .into_response()
}

/// The problem response of a rerun error, logged for the operator.
fn problem_of<B>(e: &Error) -> Response<ResponseBody<B>> {
    match e {
        Error::InProgress { .. } | Error::PayloadMismatch { .. } => {
            tracing::debug!(error = %rerun_core::telemetry::error_field(e), "rerun-http: request refused")
        }
        _ => {
            tracing::warn!(error = %rerun_core::telemetry::error_field(e), "rerun-http: request failed")
        }
    }
    e.problem().into_response()
}

/// The handler's response, read whole (with its trailers) to be recorded, and returned as the
/// handler gave it with that body; or returned unrecorded when it is a 5xx or a gRPC failure
/// of the same kind, an event stream, or larger than `max_body`.
async fn capture<E, B>(
    response: Response<B>,
    max_body: usize,
) -> Result<(Recorded, Response<ResponseBody<B>>), Failure<E, B>>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    if parts.status.is_server_error()
        || says_retry_later(parts.status)
        || is_event_stream(&parts)
        || grpc_failed(&parts.headers)
    {
        return Err(Failure::Pass(Response::from_parts(
            parts,
            ResponseBody::streaming(body),
        )));
    }
    match read_response(body, max_body).await {
        Captured::Whole(bytes, trailers) => match trailers.as_ref().is_some_and(grpc_failed) {
            true => Err(Failure::Pass(Response::from_parts(
                parts,
                ResponseBody::whole(bytes, trailers),
            ))),
            false => Ok((
                Recorded::new(&parts, bytes.clone(), trailers.as_ref()),
                Response::from_parts(parts, ResponseBody::whole(bytes, trailers)),
            )),
        },
        Captured::Partial(body) => {
            tracing::info!(
                max_body,
                "rerun-http: a response larger than max_body was returned unrecorded"
            );
            Err(Failure::Pass(Response::from_parts(parts, body)))
        }
        Captured::Failed(e) => {
            tracing::warn!(error = %e, "rerun-http: the handler's response body failed; nothing was recorded");
            Err(Failure::BodyFailed)
        }
    }
}

/// Runs `call` until it finishes, or until its body hands over a failure through `left`: the
/// call is then dropped mid-body, which is how a `once` call's claim is left unknown (a
/// dropped call gives its claim back as unknown, in the background, where a failed body's
/// would be released). Called on the task that polls the body, it sees the failure as soon as
/// the body has handed it over and returned `Pending`.
async fn unless_left<F: Future, T>(
    call: F,
    mut left: tokio::sync::oneshot::Receiver<T>,
) -> Result<F::Output, T> {
    let mut call = Box::pin(call);
    let out = std::future::poll_fn(|cx| match call.as_mut().poll(cx) {
        Poll::Ready(out) => Poll::Ready(Ok(out)),
        Poll::Pending => match left.try_recv() {
            Ok(failure) => Poll::Ready(Err(failure)),
            Err(_) => Poll::Pending,
        },
    })
    .await;
    drop(call);
    out
}

/// Whether `status` is a 4xx that says "try again later" rather than answering the request:
/// `408 Request Timeout` (a timeout layer inside this one cut the handler short, its effect
/// perhaps half done), `425 Too Early` and `429 Too Many Requests` (a rate limiter). Recorded,
/// they would be replayed to every retry for the record's whole ttl; like a 5xx, they are
/// returned unrecorded and the key is given back.
fn says_retry_later(status: http::StatusCode) -> bool {
    status.as_u16() == 408 || not_processed(status)
}

/// Whether `status` says the request was not processed at all (`425 Too Early`, `429 Too Many
/// Requests`), so that even a `once` request's key is released rather than left unknown. A
/// `408` is not: a timeout inside the layer may have cut the handler short mid-effect.
fn not_processed(status: http::StatusCode) -> bool {
    matches!(status.as_u16(), 425 | 429)
}

/// Whether `headers` (a response's, or its trailers) carry a gRPC status that says "try
/// again", as a 5xx or a [`says_retry_later`] status does, so that it is not recorded: the ones
/// the standard mapping of gRPC codes to HTTP answers with a 5xx (UNKNOWN, DEADLINE_EXCEEDED,
/// UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS) or with 429 (RESOURCE_EXHAUSTED), and
/// CANCELLED and ABORTED, which gRPC defines as retried at a higher level. Every other status
/// (OK and the other 4xx-like ones) is an answer a retry would get again.
fn grpc_failed(headers: &http::HeaderMap) -> bool {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|code| matches!(code, 1 | 2 | 4 | 8 | 10 | 12 | 13 | 14 | 15))
}

/// Whether a response is a stream of server-sent events, which is never recorded.
fn is_event_stream(parts: &http::response::Parts) -> bool {
    parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// A future that turns a panic while polling into `Err(())` (the panic hook has printed it),
/// so a panicking handler fails its call like an error does: a replayable call's claim is
/// released before the response is sent, not later by a destructor on another thread.
struct CatchPanic<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchPanic<F> {
    type Output = Result<F::Output, ()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::KeyError;

    /// The codes of the problems this file answers itself: the string after the status of
    /// each `Problem::new(`.
    fn own_codes() -> Vec<&'static str> {
        let source = include_str!("service.rs");
        let mut codes = Vec::new();
        let mut rest = source;
        while let Some(at) = rest.find("Problem::new(\n") {
            rest = &rest[at + "Problem::new(\n".len()..];
            let mut lines = rest.lines().skip(1);
            if let Some(code) = lines
                .next()
                .map(str::trim)
                .and_then(|l| l.strip_prefix('"'))
                .and_then(|l| l.strip_suffix("\","))
            {
                codes.push(code);
            }
        }
        codes
    }

    #[test]
    fn every_code_is_in_the_http_guide() {
        let mut codes = own_codes();
        assert_eq!(
            codes,
            [
                "body_too_large",
                "body_unreadable",
                "response_failed",
                "handler_failed"
            ]
        );
        codes.extend([KeyError::Missing, KeyError::Empty].map(|e| e.problem().code()));
        let guide = include_str!("../../docs/http.md");
        for code in codes {
            assert!(
                guide.contains(&format!("| `{code}` |")),
                "docs/http.md has no row for the code {code}"
            );
        }
    }
}
