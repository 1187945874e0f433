//! What makes two requests "the same request": the fingerprint a retry must match.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::HeaderName;
use rerun_core::{Error, Fingerprint, Key};

use crate::record::Raw;

/// The fingerprint of a request: method, path, query, content type, body, and the values of
/// the headers named in `headers` (in the order given; each header's values in order). A
/// header named but absent and one present but empty differ.
pub(crate) fn of(
    parts: &Parts,
    body: &Bytes,
    headers: &[HeaderName],
    key: &Key,
) -> Result<Fingerprint, Error> {
    let named: Vec<(&str, Vec<Raw>)> = headers
        .iter()
        .map(|name| {
            let values = parts
                .headers
                .get_all(name)
                .iter()
                .map(|v| Raw(Bytes::copy_from_slice(v.as_bytes())))
                .collect();
            (name.as_str(), values)
        })
        .collect();
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .map(|v| Raw(Bytes::copy_from_slice(v.as_bytes())));
    let print = (
        parts.method.as_str(),
        parts.uri.path(),
        parts.uri.query(),
        content_type,
        named,
        Raw(body.clone()),
    );
    // Strings, bytes and options always serialize; an error here would be a bug in the codec.
    Fingerprint::of(&print).map_err(|e| {
        Error::config(format!(
            "{key}: the request could not be fingerprinted: {}",
            e.0
        ))
    })
}
