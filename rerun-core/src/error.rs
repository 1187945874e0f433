//! The one error type of rerun.

use std::fmt;
use std::time::Duration;

use crate::holder::Holder;
use crate::key::Key;

/// Why a stored record could not be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptKind {
    /// The bytes are shorter than their envelope says.
    Truncated,
    /// The checksum over the stored result does not match its bytes.
    Checksum,
    /// The record or result was written by a version of rerun this build does not know.
    UnknownVersion {
        /// The version found in the store.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The bytes are intact but do not decode as the function's result type
    /// (typically the result type changed between versions).
    Decode(String),
    /// A field of the record itself is malformed.
    Record(String),
}

impl fmt::Display for CorruptKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorruptKind::Truncated => f.write_str("the stored bytes are truncated"),
            CorruptKind::Checksum => f.write_str("the stored bytes fail their checksum"),
            CorruptKind::UnknownVersion { found, supported } => write!(
                f,
                "the record has format version {found}, this build reads up to version {supported}"
            ),
            CorruptKind::Decode(msg) => {
                write!(
                    f,
                    "the stored result does not decode as the result type: {msg}"
                )
            }
            CorruptKind::Record(msg) => write!(f, "the record is malformed: {msg}"),
        }
    }
}

/// The error type of every rerun operation.
///
/// Each variant carries the key it concerns, so a log line says which operation failed.
/// Functions annotated with `#[idempotent]` return their own error type, which must implement
/// `From<rerun_core::Error>`.
///
/// ```
/// use rerun_core::{Call, Error, MemoryStore};
/// let store = MemoryStore::new();
/// Call::new("billing.charge", "ord_1").payload(&500).run(&store, || Ok::<_, Error>(1))?;
/// let err = Call::new("billing.charge", "ord_1").payload(&900).run(&store, || Ok::<_, Error>(2));
/// match err {
///     Err(e @ Error::PayloadMismatch { .. }) => {
///         assert!(!e.is_retryable());
///         assert!(e.to_string().contains("billing.charge"));
///     }
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another live attempt holds the key right now.
    #[error("{key} is in progress in {holder} (its lease ends in {lease_ends_in:?}); retry later, or set `wait = \"10s\"` to wait for its result")]
    #[non_exhaustive]
    InProgress {
        /// The key.
        key: Key,
        /// Who holds it (boxed: it is the largest field of any variant).
        holder: Box<Holder>,
        /// How long until the holder's lease runs out, unless it renews it.
        lease_ends_in: Duration,
    },
    /// The key was used before with a different payload.
    #[error("{key} was already used with a different payload; a retry must send the same payload, or use a new key for a new operation")]
    #[non_exhaustive]
    PayloadMismatch {
        /// The key.
        key: Key,
    },
    /// An at-most-once operation died after its body started; whether its effect happened is unknown.
    #[error("{key}: an earlier attempt died after its body started, so its outcome is unknown; give the function a `reconcile` function, or check by hand and then `forget` the key")]
    #[non_exhaustive]
    OutcomeUnknown {
        /// The key.
        key: Key,
    },
    /// This attempt's claim was taken over (its lease ran out); its result was not recorded.
    #[error("{key}: this attempt lost its lease to another holder and its result was not recorded; the other holder's result stands")]
    #[non_exhaustive]
    LeaseLost {
        /// The key.
        key: Key,
    },
    /// The stored record cannot be decoded; it is left untouched and the body does not run.
    #[error("{key}: the stored record is corrupt ({kind}); it was left untouched; inspect it, then `forget` the key to run again")]
    #[non_exhaustive]
    Corrupt {
        /// The key.
        key: Key,
        /// What is wrong with it.
        kind: CorruptKind,
    },
    /// The store is unavailable or failed.
    #[error("{}store failed: {message}; the call can be retried", key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default())]
    #[non_exhaustive]
    Store {
        /// The key, when the failure concerns one.
        key: Option<Key>,
        /// What failed, in words.
        message: String,
        /// The driver's error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// A result or payload could not be encoded.
    #[error("{key}: could not encode {what}: {message}")]
    #[non_exhaustive]
    Codec {
        /// The key.
        key: Key,
        /// What was being encoded (`"the result"` or `"the payload"`).
        what: &'static str,
        /// The encoder's message.
        message: String,
    },
    /// rerun is configured wrongly (a bad `RERUN_STORE` URL, `init` called twice, a bad option).
    #[error("configuration error: {message}")]
    #[non_exhaustive]
    Config {
        /// What is wrong and what was expected.
        message: String,
    },
}

impl Error {
    /// Whether retrying the same call later can succeed.
    ///
    /// `InProgress` (the holder finishes), `Store` (the backend recovers) and `LeaseLost` (the
    /// successor's result is replayed) are retryable; the others need a changed call or an operator.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::InProgress { .. } | Error::Store { .. } | Error::LeaseLost { .. }
        )
    }

    /// The key this error concerns, if any.
    pub fn key(&self) -> Option<&Key> {
        match self {
            Error::InProgress { key, .. }
            | Error::PayloadMismatch { key }
            | Error::OutcomeUnknown { key }
            | Error::LeaseLost { key }
            | Error::Corrupt { key, .. }
            | Error::Codec { key, .. } => Some(key),
            Error::Store { key, .. } => key.as_ref(),
            Error::Config { .. } => None,
        }
    }

    /// A store failure with its driver error, for store implementations.
    pub fn store(
        key: Option<&Key>,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::Store {
            key: key.cloned(),
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// A store failure without a driver error, for store implementations.
    pub fn store_msg(key: Option<&Key>, message: impl Into<String>) -> Error {
        Error::Store {
            key: key.cloned(),
            message: message.into(),
            source: None,
        }
    }

    /// A configuration error.
    pub fn config(message: impl Into<String>) -> Error {
        Error::Config {
            message: message.into(),
        }
    }

    /// A corrupt record, for store implementations.
    pub fn corrupt(key: &Key, kind: CorruptKind) -> Error {
        Error::Corrupt {
            key: key.clone(),
            kind,
        }
    }

    /// A short, stable name of the variant, for metrics and reports (`"in_progress"`, …).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Error::InProgress { .. } => "in_progress",
            Error::PayloadMismatch { .. } => "payload_mismatch",
            Error::OutcomeUnknown { .. } => "outcome_unknown",
            Error::LeaseLost { .. } => "lease_lost",
            Error::Corrupt { .. } => "corrupt",
            Error::Store { .. } => "store",
            Error::Codec { .. } => "codec",
            Error::Config { .. } => "config",
        }
    }
}
