//! rerun's errors as HTTP responses: RFC 9457 problem details (`application/problem+json`).
//!
//! [`Error::problem`] says which status a client should see for each error, and what it should
//! do about it; [`Problem::into_response`] writes the response. With the feature `axum`,
//! `rerun_core::Error` implements `axum_core::response::IntoResponse` through the same mapping,
//! so a handler can return `Result<_, rerun_core::Error>` (or `?` it into its own error).
//!
//! | error | status | `Retry-After` |
//! |---|---|---|
//! | `InProgress` | 409 Conflict | 1 |
//! | `PayloadMismatch` | 422 Unprocessable Entity | |
//! | `Store` | 503 Service Unavailable | 1, when retrying can help |
//! | `LeaseLost` | 503 Service Unavailable | 1 |
//! | `OutcomeUnknown` | 500 Internal Server Error, with a body that says the outcome is unknown | |
//! | `Corrupt`, `Codec`, `Config` | 500 Internal Server Error | |
//!
//! A `Store` failure after the body ran (its result could not be recorded: see
//! [`AfterBody`](crate::AfterBody)) keeps its status and code, but its detail says the request
//! was processed; for an at-most-once call it has no `Retry-After` (its outcome is unknown), and
//! a `Codec` error says whether the request was processed.
//!
//! A problem body never carries the holder of a claim (its pid, hostname or process start), the
//! store's description, or the driver's message: those are for logs, not for clients.
//!
//! ```
//! use rerun_core::{Call, Error, MemoryStore};
//!
//! let store = MemoryStore::new();
//! Call::new("payments", "k1").payload(&1).run(&store, || Ok::<_, Error>(()))?;
//! let err = Call::new("payments", "k1").payload(&2).run(&store, || Ok::<_, Error>(())).unwrap_err();
//! let problem = err.problem();
//! assert_eq!(problem.status(), http::StatusCode::UNPROCESSABLE_ENTITY);
//! let response = problem.into_response::<Vec<u8>>();
//! assert_eq!(response.headers()["content-type"], "application/problem+json");
//! # Ok::<(), Error>(())
//! ```

use std::fmt;

use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::StatusCode;

use crate::error::{AfterBody, Error};

/// The media type of a problem body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem: the status, a short title, a detail saying what happened and what to do,
/// a stable `code` for programs, and an optional `Retry-After` in seconds.
///
/// ```
/// use rerun_core::problem::Problem;
/// let p = Problem::new(http::StatusCode::BAD_REQUEST, "idempotency_key_missing",
///     "this request needs an Idempotency-Key header");
/// let body = String::from_utf8(p.to_json()).unwrap();
/// assert!(body.contains(r#""status":400"#) && body.contains("idempotency_key_missing"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    status: StatusCode,
    code: &'static str,
    detail: String,
    retry_after: Option<u64>,
}

impl Problem {
    /// A problem with `status`, a stable machine-readable `code` and a `detail` for people.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            code,
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// Adds `Retry-After: seconds` to the response.
    pub fn retry_after(mut self, seconds: u64) -> Problem {
        self.retry_after = Some(seconds);
        self
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable code (`"idempotency_key_in_use"`, …): what a program should match on.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The detail: what happened and what to do.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The `Retry-After` seconds, if any.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
    }

    /// The JSON body: `type` (`about:blank`: the status says it), `title` (the status' reason
    /// phrase), `status`, `detail` and the extension member `code`.
    pub fn to_json(&self) -> Vec<u8> {
        // Fields in the order RFC 9457 lists them, the extension last.
        #[derive(serde::Serialize)]
        struct Body<'a> {
            r#type: &'a str,
            title: &'a str,
            status: u16,
            detail: &'a str,
            code: &'a str,
        }
        let body = Body {
            r#type: "about:blank",
            title: self.status.canonical_reason().unwrap_or("Error"),
            status: self.status.as_u16(),
            detail: &self.detail,
            code: self.code,
        };
        // Serializing strings and a number cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The response: status, `Content-Type: application/problem+json`, `Retry-After` when set,
    /// and the JSON body in any body type made from bytes.
    pub fn into_response<B: From<Vec<u8>>>(self) -> http::Response<B> {
        let mut response = http::Response::new(B::from(self.to_json()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = self.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.code, self.detail)
    }
}

impl Error {
    /// What a client should see for this error: see the [module](crate::problem) for the table.
    /// The detail names no process, host or store, and not the key (the client sent it).
    ///
    /// ```
    /// use rerun_core::Error;
    /// let e = Error::config("RERUN_STORE names an unknown scheme");
    /// assert_eq!(e.problem().status(), http::StatusCode::INTERNAL_SERVER_ERROR);
    /// assert!(!e.problem().detail().contains("RERUN_STORE"));
    /// ```
    pub fn problem(&self) -> Problem {
        match self {
            Error::InProgress { .. } => Problem::new(
                StatusCode::CONFLICT,
                "idempotency_key_in_use",
                "a request with this idempotency key is still being processed; retry after the time in Retry-After to receive its response",
            )
            .retry_after(1),
            Error::PayloadMismatch { .. } => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                "this idempotency key was already used with a different request; a retry must repeat the original request exactly, or use a new key for a new request",
            ),
            Error::OutcomeUnknown { .. } => Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "outcome_unknown",
                "an earlier attempt with this idempotency key stopped while it was being processed, and whether its effect happened is unknown; it will not be run again automatically: check its effect before sending a new request with a new key",
            ),
            Error::LeaseLost { .. } => Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "attempt_superseded",
                "this attempt was superseded by another one with the same idempotency key; retry to receive that attempt's response",
            )
            .retry_after(1),
            Error::Store {
                retryable,
                after_body,
                ..
            } => {
                let detail = match (after_body, retryable) {
                    // The body ran: the request was processed, and only its response is not
                    // recorded.
                    (Some(AfterBody::Once), _) => {
                        "the request was processed, but its response could not be recorded for this idempotency key; its outcome is unknown and it will not be run again automatically: check its effect before sending a new request with a new key"
                    }
                    (Some(_), _) => {
                        "the request was processed, but its response could not be recorded for this idempotency key, so a retry with the same key will process it again"
                    }
                    (None, true) => {
                        "the service cannot check idempotency keys right now, so the request was not processed; retry later with the same key"
                    }
                    (None, false) => {
                        "the service cannot check idempotency keys, so the request was not processed"
                    }
                };
                let problem =
                    Problem::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", detail);
                // An at-most-once request whose outcome is unknown is for a person to check,
                // not for a client to retry on its own.
                if *retryable && *after_body != Some(AfterBody::Once) {
                    problem.retry_after(1)
                } else {
                    problem
                }
            }
            Error::Corrupt { .. } => Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "record_unreadable",
                "the recorded response for this idempotency key cannot be read, and the request was not processed again",
            ),
            // After the body (its result), or before it (the payload, the key, the holder).
            Error::Codec { what, .. } if *what == "the result" => Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "result_not_recordable",
                "the request was processed, but its result could not be recorded for its idempotency key",
            ),
            Error::Codec { .. } => Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "result_not_recordable",
                "the request could not be recorded under its idempotency key, and it was not processed",
            ),
            Error::Config { .. } => Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "misconfigured",
                "the service is misconfigured and did not process the request",
            ),
        }
    }
}

#[cfg(feature = "axum")]
impl axum_core::response::IntoResponse for Error {
    /// The [`Error::problem`] response; the error itself is logged at `warn` for the operator.
    fn into_response(self) -> axum_core::response::Response {
        tracing::warn!(error = %self, "rerun: a request ended with this error");
        self.problem().into_response()
    }
}

#[cfg(feature = "axum")]
impl axum_core::response::IntoResponse for Problem {
    fn into_response(self) -> axum_core::response::Response {
        Problem::into_response(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holder::Holder;
    use crate::key::Key;
    use std::time::Duration;

    fn all() -> Vec<Error> {
        let key = Key::new("payments", "k1");
        let mut holder = Holder::current();
        holder.host = "secret-host-name".into();
        vec![
            Error::InProgress {
                key: key.clone(),
                holder: Box::new(holder),
                lease_ends_in: Duration::from_secs(30),
            },
            Error::PayloadMismatch { key: key.clone() },
            Error::OutcomeUnknown { key: key.clone() },
            Error::LeaseLost { key: key.clone() },
            Error::store_msg(Some(&key), "connection to db-internal-7 refused"),
            Error::corrupt(&key, crate::CorruptKind::Checksum),
            Error::Codec {
                key: key.clone(),
                what: "the result",
                message: "nope".into(),
            },
            Error::config("RERUN_STORE=postgres://secret@db"),
        ]
    }

    #[test]
    fn statuses_follow_the_table() {
        let statuses: Vec<u16> = all()
            .iter()
            .map(|e| e.problem().status().as_u16())
            .collect();
        assert_eq!(statuses, [409, 422, 500, 503, 503, 500, 500, 500]);
        let retry: Vec<Option<u64>> = all()
            .iter()
            .map(|e| e.problem().retry_after_secs())
            .collect();
        assert_eq!(
            retry,
            [Some(1), None, None, Some(1), Some(1), None, None, None]
        );
    }

    /// A store failure after the body ran says the request was processed; at most once, that
    /// its outcome is unknown, with no `Retry-After` (the error stays retryable: a redelivery
    /// runs the function's reconcile).
    #[test]
    fn a_store_failure_after_the_body_says_the_request_was_processed() {
        let key = Key::new("payments", "k1");
        let failed = || Error::store_msg(Some(&key), "connection reset");
        for (after, unknown) in [(AfterBody::Replayable, false), (AfterBody::Once, true)] {
            let e = failed().after_body(after);
            let problem = e.problem();
            assert_eq!(
                (problem.status().as_u16(), problem.code()),
                (503, "store_unavailable")
            );
            let detail = problem.detail();
            assert!(
                detail.contains("was processed") && !detail.contains("not processed"),
                "{detail}"
            );
            assert_eq!(detail.contains("outcome is unknown"), unknown, "{detail}");
            assert_eq!(problem.retry_after_secs().is_some(), !unknown);
            assert!(e.is_retryable(), "a redelivery runs reconcile");
            let text = e.to_string();
            assert!(
                text.contains("the body ran, but its result was not recorded"),
                "{text}"
            );
        }
        // Not a store failure: returned as it is.
        let mismatch = Error::PayloadMismatch { key: key.clone() };
        assert!(matches!(
            mismatch.after_body(AfterBody::Once),
            Error::PayloadMismatch { .. }
        ));
        // A payload that cannot be fingerprinted stops the call before its body.
        let payload = Error::Codec {
            key,
            what: "the payload",
            message: "nope".into(),
        };
        assert!(payload.problem().detail().contains("not processed"));
        let key_too_large = Error::Codec {
            key: Key::new("payments", "k1"),
            what: "the key",
            message: "too large".into(),
        };
        assert!(key_too_large.problem().detail().contains("not processed"));
    }

    /// Which variant `e` is: a variant added to `Error` fails to compile here until `all`
    /// and the HTTP guide's table of codes have it too.
    fn variant(e: &Error) -> usize {
        match e {
            Error::InProgress { .. } => 0,
            Error::PayloadMismatch { .. } => 1,
            Error::OutcomeUnknown { .. } => 2,
            Error::LeaseLost { .. } => 3,
            Error::Store { .. } => 4,
            Error::Corrupt { .. } => 5,
            Error::Codec { .. } => 6,
            Error::Config { .. } => 7,
        }
    }

    #[test]
    fn every_code_is_in_the_http_guide() {
        let variants: Vec<usize> = all().iter().map(variant).collect();
        assert_eq!(variants, (0..8).collect::<Vec<_>>());
        let guide = include_str!("../../docs/http.md");
        for e in all() {
            let code = e.problem().code();
            assert!(
                guide.contains(&format!("| `{code}` |")),
                "docs/http.md has no row for the code {code}"
            );
        }
    }

    #[test]
    fn bodies_name_no_process_host_or_store() {
        for e in all() {
            let response = e.problem().into_response::<Vec<u8>>();
            assert_eq!(response.headers()[CONTENT_TYPE], PROBLEM_JSON);
            let body = String::from_utf8(response.into_body()).unwrap_or_default();
            for secret in ["secret", "db-internal", "pid", "payments", "k1"] {
                assert!(!body.contains(secret), "{body} contains {secret}");
            }
            let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            assert!(json["detail"].as_str().is_some_and(|d| !d.is_empty()));
        }
        let unknown = Error::OutcomeUnknown {
            key: Key::new("s", "k"),
        };
        assert!(unknown.problem().detail().contains("unknown"));
    }
}
