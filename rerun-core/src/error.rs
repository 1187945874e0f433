//! The one error type of rerun.

use std::fmt;
use std::time::Duration;

use crate::holder::Holder;
use crate::key::Key;

/// A call whose store failed after its body had run and returned, while its result was being
/// recorded ([`Error::Store`]'s `after_body`): the effect may have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AfterBody {
    /// A replayable call: nothing is recorded, and a retry runs the body again.
    Replayable,
    /// An at-most-once call: its outcome is unknown, and it will not run again for this key
    /// (a retry waits out the lease, then gets [`Error::OutcomeUnknown`], or runs the
    /// function's `reconcile`).
    Once,
}

/// The advice that ends a store failure's message.
fn store_advice(retryable: bool, after_body: Option<AfterBody>) -> &'static str {
    match (after_body, retryable) {
        (Some(AfterBody::Once), _) => "the body ran, but its result was not recorded: its outcome is unknown, and the body will not run again for this key (a retry runs its reconcile function, if any)",
        (Some(AfterBody::Replayable), true) => "the body ran, but its result was not recorded: the call can be retried, and a retry runs the body again",
        (Some(AfterBody::Replayable), false) => "the body ran, but its result was not recorded, and retrying will not help until this is fixed",
        (None, true) => "the call can be retried",
        (None, false) => "retrying will not help until this is fixed",
    }
}

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
    /// A scan met a key rerun would not have written (a name or a key column written by
    /// something else: not UTF-8, not text, or not escaped as rerun escapes). It is named as
    /// stored, which no [`Key`] reaches, so [`crate::Store::forget`] cannot remove it: delete it
    /// with the store's own client (`psql`, `sqlite3`, `redis-cli`).
    ForeignKey(String),
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
            CorruptKind::ForeignKey(msg) => write!(
                f,
                "the key is not one rerun writes: {msg}; something else wrote it, and rerun \
                 cannot forget it by a key (delete it with the store's own client)"
            ),
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
    /// Another live attempt holds the key right now. The message names no process or host
    /// (it may reach a client); the holder is in the field, for logs.
    #[error("{key} is in progress in another attempt (its lease ends in {}); retry later, or let the call wait for the result: `wait = \"10s\"` in `#[idempotent(…)]`, `#[rerun(wait = \"10s\")]` on a derived type, or `Call::wait`", rounded(*lease_ends_in))]
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
    PayloadMismatch {
        /// The key.
        key: Key,
    },
    /// An at-most-once operation died after its body started; whether its effect happened is unknown.
    #[error("{key}: an earlier attempt died after its body started, so its outcome is unknown; give the function a `reconcile` function, or check by hand and then `forget` the key")]
    OutcomeUnknown {
        /// The key.
        key: Key,
    },
    /// This attempt's claim was taken over (its lease ran out); its result was not recorded.
    #[error("{key}: this attempt lost its lease to another holder and its result was not recorded; the other holder's result stands")]
    LeaseLost {
        /// The key.
        key: Key,
    },
    /// The stored record cannot be decoded; it is left untouched and the body does not run.
    #[error("{key}: the stored record is corrupt ({kind}); it was left untouched; inspect it, then `forget` the key to run again")]
    Corrupt {
        /// The key.
        key: Key,
        /// What is wrong with it.
        kind: CorruptKind,
    },
    /// The store is unavailable or failed.
    #[error("{}store failed: {message}; {}", key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default(), store_advice(*retryable, *after_body))]
    Store {
        /// The key, when the failure concerns one.
        key: Option<Key>,
        /// What failed and why, in words (the driver's own message included).
        message: String,
        /// The driver's error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
        /// Whether retrying later can succeed: `false` for what no retry fixes (permission
        /// denied, an unknown database or role, a read-only file).
        retryable: bool,
        /// Set when the store failed while recording the result of a body that had run: its
        /// effect may have happened, and only its result is not recorded (`None`: the body did
        /// not run, or the failure was not a call's).
        after_body: Option<AfterBody>,
    },
    /// A result, payload, key or holder could not be encoded, or is too large for the store.
    #[error("{key}: could not encode {what}: {message}")]
    Codec {
        /// The key.
        key: Key,
        /// What was being encoded: `"the result"` (after the body ran), or `"the payload"`,
        /// `"the key"`, `"the holder"` (before it).
        what: &'static str,
        /// The encoder's message.
        message: String,
    },
    /// rerun is configured wrongly (a bad `RERUN_STORE` URL, `init` called twice, a bad option).
    #[error("configuration error: {message}")]
    Config {
        /// What is wrong and what was expected.
        message: String,
    },
}

/// An [`Error`] as an I/O error, so that a function returning [`std::io::Result`] can be
/// `#[idempotent]` and `?` rerun's errors: the kind says what a caller of I/O would do about
/// it (`ResourceBusy` for a key in progress, `InvalidInput` for configuration, `InvalidData`
/// for what cannot be encoded or decoded), and the error itself is kept inside, for
/// [`std::io::Error::get_ref`] and `downcast`.
///
/// ```
/// use rerun_core::{idempotent, MemoryStore};
///
/// #[idempotent(key = path, store = store)]
/// fn write_once(store: &MemoryStore, path: &str) -> std::io::Result<u64> {
///     Ok(path.len() as u64)
/// }
///
/// assert_eq!(write_once(&MemoryStore::new(), "/tmp/out").unwrap(), 8);
/// ```
impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        use std::io::ErrorKind;
        let kind = match &e {
            // Not `WouldBlock`, which async I/O reads as "not ready yet, poll again".
            Error::InProgress { .. } => ErrorKind::ResourceBusy,
            Error::Config { .. } => ErrorKind::InvalidInput,
            Error::Codec { .. } | Error::Corrupt { .. } => ErrorKind::InvalidData,
            _ => ErrorKind::Other,
        };
        std::io::Error::new(kind, e)
    }
}

/// A duration as people read it: `30s`, `1.5s`, `250ms`, `2m 5s`, `3h 10m`.
pub(crate) fn rounded(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    if ms < 10_000 {
        let tenths = (ms + 50) / 100;
        return if tenths % 10 == 0 {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        };
    }
    let s = (ms + 500) / 1_000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3_599 if s % 60 == 0 => format!("{}m", s / 60),
        60..=3_599 => format!("{}m {}s", s / 60, s % 60),
        3_600..=86_399 if (s % 3_600) / 60 == 0 => format!("{}h", s / 3_600),
        3_600..=86_399 => format!("{}h {}m", s / 3_600, (s % 3_600) / 60),
        _ if (s % 86_400) / 3_600 == 0 => format!("{}d", s / 86_400),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3_600),
    }
}

impl Error {
    /// Whether retrying the same call later can succeed.
    ///
    /// `InProgress` (the holder finishes), `Store` (the backend recovers) and `LeaseLost` (the
    /// successor's result is replayed) are retryable; the others need a changed call or an
    /// operator. A `Store` failure after the body of an at-most-once call ran
    /// ([`AfterBody::Once`]) stays retryable: the retry waits out the claim, then runs the
    /// function's `reconcile`, or returns [`Error::OutcomeUnknown`].
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::InProgress { .. } | Error::LeaseLost { .. } => true,
            Error::Store { retryable, .. } => *retryable,
            _ => false,
        }
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

    /// A retryable store failure with its driver error, for store implementations. The
    /// message is `what` followed by the driver's own message (`"opening /var/lib/app/rerun.sqlite3:
    /// unable to open database file"`), so the cause is never only in `source()`.
    pub fn store(
        key: Option<&Key>,
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::store_failure(key, what, source, true)
    }

    /// A store failure with its driver error that retrying cannot fix (permission denied, an
    /// unknown database or role), for store implementations.
    pub fn store_permanent(
        key: Option<&Key>,
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::store_failure(key, what, source, false)
    }

    fn store_failure(
        key: Option<&Key>,
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
        retryable: bool,
    ) -> Error {
        let mut message = what.into();
        let cause = source.to_string();
        if !cause.is_empty() && !message.contains(&cause) {
            message.push_str(": ");
            message.push_str(&cause);
        }
        Error::Store {
            key: key.cloned(),
            message,
            source: Some(Box::new(source)),
            retryable,
            after_body: None,
        }
    }

    /// Set when the store failed while recording the result of a body that ran
    /// ([`AfterBody`]): the error then says so, and its [`problem`](Error::problem) does not
    /// tell the client the request was not processed. Other errors are returned as they are.
    pub fn after_body(self, after: AfterBody) -> Error {
        match self {
            Error::Store {
                key,
                message,
                source,
                retryable,
                ..
            } => Error::Store {
                key,
                message,
                source,
                retryable,
                after_body: Some(after),
            },
            other => other,
        }
    }

    /// A retryable store failure without a driver error, for store implementations.
    pub fn store_msg(key: Option<&Key>, message: impl Into<String>) -> Error {
        Error::Store {
            key: key.cloned(),
            message: message.into(),
            source: None,
            retryable: true,
            after_body: None,
        }
    }

    /// A configuration error.
    pub fn config(message: impl Into<String>) -> Error {
        Error::Config {
            message: message.into(),
        }
    }

    /// An unknown outcome: an at-most-once attempt on `key` stopped after its body may have
    /// started, for integrations that learn it outside a call (a handler that panicked on a
    /// task of its own, say).
    ///
    /// ```
    /// use rerun_core::{Error, Key};
    /// let e = Error::outcome_unknown(&Key::new("billing.charge", "evt_1"));
    /// assert_eq!(e.kind_name(), "outcome_unknown");
    /// ```
    pub fn outcome_unknown(key: &Key) -> Error {
        Error::OutcomeUnknown { key: key.clone() }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_rounded() {
        let cases = [
            (Duration::from_micros(29_999_166), "30s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1_460), "1.5s"),
            (Duration::from_millis(2_000), "2s"),
            (Duration::from_secs(125), "2m 5s"),
            (Duration::from_secs(3_600), "1h"),
            (Duration::from_secs(3 * 3_600 + 620), "3h 10m"),
            (Duration::from_secs(7 * 86_400), "7d"),
            (Duration::MAX, "213503982334601d 7h"),
        ];
        for (d, want) in cases {
            assert_eq!(rounded(d), want, "{d:?}");
        }
    }

    #[test]
    fn in_progress_names_no_process() {
        let mut holder = Holder::current();
        holder.host = "db-secret-host".into();
        let e = Error::InProgress {
            key: Key::from_parts("billing.charge", "s5:ord_1"),
            holder: Box::new(holder),
            lease_ends_in: Duration::from_micros(29_999_166),
        };
        let text = e.to_string();
        assert!(text.contains("30s"), "{text}");
        assert!(
            !text.contains("db-secret-host") && !text.contains("process"),
            "{text}"
        );
    }

    #[test]
    fn store_errors_carry_their_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "permission denied");
        let e = Error::store_permanent(None, "creating /srv/app/.rerun", io);
        let text = e.to_string();
        assert!(
            text.contains("/srv/app/.rerun: permission denied"),
            "{text}"
        );
        assert!(
            !e.is_retryable() && text.contains("retrying will not help"),
            "{text}"
        );
        let e = Error::store_msg(None, "timed out");
        assert!(e.is_retryable() && e.to_string().contains("can be retried"));
    }
}
