//! The `Idempotency-Key` header: an RFC 8941 sf-string, or a bare token as many clients send.

use std::fmt;

use http::{HeaderMap, HeaderName, StatusCode};
use rerun_core::problem::Problem;

/// The longest key accepted, in characters.
pub const MAX_KEY_LEN: usize = 255;

/// The header's name, as the draft spells it.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// An idempotency key as the client sent it: 1 to 255 characters of visible ASCII and spaces.
///
/// The draft's form is a quoted structured-field string, `Idempotency-Key: "8e03978e"`; the
/// bare form `Idempotency-Key: 8e03978e` is accepted as the same key.
///
/// ```
/// use rerun_http::IdempotencyKey;
/// let quoted = IdempotencyKey::parse(br#""8e03978e-40d5""#)?;
/// let bare = IdempotencyKey::parse(b"8e03978e-40d5")?;
/// assert_eq!(quoted, bare);
/// assert_eq!(IdempotencyKey::parse(br#""say \"hi\"""#)?.as_str(), r#"say "hi""#);
/// assert!(IdempotencyKey::parse(b"").is_err());
/// # Ok::<(), rerun_http::KeyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

/// Why a key header was refused; every case is a `400 Bad Request` ([`KeyError::problem`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The header was sent more than once.
    Several,
    /// The key is empty.
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] characters.
    TooLong {
        /// Its length, in characters.
        len: usize,
    },
    /// The value is neither a structured-field string nor a bare token of visible ASCII.
    Malformed {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A request that must carry a key did not.
    Missing,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Several => f.write_str("the Idempotency-Key header was sent more than once; send it once"),
            KeyError::Empty => f.write_str("the Idempotency-Key header is empty; send a unique value, such as a UUID"),
            KeyError::TooLong { len } => write!(f, "the idempotency key has {len} characters, more than the {MAX_KEY_LEN} allowed; send a shorter unique value, such as a UUID"),
            KeyError::Malformed { reason } => write!(f, "the Idempotency-Key header is malformed: {reason}; send a quoted string such as \"8e03978e-40d5-43e8-bc93-6894a57f9324\""),
            KeyError::Missing => f.write_str("this request must carry an Idempotency-Key header, so that a retry of it cannot take effect twice; send one with a unique value, such as a UUID, and repeat it on every retry"),
        }
    }
}

impl std::error::Error for KeyError {}

impl KeyError {
    /// The `400 Bad Request` problem for this error.
    ///
    /// ```
    /// use rerun_http::KeyError;
    /// assert_eq!(KeyError::Empty.problem().status(), http::StatusCode::BAD_REQUEST);
    /// ```
    pub fn problem(&self) -> Problem {
        let code = match self {
            KeyError::Missing => "idempotency_key_missing",
            _ => "idempotency_key_invalid",
        };
        Problem::new(StatusCode::BAD_REQUEST, code, self.to_string())
    }
}

impl IdempotencyKey {
    /// Parses one header value.
    pub fn parse(value: &[u8]) -> Result<IdempotencyKey, KeyError> {
        let value = value.trim_ascii();
        let key = match value.first() {
            None => return Err(KeyError::Empty),
            Some(b'"') => sf_string(value)?,
            Some(_) => bare(value)?,
        };
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: key.len() });
        }
        Ok(IdempotencyKey(key))
    }

    /// The key in the header `name` of `headers`: `None` when absent.
    ///
    /// ```
    /// use http::HeaderMap;
    /// use rerun_http::{IdempotencyKey, KeyError, IDEMPOTENCY_KEY};
    /// let mut headers = HeaderMap::new();
    /// assert_eq!(IdempotencyKey::from_headers(&headers, &IDEMPOTENCY_KEY)?, None);
    /// headers.append(IDEMPOTENCY_KEY, "\"a\"".parse().unwrap());
    /// assert!(IdempotencyKey::from_headers(&headers, &IDEMPOTENCY_KEY)?.is_some());
    /// headers.append(IDEMPOTENCY_KEY, "\"b\"".parse().unwrap());
    /// assert_eq!(IdempotencyKey::from_headers(&headers, &IDEMPOTENCY_KEY), Err(KeyError::Several));
    /// # Ok::<(), KeyError>(())
    /// ```
    pub fn from_headers(
        headers: &HeaderMap,
        name: &HeaderName,
    ) -> Result<Option<IdempotencyKey>, KeyError> {
        let mut values = headers.get_all(name).iter();
        let Some(first) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(KeyError::Several);
        }
        IdempotencyKey::parse(first.as_bytes()).map(Some)
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// RFC 8941 section 4.2.5: `"`, characters 0x20-0x7E with `\"` and `\\` escaped, `"`.
fn sf_string(value: &[u8]) -> Result<String, KeyError> {
    let mut out = String::with_capacity(value.len());
    let mut bytes = value.iter().skip(1);
    loop {
        match bytes.next() {
            None => {
                return Err(KeyError::Malformed {
                    reason: "the quoted string is not closed",
                })
            }
            Some(b'\\') => match bytes.next() {
                Some(&c @ (b'"' | b'\\')) => out.push(char::from(c)),
                _ => {
                    return Err(KeyError::Malformed {
                        reason: "a backslash may only escape `\"` or `\\`",
                    })
                }
            },
            Some(b'"') => break,
            Some(&c @ 0x20..=0x7e) => out.push(char::from(c)),
            Some(_) => {
                return Err(KeyError::Malformed {
                    reason: "a key holds only visible ASCII characters and spaces",
                })
            }
        }
    }
    if bytes.next().is_some() {
        return Err(KeyError::Malformed {
            reason: "there is text after the closing quote (parameters are not accepted)",
        });
    }
    Ok(out)
}

/// A bare key: visible ASCII without quotes, commas or semicolons (a comma is what a proxy
/// joins two header lines with; a semicolon starts structured-field parameters).
fn bare(value: &[u8]) -> Result<String, KeyError> {
    if let Some(c) = value
        .iter()
        .find(|&&c| !(0x21..=0x7e).contains(&c) || matches!(c, b'"' | b',' | b';'))
    {
        return Err(KeyError::Malformed {
            reason: match c {
                b' ' | b'\t' => "an unquoted key cannot contain spaces",
                b',' => "an unquoted key cannot contain commas (was the header sent twice?)",
                b';' => "an unquoted key cannot contain semicolons",
                b'"' => "an unquoted key cannot contain quotes",
                _ => "a key holds only visible ASCII characters",
            },
        });
    }
    // Every byte is ASCII, hence valid UTF-8.
    Ok(value.iter().map(|&c| char::from(c)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_and_faults() {
        let ok = |v: &[u8]| IdempotencyKey::parse(v).map(|k| k.0);
        assert_eq!(ok(b"\"abc\"").as_deref(), Ok("abc"));
        assert_eq!(ok(b"abc").as_deref(), Ok("abc"));
        assert_eq!(ok(b"  abc ").as_deref(), Ok("abc"));
        assert_eq!(ok(b"\"a b\"").as_deref(), Ok("a b"));
        assert_eq!(ok(br#""a\\b""#).as_deref(), Ok("a\\b"));
        assert_eq!(ok(b""), Err(KeyError::Empty));
        assert_eq!(ok(b"\"\""), Err(KeyError::Empty));
        assert!(matches!(ok(b"\"abc"), Err(KeyError::Malformed { .. })));
        assert!(matches!(
            ok(b"\"abc\";p=1"),
            Err(KeyError::Malformed { .. })
        ));
        assert!(matches!(ok(br#""a\nb""#), Err(KeyError::Malformed { .. })));
        assert!(matches!(ok(b"a b"), Err(KeyError::Malformed { .. })));
        assert!(matches!(ok(b"a, b"), Err(KeyError::Malformed { .. })));
        assert!(matches!(
            ok("\"é\"".as_bytes()),
            Err(KeyError::Malformed { .. })
        ));
        assert!(matches!(ok(b"\xff\xfe"), Err(KeyError::Malformed { .. })));
        let longest = "k".repeat(MAX_KEY_LEN);
        assert_eq!(ok(longest.as_bytes()).as_deref(), Ok(longest.as_str()));
        let quoted = format!("\"{longest}\"");
        assert_eq!(ok(quoted.as_bytes()).as_deref(), Ok(longest.as_str()));
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert_eq!(
            ok(long.as_bytes()),
            Err(KeyError::TooLong {
                len: MAX_KEY_LEN + 1
            })
        );
    }

    #[test]
    fn problems_are_bad_requests_that_say_what_to_do() {
        for e in [
            KeyError::Several,
            KeyError::Empty,
            KeyError::TooLong { len: 300 },
            KeyError::Malformed { reason: "x" },
            KeyError::Missing,
        ] {
            let p = e.problem();
            assert_eq!(p.status(), StatusCode::BAD_REQUEST);
            assert!(p.detail().contains("send"), "{p}");
        }
    }
}
