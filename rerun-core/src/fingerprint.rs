//! Payload fingerprints: SHA-256 over a canonical serde encoding, streamed into the hasher.
//!
//! The encoding is canonical in the ways that matter for "is this the same request?": map
//! entries and struct fields are sorted, so a `HashMap`'s iteration order or a reordered struct
//! definition does not change the fingerprint; every integer type encodes the same value alike;
//! every value starts with a tag and every variable-length part is length-prefixed, terminated
//! or hashed, so distinct payloads never share an encoding.
//!
//! A sequence keeps its order (a list's order means something), and serde writes a set as a
//! sequence: a `HashSet`, which lists its items in another order in every set, would give two
//! equal sets two fingerprints. `#[idempotent]` and `#[derive(Idempotent)]` refuse a fingerprinted
//! argument or field whose type names a `HashSet` (use a `BTreeSet`, or skip it); one nested in
//! another type of yours, or passed to [`Call::payload`](crate::Call::payload), is for you to
//! keep ordered.
//!
//! The encoding is written straight into SHA-256 through a small fixed buffer, never held whole:
//! fingerprinting a payload takes memory for its map keys (plus a few bytes per map entry), not
//! for its size.
//!
//! | value | encoding |
//! |---|---|
//! | `true`, `false` | `T`, `F` |
//! | integer `v >= 0` (any integer type) | `0x80 + n`, then `v` in its `n` significant bytes, little endian (`0` is `80`, `300` is `82 2c 01`) |
//! | integer `v < 0` | `0xa0 + n`, then `-(v + 1)` in its `n` significant bytes (`-1` is `a0`) |
//! | `f32`, `f64` | `f`, then the 8 bytes of the value as `f64` (little endian; one NaN for all) |
//! | `str`, `char` | `s`, the length in bytes (LEB128: 7 bits a byte, low first), the UTF-8 |
//! | bytes (`serialize_bytes`) | `b`, the length in LEB128, the bytes |
//! | `None`, `Some(v)` | `N`, `S` and `v` |
//! | `()`, unit struct | `u` |
//! | newtype struct | the inner value |
//! | unit variant | `e`, the variant name as a string |
//! | newtype, tuple, struct variant | `E`, the variant name as a string, then the value |
//! | sequence, tuple, tuple struct | `[`, the elements, `]` |
//! | map, struct | `{`, the entries sorted, `}` |
//!
//! A map entry (a struct field is an entry keyed by its name as a string) is the key's encoding
//! followed by its value's *digest*: `=`, one length byte and the value's encoding when that is
//! at most 32 bytes long, otherwise `#` and the 32-byte SHA-256 of the value's encoding. Entries
//! are sorted by their bytes. Each value is hashed on its own as it is serialized, so a large
//! value inside a map is streamed too; only the keys and the digests of one map are held, to be
//! sorted.
//!
//! Values nest at most 256 levels deep (options, newtypes, lists, maps, structs and variants
//! inside one another), the codec's limit: a deeper payload is a [`FingerprintError`], where
//! following it down would exhaust the stack and abort the process.

use std::fmt;

use serde::ser::{self, Serialize};
use sha2::{Digest, Sha256};
use smallvec::SmallVec;

use crate::codec::MAX_DEPTH;

/// The SHA-256 of a payload's canonical encoding.
///
/// ```
/// use std::collections::HashMap;
/// use rerun_core::Fingerprint;
///
/// let a: HashMap<&str, u32> = [("x", 1), ("y", 2)].into_iter().collect();
/// let b: HashMap<&str, u32> = [("y", 2), ("x", 1)].into_iter().collect();
/// assert_eq!(Fingerprint::of(&a).unwrap(), Fingerprint::of(&b).unwrap());
/// assert_ne!(Fingerprint::of(&1u8).unwrap(), Fingerprint::of(&2u8).unwrap());
/// assert_eq!(Fingerprint::of(&1u8).unwrap(), Fingerprint::of(&1i64).unwrap());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of a call without payload: the SHA-256 of nothing, which no payload's
    /// encoding is.
    pub const EMPTY: Fingerprint = Fingerprint([
        0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9,
        0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52,
        0xb8, 0x55,
    ]);

    /// The fingerprint of `payload`. Fails when the value's own `Serialize` impl fails, or when
    /// it nests deeper than 256 levels (options, newtypes, lists, maps, structs and variants
    /// inside one another, the limit of rerun's codec), which is refused rather than allowed to
    /// exhaust the stack.
    ///
    /// ```
    /// use rerun_core::Fingerprint;
    ///
    /// let mut deep = serde_json::json!(0);
    /// for _ in 0..300 {
    ///     deep = serde_json::json!([deep]);
    /// }
    /// let err = Fingerprint::of(&deep).unwrap_err();
    /// assert!(err.to_string().contains("deeper than 256 levels"), "{err}");
    /// ```
    pub fn of<P: Serialize + ?Sized>(payload: &P) -> Result<Fingerprint, FingerprintError> {
        let mut hasher = HashSink::new();
        let mut scratch = Scratch::new();
        payload.serialize(Canonical::top(&mut hasher, &mut scratch))?;
        Ok(Fingerprint(hasher.finish()))
    }

    /// The fingerprint as 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        crate::hex::encode(&self.0)
    }

    /// Parses 32 raw bytes, as a store reads them back.
    pub fn from_slice(bytes: &[u8]) -> Option<Fingerprint> {
        <[u8; 32]>::try_from(bytes).ok().map(Fingerprint)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({}…)", &self.to_hex()[..12])
    }
}

/// A payload's `Serialize` impl failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FingerprintError(pub String);

impl fmt::Display for FingerprintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for FingerprintError {}
impl ser::Error for FingerprintError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        FingerprintError(msg.to_string())
    }
}

/// Writes the canonical encoding of `value` to `out`: the bytes whose SHA-256
/// [`Fingerprint::of`] is. Meant for inspecting an encoding; [`Fingerprint::of`] streams it
/// instead of holding it.
///
/// ```
/// use rerun_core::fingerprint::canonical_encode;
/// let mut out = Vec::new();
/// canonical_encode(&(300u16, -1i8, "ab"), &mut out).unwrap();
/// assert_eq!(out, b"[\x82\x2c\x01\xa0s\x02ab]");
/// ```
pub fn canonical_encode<P: Serialize + ?Sized>(
    value: &P,
    out: &mut Vec<u8>,
) -> Result<(), FingerprintError> {
    value.serialize(Canonical::top(out, &mut Scratch::new()))
}

/// The fingerprint of a tuple built one element at a time: the same bytes as serializing the
/// whole tuple, so `(a, b)` built as `element(&a)`, `element(&b)` is `Fingerprint::of(&(a, b))`.
pub(crate) struct TupleFingerprint {
    out: HashSink,
}

impl TupleFingerprint {
    /// A tuple without elements yet.
    pub(crate) fn new() -> TupleFingerprint {
        let mut out = HashSink::new();
        out.put(&[SEQ]);
        TupleFingerprint { out }
    }

    /// Adds the next element, one level inside the tuple.
    pub(crate) fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        value.serialize(Canonical {
            out: &mut self.out,
            scratch: &mut Scratch::new(),
            depth: 1,
        })
    }

    /// Closes the tuple.
    pub(crate) fn finish(mut self) -> Fingerprint {
        self.out.put(&[SEQ_END]);
        Fingerprint(self.out.finish())
    }
}

type Res = Result<(), FingerprintError>;

// The tags of the encoding (see the module docs). Each is one byte, and no two are alike, so
// the first byte of a value says how to read the rest.
const TRUE: u8 = b'T';
const FALSE: u8 = b'F';
/// `0x80` to `0x90`: a non-negative integer of 0 to 16 bytes.
const INT: u8 = 0x80;
/// `0xa0` to `0xb0`: a negative integer, `-(v + 1)` in 0 to 16 bytes.
const NEG_INT: u8 = 0xa0;
const FLOAT: u8 = b'f';
const STR: u8 = b's';
const BYTES: u8 = b'b';
const NONE: u8 = b'N';
const SOME: u8 = b'S';
const UNIT: u8 = b'u';
const UNIT_VARIANT: u8 = b'e';
const VARIANT: u8 = b'E';
const SEQ: u8 = b'[';
const SEQ_END: u8 = b']';
const MAP: u8 = b'{';
const MAP_END: u8 = b'}';
/// A map value written as it is (at most [`INLINE`] bytes).
const INLINE_VALUE: u8 = b'=';
/// A map value written as the SHA-256 of its encoding.
const HASHED_VALUE: u8 = b'#';

/// The longest map value written as it is rather than hashed: hashing a small value would cost
/// more than it saves.
const INLINE: usize = 32;

/// Where an encoding goes: the hasher, a map key's scratch buffer, or a map value's digest.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
    /// Puts `buf[..len]`: a tag and a number, in a fixed-size buffer that a sink can copy
    /// whole (most parts are a few bytes long, and a copy of fixed size needs no call to
    /// `memcpy`).
    fn put_prefix(&mut self, buf: &[u8; PREFIX], len: usize) {
        self.put(&buf[..len.min(PREFIX)]);
    }
}

/// The longest tag and number: a tag and a `u128` in LEB128 (19 bytes).
const PREFIX: usize = 20;

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for MapKeys {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn put_prefix(&mut self, buf: &[u8; PREFIX], len: usize) {
        for &b in &buf[..len.min(PREFIX)] {
            self.push(b);
        }
    }
}

/// SHA-256 fed through a small buffer: most parts are a few bytes long, and the hasher's
/// per-call work would otherwise dominate.
struct HashSink {
    sha: Sha256,
    buf: [u8; 256],
    len: usize,
}

impl HashSink {
    fn new() -> HashSink {
        HashSink {
            sha: Sha256::new(),
            buf: [0; 256],
            len: 0,
        }
    }

    fn flush(&mut self) {
        self.sha.update(&self.buf[..self.len]);
        self.len = 0;
    }

    fn finish(&mut self) -> [u8; 32] {
        self.flush();
        self.sha.finalize_reset().into()
    }
}

impl Sink for HashSink {
    fn put(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > self.buf.len() {
            self.flush();
            if bytes.len() >= self.buf.len() {
                self.sha.update(bytes);
                return;
            }
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    fn put_prefix(&mut self, buf: &[u8; PREFIX], len: usize) {
        // Most payload bytes are small integers: a copy of fixed size, without a call to
        // `memcpy`, is what makes a long `Vec<u8>` fast.
        match self.buf.get_mut(self.len..self.len + PREFIX) {
            Some(room) => {
                room.copy_from_slice(buf);
                self.len += len.min(PREFIX);
            }
            None => self.put(&buf[..len.min(PREFIX)]),
        }
    }
}

/// A map value's digest being written: its encoding is kept while it fits [`INLINE`] bytes,
/// then streamed into a hasher.
struct Digesting<'a> {
    /// The encoding so far in its first [`INLINE`] bytes; room behind them for a prefix
    /// copied whole.
    inline: [u8; INLINE + PREFIX],
    len: usize,
    /// The map's hasher, reused from value to value; taken once the value outgrows `inline`.
    hasher: &'a mut Option<Box<HashSink>>,
    hashing: bool,
}

/// A map value as it is written in its entry: `=`, its length and its encoding, or `#` and
/// the SHA-256 of its encoding.
#[derive(Clone, Copy)]
struct ValueDigest {
    bytes: [u8; 2 + INLINE],
    len: u8,
}

impl ValueDigest {
    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl<'a> Digesting<'a> {
    fn new(hasher: &'a mut Option<Box<HashSink>>) -> Digesting<'a> {
        Digesting {
            inline: [0; INLINE + PREFIX],
            len: 0,
            hasher,
            hashing: false,
        }
    }

    fn finish(self) -> ValueDigest {
        let mut bytes = [0; 2 + INLINE];
        match self.hasher {
            Some(hasher) if self.hashing => {
                bytes[0] = HASHED_VALUE;
                bytes[1..33].copy_from_slice(&hasher.finish());
                ValueDigest { bytes, len: 33 }
            }
            _ => {
                bytes[0] = INLINE_VALUE;
                // At most INLINE (32) bytes: fits a byte.
                bytes[1] = self.len as u8;
                // Copied whole (a fixed size, no call to `memcpy`); the digest is its first
                // `2 + len` bytes.
                let (inline, _) = self.inline.split_at(INLINE);
                bytes[2..].copy_from_slice(inline);
                ValueDigest {
                    bytes,
                    len: 2 + self.len as u8,
                }
            }
        }
    }
}

impl Sink for Digesting<'_> {
    fn put_prefix(&mut self, buf: &[u8; PREFIX], len: usize) {
        let len = len.min(PREFIX);
        if !self.hashing && self.len + len <= INLINE {
            if let Some(room) = self.inline.get_mut(self.len..self.len + PREFIX) {
                room.copy_from_slice(buf);
                self.len += len;
                return;
            }
        }
        self.put(&buf[..len]);
    }
    fn put(&mut self, bytes: &[u8]) {
        if !self.hashing {
            if self.len + bytes.len() <= INLINE {
                self.inline[self.len..self.len + bytes.len()].copy_from_slice(bytes);
                self.len += bytes.len();
                return;
            }
            self.hashing = true;
            let hasher = self.hasher.get_or_insert_with(|| Box::new(HashSink::new()));
            hasher.put(&self.inline[..self.len]);
        }
        if let Some(hasher) = self.hasher.as_mut() {
            hasher.put(bytes);
        }
    }
}

/// `tag`, then `v` in LEB128: 7 bits a byte, low first, the high bit set on all but the last.
fn put_varint(out: &mut dyn Sink, tag: u8, mut v: u128) {
    let mut buf = [0u8; PREFIX];
    buf[0] = tag;
    let mut n = 1;
    loop {
        let low = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf[n] = low;
            n += 1;
            break;
        }
        buf[n] = low | 0x80;
        n += 1;
    }
    out.put_prefix(&buf, n);
}

/// `tag + n`, then the `n` significant bytes of `magnitude` (without its high zero bytes),
/// little endian: one byte for 0, two up to 255, three up to 65535, …
fn put_magnitude(out: &mut dyn Sink, tag: u8, magnitude: u128) {
    let n = 16 - (magnitude.leading_zeros() / 8) as usize;
    let mut buf = [0u8; PREFIX];
    // At most 16, so the tag stays within its 17 values.
    buf[0] = tag + n as u8;
    buf[1..17].copy_from_slice(&magnitude.to_le_bytes());
    out.put_prefix(&buf, 1 + n);
}

fn put_uint(out: &mut dyn Sink, v: u128) {
    put_magnitude(out, INT, v);
}

fn put_int(out: &mut dyn Sink, v: i128) {
    if v >= 0 {
        put_magnitude(out, INT, v.unsigned_abs());
    } else {
        // -(v + 1), which cannot overflow: i128::MIN gives i128::MAX.
        put_magnitude(out, NEG_INT, (!v).unsigned_abs());
    }
}

fn put_str(out: &mut dyn Sink, tag: u8, s: &[u8]) {
    put_varint(out, tag, s.len() as u128);
    out.put(s);
}

struct Canonical<'a> {
    out: &'a mut dyn Sink,
    /// The keys and entries of the maps this value is inside, and room for its own.
    scratch: &'a mut Scratch,
    /// How many options, newtypes, lists, maps, structs and variants this value is inside.
    depth: usize,
}

impl<'a> Canonical<'a> {
    /// The serializer of a whole payload.
    fn top(out: &'a mut dyn Sink, scratch: &'a mut Scratch) -> Canonical<'a> {
        Canonical {
            out,
            scratch,
            depth: 0,
        }
    }

    /// The depth of a value inside this one; an error past [`MAX_DEPTH`].
    fn inner_depth(&self) -> Result<usize, FingerprintError> {
        if self.depth >= MAX_DEPTH {
            return Err(FingerprintError(format!(
                "the payload nests deeper than {MAX_DEPTH} levels (options, structs, lists and maps inside one another); fingerprint a flatter value, or leave the deep part out of the payload"
            )));
        }
        Ok(self.depth + 1)
    }

    /// The serializer of a value inside this one.
    fn inner(self) -> Result<Canonical<'a>, FingerprintError> {
        let depth = self.inner_depth()?;
        Ok(Canonical {
            out: self.out,
            scratch: self.scratch,
            depth,
        })
    }
}

impl<'a> ser::Serializer for Canonical<'a> {
    type Ok = ();
    type Error = FingerprintError;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Map<'a>;
    type SerializeStruct = Map<'a>;
    type SerializeStructVariant = Map<'a>;

    fn serialize_bool(self, v: bool) -> Res {
        self.out.put(&[if v { TRUE } else { FALSE }]);
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Res {
        put_int(self.out, v.into());
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> Res {
        put_int(self.out, v.into());
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> Res {
        put_int(self.out, v.into());
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Res {
        put_int(self.out, v.into());
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Res {
        put_int(self.out, v);
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Res {
        put_uint(self.out, v.into());
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Res {
        put_uint(self.out, v.into());
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Res {
        put_uint(self.out, v.into());
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Res {
        put_uint(self.out, v.into());
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Res {
        put_uint(self.out, v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Res {
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Res {
        // One NaN, whatever its payload bits.
        let v = if v.is_nan() { f64::NAN } else { v };
        let mut buf = [FLOAT; 9];
        buf[1..].copy_from_slice(&v.to_bits().to_le_bytes());
        self.out.put(&buf);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Res {
        put_str(self.out, STR, v.encode_utf8(&mut [0; 4]).as_bytes());
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Res {
        put_str(self.out, STR, v.as_bytes());
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Res {
        put_str(self.out, BYTES, v);
        Ok(())
    }
    fn serialize_none(self) -> Res {
        self.out.put(&[NONE]);
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Res {
        self.out.put(&[SOME]);
        value.serialize(self.inner()?)
    }
    fn serialize_unit(self) -> Res {
        self.out.put(&[UNIT]);
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Res {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _n: &'static str, _i: u32, variant: &'static str) -> Res {
        put_str(self.out, UNIT_VARIANT, variant.as_bytes());
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _n: &'static str, value: &T) -> Res {
        value.serialize(self.inner()?)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _n: &'static str,
        _i: u32,
        variant: &'static str,
        value: &T,
    ) -> Res {
        put_str(self.out, VARIANT, variant.as_bytes());
        value.serialize(self.inner()?)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Seq<'a>, FingerprintError> {
        let depth = self.inner_depth()?;
        self.out.put(&[SEQ]);
        Ok(Seq {
            out: self.out,
            scratch: self.scratch,
            depth,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'a>, FingerprintError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _n: &'static str,
        len: usize,
    ) -> Result<Seq<'a>, FingerprintError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _n: &'static str,
        _i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Seq<'a>, FingerprintError> {
        put_str(self.out, VARIANT, variant.as_bytes());
        self.serialize_seq(Some(len))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Map<'a>, FingerprintError> {
        let depth = self.inner_depth()?;
        Ok(Map::new(self.out, self.scratch, depth))
    }
    fn serialize_struct(self, _n: &'static str, len: usize) -> Result<Map<'a>, FingerprintError> {
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _n: &'static str,
        _i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Map<'a>, FingerprintError> {
        put_str(self.out, VARIANT, variant.as_bytes());
        self.serialize_map(Some(len))
    }
}

struct Seq<'a> {
    out: &'a mut dyn Sink,
    scratch: &'a mut Scratch,
    /// The depth of its elements.
    depth: usize,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        value.serialize(Canonical {
            out: self.out,
            scratch: self.scratch,
            depth: self.depth,
        })
    }
    fn finish(self) -> Res {
        self.out.put(&[SEQ_END]);
        Ok(())
    }
}

impl ser::SerializeSeq for Seq<'_> {
    type Ok = ();
    type Error = FingerprintError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        self.element(value)
    }
    fn end(self) -> Res {
        self.finish()
    }
}
impl ser::SerializeTuple for Seq<'_> {
    type Ok = ();
    type Error = FingerprintError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        self.element(value)
    }
    fn end(self) -> Res {
        self.finish()
    }
}
impl ser::SerializeTupleStruct for Seq<'_> {
    type Ok = ();
    type Error = FingerprintError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        self.element(value)
    }
    fn end(self) -> Res {
        self.finish()
    }
}
impl ser::SerializeTupleVariant for Seq<'_> {
    type Ok = ();
    type Error = FingerprintError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        self.element(value)
    }
    fn end(self) -> Res {
        self.finish()
    }
}

/// How many entries, and how many bytes of encoded keys, the maps and structs of one payload
/// hold between them without allocating: a struct of a few fields is fingerprinted on the stack
/// alone.
const SCRATCH_ENTRIES: usize = 16;
type MapKeys = SmallVec<[u8; 256]>;

/// One map entry: where its key lies in [`Scratch::keys`], and its value's digest.
type Entry = (usize, usize, ValueDigest);

/// The keys and entries of every map being serialized, one above another. A map's own lie above
/// the heights it found when it began; a map inside one of its values puts its own above them
/// and takes them off again before the value's digest is entered. So a map is a few words,
/// cheap to return and to move, however many entries it holds.
struct Scratch {
    keys: MapKeys,
    entries: SmallVec<[Entry; SCRATCH_ENTRIES]>,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            keys: MapKeys::new(),
            entries: SmallVec::new(),
        }
    }
}

/// Maps and structs: the order of entries must not matter, so they are sorted before they are
/// written. Keys are encoded into the scratch; each value is reduced to its digest as it is
/// serialized (see [`Digesting`]), so a map holds its keys and a few bytes per entry, never its
/// values.
struct Map<'a> {
    out: &'a mut dyn Sink,
    scratch: &'a mut Scratch,
    /// Where this map's keys and entries begin in the scratch.
    keys_from: usize,
    entries_from: usize,
    pending_key: Option<(usize, usize)>,
    /// The hasher of values too long to write as they are, reused from one to the next.
    hasher: Option<Box<HashSink>>,
    /// The depth of its keys and values.
    depth: usize,
}

impl<'a> Map<'a> {
    fn new(out: &'a mut dyn Sink, scratch: &'a mut Scratch, depth: usize) -> Map<'a> {
        Map {
            out,
            keys_from: scratch.keys.len(),
            entries_from: scratch.entries.len(),
            scratch,
            depth,
            pending_key: None,
            hasher: None,
        }
    }

    fn value<T: Serialize + ?Sized>(&mut self, key: (usize, usize), value: &T) -> Res {
        let (keys, entries) = (self.scratch.keys.len(), self.scratch.entries.len());
        let mut digest = Digesting::new(&mut self.hasher);
        value.serialize(Canonical {
            out: &mut digest,
            scratch: &mut *self.scratch,
            depth: self.depth,
        })?;
        let digest = digest.finish();
        // Whatever the value's maps left (none, unless a `Serialize` impl dropped a map it
        // began) is not this map's.
        self.scratch.keys.truncate(keys);
        self.scratch.entries.truncate(entries);
        self.scratch.entries.push((key.0, key.1, digest));
        Ok(())
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Res {
        let start = self.scratch.keys.len();
        put_str(&mut self.scratch.keys, STR, name.as_bytes());
        self.value((start, self.scratch.keys.len()), value)
    }

    fn finish(self) -> Res {
        if self.pending_key.is_some() {
            return Err(FingerprintError(
                "map key serialized without its value".into(),
            ));
        }
        let Scratch { keys, entries } = &mut *self.scratch;
        let own = entries.get_mut(self.entries_from..).unwrap_or_default();
        own.sort_unstable_by(|a, b| {
            keys[a.0..a.1]
                .cmp(&keys[b.0..b.1])
                .then_with(|| a.2.as_bytes().cmp(b.2.as_bytes()))
        });
        self.out.put(&[MAP]);
        for (start, end, digest) in own.iter() {
            self.out.put(&keys[*start..*end]);
            self.out.put(digest.as_bytes());
        }
        self.out.put(&[MAP_END]);
        keys.truncate(self.keys_from);
        entries.truncate(self.entries_from);
        Ok(())
    }
}

impl ser::SerializeMap for Map<'_> {
    type Ok = ();
    type Error = FingerprintError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Res {
        let start = self.scratch.keys.len();
        // The key is written into the scratch's keys, so a map inside the key (a struct used
        // as a key) keeps its own entries in a scratch of its own.
        key.serialize(Canonical {
            out: &mut self.scratch.keys,
            scratch: &mut Scratch::new(),
            depth: self.depth,
        })?;
        self.pending_key = Some((start, self.scratch.keys.len()));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        let key = self
            .pending_key
            .take()
            .ok_or_else(|| FingerprintError("map value serialized before its key".into()))?;
        self.value(key, value)
    }
    fn end(self) -> Res {
        self.finish()
    }
}
impl ser::SerializeStruct for Map<'_> {
    type Ok = ();
    type Error = FingerprintError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Res {
        self.field(name, value)
    }
    fn end(self) -> Res {
        self.finish()
    }
}
impl ser::SerializeStructVariant for Map<'_> {
    type Ok = ();
    type Error = FingerprintError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Res {
        self.field(name, value)
    }
    fn end(self) -> Res {
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::collections::{BTreeMap, HashMap};

    #[derive(Serialize)]
    struct A {
        x: u32,
        y: String,
    }
    #[derive(Serialize)]
    struct B {
        y: String,
        x: u64,
    }

    /// `n` options inside one another around a `0u8`, built as it is serialized (nothing to
    /// allocate or drop, however deep).
    struct DeepOption(usize);
    impl Serialize for DeepOption {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self.0 {
                0 => s.serialize_u8(0),
                n => s.serialize_some(&DeepOption(n - 1)),
            }
        }
    }

    /// `n` structs inside one another, each with one field.
    struct DeepStruct(usize);
    impl Serialize for DeepStruct {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeStruct;
            match self.0 {
                0 => s.serialize_unit(),
                n => {
                    let mut st = s.serialize_struct("DeepStruct", 1)?;
                    st.serialize_field("inner", &DeepStruct(n - 1))?;
                    st.end()
                }
            }
        }
    }

    #[test]
    fn payloads_nest_as_deep_as_the_codec_allows_and_no_deeper() {
        assert!(Fingerprint::of(&DeepOption(MAX_DEPTH)).is_ok());
        assert!(Fingerprint::of(&DeepStruct(MAX_DEPTH)).is_ok());
        for err in [
            Fingerprint::of(&DeepOption(MAX_DEPTH + 1)).unwrap_err(),
            Fingerprint::of(&DeepStruct(MAX_DEPTH + 1)).unwrap_err(),
        ] {
            assert!(err.0.contains("deeper than 256 levels"), "{err}");
        }
        // The same limit through the annotated functions' tuple, one level in.
        let mut tuple = TupleFingerprint::new();
        assert!(tuple.element(&DeepOption(MAX_DEPTH - 1)).is_ok());
        assert_eq!(
            tuple.finish(),
            Fingerprint::of(&(&DeepOption(MAX_DEPTH - 1),)).unwrap()
        );
        assert!(TupleFingerprint::new()
            .element(&DeepOption(MAX_DEPTH))
            .is_err());
        assert!(Fingerprint::of(&(&DeepOption(MAX_DEPTH),)).is_err());
    }

    #[test]
    fn a_payload_nested_a_million_deep_is_an_error_not_a_stack_overflow() {
        // Half the stack a spawned thread gets by default: the refusal comes long before it
        // could run out, in a debug build too.
        let refused = std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(|| {
                (
                    Fingerprint::of(&DeepOption(1_000_000)).is_err(),
                    Fingerprint::of(&DeepStruct(1_000_000)).is_err(),
                )
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(refused, (true, true));
    }

    fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
        let mut out = Vec::new();
        canonical_encode(value, &mut out).unwrap();
        out
    }

    #[test]
    fn empty_constant_is_sha256_of_nothing() {
        assert_eq!(Fingerprint(Sha256::digest([]).into()), Fingerprint::EMPTY);
    }

    #[test]
    fn the_fingerprint_is_the_sha256_of_the_encoding() {
        let mut big = BTreeMap::new();
        big.insert("long", "x".repeat(100));
        big.insert("short", "y".into());
        let value = (
            A {
                x: 1,
                y: "z".into(),
            },
            big,
            vec![Some(1.5f32)],
            -3i64,
        );
        assert_eq!(
            Fingerprint::of(&value).unwrap(),
            Fingerprint(Sha256::digest(encode(&value)).into())
        );
    }

    #[test]
    fn integers_are_compact_and_canonical() {
        assert_eq!(encode(&0u8), b"\x80");
        assert_eq!(encode(&255u64), b"\x81\xff");
        assert_eq!(encode(&256u16), b"\x82\x00\x01");
        assert_eq!(encode(&-1i32), b"\xa0");
        assert_eq!(encode(&-257i64), b"\xa2\x00\x01");
        assert_eq!(encode(&u128::MAX), [&[0x90][..], &[0xff; 16]].concat());
        assert_eq!(
            encode(&i128::MIN),
            [&[0xb0][..], &[0xff; 15], &[0x7f]].concat()
        );
        assert_ne!(encode(&i128::MIN), encode(&i128::MAX));
        for v in [
            0i128,
            1,
            127,
            128,
            255,
            256,
            65535,
            -1,
            -128,
            -129,
            i128::from(i64::MIN),
        ] {
            let expected = encode(&v);
            if let Ok(v) = u8::try_from(v) {
                assert_eq!(encode(&v), expected);
            }
            if let Ok(v) = i8::try_from(v) {
                assert_eq!(encode(&v), expected);
            }
            if let Ok(v) = u16::try_from(v) {
                assert_eq!(encode(&v), expected);
            }
            if let Ok(v) = i32::try_from(v) {
                assert_eq!(encode(&v), expected);
            }
            if let Ok(v) = i64::try_from(v) {
                assert_eq!(encode(&v), expected);
            }
            if let Ok(v) = u64::try_from(v) {
                assert_eq!(encode(&v), expected);
            }
            if let Ok(v) = u128::try_from(v) {
                assert_eq!(encode(&v), expected);
            }
        }
    }

    #[test]
    fn integer_width_does_not_matter() {
        assert_eq!(Fingerprint::of(&1u8), Fingerprint::of(&1i64));
        assert_eq!(
            Fingerprint::of(&(1u8, -2i8)),
            Fingerprint::of(&(1u128, -2i128))
        );
        assert_eq!(
            Fingerprint::of(&A {
                x: 7,
                y: "a".into()
            }),
            Fingerprint::of(&B {
                y: "a".into(),
                x: 7
            })
        );
        assert_ne!(Fingerprint::of(&1u8), Fingerprint::of(&-1i8));
    }

    #[test]
    fn nan_is_one_value() {
        let quiet = f64::NAN;
        let other = f64::from_bits(quiet.to_bits() | 1);
        assert!(other.is_nan());
        assert_eq!(Fingerprint::of(&quiet), Fingerprint::of(&other));
        assert_eq!(Fingerprint::of(&f32::NAN), Fingerprint::of(&quiet));
        assert_ne!(Fingerprint::of(&0.0f64), Fingerprint::of(&-0.0f64));
    }

    #[test]
    fn field_order_does_not_matter() {
        let a = A {
            x: 1,
            y: "z".into(),
        };
        let b = B {
            y: "z".into(),
            x: 1,
        };
        assert_eq!(Fingerprint::of(&a), Fingerprint::of(&b));
    }

    #[test]
    fn map_order_does_not_matter_and_content_does() {
        let mut m1 = HashMap::new();
        let mut m2 = BTreeMap::new();
        for i in 0..100u32 {
            m1.insert(i.to_string(), i);
            m2.insert((99 - i).to_string(), 99 - i);
        }
        assert_eq!(Fingerprint::of(&m1), Fingerprint::of(&m2));
        m2.insert("x".into(), 1);
        assert_ne!(Fingerprint::of(&m1), Fingerprint::of(&m2));
    }

    #[test]
    fn map_order_does_not_matter_for_large_values() {
        let mut m1 = HashMap::new();
        let mut m2 = BTreeMap::new();
        for i in 0..50u8 {
            m1.insert(vec![i], vec![i; 100 + usize::from(i)]);
            m2.insert(vec![49 - i], vec![49 - i; 149 - usize::from(i)]);
        }
        assert_eq!(Fingerprint::of(&m1), Fingerprint::of(&m2));
        m2.insert(vec![7], vec![7; 106]);
        assert_ne!(Fingerprint::of(&m1), Fingerprint::of(&m2));
    }

    #[test]
    fn nested_changes_are_seen() {
        #[derive(Serialize)]
        struct Outer {
            items: Vec<A>,
            by_name: HashMap<String, A>,
        }
        let make = |deep: &str, long: usize| Outer {
            items: vec![A {
                x: 1,
                y: deep.into(),
            }],
            by_name: [(
                "k".to_owned(),
                A {
                    x: 2,
                    y: "q".repeat(long),
                },
            )]
            .into_iter()
            .collect(),
        };
        let base = Fingerprint::of(&make("a", 100));
        assert_eq!(base, Fingerprint::of(&make("a", 100)));
        assert_ne!(base, Fingerprint::of(&make("b", 100)));
        assert_ne!(base, Fingerprint::of(&make("a", 101)));
        assert_ne!(
            Fingerprint::of(&make("a", 1)),
            Fingerprint::of(&make("a", 2))
        );
    }

    #[test]
    fn adjacent_strings_do_not_collide() {
        assert_ne!(Fingerprint::of(&("ab", "c")), Fingerprint::of(&("a", "bc")));
        assert_ne!(Fingerprint::of(&Some(1u8)), Fingerprint::of(&1u8));
        assert_ne!(
            Fingerprint::of(&vec![vec![1u8], vec![]]),
            Fingerprint::of(&vec![vec![], vec![1u8]])
        );
        // A short value and a long one that starts alike.
        assert_ne!(
            Fingerprint::of(&[("k", "v".repeat(31))]),
            Fingerprint::of(&[("k", "v".repeat(40))])
        );
    }

    /// An entry's value is written as it is or as its hash, and the two never read alike.
    #[test]
    fn inline_and_hashed_values_are_told_apart() {
        let map = |v: String| BTreeMap::from([("k", v)]);
        let at_limit = encode(&map("v".repeat(30))); // `s`, length, 30 bytes: 32 bytes
        assert_eq!(at_limit[..5], *b"{s\x01k=");
        assert_eq!(at_limit[5], 32);
        let over = encode(&map("v".repeat(31)));
        assert_eq!(over[..5], *b"{s\x01k#");
        assert_eq!(over.len(), 5 + 32 + 1);
    }

    #[test]
    fn a_tuple_built_element_by_element_is_the_tuple() {
        let order = A {
            x: 5,
            y: "ord".into(),
        };
        let tags: HashMap<&str, u8> = [("a", 1), ("b", 2)].into_iter().collect();
        let mut tuple = TupleFingerprint::new();
        tuple.element(&&order).unwrap();
        tuple.element(&&tags).unwrap();
        tuple.element(&&7u64).unwrap();
        assert_eq!(
            Fingerprint::of(&(&order, &tags, &7u64)).unwrap(),
            tuple.finish()
        );
        assert_eq!(
            TupleFingerprint::new().finish(),
            Fingerprint(Sha256::digest(b"[]").into())
        );
    }

    #[test]
    fn a_large_payload_streams() {
        let payload = vec![0xa5u8; 50 << 20];
        let f = Fingerprint::of(&payload).unwrap();
        assert_ne!(f, Fingerprint::EMPTY);
        #[derive(Serialize)]
        struct Upload<'a> {
            name: &'a str,
            body: &'a [u8],
        }
        let upload = Fingerprint::of(&Upload {
            name: "x",
            body: &payload[..1 << 20],
        })
        .unwrap();
        assert_ne!(upload, f);
    }

    #[test]
    fn failing_serialize_is_an_error() {
        struct Fails;
        impl Serialize for Fails {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        assert_eq!(
            Fingerprint::of(&vec![Fails]),
            Err(FingerprintError("no".into()))
        );
        assert_eq!(
            Fingerprint::of(&BTreeMap::from([(1, Fails)])),
            Err(FingerprintError("no".into()))
        );
    }

    /// Maps inside maps, a struct as a key, values written whole and values hashed: the
    /// fingerprint is pinned, so keeping the maps' entries in one scratch for the whole payload
    /// (rather than in each map) changed no byte of the encoding.
    #[test]
    fn nested_maps_and_struct_keys_are_pinned() {
        #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
        struct Part {
            n: u8,
            name: &'static str,
        }
        #[derive(Serialize)]
        struct Nested {
            id: u64,
            parts: BTreeMap<Part, Vec<u8>>,
            inner: Option<BTreeMap<&'static str, (i64, String)>>,
        }
        let mut parts = BTreeMap::new();
        parts.insert(Part { n: 2, name: "b" }, vec![7u8; 40]);
        parts.insert(Part { n: 1, name: "a" }, vec![1, 2, 3]);
        let mut inner = BTreeMap::new();
        inner.insert("long", (-300i64, "x".repeat(50)));
        inner.insert("short", (5i64, "y".into()));
        let v = Nested {
            id: 1 << 40,
            parts,
            inner: Some(inner),
        };
        assert_eq!(
            Fingerprint::of(&v).unwrap().to_hex(),
            "2103ba9c499afec13ee2caf2bfe87222a83eb2e0f8411ce5feae16dbc835c3b1"
        );
    }

    #[test]
    fn hex_round_trip() {
        let f = Fingerprint::of("x").unwrap();
        assert_eq!(f.to_hex().len(), 64);
        assert_eq!(Fingerprint::from_slice(&f.0), Some(f));
        assert_eq!(Fingerprint::from_slice(&[1, 2]), None);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// A small zoo of serde shapes.
        #[derive(Debug, Clone, PartialEq, Serialize)]
        enum Zoo {
            Unit,
            Bool(bool),
            Small(u8),
            Wide(i64),
            Float(f64),
            Text(String),
            Bytes(#[serde(with = "as_bytes")] Vec<u8>),
            Maybe(Option<Box<Zoo>>),
            List(Vec<Zoo>),
            Pair(Box<Zoo>, Box<Zoo>),
            Record { name: String, value: Box<Zoo> },
            Map(BTreeMap<String, Zoo>),
        }

        mod as_bytes {
            pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(v)
            }
        }

        fn zoo() -> impl Strategy<Value = Zoo> {
            let text = "[ab:]{0,3}|[a-z]{30,40}";
            let leaf = prop_oneof![
                Just(Zoo::Unit),
                any::<bool>().prop_map(Zoo::Bool),
                (0u8..4).prop_map(Zoo::Small),
                prop_oneof![-2i64..4, any::<i64>()].prop_map(Zoo::Wide),
                // No NaN (one value for all) and no zeros (-0.0 == 0.0, but their bits differ).
                prop::num::f64::NORMAL.prop_map(Zoo::Float),
                text.prop_map(Zoo::Text),
                prop::collection::vec(0u8..3, 0..3).prop_map(Zoo::Bytes),
            ];
            leaf.prop_recursive(3, 32, 4, move |inner| {
                prop_oneof![
                    prop::option::of(inner.clone().prop_map(Box::new)).prop_map(Zoo::Maybe),
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Zoo::List),
                    (inner.clone(), inner.clone())
                        .prop_map(|(a, b)| Zoo::Pair(Box::new(a), Box::new(b))),
                    ("[ab]{0,2}", inner.clone()).prop_map(|(name, v)| Zoo::Record {
                        name,
                        value: Box::new(v)
                    }),
                    prop::collection::btree_map("[ab]{0,2}", inner, 0..4).prop_map(Zoo::Map),
                ]
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            #[test]
            fn distinct_values_fingerprint_differently(a in zoo(), b in zoo()) {
                let (fa, fb) = (Fingerprint::of(&a).unwrap(), Fingerprint::of(&b).unwrap());
                prop_assert_eq!(a == b, fa == fb, "{:?} / {:?}", a, b);
            }

            #[test]
            fn hash_map_and_btree_map_agree(m in prop::collection::btree_map("[ab]{0,2}", zoo(), 0..6)) {
                let hashed: HashMap<&String, &Zoo> = m.iter().collect();
                prop_assert_eq!(Fingerprint::of(&m).unwrap(), Fingerprint::of(&hashed).unwrap());
            }
        }
    }
}
