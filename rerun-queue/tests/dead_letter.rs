//! JetStream dead letters: the copy keeps its headers as rerun wrote them whatever the reason
//! says, and a message whose copy cannot be stored is neither lost nor left to `ack_wait`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, unique, Broker, Rig};
use futures::future::BoxFuture;
use rerun_core::{Error, Idempotent, MemoryStore};
use rerun_queue::nats::{
    DEAD_BODY_OMITTED_HEADER, DEAD_MSG_ID_HEADER, DEAD_REASON_HEADER, DEAD_SUBJECT_HEADER,
};
use rerun_queue::{handler, Failure, FailureKind, Handled, Handler, Message, Policy, Settings};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Created,
    Paid,
}

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[rerun(scope = "dead.event")]
struct Event {
    kind: Kind,
    #[rerun(key)]
    id: String,
}

fn fast() -> Settings {
    Settings::new().max_in_flight(4).policy(
        Policy::new()
            .in_progress_delay(Duration::from_millis(200))
            .backoff(Duration::from_millis(200), Duration::from_secs(1)),
    )
}

async fn rig(tag: &str) -> Option<Rig> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("rerun_queue=warn")
        .with_test_writer()
        .try_init();
    let url = Broker::Nats.url()?;
    Some(Rig::create(Broker::Nats, &url, &unique(tag)).await)
}

/// A body whose decoding error quotes line breaks and headers: the reason must not add them
/// to the dead-lettered copy (a `Nats-Msg-Id` of the reason's made the dead-letter stream drop
/// the second copy as a duplicate, a `Nats-Expected-Stream` made the publish fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reason_adds_no_header_to_the_dead_letter() {
    let Some(rig) = rig("inject").await else {
        return;
    };
    let bodies: [(&[u8], &str); 3] = [
        (br#"{"kind":"x\r\nNats-Msg-Id: dup\r\nX-Pad: "}"#, "m-1"),
        (br#"{"kind":"y\r\nNats-Msg-Id: dup\r\nX-Pad: "}"#, "m-2"),
        (
            br#"{"kind":"z\r\nNats-Expected-Stream: elsewhere\r\nX-Pad: "}"#,
            "m-3",
        ),
    ];
    for (body, id) in bodies {
        rig.publish(body, Some(id)).await;
    }
    let h = handler::typed(Arc::new(MemoryStore::new()), |e: Event| async move {
        Ok::<_, Error>(e.id)
    });
    let stop = async {
        eventually(Duration::from_secs(10), || async {
            rig.outstanding().await == 0 && rig.dead_letters().await >= 3
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let report = rig.consume(h, fast(), stop).await;
    assert_eq!(report.dead_lettered, 3, "{report:?}");
    assert_eq!(rig.dead_letters().await, 3, "each copy stored once");
    assert_eq!(rig.outstanding().await, 0);

    let dead = rig
        .js()
        .get_stream(format!("{}_dead", rig.name))
        .await
        .expect("dead stream");
    // Two handlers run at once, so the copies are stored in either order: each is matched to
    // its message by the id it carries.
    let mut copies = Vec::new();
    for seq in 1..=3 {
        copies.push(dead.get_raw_message(seq).await.expect("dead letter"));
    }
    for (body, id) in bodies {
        let copy = copies
            .iter()
            .find(|c| {
                c.headers
                    .get(DEAD_MSG_ID_HEADER)
                    .is_some_and(|v| v.as_str() == id)
            })
            .unwrap_or_else(|| panic!("no dead letter of {id}"));
        assert_eq!(&copy.payload[..], body);
        let mut names: Vec<String> = copy
            .headers
            .iter()
            .map(|(name, _)| name.to_string().to_ascii_lowercase())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "nats-msg-id",
                "rerun-dead-letter-msg-id",
                "rerun-dead-letter-reason",
                "rerun-dead-letter-subject"
            ],
            "no injected header"
        );
        let header = |name: &str| {
            copy.headers
                .get(name)
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default()
        };
        assert_eq!(header(DEAD_MSG_ID_HEADER), id);
        // The copy's own id names the message's place in its stream, never the reason's text.
        let own = copy
            .headers
            .get(async_nats::header::NATS_MESSAGE_ID)
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        assert!(
            own.starts_with(&format!("rerun-dead-letter:{}:", rig.name)),
            "{own}"
        );
        assert_eq!(header(DEAD_SUBJECT_HEADER), format!("{}.in", rig.name));
        let reason = header(DEAD_REASON_HEADER);
        assert!(reason.contains("unknown variant"), "{reason}");
        assert!(reason.contains(r"\r\n"), "escaped: {reason}");
        assert!(!reason.contains(['\r', '\n']), "{reason}");
    }
    rig.cleanup().await;
}

/// Fails every delivery in a way no retry fixes, counting them.
struct Hopeless(Arc<AtomicUsize>);

impl Handler for Hopeless {
    fn handle<'a>(&'a self, _: &'a Message) -> BoxFuture<'a, Handled> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Handled::Failed(Failure::new(FailureKind::Fatal, "hopeless")) })
    }
}

/// No stream keeps the dead-letter subject, so the copy cannot be stored: the message is not
/// terminated, and comes back with the backoff (200 ms, 400 ms, …), not after the 2 s
/// `ack_wait` each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_dead_letter_comes_back_with_backoff() {
    let Some(rig) = rig("nodead").await else {
        return;
    };
    rig.js()
        .delete_stream(format!("{}_dead", rig.name))
        .await
        .expect("deleting the dead-letter stream");
    rig.publish(b"{}", Some("m-1")).await;
    let deliveries = Arc::new(AtomicUsize::new(0));
    let report = rig
        .consume(
            Hopeless(deliveries.clone()),
            fast(),
            tokio::time::sleep(Duration::from_millis(1800)),
        )
        .await;
    let n = deliveries.load(Ordering::SeqCst);
    assert!(n >= 3, "{n} deliveries in 1.8 s: {report:?}");
    assert_eq!(report.dead_lettered, 0, "{report:?}");
    assert!(report.redelivered >= 2, "{report:?}");
    assert_eq!(rig.outstanding().await, 1, "the message is kept");
    rig.cleanup().await;
}

/// A consumer whose dead-letter subject is one it reads itself: a message that fails for good
/// is copied there once, and the copy, failing again where it was put, is terminated without
/// another copy. Two runs in all, not a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_copy_that_fails_again_is_not_copied_again() {
    let Some(rig) = rig("recopy").await else {
        return;
    };
    rig.publish(br#"{"kind":"x"}"#, Some("m-1")).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let stream = rig.js().get_stream(&rig.name).await.expect("stream");
    let consumer: async_nats::jetstream::consumer::PullConsumer =
        stream.get_consumer(&rig.name).await.expect("consumer");
    let stop = async {
        eventually(Duration::from_secs(10), || async {
            runs.load(Ordering::SeqCst) >= 2 && rig.outstanding().await == 0
        })
        .await;
        // Long enough for a third run, if a second copy were made.
        tokio::time::sleep(Duration::from_millis(800)).await;
    };
    let report = rerun_queue::nats::JetStreamConsumer::new(consumer, Hopeless(runs.clone()))
        .settings(fast())
        .dead_letter_subject(rig.js().clone(), format!("{}.in", rig.name))
        .run(stop)
        .await
        .expect("consumer run");
    assert_eq!(runs.load(Ordering::SeqCst), 2, "{report:?}");
    assert_eq!(report.dead_lettered, 2, "{report:?}");
    let mut stream = rig.js().get_stream(&rig.name).await.expect("stream");
    let stored = stream.info().await.expect("stream info").state.messages;
    assert!(stored <= 2, "the message and one copy, at most: {stored}");
    assert_eq!(rig.outstanding().await, 0, "terminated");
    rig.cleanup().await;
}

/// A message that fits the server, but not with the dead-letter headers added: its copy is
/// stored without the body and says so, and the message is terminated. (Published whole, the
/// copy would be over the server's `max_payload`: the server closes the connection, the copy
/// is never stored, and the message comes back to fail again for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_too_large_for_the_server_is_stored_without_the_body() {
    let Some(rig) = rig("large").await else {
        return;
    };
    let max_payload = rig.js().client().server_info().max_payload;
    // With its `Nats-Msg-Id` header (30 bytes), just within the limit.
    let body = vec![b'x'; max_payload - 64];
    rig.publish(&body, Some("m-1")).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let stop = async {
        eventually(Duration::from_secs(10), || async {
            rig.outstanding().await == 0 && rig.dead_letters().await >= 1
        })
        .await;
    };
    let report = rig.consume(Hopeless(runs.clone()), fast(), stop).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{report:?}");
    assert_eq!(
        (report.dead_lettered, report.settle_failures),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(rig.outstanding().await, 0, "terminated");
    let dead = rig
        .js()
        .get_stream(format!("{}_dead", rig.name))
        .await
        .expect("dead stream");
    let copy = dead.get_raw_message(1).await.expect("dead letter");
    assert!(copy.payload.is_empty(), "{} bytes", copy.payload.len());
    let header = |name: &str| copy.headers.get(name).map(|v| v.as_str().to_owned());
    assert_eq!(
        header(DEAD_BODY_OMITTED_HEADER),
        Some(body.len().to_string())
    );
    assert_eq!(header(DEAD_MSG_ID_HEADER).as_deref(), Some("m-1"));
    assert_eq!(header(DEAD_REASON_HEADER).as_deref(), Some("hopeless"));
    rig.cleanup().await;
}
