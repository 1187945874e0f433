//! The layer as a tower service, without a server: an inner service that fails, and responses
//! no HTTP client would take whole (25,000 header values).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use rerun_core::Store;
use rerun_http::{IdempotencyLayer, RequestBody, ResponseBody, IDEMPOTENT_REPLAYED};
use tower::{Layer, ServiceExt};

type Answer = Response<ResponseBody<Full<Bytes>>>;

/// A request for `/charge` with the idempotency key `key`.
fn request(key: &str) -> Request<Full<Bytes>> {
    Request::post("/charge")
        .header("idempotency-key", key)
        .body(Full::new(Bytes::from_static(b"{\"cents\":500}")))
        .unwrap_or_else(|e| panic!("a request: {e}"))
}

/// The problem's `code` member.
async fn code(response: Answer) -> String {
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("reading: {e}"))
        .to_bytes();
    let json: serde_json::Value =
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    json["code"].as_str().unwrap_or_default().to_owned()
}

/// The layer around an inner service that counts its runs and fails with an error of its own
/// (a timeout of a downstream call, say) after it started.
fn failing(layer: IdempotencyLayer, runs: Arc<AtomicUsize>) -> impl Fn(&str) -> Call {
    let service = layer.layer(tower::service_fn(
        move |_req: Request<RequestBody<Full<Bytes>>>| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Err::<Response<Full<Bytes>>, _>(std::io::Error::other("the charge timed out"))
            }
        },
    ));
    move |key: &str| Box::pin(service.clone().oneshot(request(key)))
}

type Call = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Answer, std::io::Error>> + Send + 'static>,
>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inner_error_of_a_once_service_leaves_the_key_unknown() {
    let runs = Arc::new(AtomicUsize::new(0));
    let call = failing(
        IdempotencyLayer::new(rerun_core::MemoryStore::new()).once(),
        runs.clone(),
    );
    let first = call("k").await;
    assert!(first.is_err(), "the inner service's error is returned");
    // The claim is marked unknown in the background as the call is dropped: until then a
    // retry is told the first attempt is in progress (409), never run.
    let deadline = Instant::now() + Duration::from_secs(10);
    for _ in 0..2 {
        let retry = loop {
            match call("k").await {
                Ok(r) if r.status() == StatusCode::CONFLICT && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(r) => break r,
                Err(e) => panic!("the once service ran again and failed: {e}"),
            }
        };
        assert_eq!(retry.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(code(retry).await, "outcome_unknown");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the once service ran again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inner_error_of_a_replayable_service_releases_the_key() {
    let runs = Arc::new(AtomicUsize::new(0));
    let call = failing(
        IdempotencyLayer::new(rerun_core::MemoryStore::new()),
        runs.clone(),
    );
    assert!(call("k").await.is_err());
    assert!(call("k").await.is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the retry runs again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_with_25000_values_of_one_header_is_returned_and_replayed() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let service = IdempotencyLayer::new(rerun_core::MemoryStore::new()).layer(tower::service_fn(
        move |_req: Request<RequestBody<Full<Bytes>>>| {
            let runs = counted.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let mut response = Response::new(Full::new(Bytes::from_static(b"tagged")));
                for i in 0..25_000 {
                    let value = HeaderValue::from_str(&i.to_string())
                        .unwrap_or(HeaderValue::from_static("0"));
                    response.headers_mut().append("x-tag", value);
                }
                Ok::<_, std::io::Error>(response)
            }
        },
    ));
    for replayed in [false, true] {
        let response = service
            .clone()
            .oneshot(request("tags"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers().get_all("x-tag").iter().count(), 25_000);
        assert_eq!(
            response.headers().get(IDEMPOTENT_REPLAYED).is_some(),
            replayed
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

mod support;

/// A store that fails after the handler answered (while its answer is recorded, every attempt
/// of it): the client gets the handler's own answer, unrecorded, in both modes, as it would
/// without the layer; not a problem that hides a processed request's result and invites a
/// retry that runs it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failing_after_the_handler_answered_leaves_the_client_its_answer() {
    for once in [false, true] {
        let fixture = tokio::task::spawn_blocking(|| {
            support::Fixture::new(support::Kind::Memory, "recordfail")
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("the memory store needs no server"));
        let layer = match once {
            true => fixture.switched_layer().once(),
            false => fixture.switched_layer(),
        };
        let switch = fixture.switch.clone();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let service = layer.layer(tower::service_fn(
            move |_req: Request<RequestBody<Full<Bytes>>>| {
                // The claim went through; the store goes down before the answer is recorded.
                switch.store(true, Ordering::SeqCst);
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    Ok::<_, std::io::Error>(
                        Response::builder()
                            .status(StatusCode::CREATED)
                            .body(Full::new(Bytes::from_static(b"charged")))
                            .unwrap_or_else(|e| panic!("{e}")),
                    )
                }
            },
        ));
        let answer = service
            .oneshot(request("k"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer.status(), StatusCode::CREATED, "once: {once}");
        assert!(answer.headers().get(IDEMPOTENT_REPLAYED).is_none());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let body = answer
            .into_body()
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .to_bytes();
        assert_eq!(&body[..], b"charged");
        // Nothing was recorded.
        let key_is_completed = fixture
            .store
            .scan(None, 10)
            .unwrap_or_else(|e| panic!("{e}"))
            .records
            .iter()
            .any(|r| r.status == rerun_core::Status::Completed);
        assert!(!key_is_completed);
    }
}

/// A gRPC-style response: a body and trailers carrying `grpc-status`.
fn grpc_response(
    status: &'static str,
) -> Response<impl http_body::Body<Data = Bytes, Error = std::convert::Infallible> + Send> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static(status));
    Response::builder()
        .header("content-type", "application/grpc")
        .body(
            Full::new(Bytes::from_static(b"\x00\x00\x00\x00\x02hi"))
                .with_trailers(async move { Some(Ok(trailers)) }),
        )
        .unwrap_or_else(|e| panic!("a response: {e}"))
}

/// The body and trailers of a response, read whole.
async fn body_and_trailers<B>(response: Response<B>) -> (Bytes, Option<http::HeaderMap>)
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let collected = response
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|e| panic!("reading: {e:?}"));
    let trailers = collected.trailers().cloned();
    (collected.to_bytes(), trailers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_are_recorded_and_replayed_and_a_grpc_failure_is_not_recorded() {
    for (status, recorded) in [("0", true), ("5", true), ("10", false), ("14", false)] {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let service = IdempotencyLayer::new(rerun_core::MemoryStore::new()).layer(
            tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
                let runs = counted.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>(grpc_response(status))
                }
            }),
        );
        for attempt in 0..2 {
            let response = service
                .clone()
                .oneshot(request("grpc"))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(response.status(), StatusCode::OK);
            let replayed = response.headers().get(IDEMPOTENT_REPLAYED).is_some();
            assert_eq!(replayed, recorded && attempt == 1, "grpc-status {status}");
            let (body, trailers) = body_and_trailers(response).await;
            assert_eq!(&body[..], b"\x00\x00\x00\x00\x02hi");
            let trailers = trailers.unwrap_or_else(|| panic!("grpc-status {status}: trailers"));
            assert_eq!(trailers["grpc-status"], status);
        }
        let runs = runs.load(Ordering::SeqCst);
        assert_eq!(runs, if recorded { 1 } else { 2 }, "grpc-status {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_failure_in_the_headers_is_not_recorded() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let service = IdempotencyLayer::new(rerun_core::MemoryStore::new()).layer(tower::service_fn(
        move |_req: Request<RequestBody<Full<Bytes>>>| {
            let runs = counted.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                // A "trailers-only" answer: the status in the headers, no body.
                let response = Response::builder()
                    .header("content-type", "application/grpc")
                    .header("grpc-status", "14")
                    .body(Full::new(Bytes::new()))
                    .unwrap_or_else(|e| panic!("a response: {e}"));
                Ok::<_, std::io::Error>(response)
            }
        },
    ));
    for _ in 0..2 {
        let response = service
            .clone()
            .oneshot(request("unavailable"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(response.headers().get(IDEMPOTENT_REPLAYED).is_none());
        assert_eq!(response.headers()["grpc-status"], "14");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "a retry runs again");
}

/// The layer's client gets the handler's own response: its status, its connection headers
/// (`Connection: close`, `Upgrade`), its extensions and its version, with the body read whole;
/// a replay gets the record, which keeps end-to-end headers (`Proxy-Authenticate`, `Trailer`)
/// and trailers, and leaves out headers about the first one's connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_response_is_the_handlers_own_and_a_replay_keeps_its_end_to_end_headers() {
    #[derive(Debug, Clone, PartialEq)]
    struct Marker(u32);
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let service = IdempotencyLayer::new(rerun_core::MemoryStore::new()).layer(tower::service_fn(
        move |_req: Request<RequestBody<Full<Bytes>>>| {
            let runs = counted.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let mut trailers = http::HeaderMap::new();
                trailers.insert("x-checksum", HeaderValue::from_static("abc"));
                let response = Response::builder()
                    .status(StatusCode::UPGRADE_REQUIRED)
                    .version(http::Version::HTTP_2)
                    .header("connection", "close, upgrade")
                    .header("upgrade", "h2c")
                    .header("proxy-authenticate", "Basic realm=\"proxy\"")
                    .header("trailer", "x-checksum")
                    .header("x-own", "1")
                    .extension(Marker(7))
                    .body(
                        Full::new(Bytes::from_static(b"upgrade first"))
                            .with_trailers(async move { Some(Ok(trailers)) }),
                    )
                    .unwrap_or_else(|e| panic!("a response: {e}"));
                Ok::<_, std::io::Error>(response)
            }
        },
    ));
    let first = service
        .clone()
        .oneshot(request("upgrade"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.status(), StatusCode::UPGRADE_REQUIRED);
    assert_eq!(first.version(), http::Version::HTTP_2);
    assert_eq!(first.extensions().get::<Marker>(), Some(&Marker(7)));
    let headers = first.headers();
    assert_eq!(headers["connection"], "close, upgrade");
    assert_eq!(headers["upgrade"], "h2c");
    assert_eq!(headers["proxy-authenticate"], "Basic realm=\"proxy\"");
    assert_eq!(headers["trailer"], "x-checksum");
    assert_eq!(headers["x-own"], "1");
    assert!(headers.get(IDEMPOTENT_REPLAYED).is_none());
    let (body, trailers) = body_and_trailers(first).await;
    assert_eq!(&body[..], b"upgrade first");
    assert_eq!(
        trailers.map(|t| t["x-checksum"].clone()),
        Some(HeaderValue::from_static("abc"))
    );

    let replay = service
        .clone()
        .oneshot(request("upgrade"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(replay.status(), StatusCode::UPGRADE_REQUIRED);
    assert!(replay.extensions().get::<Marker>().is_none());
    let headers = replay.headers();
    assert_eq!(headers[IDEMPOTENT_REPLAYED], "true");
    assert!(headers.get("connection").is_none());
    assert!(headers.get("upgrade").is_none());
    assert_eq!(headers["proxy-authenticate"], "Basic realm=\"proxy\"");
    assert_eq!(headers["trailer"], "x-checksum");
    assert_eq!(headers["x-own"], "1");
    let (body, trailers) = body_and_trailers(replay).await;
    assert_eq!(&body[..], b"upgrade first");
    assert_eq!(
        trailers.map(|t| t["x-checksum"].clone()),
        Some(HeaderValue::from_static("abc"))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A request body that streams its chunks, its length unknown in advance (as a chunked one's).
type Chunked = http_body_util::StreamBody<
    futures_util::stream::Iter<
        std::vec::IntoIter<Result<http_body::Frame<Bytes>, std::convert::Infallible>>,
    >,
>;

fn chunked(key: &str, chunks: &[&'static [u8]]) -> Request<Chunked> {
    let frames: Vec<_> = chunks
        .iter()
        .map(|c| Ok(http_body::Frame::data(Bytes::from_static(c))))
        .collect();
    Request::post("/upload")
        .header("idempotency-key", key)
        .body(http_body_util::StreamBody::new(futures_util::stream::iter(
            frames,
        )))
        .unwrap_or_else(|e| panic!("a request: {e}"))
}

/// A body over the limit of a layer around this one (tower-http's `RequestBodyLimitLayer`)
/// is `413`, as one over `max_body` is, not a failed body to send again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_a_limit_set_around_the_layer_gets_413() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let idempotent =
        IdempotencyLayer::new(rerun_core::MemoryStore::new()).layer(tower::service_fn(
            move |_req: Request<RequestBody<tower_http::body::Limited<Chunked>>>| {
                let runs = counted.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                }
            },
        ));
    let service = tower_http::limit::RequestBodyLimitLayer::new(16).layer(idempotent);
    let within = service
        .clone()
        .oneshot(chunked("within", &[b"0123456789", b"012345"]))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(within.status(), StatusCode::OK);
    let over = service
        .clone()
        .oneshot(chunked("over", &[b"0123456789", b"0123456789"]))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(over.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let (body, _) = body_and_trailers(over).await;
    let json: serde_json::Value =
        serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    assert_eq!(json["code"], "body_too_large");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the handler did not run for it"
    );
}

/// A response within `max_body` that the store will not keep (its own limit on results is
/// lower) reaches the client all the same, unrecorded, as one over `max_body` does; the key is
/// given back (released, or unknown for a `once` layer).
#[test]
fn a_response_the_store_will_not_keep_is_returned_unrecorded() {
    let Some(url) = rerun_core::testing::service_url("RERUN_TEST_POSTGRES_URL") else {
        return;
    };
    let table = support::unique("limit").to_ascii_lowercase();
    let _dropped = DropTable(url.clone(), table.clone());
    let store = rerun_core::PostgresStore::builder(&url)
        .table(&table)
        .max_result_bytes(64)
        .connect()
        .unwrap_or_else(|e| panic!("connecting: {e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a runtime: {e}"));
    for once in [false, true] {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let layer = IdempotencyLayer::new(store.clone());
        let layer = if once { layer.once() } else { layer };
        let service = layer.layer(tower::service_fn(
            move |_req: Request<RequestBody<Full<Bytes>>>| {
                let runs = counted.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    let response = Response::builder()
                        .status(201)
                        .body(Full::new(Bytes::from(vec![b'x'; 500])))
                        .unwrap_or_else(|e| panic!("a response: {e}"));
                    Ok::<_, std::io::Error>(response)
                }
            },
        ));
        let key = format!("big-{once}");
        let first = rt
            .block_on(service.clone().oneshot(request(&key)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(first.status(), StatusCode::CREATED, "once: {once}");
        assert!(first.headers().get(IDEMPOTENT_REPLAYED).is_none());
        let (body, _) = rt.block_on(body_and_trailers(first));
        assert_eq!(body.len(), 500);
        let retry = rt
            .block_on(service.clone().oneshot(request(&key)))
            .unwrap_or_else(|e| panic!("{e}"));
        match once {
            false => assert_eq!(retry.status(), StatusCode::CREATED, "a retry runs again"),
            true => assert_eq!(rt.block_on(code(retry)), "outcome_unknown"),
        }
        let expected = if once { 1 } else { 2 };
        assert_eq!(runs.load(Ordering::SeqCst), expected, "once: {once}");
    }
}

/// Drops a test's table when the test ends, passed or failed.
struct DropTable(String, String);

impl Drop for DropTable {
    fn drop(&mut self) {
        support::drop_table(&self.0, &self.1);
    }
}

/// An attempt whose key another took over meanwhile (its completion refused as `LeaseLost`)
/// answers `503 attempt_superseded`, never its own response, which the key's record, holding
/// the other attempt's, would contradict on every retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_attempt_never_answers_with_its_own_response() {
    use rerun_core::testing::{Faulty, Op};
    let superseded = Faulty::new(rerun_core::MemoryStore::new()).before(|op| match op {
        Op::Complete { claim, .. } => Err(rerun_core::Error::LeaseLost {
            key: claim.key.clone(),
        }),
        _ => Ok(()),
    });
    let service = IdempotencyLayer::new(superseded).layer(tower::service_fn(
        |_req: Request<RequestBody<Full<Bytes>>>| async move {
            Ok::<_, std::io::Error>(
                Response::builder()
                    .status(StatusCode::CREATED)
                    .body(Full::new(Bytes::from_static(b"pay_1")))
                    .unwrap_or_else(|e| panic!("{e}")),
            )
        },
    ));
    let answer = service
        .oneshot(request("k"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(code(answer).await, "attempt_superseded");
}

/// A `once` request the service answered "not processed" (`429`, `425`) is given back, not
/// left unknown: its retry runs. A `408` (a timeout may have cut it short mid-effect) is left
/// unknown, as a 5xx is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_once_request_answered_too_many_requests_is_given_back() {
    for (status, retried) in [(429u16, true), (425, true), (408, false)] {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let store = rerun_core::MemoryStore::new();
        let service = IdempotencyLayer::new(store.clone())
            .once()
            .layer(tower::service_fn(
                move |_req: Request<RequestBody<Full<Bytes>>>| {
                    let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        Ok::<_, std::io::Error>(
                            Response::builder()
                                .status(if first { status } else { 201 })
                                .body(Full::new(Bytes::from_static(b"x")))
                                .unwrap_or_else(|e| panic!("{e}")),
                        )
                    }
                },
            ));
        let first = service
            .clone()
            .oneshot(request("k"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(first.status().as_u16(), status);
        // A claim left unknown is marked so in the background: wait for it to settle.
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until
            && store
                .scan(None, 10)
                .unwrap_or_else(|e| panic!("{e}"))
                .records
                .iter()
                .any(|r| r.status == rerun_core::Status::InProgress)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let retry = service
            .oneshot(request("k"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        match retried {
            true => assert_eq!(retry.status(), StatusCode::CREATED, "{status}"),
            false => assert_eq!(code(retry).await, "outcome_unknown", "{status}"),
        }
        assert_eq!(runs.load(Ordering::SeqCst), if retried { 2 } else { 1 });
    }
}
