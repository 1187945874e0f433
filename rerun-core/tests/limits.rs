//! What a call refuses before it touches the store: scopes outside the rule (contract 3, 6.6),
//! durations outside the limits (each `Error::Config` naming the fix), and payloads nested
//! deeper than the codec allows (`Error::Codec`). Nothing is written.

use std::time::Duration;

use rerun_core::{Call, Error, Key, MemoryStore, Store, MAX_DURATION, MIN_LEASE};

fn refused(call: Call, store: &MemoryStore) -> String {
    let key = call.key().clone();
    let err = call.run(store, || Ok::<_, Error>(1)).unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
    assert!(store.inspect(&key).unwrap().is_none(), "{key} was written");
    err.to_string()
}

#[test]
fn scopes_outside_the_rule_are_config_errors() {
    let store = MemoryStore::new();
    for scope in ["", "  ", "billing\tcharge", "line\nbreak", "nul\0"] {
        let text = refused(Call::new(scope.to_owned(), "k"), &store);
        assert!(text.contains("scope"), "{scope:?}: {text}");
        assert!(!text.contains('\t') && !text.contains('\n'), "{text:?}");
    }
    let long = "a".repeat(513);
    let text = refused(Call::new(long, "k"), &store);
    assert!(text.contains("512"), "{text}");
    // The longest allowed and unusual but valid characters are fine.
    for scope in [
        "a".repeat(512),
        "<a::B as c::D>::e".to_owned(),
        "é/ü:1".to_owned(),
    ] {
        Call::new(scope, "k")
            .run(&store, || Ok::<_, Error>(1))
            .unwrap();
    }
}

#[test]
fn durations_outside_the_limits_are_config_errors() {
    let store = MemoryStore::new();
    let text = refused(Call::new("s", "short").lease(MIN_LEASE / 2), &store);
    assert!(text.contains("minimum lease"), "{text}");
    let text = refused(Call::new("s", "zero").lease(Duration::ZERO), &store);
    assert!(text.contains("minimum lease"), "{text}");
    refused(Call::new("s", "ttl-max").ttl(Duration::MAX), &store);
    refused(Call::new("s", "ttl-zero").ttl(Duration::ZERO), &store);
    refused(
        Call::new("s", "wait").wait(MAX_DURATION + Duration::from_secs(1)),
        &store,
    );
    refused(Call::new("s", "lease").lease(MAX_DURATION * 2), &store);
    // At the limits, calls run. (A claim answered after its lease could have ended is given
    // back unrun, and with the shortest lease a stall of a loaded machine can do that: tried
    // a few times.)
    let edges = || {
        Call::new("s", "edges")
            .ttl(MAX_DURATION)
            .lease(MIN_LEASE)
            .wait(Duration::ZERO)
            .run(&store, || Ok::<_, Error>(1))
    };
    let ran = (0..5).any(|_| edges().is_ok());
    assert!(ran, "{:?}", edges());
    assert!(store.inspect(&Key::new("s", "edges")).unwrap().is_some());
}

#[test]
fn a_payload_nested_too_deep_is_a_codec_error_and_the_body_never_runs() {
    let store = MemoryStore::new();
    let mut deep = serde_json::json!("leaf");
    for _ in 0..300 {
        deep = serde_json::json!({ "inner": deep });
    }
    let call = Call::new("jobs.deep", "k1").payload(&deep);
    let key = call.key().clone();
    let mut ran = false;
    let err = call
        .run(&store, || {
            ran = true;
            Ok::<_, Error>(1)
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Codec {
                what: "the payload",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("256 levels"), "{err}");
    assert!(!ran, "the body ran");
    assert!(store.inspect(&key).unwrap().is_none(), "{key} was written");
    // Shallower, the same payload is a payload like any other.
    let mut ok = serde_json::json!("leaf");
    for _ in 0..200 {
        ok = serde_json::json!({ "inner": ok });
    }
    Call::new("jobs.deep", "k2")
        .payload(&ok)
        .run(&store, || Ok::<_, Error>(1))
        .unwrap();
}
