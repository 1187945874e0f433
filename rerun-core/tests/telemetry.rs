//! What rerun tells operators: one `rerun.call` span per call with its outcome, events for
//! takeovers, releases, corrupt records and unknown outcomes, and the metric series of
//! contract 13, captured with a real subscriber and a real recorder.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use rerun_core::record::ClaimRequest;
use rerun_core::testing::{Faulty, Op};
use rerun_core::{Call, Error, Fingerprint, Holder, Key, MemoryStore, Store};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// The fields of a span or an event.
type Fieldset = BTreeMap<String, String>;

/// Fields of every `rerun.call` span, and the level and fields of events, in order.
#[derive(Default, Clone)]
struct Seen {
    spans: Arc<Mutex<BTreeMap<u64, Fieldset>>>,
    events: Arc<Mutex<Vec<(String, Fieldset)>>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Seen {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() == "rerun.call" {
            let mut fields = BTreeMap::new();
            attrs.record(&mut Fields(&mut fields));
            self.spans.lock().unwrap().insert(id.into_u64(), fields);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(fields) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        // Whether the event was emitted inside a `rerun.call` span, as a pseudo-field.
        let in_call = ctx
            .event_span(event)
            .is_some_and(|s| s.scope().any(|s| s.name() == "rerun.call"));
        fields.insert("in_call".to_owned(), in_call.to_string());
        let level = event.metadata().level().to_string();
        self.events.lock().unwrap().push((level, fields));
    }
}

impl Seen {
    fn outcomes(&self) -> Vec<String> {
        self.spans
            .lock()
            .unwrap()
            .values()
            .map(|f| f.get("outcome").cloned().unwrap_or_default())
            .collect()
    }
    fn event(&self, contains: &str) -> Option<(String, Fieldset)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .find(|(_, f)| f.get("message").is_some_and(|m| m.contains(contains)))
            .cloned()
    }
}

/// The tests of this binary take turns. Key redaction is process-wide, and so is tracing's
/// cache of each callsite's interest: a callsite first reached on a thread with no subscriber
/// while another test installs its scoped one can be cached as "never", and that test then
/// misses the event (a takeover event went missing this way while the metrics test ran).
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn every_call_is_one_span_with_its_outcome_and_events_say_what_operators_need() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let seen = Seen::default();
    let subscriber = tracing_subscriber::registry().with(seen.clone());
    tracing::subscriber::with_default(subscriber, || {
        let store = MemoryStore::new();
        Call::new("billing.charge", "evt_1")
            .run(&store, || Ok::<_, Error>(1))
            .unwrap();
        Call::new("billing.charge", "evt_1")
            .run(&store, || Ok::<_, Error>(2))
            .unwrap();
        let _ = Call::new("billing.charge", "evt_1")
            .payload(&"other")
            .run(&store, || Ok::<_, Error>(3));
        let _ = Call::new("billing.charge", "evt_2")
            .run(&store, || Err::<u8, _>(Error::config("body failed")));
        // A dead holder (our pid, another start time) is taken over at once.
        let key = Key::new("billing.charge", "evt_3");
        let mut dead = Holder::current();
        dead.start_time += 2;
        store
            .claim(&ClaimRequest {
                key: &key,
                fingerprint: &Fingerprint::EMPTY,
                holder: &dead,
                lease: Duration::from_secs(30),
                once: true,
                steal: None,
            })
            .unwrap();
        let _ = Call::new("billing.charge", "evt_3")
            .once()
            .run(&store, || Ok::<_, Error>(4));
        // A live holder: in progress.
        let live = Key::new("billing.charge", "evt_4");
        store
            .claim(&ClaimRequest {
                key: &live,
                fingerprint: &Fingerprint::EMPTY,
                holder: &Holder::current(),
                lease: Duration::from_secs(30),
                once: false,
                steal: None,
            })
            .unwrap();
        let _ = Call::new("billing.charge", "evt_4").run(&store, || Ok::<_, Error>(5));
    });
    assert_eq!(
        seen.outcomes(),
        [
            "ran",
            "replayed",
            "mismatch",
            "failed",
            "unknown",
            "in_progress"
        ],
    );
    let spans = seen.spans.lock().unwrap();
    let first = spans.values().next().unwrap();
    assert_eq!(
        first.get("scope").map(String::as_str),
        Some("billing.charge")
    );
    assert_eq!(first.get("key").map(String::as_str), Some("evt_1"));
    assert_eq!(first.get("store").map(String::as_str), Some("memory"));
    assert!(
        first.get("fence").is_some_and(|f| f.parse::<u64>().is_ok()),
        "{first:?}"
    );
    drop(spans);
    let (level, takeover) = seen.event("took over").expect("a takeover event");
    assert_eq!(
        (level.as_str(), takeover.get("reason").map(String::as_str)),
        ("INFO", Some("dead_holder"))
    );
    assert_eq!(
        seen.event("outcome is unknown").map(|e| e.0),
        Some("WARN".into())
    );
    assert_eq!(
        seen.event("claim was given back").map(|e| e.0),
        Some("INFO".into())
    );
}

#[test]
fn keys_can_be_logged_as_a_digest() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let seen = Seen::default();
    let subscriber = tracing_subscriber::registry().with(seen.clone());
    rerun_core::telemetry::redact_keys(true);
    tracing::subscriber::with_default(subscriber, || {
        Call::new("mail.welcome", "alice@example.com")
            .run(&MemoryStore::new(), || Ok::<_, Error>(()))
            .unwrap();
    });
    rerun_core::telemetry::redact_keys(false);
    let spans = seen.spans.lock().unwrap();
    let key = spans
        .values()
        .next()
        .and_then(|f| f.get("key").cloned())
        .unwrap_or_default();
    assert!(
        key.starts_with("sha256:") && !key.contains("alice"),
        "{key}"
    );
}

/// A memory store whose `release` fails, naming the key as every store error does.
fn release_fails() -> Faulty {
    Faulty::new(MemoryStore::new()).before(|op| match op {
        Op::Release(claim) => Err(Error::store_msg(
            Some(&claim.key),
            "the connection was reset",
        )),
        _ => Ok(()),
    })
}

/// With redaction on, an event about a failed store operation names the key by its digest in
/// its `key` field and in its `error` text alike.
#[test]
fn failures_name_keys_as_a_digest_too() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let seen = Seen::default();
    let subscriber = tracing_subscriber::registry().with(seen.clone());
    rerun_core::telemetry::redact_keys(true);
    tracing::subscriber::with_default(subscriber, || {
        let out = Call::new("mail.welcome", "alice@example.com")
            .run(&release_fails(), || Err::<(), _>(Error::config("no")));
        assert!(out.is_err());
    });
    rerun_core::telemetry::redact_keys(false);
    let (_, fields) = seen
        .event("could not release")
        .unwrap_or_else(|| panic!("no event about the failed release"));
    let text = format!("{fields:?}");
    assert!(!text.contains("alice"), "{text}");
    assert!(
        fields.get("key").is_some_and(|k| k.starts_with("sha256:")),
        "{text}"
    );
    assert!(
        fields.get("error").is_some_and(|e| e.contains("sha256:")),
        "{text}"
    );
}

#[test]
fn the_metric_series_of_contract_13() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let store = MemoryStore::new();
        for _ in 0..3 {
            Call::new("jobs.resize", "img_1")
                .run(&store, || Ok::<_, Error>(1))
                .unwrap();
        }
        let key = Key::new("jobs.resize", "img_2");
        let mut dead = Holder::current();
        dead.start_time += 2;
        store
            .claim(&ClaimRequest {
                key: &key,
                fingerprint: &Fingerprint::EMPTY,
                holder: &dead,
                lease: Duration::from_secs(30),
                once: false,
                steal: None,
            })
            .unwrap();
        Call::new("jobs.resize", "img_2")
            .run(&store, || Ok::<_, Error>(2))
            .unwrap();
    });
    let mut counters = BTreeMap::new();
    let mut histograms = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, k) = key.into_parts();
        let mut labels: Vec<String> = k
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let name = format!("{}{{{}}}", k.name(), labels.join(","));
        match value {
            DebugValue::Counter(n) => {
                counters.insert(name, n);
            }
            DebugValue::Histogram(v) => {
                histograms.insert(name, v.len());
            }
            DebugValue::Gauge(_) => {}
        }
    }
    assert_eq!(
        counters.get("rerun_calls_total{outcome=ran,scope=jobs.resize}"),
        Some(&2),
        "{counters:?}"
    );
    assert_eq!(
        counters.get("rerun_calls_total{outcome=replayed,scope=jobs.resize}"),
        Some(&2),
        "{counters:?}"
    );
    assert_eq!(
        counters.get("rerun_takeovers_total{reason=dead_holder,scope=jobs.resize}"),
        Some(&1),
        "{counters:?}"
    );
    assert_eq!(
        histograms.get("rerun_call_duration_seconds{outcome=ran,scope=jobs.resize}"),
        Some(&2),
        "{histograms:?}"
    );
    assert!(
        histograms
            .get("rerun_store_op_duration_seconds{op=claim,store=memory}")
            .is_some_and(|n| *n >= 5),
        "{histograms:?}"
    );
    assert!(
        histograms
            .get("rerun_store_op_duration_seconds{op=complete,store=memory}")
            .is_some_and(|n| *n == 2),
        "{histograms:?}"
    );
}

/// A call dropped midway (a cancelled task) drops its body inside its span: what the body's
/// guards log on the way out, and the claim given back, belong to the call.
#[test]
fn a_call_dropped_midway_drops_its_body_inside_its_span() {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            tracing::info!("the body was dropped");
        }
    }
    let seen = Seen::default();
    let subscriber = tracing_subscriber::registry().with(seen.clone());
    tracing::subscriber::with_default(subscriber, || {
        let store = MemoryStore::new();
        let call = Call::new("telemetry.dropped", &1u64).run_async(&store, async {
            let _guard = Guard;
            std::future::pending::<()>().await;
            Ok::<u32, Error>(1)
        });
        let mut call = std::pin::pin!(call);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(std::future::Future::poll(call.as_mut(), &mut cx).is_pending());
    });
    let (_, dropped) = seen
        .event("the body was dropped")
        .expect("the body's guard logged");
    assert_eq!(
        dropped.get("in_call").map(String::as_str),
        Some("true"),
        "{dropped:?}"
    );
}
