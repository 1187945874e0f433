//! [`IdempotencyLayer`]: the builder, and the configuration its services share.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{HeaderName, Method};
use rerun_core::{DynStore, Error, Options};
use tower_layer::Layer;

use crate::key::IDEMPOTENCY_KEY;
use crate::service::IdempotencyService;

/// The default `max_body`: 1 MiB.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// The default scope of the layer's records in the store.
pub const DEFAULT_SCOPE: &str = "http";

type Principal = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Where the layer's records are kept.
#[derive(Clone)]
pub(crate) enum StoreRef {
    Owned(Arc<dyn DynStore>),
    /// `rerun_core::global()`, looked up at the first request that needs it.
    Global,
}

/// A store resolved for one request, movable into the handler's task.
pub(crate) enum Resolved {
    Owned(Arc<dyn DynStore>),
    Static(&'static dyn DynStore),
}

impl Resolved {
    pub(crate) fn get(&self) -> &dyn DynStore {
        match self {
            Resolved::Owned(store) => &**store,
            Resolved::Static(store) => *store,
        }
    }
}

impl StoreRef {
    pub(crate) fn resolve(&self) -> Result<Resolved, Error> {
        match self {
            StoreRef::Owned(store) => Ok(Resolved::Owned(store.clone())),
            StoreRef::Global => rerun_core::global().map(Resolved::Static),
        }
    }
}

/// The `Idempotency-Key` layer for tower services (axum routers and method routers, hyper
/// services, tonic's HTTP stack): see the [crate] documentation for what it does with each
/// request.
///
/// ```
/// use std::time::Duration;
/// use axum::{routing::post, Router};
/// use rerun_core::MemoryStore;
/// use rerun_http::IdempotencyLayer;
///
/// /// The caller's account, inserted into the request's extensions by the authentication
/// /// layer (outside this one) once it has checked the caller's credentials.
/// #[derive(Clone)]
/// struct AccountId(String);
///
/// async fn create_payment(body: String) -> (http::StatusCode, String) {
///     (http::StatusCode::CREATED, format!("paid: {body}"))
/// }
///
/// let app: Router = Router::new().route("/payments", post(create_payment)).layer(
///     IdempotencyLayer::new(MemoryStore::new())
///         // Who is calling, as authentication established it: never a header the client
///         // sets as it likes.
///         .principal(|req: &http::request::Parts| {
///             req.extensions.get::<AccountId>().map(|a| a.0.clone())
///         })
///         .required(true)
///         .wait(Duration::from_secs(5))
///         .ttl(Duration::from_secs(24 * 3600)),
/// );
/// ```
///
/// # Limits
///
/// - A request's body is fingerprinted as it is sent, bytes and `Content-Type` included. A
///   multipart body carries a random boundary in both: a client that encodes a multipart
///   upload again for its retry (most HTTP clients pick a new boundary each time) sends a
///   different request, and gets `422`. Clients must resend the same bytes.
/// - A response is read whole before it is sent, and its key stays in progress until then. A
///   streaming response (server-streaming gRPC, NDJSON progress) reaches its client only at
///   its end (or past `max_body`, unrecorded), and a duplicate finds its key in progress for
///   as long as it streams: keep such routes off the layer. Server-sent events
///   (`text/event-stream`) are the exception: passed through as they stream, unrecorded.
#[derive(Clone)]
pub struct IdempotencyLayer {
    pub(crate) store: StoreRef,
    pub(crate) scope: Cow<'static, str>,
    pub(crate) principal: Option<Principal>,
    pub(crate) required: bool,
    pub(crate) options: Options,
    pub(crate) max_body: usize,
    pub(crate) methods: Vec<Method>,
    pub(crate) header: HeaderName,
    pub(crate) fingerprint_headers: Vec<HeaderName>,
}

impl fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("scope", &self.scope)
            .field("principal", &self.principal.is_some())
            .field("required", &self.required)
            .field("options", &self.options)
            .field("max_body", &self.max_body)
            .field("methods", &self.methods)
            .field("header", &self.header)
            .field("fingerprint_headers", &self.fingerprint_headers)
            .finish_non_exhaustive()
    }
}

impl IdempotencyLayer {
    /// A layer keeping its records in `store` (any rerun store, moved in; an `Arc` of one
    /// works too), with the defaults: keys optional, POST and PATCH handled, a 24 h ttl, a 30 s
    /// lease, no waiting, a 1 MiB body limit, the header `Idempotency-Key`, no principal.
    ///
    /// ```
    /// let layer = rerun_http::IdempotencyLayer::new(rerun_core::MemoryStore::new());
    /// ```
    pub fn new<S: DynStore + 'static>(store: S) -> IdempotencyLayer {
        IdempotencyLayer::with_store(StoreRef::Owned(Arc::new(store)))
    }

    /// A layer keeping its records in the process-wide store (`rerun_core::global()`: the one
    /// given to `rerun_core::init`, else `RERUN_STORE`, else SQLite under `.rerun/`). If that
    /// store cannot be opened, requests the layer handles get a problem response, and the
    /// handler does not run; call `rerun_core::init_from_env()` at start-up to fail fast instead.
    ///
    /// ```
    /// let layer = rerun_http::IdempotencyLayer::global();
    /// ```
    pub fn global() -> IdempotencyLayer {
        IdempotencyLayer::with_store(StoreRef::Global)
    }

    fn with_store(store: StoreRef) -> IdempotencyLayer {
        IdempotencyLayer {
            store,
            scope: Cow::Borrowed(DEFAULT_SCOPE),
            principal: None,
            required: false,
            options: Options::new(),
            max_body: DEFAULT_MAX_BODY,
            methods: vec![Method::POST, Method::PATCH],
            header: IDEMPOTENCY_KEY,
            fingerprint_headers: Vec::new(),
        }
    }

    /// Scopes keys by who sends them: `principal` reads the caller's identity (a tenant, an
    /// account, an API key's id) from the request's parts, after authentication. Two
    /// principals sending the same key get two runs, and one never receives the other's
    /// response; `None` is the anonymous scope, shared by every request without a principal
    /// and by no principal.
    ///
    /// The principal must come from authenticated data: what the authentication layer
    /// established and put in the request's extensions, never a value the client chooses (an
    /// `X-Tenant` header, a field of the body). A client that could name another tenant would,
    /// with one of its keys, receive that tenant's recorded responses.
    ///
    /// Without a principal, every client of the routes under the layer shares one key space:
    /// that is safe only when keys are unguessable (random UUIDs) and every client is trusted
    /// to keep its keys to itself, as with one internal caller.
    ///
    /// ```
    /// # use rerun_http::IdempotencyLayer;
    /// let layer = IdempotencyLayer::new(rerun_core::MemoryStore::new())
    ///     .principal(|req: &http::request::Parts| {
    ///         req.extensions.get::<AccountId>().map(|a| a.0.clone())
    ///     });
    /// #[derive(Clone)]
    /// struct AccountId(String); // inserted by the authentication layer
    /// ```
    pub fn principal<F>(mut self, principal: F) -> IdempotencyLayer
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.principal = Some(Arc::new(principal));
        self
    }

    /// Whether a request of a handled method must carry a key (`400 Bad Request` without one).
    /// Default `false`: a request without a key passes through untouched.
    pub fn required(mut self, required: bool) -> IdempotencyLayer {
        self.required = required;
        self
    }

    /// A request that finds its key in progress waits up to `wait` for the first one's
    /// response, then returns it (with `Idempotent-Replayed: true`), instead of `409 Conflict`.
    pub fn wait(mut self, wait: Duration) -> IdempotencyLayer {
        self.options = self.options.wait(wait);
        self
    }

    /// How long a recorded response is replayed (default 24 h).
    pub fn ttl(mut self, ttl: Duration) -> IdempotencyLayer {
        self.options = self.options.ttl(ttl);
        self
    }

    /// How long a request's claim holds without renewal (default 30 s, at least 100 ms); it is
    /// renewed while the handler runs, so it bounds how long a crashed server's keys stay in
    /// progress, not how long a handler may take.
    pub fn lease(mut self, lease: Duration) -> IdempotencyLayer {
        self.options = self.options.lease(lease);
        self
    }

    /// At-most-once: a handler that started and whose server died before it answered is never
    /// run again for its key; the retry gets `500` with a problem saying the outcome is
    /// unknown. The same goes for a handler whose answer cannot be recorded (a 5xx, a panic, an
    /// event stream, a response over `max_body`, a response body that fails, an error of the
    /// inner service): that answer is returned, and its key is left unknown. For effects that
    /// cannot be repeated (charging a card, sending an email). Without it, the retry runs the
    /// handler again.
    pub fn once(mut self) -> IdempotencyLayer {
        self.options = self.options.once();
        self
    }

    /// The largest request and response body, in bytes (default 1 MiB). A larger request is
    /// refused with `413 Payload Too Large`; a larger response is returned but not recorded,
    /// and its key is released (left unknown with [`once`](IdempotencyLayer::once)).
    pub fn max_body(mut self, bytes: usize) -> IdempotencyLayer {
        self.max_body = bytes;
        self
    }

    /// The methods the layer handles (default POST and PATCH); others pass through untouched.
    ///
    /// ```
    /// # use rerun_http::IdempotencyLayer;
    /// let layer = IdempotencyLayer::new(rerun_core::MemoryStore::new())
    ///     .methods([http::Method::POST, http::Method::PATCH, http::Method::DELETE]);
    /// ```
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> IdempotencyLayer {
        self.methods = methods.into_iter().collect();
        self
    }

    /// The header carrying the key (default `Idempotency-Key`).
    pub fn header(mut self, name: HeaderName) -> IdempotencyLayer {
        self.header = name;
        self
    }

    /// Headers that are part of "the same request" besides method, path, query, content type
    /// and body: a retry whose values differ gets `422` (e.g. a `Stripe-Version`-like header
    /// that changes what the handler does).
    pub fn fingerprint_headers(
        mut self,
        names: impl IntoIterator<Item = HeaderName>,
    ) -> IdempotencyLayer {
        self.fingerprint_headers = names.into_iter().collect();
        self
    }

    /// The scope of the layer's records in the store (default `"http"`): give two layers on
    /// one store different scopes to keep their keys apart.
    pub fn scope(mut self, scope: impl Into<Cow<'static, str>>) -> IdempotencyLayer {
        self.scope = scope.into();
        self
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> IdempotencyService<S> {
        IdempotencyService::new(inner, Arc::new(self.clone()))
    }
}
