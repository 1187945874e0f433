//! Redis key names of records: `PREFIX{SCOPE:ID}`, escaped so that no two keys share a name,
//! and the key prefix a URL may carry.

use crate::error::{CorruptKind, Error};
use crate::hex::encode as hex;
use crate::key::Key;
use crate::store::Unreadable;

/// Takes a `prefix=` query parameter out of the URL (the driver does not know it).
pub(super) fn split_prefix(url: &str) -> Result<(String, Option<String>), Error> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut prefix = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("prefix", value)) => prefix = Some(percent_decode(value)?),
            _ => rest.push(pair),
        }
    }
    let driver_url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((driver_url, prefix))
}

fn percent_decode(s: &str) -> Result<String, Error> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    Error::config(format!("{s:?} is not a valid percent-encoded prefix"))
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::config(format!("the prefix {s:?} is not UTF-8")))
}

fn escape_into(out: &mut String, part: &str, colon: bool) {
    let special = |c: char| matches!(c, '%' | '{' | '}') || (colon && c == ':');
    if !part.contains(special) {
        out.push_str(part);
        return;
    }
    for c in part.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            ':' if colon => out.push_str("%3A"),
            c => out.push(c),
        }
    }
}

fn unescape(part: &str) -> Option<String> {
    let mut out = String::with_capacity(part.len());
    let mut rest = part;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let c = match rest.get(i + 1..i + 3)? {
            "25" => '%',
            "7B" => '{',
            "7D" => '}',
            "3A" => ':',
            _ => return None,
        };
        out.push(c);
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

pub(super) fn record_key(prefix: &str, key: &Key) -> String {
    let mut out = String::with_capacity(prefix.len() + key.scope().len() + key.id().len() + 3);
    out.push_str(prefix);
    out.push('{');
    escape_into(&mut out, key.scope(), true);
    out.push(':');
    escape_into(&mut out, key.id(), false);
    out.push('}');
    out
}

/// The key that says the records under `prefix` were swept to a layout (see `upgrade`). It has
/// no brace, so no record is named so and no scan of records matches it.
pub(super) fn layout_marker(prefix: &str) -> String {
    format!("{prefix}rerun-layout")
}

/// The key a record's name spells, when it is the name rerun writes for that key: a name that
/// only resembles one (`{a:b}}`, `%3A` in an id, a bad escape) is not read as a record, since
/// `forget` and every call would reach a different name.
pub(super) fn parse_record_key(prefix: &str, name: &str) -> Option<Key> {
    let key = loose_record_key(prefix, name)?;
    (record_key(prefix, &key) == name).then_some(key)
}

/// The key a name under `prefix` seems to spell, canonical or not.
fn loose_record_key(prefix: &str, name: &str) -> Option<Key> {
    let tag = name
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    let (scope, id) = tag.split_once(':')?;
    Some(Key::from_parts(unescape(scope)?, unescape(id)?))
}

/// A name a scan of the records under `prefix` found that rerun would not have written: not
/// UTF-8, or not the name of the key it seems to spell. It is listed unreadable under its
/// whole name (invalid UTF-8 replaced), so that it is never taken for the record of a key
/// rerun does write. Its scope, for scope filters, is the one it seems to spell, or else its
/// text up to the first `:` as stored: what the scan's `MATCH` selected it by.
pub(super) fn unreadable_name(prefix: &str, name: &[u8]) -> Unreadable {
    let lossy = String::from_utf8_lossy(name);
    let seems = loose_record_key(prefix, &lossy);
    let scope = match &seems {
        Some(key) => key.scope().to_owned(),
        None => lossy
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('{'))
            .map(|rest| {
                let rest = rest.strip_suffix('}').unwrap_or(rest);
                rest.split_once(':')
                    .map_or(rest, |(scope, _)| scope)
                    .to_owned()
            })
            .unwrap_or_default(),
    };
    let why = if std::str::from_utf8(name).is_err() {
        "its name is not UTF-8"
    } else if seems.is_some() {
        "its name escapes a character as rerun does not (rerun writes `%25`, `%7B`, `%7D` and, \
         in the scope, `%3A`, and nothing else)"
    } else {
        "its name is not `PREFIX{SCOPE:ID}` with rerun's escapes"
    };
    Unreadable {
        key: Key::from_parts(scope, lossy.into_owned()),
        kind: CorruptKind::ForeignKey(format!("{why} (bytes {})", hex(name))),
    }
}

/// `SCAN MATCH` pattern of the records under `prefix` whose scope starts with `scope_prefix`.
pub(super) fn scan_pattern_within(prefix: &str, scope_prefix: Option<&str>) -> String {
    let mut out = String::with_capacity(prefix.len() + 8);
    let glob = |out: &mut String, text: &str| {
        for c in text.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
    };
    glob(&mut out, prefix);
    out.push('{');
    if let Some(scope) = scope_prefix {
        let mut escaped = String::new();
        escape_into(&mut escaped, scope, true);
        glob(&mut out, &escaped);
    }
    out.push_str("*}");
    out
}
