//! # rerun-http: the `Idempotency-Key` header for tower, hyper and axum services
//!
//! Clients retry: a mobile app after a timeout, a payment form submitted twice, a gateway
//! replaying. [`IdempotencyLayer`] makes a retried request return the first one's response
//! instead of running the handler again, following the IETF draft "The Idempotency-Key HTTP
//! Header Field" and Stripe's practice, on rerun's claims, leases and fencing tokens: one
//! winner among concurrent duplicates across every server sharing the store, and a crashed
//! server's requests taken over by the retry.
//!
//! ```
//! use std::time::Duration;
//! use axum::{routing::post, Router};
//! use rerun_http::IdempotencyLayer;
//!
//! async fn create_payment(body: String) -> (http::StatusCode, String) {
//!     (http::StatusCode::CREATED, format!("paid: {body}"))
//! }
//!
//! # fn tenant_of(req: &http::request::Parts) -> Option<String> { None }
//! let store = rerun_core::MemoryStore::new(); // or SqliteStore, PostgresStore, RedisStore
//! let app: Router = Router::new()
//!     .route("/payments", post(create_payment))
//!     .layer(
//!         IdempotencyLayer::new(store)
//!             .principal(|req: &http::request::Parts| tenant_of(req)) // scopes keys
//!             .required(true)                 // a POST without the header gets 400
//!             .wait(Duration::from_secs(5))   // a concurrent duplicate waits, then replays
//!             .ttl(Duration::from_secs(24 * 3600)),
//!     );
//! ```
//!
//! ## What each request gets
//!
//! | request | response |
//! |---|---|
//! | POST/PATCH with a new key | the handler runs once; its status, headers and body are recorded and returned |
//! | same key, same request (method, path, query, content type, body, and the [`fingerprint_headers`](IdempotencyLayer::fingerprint_headers)), after completion | the recorded status, headers and body, byte for byte, plus `Idempotent-Replayed: true`; the handler does not run |
//! | same key while the first is running | `409 Conflict` with `Retry-After: 1`, or with [`wait`](IdempotencyLayer::wait), the first one's response (also with `Idempotent-Replayed: true`) |
//! | same key, different request | `422 Unprocessable Entity` |
//! | no key where [`required(true)`](IdempotencyLayer::required) | `400 Bad Request` |
//! | a malformed key, an empty one, one over 255 characters, or the header sent twice | `400 Bad Request` |
//! | a body over [`max_body`](IdempotencyLayer::max_body) (1 MiB by default), or over the limit of a layer around this one (tower-http's `RequestBodyLimitLayer`) | `413 Payload Too Large`; the handler does not run |
//! | the handler answers 5xx, `408`, `425` or `429`, or panics | nothing is recorded (a panic gives `500`); a retry runs the handler again |
//! | the handler answers `text/event-stream` (server-sent events), or a body over `max_body` | returned as it streams, not recorded; a retry runs the handler again |
//! | with [`once`](IdempotencyLayer::once), any of the last two rows, a response body that fails, or an error of the inner service | the answer as above (a panic or a failed body: `500` with a problem saying the outcome is unknown), not recorded; the key's outcome is left unknown: a retry gets that `500`, and the handler is never run twice |
//! | the store is unreachable | `503 Service Unavailable` with `Retry-After: 1`; the handler does not run |
//! | the store fails while the handler's answer is recorded (after the completion was sent again) | the handler's answer, unrecorded; the key is given back (left unknown with [`once`](IdempotencyLayer::once)) as far as the store allows, or else when its lease ends |
//! | the server died mid-handler, then the client retries | the retry takes the dead server's claim over and runs the handler once; with [`once`](IdempotencyLayer::once), `500` with a problem saying the outcome is unknown, and the handler is never run twice |
//! | GET, HEAD, OPTIONS, PUT, DELETE, or no key where it is not required | passed through untouched ([`methods`](IdempotencyLayer::methods) changes which methods are handled) |
//!
//! Every error response is `application/problem+json` (RFC 9457) saying what happened and
//! what to do, with a stable `code` member; none names a process, host or store.
//!
//! ## Keys and tenants
//!
//! The key is the draft's structured-field string (`Idempotency-Key: "8e03978e"`); a bare
//! token of visible ASCII (`Idempotency-Key: 8e03978e`) is the same key. Keys are scoped by
//! the [`principal`](IdempotencyLayer::principal): one tenant can never receive another's
//! recorded response, whatever key it sends. The principal must come from authenticated data
//! (a request extension set by the authentication layer), never from a header the client
//! chooses. Without a principal, all clients share one key space: safe only when keys are
//! unguessable and every client is trusted.
//!
//! Keys are also scoped by route: with the `axum` feature, axum's matched route
//! (`/payments/{id}`), so the same key sent to `/payments` and to `/refunds` names two
//! operations, while `/payments/7` and `/payments/8` under one route are two different
//! requests for one key (`422`). Below other routers, the layer's
//! [`scope`](IdempotencyLayer::scope) is the only one: give each route's layer its own.
//!
//! ## Disconnects and crashes
//!
//! The handler runs on the request's own task while the client waits; if the client hangs up,
//! the rest of the call (handler and record) moves to a tokio task of its own, so the
//! disconnect does not cut it short: its response is recorded, and the retry replays it. A server killed mid-handler leaves a
//! claim that the retry takes over at once on the same host (its process is provably gone)
//! or when its lease (30 s by default) ends elsewhere.
//!
//! ## Features
//!
//! `axum`: an extractor for the key ([`IdempotencyKey`] implements `FromRequestParts`) for
//! handlers that call `#[idempotent]` functions themselves, and `IntoResponse` for
//! `rerun_core::Error` and [`Problem`]. The layer itself needs no framework: it is a tower
//! `Layer` over `http` 1 requests and responses.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod body;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
mod extract;
mod fingerprint;
mod key;
mod layer;
mod record;
mod service;

pub use body::{BoxError, RequestBody, ResponseBody};
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use extract::KeyRejection;
pub use key::{IdempotencyKey, KeyError, IDEMPOTENCY_KEY, MAX_KEY_LEN};
pub use layer::{IdempotencyLayer, DEFAULT_MAX_BODY, DEFAULT_SCOPE};
pub use record::IDEMPOTENT_REPLAYED;
pub use rerun_core::problem::{Problem, PROBLEM_JSON};
pub use service::{IdempotencyService, ResponseFuture};
