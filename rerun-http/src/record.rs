//! The recorded response: status, headers, body and trailers, as rerun's codec stores them.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use rerun_core::CorruptKind;
use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::body::ResponseBody;

/// The header a replayed response carries, as the draft names it.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Headers about one connection, never recorded (RFC 9110 section 7.6.1). `Trailer` (which
/// names the trailers a replay sends again) and `Proxy-Authenticate` are end-to-end: recorded.
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// The most header names a replayed response's map is made for up front. The recorded values
/// count every value of a name, so they only bound the names from above (one name may carry
/// thousands), and a `HeaderMap` cannot be made for more than about 24,000 names; past this
/// the map grows as it is filled.
const PRESIZED_HEADERS: usize = 128;

/// A response as recorded: what a replay returns, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Recorded {
    status: u16,
    /// Names and raw values, in the order the handler set them.
    headers: Vec<(String, Raw)>,
    body: Raw,
    /// The trailers (gRPC's status travels in them), as the headers are kept; `None` for a
    /// response that sent none. Left out of records without them, which therefore read and
    /// write as those of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trailers: Option<Vec<(String, Raw)>>,
}

impl Recorded {
    /// Takes the response's parts, its whole body and its trailers.
    pub(crate) fn new(
        parts: &http::response::Parts,
        body: Bytes,
        trailers: Option<&HeaderMap>,
    ) -> Recorded {
        Recorded {
            status: parts.status.as_u16(),
            headers: kept(&parts.headers),
            body: Raw(body),
            trailers: trailers.map(kept),
        }
    }

    /// The response again; `replayed` adds `Idempotent-Replayed: true`. A recorded header or
    /// status that does not parse (a record written by hand) is skipped, or read as 500; a
    /// record with more header names than a response can hold (written by hand too: it was
    /// recorded from a response) does not decode as a response.
    pub(crate) fn into_response<B>(
        self,
        replayed: bool,
    ) -> Result<Response<ResponseBody<B>>, CorruptKind> {
        let too_many = |_| {
            CorruptKind::Decode(
                "the recorded response has more header names than a response can hold".to_owned(),
            )
        };
        let headers = header_map(self.headers, replayed).map_err(too_many)?;
        let trailers = match self.trailers {
            Some(recorded) => Some(header_map(recorded, false).map_err(too_many)?),
            None => None,
        };
        let mut response = Response::new(ResponseBody::whole(self.body.0, trailers));
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        *response.headers_mut() = headers;
        Ok(response)
    }
}

/// The names and raw values of `headers` a replay gives again: all but hop-by-hop ones.
fn kept(headers: &HeaderMap) -> Vec<(String, Raw)> {
    headers
        .iter()
        .filter(|(name, _)| !HOP_BY_HOP.contains(&name.as_str()))
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                Raw(Bytes::copy_from_slice(value.as_bytes())),
            )
        })
        .collect()
}

/// A header map of recorded names and values (one that does not parse, written by hand, is
/// skipped); `replayed` adds `Idempotent-Replayed: true`.
fn header_map(
    recorded: Vec<(String, Raw)>,
    replayed: bool,
) -> Result<HeaderMap, http::header::MaxSizeReached> {
    let presized = recorded.len().saturating_add(1).min(PRESIZED_HEADERS);
    let mut headers = HeaderMap::try_with_capacity(presized).unwrap_or_default();
    for (name, value) in recorded {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_maybe_shared(value.0),
        ) {
            headers.try_append(name, value)?;
        }
    }
    if replayed {
        headers.try_insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"))?;
    }
    Ok(headers)
}

/// Bytes stored as bytes (`serialize_bytes`), not as a sequence of numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Raw(pub(crate) Bytes);

impl Serialize for Raw {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Raw, D::Error> {
        struct RawVisitor;
        impl<'de> Visitor<'de> for RawVisitor {
            type Value = Raw;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Raw, E> {
                Ok(Raw(Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Raw, E> {
                Ok(Raw(Bytes::from(v)))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(Raw(Bytes::from(out)))
            }
        }
        d.deserialize_byte_buf(RawVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_survives_the_codec_byte_for_byte() {
        let response = Response::builder()
            .status(201)
            .header("x-one", "a")
            .header("x-one", "b")
            .header(
                "x-binary",
                HeaderValue::from_bytes(b"\xfe\xff").unwrap_or(HeaderValue::from_static("x")),
            )
            .header("connection", "close")
            .body(())
            .unwrap_or_default();
        let (parts, ()) = response.into_parts();
        let recorded = Recorded::new(&parts, Bytes::from_static(b"\x00body\xff"), None);
        let bytes = rerun_core::codec::encode_checked(&recorded).unwrap_or_default();
        let back: Recorded = rerun_core::codec::decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, recorded);
        let replayed = back
            .into_response::<()>(true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(replayed.status(), 201);
        let ones: Vec<_> = replayed.headers().get_all("x-one").iter().collect();
        assert_eq!(ones, ["a", "b"]);
        assert_eq!(replayed.headers()["x-binary"].as_bytes(), b"\xfe\xff");
        assert!(replayed.headers().get("connection").is_none());
        assert_eq!(replayed.headers()[IDEMPOTENT_REPLAYED], "true");
    }

    #[test]
    fn end_to_end_headers_are_recorded_and_connection_specific_ones_are_not() {
        let response = Response::builder()
            .status(426)
            .header("connection", "close, upgrade")
            .header("keep-alive", "timeout=5")
            .header("proxy-connection", "keep-alive")
            .header("te", "trailers")
            .header("transfer-encoding", "chunked")
            .header("upgrade", "h2c")
            .header("trailer", "x-checksum")
            .header("proxy-authenticate", "Basic realm=\"proxy\"")
            .body(())
            .unwrap_or_default();
        let (parts, ()) = response.into_parts();
        let replayed = Recorded::new(&parts, Bytes::new(), None)
            .into_response::<()>(true)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut names: Vec<_> = replayed.headers().keys().map(|n| n.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["idempotent-replayed", "proxy-authenticate", "trailer"]
        );
    }

    /// The record of earlier builds, which had no trailers.
    #[derive(Serialize, Deserialize)]
    #[serde(rename = "Recorded")]
    struct Earlier {
        status: u16,
        headers: Vec<(String, Raw)>,
        body: Raw,
    }

    #[test]
    fn records_without_trailers_read_and_write_as_those_of_earlier_builds() {
        let earlier = Earlier {
            status: 201,
            headers: vec![("x-one".to_owned(), Raw(Bytes::from_static(b"a")))],
            body: Raw(Bytes::from_static(b"body")),
        };
        let bytes = rerun_core::codec::encode_checked(&earlier).unwrap_or_default();
        let read: Recorded = rerun_core::codec::decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read.trailers, None);
        assert_eq!(read.status, 201);
        let again = rerun_core::codec::encode_checked(&read).unwrap_or_default();
        assert_eq!(again, bytes, "the same bytes as an earlier build wrote");
        // With trailers, they come back.
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let (parts, ()) = Response::new(()).into_parts();
        let with = Recorded::new(&parts, Bytes::from_static(b"x"), Some(&trailers));
        let bytes = rerun_core::codec::encode_checked(&with).unwrap_or_default();
        let back: Recorded = rerun_core::codec::decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, with);
    }

    fn recorded(headers: Vec<(String, Raw)>) -> Recorded {
        Recorded {
            status: 200,
            headers,
            body: Raw(Bytes::new()),
            trailers: None,
        }
    }

    #[test]
    fn a_response_with_25000_values_of_one_header_replays() {
        let value = Raw(Bytes::from_static(b"v"));
        let response = recorded(vec![("x-tag".to_owned(), value); 25_000])
            .into_response::<()>(true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(response.headers().get_all("x-tag").iter().count(), 25_000);
        assert_eq!(response.headers()[IDEMPOTENT_REPLAYED], "true");
    }

    #[test]
    fn a_record_with_more_header_names_than_a_response_holds_is_an_error() {
        // Only a record written by hand can hold this many names: a header map holds fewer.
        let headers = (0..40_000)
            .map(|i| (format!("x-{i}"), Raw(Bytes::from_static(b"v"))))
            .collect();
        assert!(recorded(headers).into_response::<()>(false).is_err());
    }
}
