//! Deliveries as the consumer reads and settles them, on deliveries made up here.

use lapin::acker::Acker;
use lapin::message::Delivery as LapinDelivery;

use super::*;

fn delivery(redelivered: bool, count: Option<i64>) -> LapinDelivery {
    let mut properties = lapin::BasicProperties::default();
    if let Some(n) = count {
        let mut headers = FieldTable::default();
        headers.insert(
            ShortString::from("x-delivery-count"),
            AMQPValue::LongLongInt(n),
        );
        properties = properties.with_headers(headers);
    }
    LapinDelivery {
        delivery_tag: 1,
        exchange: ShortString::from(""),
        routing_key: ShortString::from("orders"),
        redelivered,
        properties,
        data: b"{}".to_vec(),
        acker: Acker::mock(),
    }
}

/// A first delivery is the first attempt whatever `x-delivery-count` its publisher gave it;
/// a redelivery's count is the queue's.
#[test]
fn a_first_delivery_is_the_first_attempt_whatever_its_headers_say() {
    let attempt = |redelivered, count| {
        AmqpDelivery::new(delivery(redelivered, count))
            .message
            .attempt()
    };
    assert_eq!(attempt(false, Some(1000)), 1);
    assert_eq!(attempt(false, None), 1);
    assert_eq!(attempt(true, Some(3)), 4);
    assert_eq!(attempt(true, None), 2);
}

/// An acker that sent nothing (its delivery was settled already, or its channel is closed or
/// recovering) leaves the message with the broker: a failed settlement, not a done one.
#[tokio::test]
async fn a_settlement_nothing_was_sent_for_fails() {
    let inner = delivery(false, None);
    let acker = inner.acker.clone();
    let d = AmqpDelivery::new(inner);
    assert_eq!(acker.ack(BasicAckOptions::default()).await.ok(), Some(true));
    assert!(d.ack().await.is_err(), "ack");
    assert!(d.dead_letter("hopeless").await.is_err(), "dead letter");
    assert!(d.release().await.is_err(), "release");
    assert!(
        d.redeliver(Duration::ZERO, true).await.is_err(),
        "redeliver"
    );
}

/// The hold before a requeue ends at most `MAX_HOLD` after the delivery came: the broker's
/// `consumer_timeout` runs from then, through the handler's run.
#[test]
fn a_hold_ends_at_most_max_hold_after_the_delivery_came() {
    let minute = Duration::from_secs(60);
    assert_eq!(
        hold(Duration::from_secs(1), Duration::ZERO),
        Duration::from_secs(1)
    );
    assert_eq!(hold(Duration::MAX, Duration::ZERO), MAX_HOLD);
    assert_eq!(hold(Duration::MAX, 10 * minute), MAX_HOLD - 10 * minute);
    assert_eq!(
        hold(minute, 14 * minute + 30 * Duration::from_secs(1)),
        minute / 2
    );
    assert_eq!(hold(minute, 20 * minute), Duration::ZERO);
}
