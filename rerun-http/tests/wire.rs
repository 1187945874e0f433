//! The layer behind a hyper HTTP/1.1 server on loopback, with other layers around it: what
//! reaches the client on the wire.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use rerun_http::IdempotencyLayer;
use support::{raw, raw_status, Runs, Server};

/// Sends `request` on a connection of its own and returns the raw response.
async fn raw_async(server: &Server, request: String) -> String {
    let addr = server.addr;
    tokio::task::spawn_blocking(move || raw(addr, request.as_bytes()))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A handler's trailers, named in its `Trailer` header, reach an HTTP/1.1 client that accepts
/// them (`TE: trailers`), on the first response and on the replay: both are sent chunked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_reach_an_http1_client_on_the_first_response_and_the_replay() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let handler = move || {
        let runs = counted.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let mut trailers = http::HeaderMap::new();
            trailers.insert("x-checksum", http::HeaderValue::from_static("abc"));
            let body = Full::new(Bytes::from_static(b"hello"))
                .with_trailers(async move { Some(Ok(trailers)) });
            Response::builder()
                .header("content-type", "text/plain")
                .header("trailer", "x-checksum")
                .body(Body::new(body))
                .unwrap_or_else(|e| panic!("a response: {e}"))
        }
    };
    let router = Router::new()
        .route("/upload", post(handler))
        .layer(IdempotencyLayer::new(rerun_core::MemoryStore::new()));
    let server = Server::serve(router, Runs::default()).await;
    let request = "POST /upload HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"sum-1\"\r\nTE: trailers\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello";
    for replayed in [false, true] {
        let response = raw_async(&server, request.to_owned()).await;
        assert_eq!(raw_status(&response), 200, "{response}");
        let lower = response.to_ascii_lowercase();
        let (head, body) = lower.split_once("\r\n\r\n").unwrap_or((&lower, ""));
        assert!(head.contains("transfer-encoding: chunked"), "{response}");
        assert!(head.contains("trailer: x-checksum"), "{response}");
        assert_eq!(
            head.contains("idempotent-replayed: true"),
            replayed,
            "{response}"
        );
        assert_eq!(
            body, "5\r\nhello\r\n0\r\nx-checksum: abc\r\n\r\n",
            "{response}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A chunked request body over the limit of `RequestBodyLimitLayer`, set around the layer on
/// an axum router (which hands the limit's error on wrapped in one of its own), is `413`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_a_limit_set_around_the_layer_gets_413_over_http() {
    let runs = Runs::default();
    let router = support::app(runs.clone())
        .layer(IdempotencyLayer::new(rerun_core::MemoryStore::new()))
        .layer(tower_http::limit::RequestBodyLimitLayer::new(64));
    let server = Server::serve(router, runs).await;
    let chunked = |key: &str, body: &str| {
        format!("POST /payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: {key}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{body}")
    };
    let within = raw_async(&server, chunked("within", "5\r\nhello\r\n0\r\n\r\n")).await;
    assert_eq!(raw_status(&within), 201, "{within}");
    let forty = "0123456789012345678901234567890123456789";
    let over = raw_async(
        &server,
        chunked(
            "over",
            &format!("28\r\n{forty}\r\n28\r\n{forty}\r\n0\r\n\r\n"),
        ),
    )
    .await;
    assert_eq!(raw_status(&over), 413, "{over}");
    assert!(over.contains("body_too_large"), "{over}");
    assert_eq!(server.runs.get(), 1, "the handler did not run for it");
}
