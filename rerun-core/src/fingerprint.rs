//! Payload fingerprints: SHA-256 over a canonical serde encoding.
//!
//! The encoding is canonical in the ways that matter for "is this the same request?": map
//! entries and struct fields are sorted by their encoded key, so a `HashMap`'s iteration order
//! or a reordered struct definition does not change the fingerprint; every integer type encodes
//! the same value alike; each value is tagged and length-prefixed, so distinct payloads never
//! share an encoding.

use std::fmt;

use serde::ser::{self, Serialize};
use sha2::{Digest, Sha256};

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
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of a call without payload.
    pub const EMPTY: Fingerprint = Fingerprint([
        0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9,
        0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52,
        0xb8, 0x55,
    ]);

    /// The fingerprint of `payload`. Fails only when the value's own `Serialize` impl fails.
    pub fn of<P: Serialize + ?Sized>(payload: &P) -> Result<Fingerprint, FingerprintError> {
        let mut out = Vec::with_capacity(128);
        canonical_encode(payload, &mut out)?;
        Ok(Fingerprint(Sha256::digest(&out).into()))
    }

    /// The fingerprint as 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        s
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

/// Writes the canonical encoding of `value` to `out`.
pub fn canonical_encode<P: Serialize + ?Sized>(
    value: &P,
    out: &mut Vec<u8>,
) -> Result<(), FingerprintError> {
    value.serialize(Canonical { out })
}

type Res = Result<(), FingerprintError>;

struct Canonical<'a> {
    out: &'a mut Vec<u8>,
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u64).to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, tag: u8, s: &[u8]) {
    out.push(tag);
    put_len(out, s.len());
    out.extend_from_slice(s);
}

fn put_int(out: &mut Vec<u8>, v: i128) {
    out.push(b'i');
    out.extend_from_slice(&v.to_le_bytes());
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
        self.out.push(if v { b'T' } else { b'F' });
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
        put_int(self.out, v.into());
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Res {
        put_int(self.out, v.into());
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Res {
        put_int(self.out, v.into());
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Res {
        put_int(self.out, v.into());
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Res {
        match i128::try_from(v) {
            Ok(v) => put_int(self.out, v),
            Err(_) => {
                self.out.push(b'U');
                self.out.extend_from_slice(&v.to_le_bytes());
            }
        }
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Res {
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Res {
        // One NaN, whatever its payload bits.
        let v = if v.is_nan() { f64::NAN } else { v };
        self.out.push(b'f');
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Res {
        put_str(self.out, b's', v.encode_utf8(&mut [0; 4]).as_bytes());
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Res {
        put_str(self.out, b's', v.as_bytes());
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Res {
        put_str(self.out, b'b', v);
        Ok(())
    }
    fn serialize_none(self) -> Res {
        self.out.push(b'N');
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Res {
        self.out.push(b'S');
        value.serialize(self)
    }
    fn serialize_unit(self) -> Res {
        self.out.push(b'u');
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Res {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _n: &'static str, _i: u32, variant: &'static str) -> Res {
        put_str(self.out, b'e', variant.as_bytes());
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _n: &'static str, value: &T) -> Res {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _n: &'static str,
        _i: u32,
        variant: &'static str,
        value: &T,
    ) -> Res {
        put_str(self.out, b'E', variant.as_bytes());
        value.serialize(self)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Seq<'a>, FingerprintError> {
        self.out.push(b'[');
        Ok(Seq { out: self.out })
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
        put_str(self.out, b'E', variant.as_bytes());
        self.serialize_seq(Some(len))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Map<'a>, FingerprintError> {
        Ok(Map {
            out: self.out,
            scratch: Vec::new(),
            entries: Vec::new(),
            pending_key: None,
        })
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
        put_str(self.out, b'E', variant.as_bytes());
        self.serialize_map(Some(len))
    }
}

struct Seq<'a> {
    out: &'a mut Vec<u8>,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        value.serialize(Canonical { out: self.out })
    }
    fn finish(self) -> Res {
        self.out.push(b']');
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

/// Maps and structs: entries are encoded into one scratch buffer, then written sorted by their
/// encoded key (one allocation per map, whatever its number of entries).
struct Map<'a> {
    out: &'a mut Vec<u8>,
    scratch: Vec<u8>,
    /// Per entry: where its key starts, where its value starts, where its value ends.
    entries: Vec<(usize, usize, usize)>,
    pending_key: Option<(usize, usize)>,
}

impl Map<'_> {
    fn encode<T: Serialize + ?Sized>(
        &mut self,
        value: &T,
    ) -> Result<(usize, usize), FingerprintError> {
        let start = self.scratch.len();
        value.serialize(Canonical {
            out: &mut self.scratch,
        })?;
        Ok((start, self.scratch.len()))
    }
    fn field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Res {
        let key = self.scratch.len();
        put_str(&mut self.scratch, b's', name.as_bytes());
        let (value_start, value_end) = self.encode(value)?;
        self.entries.push((key, value_start, value_end));
        Ok(())
    }
    fn finish(mut self) -> Res {
        let scratch = &self.scratch;
        self.entries.sort_unstable_by(|a, b| {
            scratch[a.0..a.1]
                .cmp(&scratch[b.0..b.1])
                .then(scratch[a.1..a.2].cmp(&scratch[b.1..b.2]))
        });
        self.out.push(b'{');
        for &(key, value, end) in &self.entries {
            self.out.extend_from_slice(&scratch[key..value]);
            self.out.extend_from_slice(&scratch[value..end]);
        }
        self.out.push(b'}');
        Ok(())
    }
}

impl ser::SerializeMap for Map<'_> {
    type Ok = ();
    type Error = FingerprintError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Res {
        self.pending_key = Some(self.encode(key)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        let (key, value_start) = self
            .pending_key
            .take()
            .ok_or_else(|| FingerprintError("map value serialized before its key".into()))?;
        // The key and value were encoded back to back, so the value starts where the key ended.
        let (start, end) = self.encode(value)?;
        debug_assert_eq!(start, value_start);
        self.entries.push((key, start, end));
        Ok(())
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

    #[test]
    fn empty_constant_is_sha256_of_nothing() {
        assert_eq!(Fingerprint(Sha256::digest([]).into()), Fingerprint::EMPTY);
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
    fn nested_changes_are_seen() {
        let a = vec![A {
            x: 1,
            y: "a".into(),
        }];
        let b = vec![A {
            x: 1,
            y: "b".into(),
        }];
        assert_ne!(Fingerprint::of(&a), Fingerprint::of(&b));
    }

    #[test]
    fn adjacent_strings_do_not_collide() {
        assert_ne!(Fingerprint::of(&("ab", "c")), Fingerprint::of(&("a", "bc")));
        assert_ne!(
            Fingerprint::of(&vec!["a"]),
            Fingerprint::of(&("a",)).map(|_| Fingerprint::EMPTY)
        );
        assert_ne!(Fingerprint::of(&Some(1u8)), Fingerprint::of(&1u8));
    }

    #[test]
    fn hex_round_trip() {
        let f = Fingerprint::of("x").unwrap();
        assert_eq!(f.to_hex().len(), 64);
        assert_eq!(Fingerprint::from_slice(&f.0), Some(f));
        assert_eq!(Fingerprint::from_slice(&[1, 2]), None);
    }
}
