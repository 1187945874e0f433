//! How a recorded result is stored: an envelope around an exact, self-describing binary
//! encoding of the serde data model.
//!
//! A replay returns exactly the value the body returned, for the whole serde data model:
//! floats bit for bit (every NaN payload, `-0.0`, subnormals, infinities), `Some(None)`,
//! `Option<()>`, `i128`/`u128`, maps with any keys. A value the codec cannot carry exactly is
//! refused with a [`CodecError`] before anything is recorded ([`encode_checked`]).
//!
//! # The envelope
//!
//! `b'R'`, the format version (1 byte), the CRC-32 of the body (4 bytes, little endian), the
//! body. A bit flip or a truncation fails the checksum ([`CorruptKind::Checksum`],
//! [`CorruptKind::Truncated`]); a version this build does not know is
//! [`CorruptKind::UnknownVersion`]; a body that breaks the format is [`CorruptKind::Record`];
//! a body that no longer decodes as the result type (the type changed) is
//! [`CorruptKind::Decode`]. None of these is a reason to run the body again.
//!
//! Version 1 bodies are serde_json (written by earlier builds; still read and rendered).
//! Version 2 bodies, written by this build ([`CODEC_VERSION`]), are one value as follows.
//!
//! # Version 2: one tag byte per value
//!
//! Lengths, counts, variant indexes and integers wider than a byte are LEB128 varints
//! (7 bits a byte, low first) in their shortest form; signed ones are zigzagged first (so
//! `-1` is one byte). A *name* is a length and UTF-8 bytes, without a tag.
//!
//! | tag    | value                | followed by                                          |
//! |--------|----------------------|------------------------------------------------------|
//! | `0x01` | `()`                 |                                                      |
//! | `0x02` | `false`              |                                                      |
//! | `0x03` | `true`               |                                                      |
//! | `0x04` | `None`               |                                                      |
//! | `0x05` | `Some(x)`            | x                                                    |
//! | `0x06` | `i8`                 | 1 byte                                               |
//! | `0x07`–`0x0a` | `i16` `i32` `i64` `i128` | zigzag varint                           |
//! | `0x0b` | `u8`                 | 1 byte                                               |
//! | `0x0c`–`0x0f` | `u16` `u32` `u64` `u128` | varint                                  |
//! | `0x10` | `f32`                | 4 bytes: the IEEE bits, little endian                |
//! | `0x11` | `f64`                | 8 bytes: the IEEE bits, little endian                |
//! | `0x12` | `char`               | varint of the scalar value                           |
//! | `0x13` | string               | length, UTF-8 bytes                                  |
//! | `0x14` | bytes                | length, bytes                                        |
//! | `0x15` | unit struct          | name                                                 |
//! | `0x16` | unit variant         | index, name                                          |
//! | `0x17` | newtype struct       | name, value                                          |
//! | `0x18` | newtype variant      | index, name, value                                   |
//! | `0x19` | sequence             | count, items                                         |
//! | `0x1a` | tuple                | count, items                                         |
//! | `0x1b` | tuple struct         | name, count, items                                   |
//! | `0x1c` | tuple variant        | index, name, count, items                            |
//! | `0x1d` | map                  | count, key value key value …                         |
//! | `0x1e` | struct               | name, count, field-name value field-name value …     |
//! | `0x1f` | struct variant       | index, name, count, field-name value …               |
//! | `0x20` | run of `u8` items    | length, raw bytes (only as items of a list)          |
//!
//! A variant's name is the variant's, not the enum's (the enum's name is not stored).
//! The *items* of the four list kinds are values, except that consecutive items that
//! serialized as a bare `u8` are written as one `0x20` run, one byte per item, counting
//! that many items; the decoder hands them to `visit_seq` one at a time. So a `Vec<u8>` or a
//! `[u8; 32]` (which serde writes as sequences and tuples of `u8`) costs one byte per element
//! and still reads back as a `Vec<u8>` / `[u8; 32]`, while a type that calls
//! `serialize_bytes` is stored as bytes (`0x14`). A sequence or map whose length was not given
//! up front (`serialize_seq(None)`) is written with the count it turned out to have.
//!
//! Numbers have exactly one encoding (the decoder refuses padded varints and values too wide
//! for their tag), and the encoder writes a value the same way whatever length it was
//! promised, so a value that decodes and encodes again gives back the same bytes: what
//! [`encode_checked`] relies on.
//!
//! Encoding appends to one buffer (128 bytes up front; a list reserves the length it was
//! promised, so a `Vec<u8>` is written into a buffer of its size), with no allocation per
//! value. Decoding borrows strings and names from the input; only the result type's own
//! `Deserialize` allocates.
//!
//! # Why this format
//!
//! - **Not JSON**, the version 1 format: it has no `NaN` or infinities (they were recorded as
//!   `null` and could never be read back), no `Some` (`Some(None)` and `Some(())` came back as
//!   `None`), no integers beyond 64 bits, its default float parser is off by one ulp for about
//!   one finite float in ten, and a `Vec<u8>` becomes a number array four times its size.
//! - **Not CBOR or MessagePack** (serde_cbor, ciborium, rmp-serde): exact for floats, but
//!   they write `Some(x)` as `x` and `None` as null, so `Some(None)` still becomes `None`.
//! - **Not bincode or postcard**: compact and exact, but not self-describing. Their
//!   deserializers cannot implement `deserialize_any`, so untagged and internally tagged
//!   enums, `#[serde(flatten)]` and `serde_json::Value` inside a result fail to decode, a
//!   changed result type can be misread as garbage instead of failing, and a stored result
//!   cannot be shown to an operator without its Rust type.
//!
//! This format keeps the names that `deserialize_any` and [`render`] need (structs, fields,
//! variants) and tags every value, so it decodes without the type, and it has a tag for every
//! case of the serde data model, so nothing collapses.
//!
//! # Decoding
//!
//! The decoder implements `deserialize_any` for every value: untagged and internally tagged
//! enums, `#[serde(flatten)]` and `serde_json::Value` work. Through `deserialize_any` a unit
//! variant is visited as its name and a variant with data as a one-entry map from its name
//! to the data, as self-describing formats without enums do; a newtype struct is transparent.
//! `deserialize_enum` takes variants by name, or by index when the identifier asks for an
//! integer. Integers are visited at the width they were written with, and serde's visitors
//! widen them (a `u8` read as `u64`) or refuse them when out of range. (serde's own buffering
//! behind untagged enums and `flatten` has no `i128`/`u128`: such a field there cannot be
//! read back in any format, and [`encode_checked`] refuses it.)
//!
//! Both the serializer and the deserializer are *human readable* (`is_human_readable()` is
//! `true`): types with two forms (uuid, IP addresses, chrono, …) store their string form, which
//! is what [`render`] then shows.
//!
//! Corrupt or hostile bytes never panic: every length is checked against the bytes left before
//! anything is sized by it, and values nest at most 256 levels deep (the encoder refuses deeper
//! values, so everything it writes decodes).

mod canon;
mod de;
mod error;
mod format;
pub(crate) use format::MAX_DEPTH;
mod legacy;
#[cfg(test)]
mod prop_tests;
mod read;
mod render;
mod ser;
#[cfg(test)]
mod tests;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use self::error::CodecError;
use self::format::{HEADER, MAGIC, VERSION_BINARY, VERSION_JSON};
use crate::error::CorruptKind;

/// The format version this build writes. It reads versions 1 (serde_json) and 2.
pub const CODEC_VERSION: u8 = VERSION_BINARY;

/// Room for a small result without growing the buffer.
const INITIAL_CAPACITY: usize = 128;

/// Encodes a value into its envelope.
///
/// Fails when the value's `Serialize` fails, or the value nests deeper than 256 levels.
/// The runtime uses [`encode_checked`], which also makes sure the value reads back as itself.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = unsealed(value)?;
    let crc = crc32fast::hash(out.get(HEADER..).unwrap_or_default());
    if let Some(field) = out.get_mut(2..HEADER) {
        field.copy_from_slice(&crc.to_le_bytes());
    }
    Ok(out)
}

/// The envelope with a zero checksum.
fn unsealed<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    unsealed_into(value, Vec::with_capacity(INITIAL_CAPACITY))
}

/// [`unsealed`], written into `out` (cleared first), whose room is reused.
fn unsealed_into<T: Serialize + ?Sized>(
    value: &T,
    mut out: Vec<u8>,
) -> Result<Vec<u8>, CodecError> {
    out.clear();
    out.extend_from_slice(&[MAGIC, CODEC_VERSION, 0, 0, 0, 0]);
    ser::Encoder::new(out).encode(value)
}

/// The largest buffer a thread keeps for [`encode_checked`]'s second encoding: a larger result
/// is checked in a buffer of its own, so one huge result does not stay allocated on the thread.
const SCRATCH_KEPT: usize = 64 * 1024;

thread_local! {
    /// The buffer [`encode_checked`] encodes the decoded value into, reused from call to call.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Encodes a value and makes sure it replays as itself.
///
/// The bytes are decoded back as `T` and that value is encoded again; if decoding fails, or
/// the second encoding differs from the first, the value does not survive a round trip (a
/// type whose `Deserialize` does not accept, or reads differently, what its `Serialize`
/// wrote) and an error says so: recording it would replay something else, or `Corrupt`.
/// Sequence items and map entries that come back in another order (a `HashMap`'s or a
/// `HashSet`'s iteration order is its own) are the same value.
pub fn encode_checked<T: Serialize + DeserializeOwned>(value: &T) -> Result<Vec<u8>, CodecError> {
    let bytes = encode(value)?;
    let back: T = decode(&bytes).map_err(|kind| {
        let why = match kind {
            CorruptKind::Decode(why) => why,
            other => other.to_string(),
        };
        CodecError::new(format!(
            "the value does not survive a round trip: it does not decode back as `{}`: {why}",
            std::any::type_name::<T>()
        ))
    })?;
    // A `Serialize` that itself runs a call on this thread finds the cell empty and simply
    // encodes into a new buffer.
    let scratch = SCRATCH.with(|cell| cell.take());
    let again = unsealed_into(&back, scratch).map_err(|e| {
        CodecError::new(format!(
            "the value does not survive a round trip: decoded back as `{}`, it no longer encodes ({e})",
            std::any::type_name::<T>()
        ))
    })?;
    drop(back);
    let first = bytes.get(HEADER..).unwrap_or_default();
    let second = again.get(HEADER..).unwrap_or_default();
    let same = first == second || canon::same(first, second);
    if again.capacity() <= SCRATCH_KEPT {
        SCRATCH.with(|cell| cell.set(again));
    }
    if !same {
        return Err(CodecError::new(format!(
            "the value does not survive a round trip: decoded back as `{}`, it is a different value \
             (its `Deserialize` does not read back exactly what its `Serialize` wrote)",
            std::any::type_name::<T>()
        )));
    }
    Ok(bytes)
}

/// Checks an envelope and returns its version and body.
fn parts(bytes: &[u8]) -> Result<(u8, &[u8]), CorruptKind> {
    let Some((header, body)) = bytes.split_at_checked(HEADER) else {
        return Err(CorruptKind::Truncated);
    };
    let [magic, version, c0, c1, c2, c3] = *header else {
        return Err(CorruptKind::Truncated);
    };
    if magic != MAGIC {
        return Err(CorruptKind::Record(
            "the result does not start with rerun's envelope".into(),
        ));
    }
    if version != VERSION_JSON && version != VERSION_BINARY {
        return Err(CorruptKind::UnknownVersion {
            found: u32::from(version),
            supported: u32::from(CODEC_VERSION),
        });
    }
    if crc32fast::hash(body) != u32::from_le_bytes([c0, c1, c2, c3]) {
        return Err(CorruptKind::Checksum);
    }
    Ok((version, body))
}

/// Checks an envelope (magic, a version this build reads, checksum) and returns its body.
pub fn open(bytes: &[u8]) -> Result<&[u8], CorruptKind> {
    parts(bytes).map(|(_, body)| body)
}

/// Checks an envelope and returns its format version (1 or 2).
pub fn version_of(bytes: &[u8]) -> Result<u8, CorruptKind> {
    parts(bytes).map(|(version, _)| version)
}

/// Decodes an envelope of either version into the result type.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CorruptKind> {
    match parts(bytes)? {
        (VERSION_JSON, body) => legacy::decode(body),
        (_, body) => de::from_body(body).map_err(CorruptKind::from),
    }
}

/// A readable one-line rendering of a recorded result of either version, for operators:
/// `Receipt { id: "ch_1", cents: 500, note: Some(None) }`.
///
/// It is Rust-like: structs, tuples and variants by name (`Paid`, `Paid(5)`,
/// `Paid { at: 1 }`), `[1, 2]` for sequences, `{"a": 1, (1, 2): "x"}` for maps, `None`,
/// `Some(1.5)`, `()`, floats in their shortest exact form (`NaN`, `inf`, `-inf`, `-0.0`),
/// `b"\x00ab"` for bytes, strings and chars quoted and escaped (no raw control character, no
/// line break). A version-1 (JSON) result shows JSON's values the same way, `null` as `null`.
pub fn render(bytes: &[u8]) -> Result<String, CorruptKind> {
    render_with(bytes, None)
}

/// [`render`], cut after `max_chars` characters with `…` appended when it is longer.
pub fn render_limited(bytes: &[u8], max_chars: usize) -> Result<String, CorruptKind> {
    render_with(bytes, Some(max_chars))
}

fn render_with(bytes: &[u8], limit: Option<usize>) -> Result<String, CorruptKind> {
    let mut out = render::Out::new(limit);
    match parts(bytes)? {
        (VERSION_JSON, body) => legacy::render(body, &mut out)?,
        (_, body) => render::body(body, &mut out).map_err(CorruptKind::from)?,
    }
    Ok(out.finish())
}
