//! What a handler run can end in, and how a handler's error is classified.

use std::fmt;
use std::time::Duration;

/// An error a queue handler can return: it carries rerun's errors (`From<rerun_core::Error>`)
/// and says whether retrying later can succeed.
///
/// `rerun_core::Error` implements it; an application error implements it in a few lines:
///
/// ```
/// use rerun_queue::HandlerError;
///
/// #[derive(Debug)]
/// enum ShopError { Rerun(rerun_core::Error), Db(String), Invalid(String) }
/// impl std::fmt::Display for ShopError {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         match self {
///             ShopError::Rerun(e) => write!(f, "{e}"),
///             ShopError::Db(e) => write!(f, "database: {e}"),
///             ShopError::Invalid(e) => write!(f, "invalid order: {e}"),
///         }
///     }
/// }
/// impl From<rerun_core::Error> for ShopError {
///     fn from(e: rerun_core::Error) -> Self { ShopError::Rerun(e) }
/// }
/// impl HandlerError for ShopError {
///     fn rerun_error(&self) -> Option<&rerun_core::Error> {
///         match self { ShopError::Rerun(e) => Some(e), _ => None }
///     }
///     fn is_retryable(&self) -> bool {
///         match self {
///             ShopError::Rerun(e) => e.is_retryable(),
///             ShopError::Db(_) => true,       // the database comes back
///             ShopError::Invalid(_) => false, // no retry fixes the order
///         }
///     }
/// }
/// ```
pub trait HandlerError: From<rerun_core::Error> + fmt::Display + Send + 'static {
    /// The rerun error inside, if this is one (`InProgress`, `PayloadMismatch`, …).
    fn rerun_error(&self) -> Option<&rerun_core::Error>;
    /// Whether handling the same message later can succeed.
    fn is_retryable(&self) -> bool;
}

impl HandlerError for rerun_core::Error {
    fn rerun_error(&self) -> Option<&rerun_core::Error> {
        Some(self)
    }
    fn is_retryable(&self) -> bool {
        rerun_core::Error::is_retryable(self)
    }
}

/// How one delivery was handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The result is recorded: the handler ran now (`replayed: false`) or earlier.
    Done {
        /// Whether the recorded result of an earlier delivery was replayed.
        replayed: bool,
    },
    /// Nothing was recorded.
    Failed(Failure),
}

/// Why a delivery was not handled, and what that means for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The class that decides what happens to the message.
    pub kind: FailureKind,
    /// What happened, in words, for the logs.
    pub reason: String,
}

/// The classes of [`Failure`], one per row of the ack policy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// Another consumer holds the key right now; its lease ends in this long unless renewed.
    InProgress {
        /// How long until the holder's lease runs out.
        lease_ends_in: Duration,
    },
    /// The handler (or the store) failed in a way a later try can fix.
    Retryable,
    /// The key was used before with another payload.
    PayloadMismatch,
    /// The stored record of the key cannot be decoded.
    Corrupt,
    /// An at-most-once handler died mid-body earlier and nothing reconciled it.
    OutcomeUnknown,
    /// The body is not a payload of the handler's type.
    Undecodable,
    /// The handler is keyed by the broker's message id and the message has none (or an empty or
    /// all-whitespace one).
    NoMessageId,
    /// The handler failed in a way no retry fixes.
    Fatal,
}

impl Failure {
    /// A failure of `kind` with `reason`.
    pub fn new(kind: FailureKind, reason: impl Into<String>) -> Failure {
        Failure {
            kind,
            reason: reason.into(),
        }
    }

    /// Classifies a handler's error.
    ///
    /// ```
    /// use rerun_core::{Error, Key};
    /// use rerun_queue::{Failure, FailureKind};
    /// let e = Error::store_msg(None, "connection reset");
    /// assert_eq!(Failure::of(&e).kind, FailureKind::Retryable);
    /// let e = Error::config("bad option");
    /// assert_eq!(Failure::of(&e).kind, FailureKind::Fatal);
    /// ```
    pub fn of<E: HandlerError>(error: &E) -> Failure {
        let kind = match error.rerun_error() {
            Some(rerun_core::Error::InProgress { lease_ends_in, .. }) => FailureKind::InProgress {
                lease_ends_in: *lease_ends_in,
            },
            Some(rerun_core::Error::PayloadMismatch { .. }) => FailureKind::PayloadMismatch,
            Some(rerun_core::Error::Corrupt { .. }) => FailureKind::Corrupt,
            Some(rerun_core::Error::OutcomeUnknown { .. }) => FailureKind::OutcomeUnknown,
            _ if error.is_retryable() => FailureKind::Retryable,
            _ => FailureKind::Fatal,
        };
        // With `redact_keys`, rerun's key is a digest here too: the reason is logged and sent
        // along with a dead letter.
        let mut reason = error.to_string();
        if let Some(key) = error.rerun_error().and_then(rerun_core::Error::key) {
            let shown = format!("key {}", rerun_core::telemetry::key_field(key));
            reason = reason.replace(&key.to_string(), &shown);
        }
        Failure::new(kind, reason)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}
