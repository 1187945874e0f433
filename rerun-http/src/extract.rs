//! The key as an axum extractor (feature `axum`), for handlers that call `#[idempotent]`
//! functions themselves instead of using the layer.

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::response::{IntoResponse, Response};
use http::request::Parts;

use crate::key::{IdempotencyKey, KeyError, IDEMPOTENCY_KEY};

/// Why the extractor refused a request: a `400 Bad Request` problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRejection(pub KeyError);

impl IntoResponse for KeyRejection {
    fn into_response(self) -> Response {
        self.0.problem().into_response()
    }
}

/// Extracts the `Idempotency-Key` header: a request without one, or with a malformed one, is
/// refused with `400 Bad Request`. As `Option<IdempotencyKey>`, a missing key is `None` and a
/// malformed one is still refused. Behind an [`IdempotencyLayer`](crate::IdempotencyLayer),
/// it is the key the layer read, from whichever header the layer was told to read
/// ([`header`](crate::IdempotencyLayer::header)).
///
/// ```
/// use axum::{routing::post, Json, Router};
/// use rerun_core::{idempotent, observe_async, Error, MemoryStore};
/// use rerun_http::IdempotencyKey;
///
/// static STORE: std::sync::LazyLock<MemoryStore> = std::sync::LazyLock::new(MemoryStore::new);
///
/// #[idempotent(key = key.as_str(), scope = "refunds", store = &*STORE, skip(key))]
/// async fn refund(key: &IdempotencyKey, cents: u64) -> Result<String, Error> {
///     Ok(format!("refunded {cents}"))
/// }
///
/// async fn handler(key: IdempotencyKey, Json(cents): Json<u64>) -> Result<String, Error> {
///     let (result, seen) = observe_async(refund(&key, cents)).await;
///     let replayed = seen.is_some_and(|s| s.replayed);
///     Ok(format!("{}{}", result?, if replayed { " (replayed)" } else { "" }))
/// }
///
/// let app: Router = Router::new().route("/refunds", post(handler));
/// ```
impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = KeyRejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        match key_of(parts) {
            Ok(Some(key)) => Ok(key),
            Ok(None) => Err(KeyRejection(KeyError::Missing)),
            Err(e) => Err(KeyRejection(e)),
        }
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for IdempotencyKey {
    type Rejection = KeyRejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Option<Self>, Self::Rejection> {
        key_of(parts).map_err(KeyRejection)
    }
}

/// The key the layer read, or else the `Idempotency-Key` header's.
fn key_of(parts: &Parts) -> Result<Option<IdempotencyKey>, KeyError> {
    match parts.extensions.get::<IdempotencyKey>() {
        Some(key) => Ok(Some(key.clone())),
        None => IdempotencyKey::from_headers(&parts.headers, &IDEMPOTENCY_KEY),
    }
}
