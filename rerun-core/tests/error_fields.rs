//! An error's fields can be named in a pattern from outside the crate, as contract section 8
//! lists them: the enum may grow variants, but a variant's fields are what they are.

use std::time::Duration;

use rerun_core::{Call, Error, Key, MemoryStore};

#[test]
fn a_payload_mismatch_names_its_key() {
    let store = MemoryStore::new();
    let first = Call::new("errors", "mismatch")
        .payload(&1)
        .run(&store, || Ok::<_, Error>(1u32));
    assert!(first.is_ok(), "{first:?}");
    let second = Call::new("errors", "mismatch")
        .payload(&2)
        .run(&store, || Ok::<_, Error>(2u32));
    match second {
        Err(Error::PayloadMismatch { key }) => {
            assert_eq!(key, Key::new("errors", "mismatch"));
        }
        other => panic!("expected a payload mismatch, got {other:?}"),
    }
}

#[test]
fn in_progress_names_the_holder_and_the_lease_left() {
    let store = MemoryStore::new();
    let lease = Duration::from_secs(30);
    let inner = Call::new("errors", "busy").lease(lease).run(&store, || {
        let nested = Call::new("errors", "busy").run(&store, || Ok::<_, Error>(0u32));
        match nested {
            Err(Error::InProgress {
                key,
                holder,
                lease_ends_in,
            }) => {
                assert_eq!(key, Key::new("errors", "busy"));
                assert!(lease_ends_in <= lease, "{lease_ends_in:?}");
                assert!(!holder.to_string().is_empty());
                Ok::<_, Error>(1u32)
            }
            other => panic!("expected in progress, got {other:?}"),
        }
    });
    assert!(matches!(inner, Ok(o) if o.value == 1));
}

#[test]
fn the_other_variants_are_patterns_of_their_fields() {
    // Compiles only while every listed variant's fields can be named without `..`.
    fn describe(e: &Error) -> String {
        match e {
            Error::InProgress {
                key,
                holder: _,
                lease_ends_in: _,
            }
            | Error::PayloadMismatch { key }
            | Error::OutcomeUnknown { key }
            | Error::LeaseLost { key }
            | Error::Corrupt { key, kind: _ }
            | Error::Codec {
                key,
                what: _,
                message: _,
            } => key.to_string(),
            Error::Config { message } => message.clone(),
            Error::Store {
                key: _,
                message,
                source: _,
                retryable: _,
                after_body: _,
            } => message.clone(),
            _ => String::new(),
        }
    }
    let e = Error::config("a bad option");
    assert!(describe(&e).contains("a bad option"));
}

#[rerun_core::idempotent(key = name, store = store, skip(ran))]
fn written(store: &MemoryStore, name: &str, ran: &std::cell::Cell<u32>) -> std::io::Result<usize> {
    ran.set(ran.get() + 1);
    Ok(name.len())
}

#[test]
fn a_function_returning_io_result_is_idempotent_and_keeps_rerun_errors_inside() {
    let store = MemoryStore::new();
    let ran = std::cell::Cell::new(0);
    assert_eq!(written(&store, "report.csv", &ran).unwrap(), 10);
    assert_eq!(written(&store, "report.csv", &ran).unwrap(), 10);
    assert_eq!(ran.get(), 1);
    let e: std::io::Error = Error::config("a bad option").into();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<Error>());
    assert!(matches!(inner, Some(Error::Config { .. })), "{e:?}");
}
