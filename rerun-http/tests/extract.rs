//! The `IdempotencyKey` extractor behind the layer gets the key the layer read, from whichever
//! header the layer reads; without the layer it reads `Idempotency-Key` itself.

#![cfg(feature = "axum")]

use axum::body::Body;
use axum::routing::post;
use axum::Router;
use http::{HeaderName, Request, StatusCode};
use http_body_util::BodyExt;
use rerun_http::{IdempotencyKey, IdempotencyLayer};
use tower::ServiceExt;

async fn echo(key: IdempotencyKey) -> String {
    key.as_str().to_owned()
}

async fn send(app: Router, header: &str, key: &str) -> (StatusCode, String) {
    let request = Request::post("/echo")
        .header(header, key)
        .body(Body::from("x"))
        .unwrap_or_else(|e| panic!("a request: {e}"));
    let response = app.oneshot(request).await.unwrap_or_else(|e| panic!("{e}"));
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn behind_a_layer_reading_another_header_the_extractor_gets_its_key() {
    let layer = IdempotencyLayer::new(rerun_core::MemoryStore::new())
        .header(HeaderName::from_static("x-request-key"));
    let app = Router::new().route("/echo", post(echo)).layer(layer);
    let (status, body) = send(app, "x-request-key", "\"order-7\"").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "order-7"));
}

#[tokio::test]
async fn without_the_layer_the_extractor_reads_the_standard_header() {
    let app = Router::new().route("/echo", post(echo));
    let (status, body) = send(app.clone(), "idempotency-key", "order-8").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "order-8"));
    let (status, _) = send(app, "x-request-key", "order-8").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}
