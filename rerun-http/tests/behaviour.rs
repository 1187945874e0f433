//! Every row of the layer's behaviour table, over real HTTP on loopback, on every store.

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use support::{client, raw, raw_status, run, send, Fixture, Kind, Server};

on_every_store!(
    a_new_key_runs_once_and_a_retry_replays_byte_for_byte,
    a_duplicate_in_progress_gets_409_with_retry_after,
    with_wait_a_duplicate_gets_the_first_response,
    the_same_key_on_a_different_request_gets_422,
    keys_missing_malformed_or_too_long_get_400,
    a_5xx_or_a_panic_records_nothing,
    a_once_handler_that_panicked_is_never_run_again,
    a_once_handler_whose_answer_was_not_recorded_is_never_run_again,
    other_methods_and_keyless_requests_pass_through,
    a_hundred_concurrent_duplicates_run_the_handler_once,
    a_tenant_replaying_another_tenants_key_gets_its_own_run,
    a_client_that_hangs_up_does_not_cut_the_handler_short,
    bodies_up_to_the_limit_are_read_and_larger_ones_refused,
    a_chunked_request_body_is_the_same_request,
    event_streams_and_oversized_responses_are_not_recorded,
    a_store_that_is_down_gets_503_and_the_handler_does_not_run,
);

async fn a_new_key_runs_once_and_a_retry_replays_byte_for_byte(f: Arc<Fixture>) {
    let server = Server::start(f.layer()).await;
    let http = client();
    let post = || {
        http.post(server.url("/payments?currency=eur"))
            .header("idempotency-key", "\"pay-1\"")
            .header("content-type", "application/json")
            .body("{\"cents\":500}")
    };
    let first = send(post()).await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.replayed());
    assert_eq!(first.header("x-run"), Some("1"));
    let again = send(post()).await;
    assert_eq!(again.status, 201);
    assert!(again.replayed());
    assert_eq!(again.body, first.body, "the body, byte for byte");
    for name in ["content-type", "x-run", "content-length"] {
        assert_eq!(again.header(name), first.header(name), "{name}");
    }
    let cookies = |g: &support::Got| -> Vec<String> {
        g.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect()
    };
    assert_eq!(cookies(&again), ["a=1", "b=2"]);
    // The bare form of the same key is the same key.
    let bare = send(
        http.post(server.url("/payments?currency=eur"))
            .header("idempotency-key", "pay-1")
            .header("content-type", "application/json")
            .body("{\"cents\":500}"),
    )
    .await;
    assert!(bare.replayed() && bare.body == first.body);
    assert_eq!(server.runs.get(), 1);
}

async fn a_duplicate_in_progress_gets_409_with_retry_after(f: Arc<Fixture>) {
    let server = Arc::new(Server::start(f.layer()).await);
    let http = client();
    let post = || {
        http.post(server.url("/payments?delay_ms=800"))
            .header("idempotency-key", "slow")
            .body("x")
    };
    let first = tokio::spawn(send(post()));
    while server.runs.get() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let dup = send(post()).await;
    assert_eq!(dup.status, 409, "{}", dup.text());
    assert_eq!(dup.code(), "idempotency_key_in_use");
    assert_eq!(dup.header("retry-after"), Some("1"));
    let first = first.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.status, 201);
    let after = send(post()).await;
    assert!(after.replayed() && after.body == first.body);
    assert_eq!(server.runs.get(), 1);
}

async fn with_wait_a_duplicate_gets_the_first_response(f: Arc<Fixture>) {
    let server = Arc::new(Server::start(f.layer().wait(Duration::from_secs(10))).await);
    let http = client();
    let post = || {
        http.post(server.url("/payments?delay_ms=300"))
            .header("idempotency-key", "waited")
            .body("x")
    };
    let first = tokio::spawn(send(post()));
    while server.runs.get() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let dup = send(post()).await;
    let first = first.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((first.status, dup.status), (201, 201));
    assert!(dup.replayed() && !first.replayed());
    assert_eq!(dup.body, first.body);
    assert_eq!(server.runs.get(), 1);
}

async fn the_same_key_on_a_different_request_gets_422(f: Arc<Fixture>) {
    let layer = f
        .layer()
        .fingerprint_headers([http::HeaderName::from_static("x-api-version")]);
    let server = Server::start(layer).await;
    let http = client();
    let base = || {
        http.post(server.url("/payments/7?a=1"))
            .header("idempotency-key", "k")
            .header("content-type", "application/json")
            .header("x-api-version", "2")
            .header("x-trace", "1")
            .body("{}")
    };
    assert_eq!(send(base()).await.status, 201);
    let variants = [
        ("body", base().body("{ }")),
        (
            "path",
            http.post(server.url("/payments/8?a=1"))
                .header("idempotency-key", "k")
                .header("content-type", "application/json")
                .header("x-api-version", "2")
                .body("{}"),
        ),
        ("query", {
            http.post(server.url("/payments/7?a=2"))
                .header("idempotency-key", "k")
                .header("content-type", "application/json")
                .header("x-api-version", "2")
                .body("{}")
        }),
        (
            "content type",
            http.post(server.url("/payments/7?a=1"))
                .header("idempotency-key", "k")
                .header("content-type", "text/plain")
                .header("x-api-version", "2")
                .body("{}"),
        ),
        (
            "named header",
            http.post(server.url("/payments/7?a=1"))
                .header("idempotency-key", "k")
                .header("content-type", "application/json")
                .header("x-api-version", "3")
                .body("{}"),
        ),
        (
            "method",
            http.patch(server.url("/payments/7?a=1"))
                .header("idempotency-key", "k")
                .header("content-type", "application/json")
                .header("x-api-version", "2")
                .body("{}"),
        ),
    ];
    for (what, req) in variants {
        let got = send(req).await;
        assert_eq!(got.status, 422, "a different {what}: {}", got.text());
        assert_eq!(got.code(), "idempotency_key_reused");
    }
    // A header the fingerprint does not name may differ.
    let other_trace = send(base().header("x-trace", "2")).await;
    assert!(other_trace.replayed(), "{}", other_trace.text());
    assert_eq!(server.runs.get(), 1);
    // Keys are scoped by route: the same key on another route is another operation.
    let other_route = send(
        http.post(server.url("/payments"))
            .header("idempotency-key", "k")
            .body("{}"),
    )
    .await;
    assert_eq!(other_route.status, 201);
    assert!(!other_route.replayed());
    assert_eq!(server.runs.get(), 2);
}

async fn keys_missing_malformed_or_too_long_get_400(f: Arc<Fixture>) {
    let server = Server::start(f.layer().required(true)).await;
    let http = client();
    let missing = send(http.post(server.url("/payments")).body("x")).await;
    assert_eq!(missing.status, 400);
    assert_eq!(missing.code(), "idempotency_key_missing");
    let longest = "k".repeat(255);
    let too_long = "k".repeat(256);
    let bad: [(&str, Vec<u8>); 6] = [
        ("empty", b"\"\"".to_vec()),
        ("unclosed", b"\"abc".to_vec()),
        ("with a space", b"a b".to_vec()),
        ("non-UTF-8", b"\"\xff\xfe\"".to_vec()),
        ("with parameters", b"\"abc\";x=1".to_vec()),
        ("too long", too_long.into_bytes()),
    ];
    for (what, value) in bad {
        let value = http::HeaderValue::from_bytes(&value).unwrap_or_else(|e| panic!("{e}"));
        let got = send(
            http.post(server.url("/payments"))
                .header("idempotency-key", value)
                .body("x"),
        )
        .await;
        assert_eq!(got.status, 400, "{what}: {}", got.text());
        assert_eq!(got.code(), "idempotency_key_invalid", "{what}");
    }
    // Sent twice, on a raw connection so nothing folds the two lines.
    let twice = raw(
        server.addr,
        b"POST /payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"a\"\r\nIdempotency-Key: \"b\"\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx",
    );
    assert_eq!(raw_status(&twice), 400, "{twice}");
    assert!(twice.contains("more than once"), "{twice}");
    let ok = send(
        http.post(server.url("/payments"))
            .header("idempotency-key", longest)
            .body("x"),
    )
    .await;
    assert_eq!(ok.status, 201, "255 characters are accepted");
    assert_eq!(server.runs.get(), 1);
}

async fn a_5xx_or_a_panic_records_nothing(f: Arc<Fixture>) {
    let server = Server::start(f.layer()).await;
    let http = client();
    // 5xx, and the 4xx that say "try again later" (a timeout or a rate limiter inside the
    // layer), are not answers a retry should get again.
    for status in [500u16, 503, 408, 425, 429] {
        let url = server.url(&format!("/payments?status={status}"));
        let key = format!("fails-{status}");
        let before = server.runs.get();
        let first = send(http.post(&url).header("idempotency-key", &key)).await;
        let retry = send(http.post(&url).header("idempotency-key", &key)).await;
        assert_eq!((first.status, retry.status), (status, status));
        assert!(!retry.replayed());
        assert_eq!(server.runs.get(), before + 2, "the retry ran again");
    }
    // 4xx are answers too: recorded.
    let url = server.url("/payments?status=404");
    let first = send(http.post(&url).header("idempotency-key", "nf")).await;
    let retry = send(http.post(&url).header("idempotency-key", "nf")).await;
    assert_eq!((first.status, retry.status), (404, 404));
    assert!(retry.replayed());
    let before = server.runs.get();
    for _ in 0..2 {
        let got = send(
            http.post(server.url("/panic"))
                .header("idempotency-key", "p"),
        )
        .await;
        assert_eq!(got.status, 500);
        assert_eq!(got.code(), "handler_failed");
    }
    assert_eq!(server.runs.get(), before + 2, "the panic released the key");
}

async fn a_once_handler_that_panicked_is_never_run_again(f: Arc<Fixture>) {
    let server = Server::start(f.layer().once()).await;
    let http = client();
    let before = server.runs.get();
    let first = send(
        http.post(server.url("/panic"))
            .header("idempotency-key", "once-p"),
    )
    .await;
    assert_eq!(
        (first.status, first.code()),
        (500, "outcome_unknown".to_owned())
    );
    // The claim is marked unknown in the background as the panic unwinds: until then a retry
    // is told the first attempt is in progress (409), never run.
    let retry = once_settled(&server, "/panic", "once-p").await;
    assert_eq!(
        (retry.status, retry.code()),
        (500, "outcome_unknown".to_owned())
    );
    assert_eq!(
        server.runs.get(),
        before + 1,
        "the panicked handler ran again"
    );
}

/// A retry of a `once` request whose first attempt was not recorded: sent until it is no longer
/// told that attempt is in progress (the claim is marked unknown in the background, as the
/// call is dropped), for up to 10 s.
async fn once_settled(server: &Server, path: &str, key: &str) -> support::Got {
    let http = client();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = send(http.post(server.url(path)).header("idempotency-key", key)).await;
        if got.status != 409 || std::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_once_handler_whose_answer_was_not_recorded_is_never_run_again(f: Arc<Fixture>) {
    let server = Server::start(f.layer().once().max_body(1024)).await;
    let http = client();
    // The first request gets the handler's answer, unrecorded (or, when its body failed, the
    // outcome-unknown problem); every retry gets the outcome-unknown problem.
    for (path, status) in [
        ("/payments?status=500", 500),
        ("/payments?status=503", 503),
        ("/events", 200),
        ("/big?bytes=2048", 200),
        ("/broken", 500),
    ] {
        let key = format!("once-{path}");
        let before = server.runs.get();
        let first = send(http.post(server.url(path)).header("idempotency-key", &key)).await;
        assert_eq!(first.status, status, "{path}: {}", first.text());
        assert!(!first.replayed(), "{path}");
        if path == "/big?bytes=2048" {
            assert_eq!(first.body.len(), 2048);
        }
        if path == "/broken" {
            assert_eq!(first.code(), "outcome_unknown");
        }
        for _ in 0..2 {
            let retry = once_settled(&server, path, &key).await;
            assert_eq!(
                (retry.status, retry.code()),
                (500, "outcome_unknown".to_owned()),
                "{path}"
            );
        }
        assert_eq!(
            server.runs.get(),
            before + 1,
            "{path}: the once handler ran again"
        );
    }
}

async fn other_methods_and_keyless_requests_pass_through(f: Arc<Fixture>) {
    let server = Server::start(f.layer()).await;
    let http = client();
    for _ in 0..2 {
        let got = send(
            http.get(server.url("/payments"))
                .header("idempotency-key", "g"),
        )
        .await;
        assert_eq!(got.status, 200);
        assert!(!got.replayed());
        let put = send(
            http.put(server.url("/payments"))
                .header("idempotency-key", "g"),
        )
        .await;
        assert_eq!(put.status, 201);
        assert!(!put.replayed());
        let keyless = send(http.post(server.url("/payments")).body("x")).await;
        assert_eq!(keyless.status, 201);
    }
    assert_eq!(server.runs.get(), 6);
    // Configured: PUT handled too.
    let server = Server::start(f.layer().methods([http::Method::PUT])).await;
    for _ in 0..2 {
        send(
            http.put(server.url("/payments"))
                .header("idempotency-key", "g"),
        )
        .await;
    }
    assert_eq!(server.runs.get(), 1);
}

async fn a_hundred_concurrent_duplicates_run_the_handler_once(f: Arc<Fixture>) {
    let server = Arc::new(Server::start(f.layer().wait(Duration::from_secs(20))).await);
    let http = client();
    let requests: Vec<_> = (0..100)
        .map(|_| {
            tokio::spawn(send(
                http.post(server.url("/payments?delay_ms=200"))
                    .header("idempotency-key", "crowd")
                    .body("same"),
            ))
        })
        .collect();
    let mut bodies = Vec::new();
    let mut fresh = 0;
    for r in requests {
        let got = r.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.status, 201, "{}", got.text());
        fresh += usize::from(!got.replayed());
        bodies.push(got.body);
    }
    assert_eq!(server.runs.get(), 1, "one run for a hundred requests");
    assert_eq!(fresh, 1);
    assert!(bodies.windows(2).all(|w| w[0] == w[1]));
}

async fn a_tenant_replaying_another_tenants_key_gets_its_own_run(f: Arc<Fixture>) {
    let layer = f.layer().principal(|parts: &http::request::Parts| {
        parts
            .headers
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    let server = Server::start(layer).await;
    let http = client();
    let post = |tenant: Option<&str>| {
        let req = http
            .post(server.url("/payments"))
            .header("idempotency-key", "order-1")
            .body("{}");
        match tenant {
            Some(t) => req.header("x-tenant", t),
            None => req,
        }
    };
    let a = send(post(Some("tenant-a"))).await;
    assert!(a.text().contains("tenant-a"));
    // Tenant B sends A's key with A's exact request: it must never see A's response.
    let b = send(post(Some("tenant-b"))).await;
    assert_eq!(b.status, 201);
    assert!(!b.replayed(), "tenant B got a replay: {}", b.text());
    assert!(b.text().contains("tenant-b") && !b.text().contains("tenant-a"));
    // The anonymous scope is a scope of its own, and so is an empty principal name.
    let anonymous = send(post(None)).await;
    assert!(!anonymous.replayed());
    let empty = send(post(Some(""))).await;
    assert!(!empty.replayed());
    // Each replays its own.
    let a_again = send(post(Some("tenant-a"))).await;
    assert!(a_again.replayed() && a_again.body == a.body);
    assert_eq!(server.runs.get(), 4);
}

async fn a_client_that_hangs_up_does_not_cut_the_handler_short(f: Arc<Fixture>) {
    let server = Server::start(f.layer()).await;
    let addr = server.addr;
    let runs = server.runs.clone();
    // Send the request, then close the connection while the handler sleeps.
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
        let _ = stream.write_all(
            b"POST /payments?delay_ms=400 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: gone\r\nContent-Length: 1\r\n\r\nx",
        );
        while runs.get() == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(stream);
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(700)).await;
    let retry = send(
        client()
            .post(server.url("/payments?delay_ms=400"))
            .header("idempotency-key", "gone")
            .body("x"),
    )
    .await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert!(retry.replayed(), "the handler completed and was recorded");
    assert_eq!(server.runs.get(), 1);
}

async fn bodies_up_to_the_limit_are_read_and_larger_ones_refused(f: Arc<Fixture>) {
    const TEN_MB: usize = 10 * 1024 * 1024;
    let server = Server::start(f.layer().max_body(TEN_MB)).await;
    let http = client();
    let body = vec![b'x'; TEN_MB];
    let post = |body: Vec<u8>, key: &str| {
        http.post(server.url("/payments"))
            .header("idempotency-key", key)
            .body(body)
    };
    let first = send(post(body.clone(), "ten-mb")).await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(first.text().contains(&format!("\"bytes\":{TEN_MB}")));
    let again = send(post(body.clone(), "ten-mb")).await;
    assert!(again.replayed());
    let mut changed = body.clone();
    changed[TEN_MB - 1] = b'y';
    assert_eq!(send(post(changed, "ten-mb")).await.status, 422);
    // Refused on its Content-Length, before the body is read (a client still uploading sees
    // the connection closed after the 413, as servers do): on a raw connection.
    let addr = server.addr;
    let over = tokio::task::spawn_blocking(move || {
        raw(
            addr,
            format!("POST /payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: over\r\nContent-Length: {}\r\n\r\n", TEN_MB + 1).as_bytes(),
        )
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(raw_status(&over), 413, "{over}");
    assert!(over.contains("body_too_large"), "{over}");
    assert_eq!(server.runs.get(), 1);
    // The default limit: 1 MiB.
    let server = Server::start(f.layer()).await;
    let exact = send(
        http.post(server.url("/payments"))
            .header("idempotency-key", "mib")
            .body(vec![b'x'; 1024 * 1024]),
    )
    .await;
    assert_eq!(exact.status, 201);
    let addr = server.addr;
    let over = tokio::task::spawn_blocking(move || {
        raw(
            addr,
            b"POST /payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: mib\r\nContent-Length: 1048577\r\n\r\n",
        )
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(raw_status(&over), 413, "{over}");
    assert_eq!(server.runs.get(), 1);
}

async fn a_chunked_request_body_is_the_same_request(f: Arc<Fixture>) {
    let server = Server::start(f.layer().max_body(64)).await;
    let addr = server.addr;
    let chunked = move |body: &'static [u8]| -> String {
        let mut req = b"POST /payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ch\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
        req.extend_from_slice(body);
        raw(addr, &req)
    };
    let (first, again, split, over) = tokio::task::spawn_blocking(move || {
        (
            chunked(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            chunked(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            chunked(b"b\r\nhello world\r\n0\r\n\r\n"),
            chunked(b"28\r\n0123456789012345678901234567890123456789\r\n28\r\n0123456789012345678901234567890123456789\r\n0\r\n\r\n"),
        )
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(raw_status(&first), 201, "{first}");
    assert!(first.contains("\"bytes\":11"), "{first}");
    assert_eq!(raw_status(&again), 201);
    assert!(again
        .to_ascii_lowercase()
        .contains("idempotent-replayed: true"));
    // Chunked differently, the same bytes: the same request.
    assert!(
        split
            .to_ascii_lowercase()
            .contains("idempotent-replayed: true"),
        "{split}"
    );
    assert_eq!(raw_status(&over), 413, "{over}");
    assert_eq!(server.runs.get(), 1);
    // A plain request with the same bytes is the same request too.
    let plain = send(
        client()
            .post(server.url("/payments"))
            .header("idempotency-key", "ch")
            .body("hello world"),
    )
    .await;
    assert!(plain.replayed());
}

async fn event_streams_and_oversized_responses_are_not_recorded(f: Arc<Fixture>) {
    let server = Server::start(f.layer().max_body(1000)).await;
    let http = client();
    for run in 1..=2 {
        let got = send(
            http.post(server.url("/events"))
                .header("idempotency-key", "sse"),
        )
        .await;
        assert_eq!(got.status, 200);
        assert!(!got.replayed());
        assert_eq!(
            got.text(),
            format!("data: {run}-0\n\ndata: {run}-1\n\ndata: {run}-2\n\n")
        );
    }
    let before = server.runs.get();
    for _ in 0..2 {
        let got = send(
            http.post(server.url("/big?bytes=1001"))
                .header("idempotency-key", "big"),
        )
        .await;
        assert_eq!((got.status, got.body.len()), (200, 1001));
        assert!(!got.replayed());
    }
    assert_eq!(
        server.runs.get(),
        before + 2,
        "an oversized response released its key"
    );
    let fits = |_: ()| {
        http.post(server.url("/big?bytes=1000"))
            .header("idempotency-key", "fits")
    };
    send(fits(())).await;
    let again = send(fits(())).await;
    assert!(again.replayed() && again.body.len() == 1000);
}

async fn a_store_that_is_down_gets_503_and_the_handler_does_not_run(f: Arc<Fixture>) {
    let server = Server::start(f.switched_layer()).await;
    let http = client();
    f.switch.store(true, Ordering::SeqCst);
    let got = send(
        http.post(server.url("/payments"))
            .header("idempotency-key", "down"),
    )
    .await;
    assert_eq!(got.status, 503, "{}", got.text());
    assert_eq!(got.code(), "store_unavailable");
    assert_eq!(got.header("retry-after"), Some("1"));
    assert!(!got.text().contains("db-internal"), "{}", got.text());
    assert_eq!(server.runs.get(), 0);
    f.switch.store(false, Ordering::SeqCst);
    let got = send(
        http.post(server.url("/payments"))
            .header("idempotency-key", "down"),
    )
    .await;
    assert_eq!(got.status, 201);
    assert_eq!(server.runs.get(), 1);
}
