//! Pull requests against a real JetStream server.

use std::future::Future;

use async_nats::jetstream::stream;

use super::*;

/// A stream of its own with one durable pull consumer configured by `consumer`, handed to
/// `test`; the stream goes whatever the test finds. `None` when no server is configured.
async fn on_a_stream<F, Fut>(consumer: pull::Config, test: F) -> Option<()>
where
    F: FnOnce(jetstream::Context, String, PullConsumer) -> Fut,
    Fut: Future<Output = ()>,
{
    let url = rerun_core::testing::service_url("RERUN_TEST_NATS_URL")?;
    let js = jetstream::new(async_nats::connect(&url).await.expect("connecting to NATS"));
    let name = crate::nats::tests::scratch_name("pull");
    js.get_or_create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![format!("{name}.in")],
        ..Default::default()
    })
    .await
    .expect("creating a stream");
    let consumer = js
        .get_stream(&name)
        .await
        .expect("the stream")
        .create_consumer(pull::Config {
            durable_name: Some(name.clone()),
            ..consumer
        })
        .await
        .expect("creating the consumer");
    let run = std::panic::AssertUnwindSafe(test(js.clone(), name.clone(), consumer));
    let found = FutureExt::catch_unwind(run).await;
    let _ = js.delete_stream(&name).await;
    found.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    Some(())
}

async fn publish(js: &jetstream::Context, name: &str, count: usize) {
    for i in 0..count {
        js.publish(format!("{name}.in"), format!("m-{i}").into())
            .await
            .expect("publishing")
            .await
            .expect("stored");
    }
}

/// The next message for a caller with `free` handlers free, within `limit`.
async fn next_within(pulls: &mut Pulls, free: usize, limit: Duration) -> jetstream::Message {
    tokio::time::timeout(limit, pulls.next(free))
        .await
        .expect("a message in time")
        .expect("pulling")
}

/// Waits up to 10 s for the consumer's count of messages delivered and not acked to be `want`.
async fn ack_pending_reaches(consumer: &mut PullConsumer, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = consumer
            .info()
            .await
            .expect("the consumer's info")
            .num_ack_pending;
        if now == want || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A consumer that caps a request's batch and wait gets requests within the caps (the server
/// refuses any other, and the consumer would end in errors), and an idle one renews its
/// request as its wait runs out, so a message published long after the last still comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_keep_within_the_consumers_limits_and_are_renewed() {
    let config = pull::Config {
        max_batch: 2,
        max_expires: Duration::from_secs(1),
        ..Default::default()
    };
    on_a_stream(config, |js, name, consumer| async move {
        let mut pulls = Pulls::new(consumer, 16);
        assert_eq!((pulls.batch, pulls.expires), (2, Duration::from_secs(1)));
        publish(&js, &name, 5).await;
        for i in 0..5 {
            let m = next_within(&mut pulls, 16, Duration::from_secs(10)).await;
            assert_eq!(&m.payload[..], format!("m-{i}").as_bytes());
            m.ack().await.expect("acking");
        }
        // Several request lifetimes with nothing to fetch.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        publish(&js, &name, 1).await;
        let m = next_within(&mut pulls, 16, Duration::from_secs(5)).await;
        assert_eq!(&m.payload[..], b"m-0");
        assert_eq!(pulls.errors, 0);
    })
    .await;
}

/// Stopping hands back at once what came and no handler took, instead of leaving it to
/// come back after the consumer's `ack_wait`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_hands_back_what_no_handler_took() {
    let config = pull::Config {
        ack_wait: Duration::from_secs(60),
        ..Default::default()
    };
    on_a_stream(config, |js, name, mut consumer| async move {
        publish(&js, &name, 4).await;
        let mut pulls = Pulls::new(consumer.clone(), 4);
        let taken = next_within(&mut pulls, 4, Duration::from_secs(10)).await;
        assert_eq!(
            ack_pending_reaches(&mut consumer, 4).await,
            4,
            "all four delivered to the client"
        );
        taken.ack().await.expect("acking");
        pulls.stop().await;
        let mut again = Pulls::new(consumer.clone(), 4);
        for _ in 0..3 {
            let m = next_within(&mut again, 4, Duration::from_secs(5)).await;
            let delivered = m.info().map(|i| i.delivered).expect("metadata");
            assert_eq!(delivered, 2, "handed back, well before the 60 s ack wait");
            m.ack().await.expect("acking");
        }
        assert_eq!(ack_pending_reaches(&mut consumer, 0).await, 0);
    })
    .await;
}

/// No more messages are asked for than the caller has handlers free for: with eight
/// messages in the stream and requests of up to eight, a caller with two free gets two
/// into the client, and the rest only as it frees handlers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_for_no_more_than_the_free_handlers_take() {
    let config = pull::Config {
        ack_wait: Duration::from_secs(60),
        ..Default::default()
    };
    on_a_stream(config, |js, name, mut consumer| async move {
        publish(&js, &name, 8).await;
        let mut pulls = Pulls::new(consumer.clone(), 8);
        let first = next_within(&mut pulls, 2, Duration::from_secs(10)).await;
        let second = next_within(&mut pulls, 1, Duration::from_secs(10)).await;
        // Long enough for more to arrive, had more been asked for.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(ack_pending_reaches(&mut consumer, 2).await, 2);
        for m in [first, second] {
            m.ack().await.expect("acking");
        }
        // Handlers free again: a request for as many as are free.
        let third = next_within(&mut pulls, 4, Duration::from_secs(10)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(ack_pending_reaches(&mut consumer, 4).await, 4);
        third.ack().await.expect("acking");
        pulls.stop().await;
    })
    .await;
}

/// Failed requests in a row are spaced out, 500 ms doubling to 4 s: the consumer gives up
/// only after about 70 s of them, past a leader election or a server restart.
#[test]
fn failed_requests_back_off_and_are_given_up_after_about_a_minute() {
    let pauses: Vec<u128> = (1..=5).map(|n| error_pause(n).as_millis()).collect();
    assert_eq!(pauses, [500, 1_000, 2_000, 4_000, 4_000]);
    assert_eq!(error_pause(u32::MAX), Duration::from_secs(4));
    let before_giving_up: Duration = (1..MAX_ERRORS).map(error_pause).sum();
    assert!(
        (Duration::from_secs(60)..Duration::from_secs(90)).contains(&before_giving_up),
        "{before_giving_up:?}"
    );
}
