//! What rerun tells about its calls: a `tracing` span per call, events for what an operator
//! must know, and (feature `metrics`) counters and histograms through the `metrics` facade.
//!
//! # Spans and events
//!
//! Every call is one span `rerun.call` (level `DEBUG`, as tower-http's request spans) with the
//! fields `scope`, `key`, `outcome`, `fence` and `store`. `outcome` is one of `ran`, `replayed`,
//! `waited` (replayed after waiting for a live holder), `in_progress`, `mismatch`, `lease_lost`,
//! `unknown`, `reconciled`, `corrupt`, `failed`. Events, inside the span:
//!
//! | event | level |
//! |---|---|
//! | a claim taken over (`reason`: `dead_holder` or `lease_end`) | `INFO` |
//! | a claim given back after its body failed | `INFO` |
//! | an unknown outcome (an at-most-once body may have run) | `WARN` |
//! | a reconciled outcome | `INFO` |
//! | a corrupt record | `WARN` |
//! | a lease that could not be renewed, or was taken over while the body ran | `WARN` |
//!
//! Keys are logged in their readable form; [`redact_keys`] logs a digest instead.
//!
//! # Metrics (feature `metrics`)
//!
//! | series | kind | labels |
//! |---|---|---|
//! | `rerun_calls_total` | counter | `scope`, `outcome` |
//! | `rerun_call_duration_seconds` | histogram | `scope`, `outcome` |
//! | `rerun_takeovers_total` | counter | `scope`, `reason` |
//! | `rerun_lease_renewals_total` | counter | `result` (`ok`, `lost`, `failed`) |
//! | `rerun_store_op_duration_seconds` | histogram | `store`, `op` |
//!
//! Install any `metrics` recorder (e.g. `metrics-exporter-prometheus`); without one, the
//! macros cost a relaxed atomic load.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::Error;
use crate::key::Key;

static REDACT: AtomicBool = AtomicBool::new(false);

/// Logs keys as a digest (`sha256:1f2e…`, the first 16 hex digits of the SHA-256 of scope and
/// id) instead of their readable form: for keys that carry personal data (an email address, a
/// card fingerprint). Process-wide; off by default.
///
/// ```
/// rerun_core::telemetry::redact_keys(true);
/// # rerun_core::telemetry::redact_keys(false);
/// ```
pub fn redact_keys(on: bool) {
    REDACT.store(on, Ordering::Relaxed);
}

/// An error as logs show it: with [`redact_keys`], the key it names is shown as its digest,
/// as [`key_field`] shows it, wherever the message repeats it.
///
/// ```
/// use rerun_core::{telemetry, Error, Key};
/// let e = Error::outcome_unknown(&Key::new("mail.send", "ann@example.com"));
/// assert!(telemetry::error_field(&e).contains("ann@example.com"));
/// telemetry::redact_keys(true);
/// let shown = telemetry::error_field(&e);
/// telemetry::redact_keys(false);
/// assert!(!shown.contains("ann@example.com") && shown.contains("sha256:"));
/// ```
pub fn error_field(e: &Error) -> String {
    let text = e.to_string();
    match e.key() {
        Some(key) if REDACT.load(Ordering::Relaxed) => {
            text.replace(&key.to_string(), &format!("key {}", key_field(key)))
        }
        _ => text,
    }
}

/// A key as logs show it: readable, or a digest with [`redact_keys`].
pub fn key_field(key: &Key) -> String {
    if REDACT.load(Ordering::Relaxed) {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        h.update(key.scope().as_bytes());
        h.update([0]);
        h.update(key.id().as_bytes());
        let digest = h.finalize();
        let mut out = String::with_capacity(23);
        out.push_str("sha256:");
        for b in &digest[..8] {
            out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        return out;
    }
    key.to_string()
        .strip_prefix("key ")
        .map(str::to_owned)
        .unwrap_or_default()
}

/// A key's value without its scope, for the `key` field of a call's span (its scope is a
/// field of its own): readable, or the whole key's digest with [`redact_keys`].
pub(crate) fn id_field(key: &Key) -> String {
    if REDACT.load(Ordering::Relaxed) {
        return key_field(key);
    }
    key.shown_id()
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Verdict {
    /// The body ran and its result was recorded.
    Ran,
    /// The recorded result was returned.
    Replayed,
    /// The recorded result was returned after waiting for a live holder.
    Waited,
    InProgress,
    Mismatch,
    LeaseLost,
    Unknown,
    /// A reconcile function found the effect done; its result was recorded.
    Reconciled,
    Corrupt,
    /// The body failed, or a store call did.
    #[default]
    Failed,
}

impl Verdict {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Ran => "ran",
            Verdict::Replayed => "replayed",
            Verdict::Waited => "waited",
            Verdict::InProgress => "in_progress",
            Verdict::Mismatch => "mismatch",
            Verdict::LeaseLost => "lease_lost",
            Verdict::Unknown => "unknown",
            Verdict::Reconciled => "reconciled",
            Verdict::Corrupt => "corrupt",
            Verdict::Failed => "failed",
        }
    }

    /// The verdict of a call that ended with one of rerun's own errors.
    pub(crate) fn of(e: &Error) -> Verdict {
        match e {
            Error::InProgress { .. } => Verdict::InProgress,
            Error::PayloadMismatch { .. } => Verdict::Mismatch,
            Error::LeaseLost { .. } => Verdict::LeaseLost,
            Error::OutcomeUnknown { .. } => Verdict::Unknown,
            Error::Corrupt { .. } => Verdict::Corrupt,
            _ => Verdict::Failed,
        }
    }
}

/// What `run` found out about a call, for its span and metrics.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) verdict: Verdict,
    pub(crate) fence: Option<u64>,
    /// The body, or the reconcile function, returned an error (the call's error is its own).
    pub(crate) body_failed: bool,
}

/// Counts a finished call.
#[inline]
pub(crate) fn call_finished(scope: &Key, verdict: Verdict, started: Option<std::time::Instant>) {
    #[cfg(feature = "metrics")]
    {
        let scope = scope_label(scope);
        let outcome = verdict.as_str();
        metrics::counter!("rerun_calls_total", "scope" => scope.clone(), "outcome" => outcome)
            .increment(1);
        if let Some(started) = started {
            metrics::histogram!("rerun_call_duration_seconds", "scope" => scope, "outcome" => outcome)
                .record(started.elapsed().as_secs_f64());
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (scope, verdict, started);
}

#[cfg(feature = "metrics")]
fn scope_label(key: &Key) -> metrics::SharedString {
    match key.scope_cow() {
        std::borrow::Cow::Borrowed(s) => metrics::SharedString::const_str(s),
        std::borrow::Cow::Owned(s) => metrics::SharedString::from(s.clone()),
    }
}

/// Counts a takeover.
#[inline]
pub(crate) fn takeover(scope: &Key, reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("rerun_takeovers_total", "scope" => scope_label(scope), "reason" => reason)
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (scope, reason);
}

/// Counts a lease renewal: `ok`, `lost` (taken over) or `failed` (the store failed).
#[inline]
pub(crate) fn renewal(result: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("rerun_lease_renewals_total", "result" => result).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = result;
}

/// When a call started, where anything will measure it.
#[inline]
pub(crate) fn clock() -> Option<std::time::Instant> {
    #[cfg(feature = "metrics")]
    return Some(std::time::Instant::now());
    #[cfg(not(feature = "metrics"))]
    None
}

/// Times one store operation.
#[inline]
pub(crate) async fn store_op<F: std::future::Future>(
    store: &'static str,
    op: &'static str,
    fut: F,
) -> F::Output {
    #[cfg(feature = "metrics")]
    {
        let started = std::time::Instant::now();
        let out = fut.await;
        metrics::histogram!("rerun_store_op_duration_seconds", "store" => store, "op" => op)
            .record(started.elapsed().as_secs_f64());
        out
    }
    #[cfg(not(feature = "metrics"))]
    {
        let _ = (store, op);
        fut.await
    }
}

/// Times one store operation made outside an async call (renewals).
#[inline]
pub(crate) fn store_op_sync<T>(store: &'static str, op: &'static str, f: impl FnOnce() -> T) -> T {
    #[cfg(feature = "metrics")]
    {
        let started = std::time::Instant::now();
        let out = f();
        metrics::histogram!("rerun_store_op_duration_seconds", "store" => store, "op" => op)
            .record(started.elapsed().as_secs_f64());
        out
    }
    #[cfg(not(feature = "metrics"))]
    {
        let _ = (store, op);
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_as_written_or_as_a_digest() {
        let key = Key::new("billing.charge", "evt_42");
        assert_eq!(key_field(&key), "billing.charge/evt_42");
        redact_keys(true);
        let digest = key_field(&key);
        redact_keys(false);
        assert!(
            digest.starts_with("sha256:") && digest.len() == 23,
            "{digest}"
        );
        assert!(!digest.contains("evt_42"));
    }
}
