//! The consumer's delivery against a real JetStream server, and the header values it writes.

use super::*;
use futures::StreamExt;

/// A message that comes back after its dead-lettered copy was stored (the consumer died
/// before its `+TERM`, or the `+TERM` was lost) is dead-lettered again, and the dead-letter
/// stream keeps one copy. A real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_back_after_its_copy_was_stored_has_one_copy() {
    use async_nats::jetstream::{consumer::pull, stream};
    let Some(url) = rerun_core::testing::service_url("RERUN_TEST_NATS_URL") else {
        return;
    };
    let js = jetstream::new(async_nats::connect(&url).await.expect("connecting to NATS"));
    let name = scratch_name("dead");
    let dead = format!("{name}_dead");
    for (stream, subject) in [
        (&name, format!("{name}.in")),
        (&dead, format!("{name}.dead")),
    ] {
        js.get_or_create_stream(stream::Config {
            name: stream.clone(),
            subjects: vec![subject],
            ..Default::default()
        })
        .await
        .expect("creating a stream");
    }
    let consumer: PullConsumer = js
        .get_stream(&name)
        .await
        .expect("the stream")
        .create_consumer(pull::Config {
            durable_name: Some(name.clone()),
            ack_wait: Duration::from_secs(3),
            ..Default::default()
        })
        .await
        .expect("creating the consumer");
    // The streams go whatever the test finds.
    let run = std::panic::AssertUnwindSafe(copies_of_a_message_back(&js, &name, consumer));
    let found = futures::FutureExt::catch_unwind(run).await;
    for stream in [&name, &dead] {
        let _ = js.delete_stream(stream).await;
    }
    let (kept, pending) = found.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    assert_eq!(kept, 2, "one copy of m-1 and one of m-2");
    assert_eq!(pending, 0, "both terminated");
}

/// A stream name no other test run uses: `tag`, the process and the time.
pub(super) fn scratch_name(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("rq_unit_{tag}_{}_{nanos}", std::process::id())
}

/// m-1's copy stored without a `+TERM`, m-2 dead-lettered, m-1 again after its `ack_wait`
/// (3 s) down the whole path: the copies the dead-letter stream keeps, and the messages
/// still pending once the `+TERM`s (sent without waiting for the server) have landed.
async fn copies_of_a_message_back(
    js: &jetstream::Context,
    name: &str,
    mut consumer: PullConsumer,
) -> (u64, usize) {
    async fn next(
        messages: &mut jetstream::consumer::pull::Stream,
        target: &Option<Arc<(jetstream::Context, String)>>,
    ) -> JsDelivery {
        let m = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .expect("a delivery within 10 s")
            .expect("the stream goes on")
            .expect("a message");
        JsDelivery::new(m, Duration::from_secs(1), target.clone())
    }
    for id in ["m-1", "m-2"] {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
        js.publish_with_headers(format!("{name}.in"), headers, id.as_bytes().to_vec().into())
            .await
            .expect("publishing")
            .await
            .expect("stored");
    }
    let target = Some(Arc::new((js.clone(), format!("{name}.dead"))));
    let mut messages = consumer.messages().await.expect("pulling");
    let first = next(&mut messages, &target).await;
    assert_eq!(first.message.id(), Some("m-1"));
    first.store_copy("hopeless").await.expect("the copy");
    drop(first);
    let other = next(&mut messages, &target).await;
    assert_eq!(other.message.id(), Some("m-2"));
    other.dead_letter("hopeless").await.expect("dead-lettered");
    let again = next(&mut messages, &target).await;
    assert_eq!(
        (again.message.id(), again.message.attempt()),
        (Some("m-1"), 2)
    );
    again.dead_letter("hopeless").await.expect("dead-lettered");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let pending = loop {
        let pending = consumer
            .info()
            .await
            .expect("the consumer's info")
            .num_ack_pending;
        if pending == 0 || tokio::time::Instant::now() > deadline {
            break pending;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let kept = js
        .get_stream(format!("{name}_dead"))
        .await
        .expect("the dead-letter stream")
        .info()
        .await
        .expect("its info")
        .state
        .messages;
    (kept, pending)
}

#[test]
fn header_values_hold_no_line_breaks_and_are_capped() {
    assert_eq!(
        header_value("unknown variant `x\r\nNats-Msg-Id: dup\r\nX-Pad: `"),
        "unknown variant `x\\r\\nNats-Msg-Id: dup\\r\\nX-Pad: `"
    );
    assert_eq!(
        header_value("tab\there\u{0}\u{7f}\u{85}"),
        "tab\\there\\u{0}\\u{7f}\\u{85}"
    );
    assert_eq!(header_value("plain é reason"), "plain é reason");
    let exact = "a".repeat(MAX_REASON_BYTES);
    assert_eq!(header_value(&exact), exact);
    // Multi-byte characters across the cut: it lands on a boundary.
    let long = "é".repeat(MAX_REASON_BYTES);
    let cut = header_value(&long);
    assert!(cut.len() <= MAX_REASON_BYTES, "{}", cut.len());
    assert!(cut.ends_with("..."));
    assert!(cut.trim_end_matches("...").chars().all(|c| c == 'é'));
    let newlines = "\n".repeat(MAX_REASON_BYTES);
    let cut = header_value(&newlines);
    assert!(cut.len() <= MAX_REASON_BYTES && !cut.contains('\n'));
}
