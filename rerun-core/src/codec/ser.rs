//! The encoder: a `serde::Serializer` that writes one tagged value into one `Vec<u8>`.
//!
//! Lists and maps are written with the length the serializer was promised (or 0 when none
//! was), and that length is corrected when the list ends if it turned out different; the
//! correction moves the bytes after it only in that rare case, so the encoding is the same
//! whatever length was promised. Consecutive `u8` items of a list are written as one run.

use serde::ser::{self, Serialize};

use super::error::CodecError;
use super::format::{self, tag, MAX_DEPTH};

/// A run of `u8` items being written: where its length is and what was guessed for it.
struct Run {
    len_at: usize,
    width: usize,
    guessed: usize,
    count: usize,
}

/// Writes values into `out`.
pub(super) struct Encoder {
    out: Vec<u8>,
    depth: usize,
    /// `Some` while the next value is an item of a list: how many more items the list was
    /// promised (the guess for the length of a run of `u8` that starts there).
    item: Option<usize>,
    /// The run of `u8` items open at the end of `out`, if any.
    run: Option<Run>,
}

impl Encoder {
    /// An encoder that appends to `out`.
    pub(super) fn new(out: Vec<u8>) -> Encoder {
        Encoder {
            out,
            depth: 0,
            item: None,
            run: None,
        }
    }

    /// Encodes one value and hands back the bytes.
    pub(super) fn encode<T: Serialize + ?Sized>(
        mut self,
        value: &T,
    ) -> Result<Vec<u8>, CodecError> {
        let before = self.out.len();
        value.serialize(&mut self)?;
        self.close_run();
        if self.out.len() == before {
            return Err(nothing());
        }
        Ok(self.out)
    }

    /// Every value but a list's `u8` item starts here: it ends the open run.
    #[inline]
    fn begin(&mut self) {
        self.item = None;
        if self.run.is_some() {
            self.close_run();
        }
    }

    fn close_run(&mut self) {
        if let Some(run) = self.run.take() {
            if run.count != run.guessed {
                patch_len(&mut self.out, run.len_at, run.width, run.count);
            }
        }
    }

    #[inline]
    fn enter(&mut self) -> Result<(), CodecError> {
        if self.depth >= MAX_DEPTH {
            return Err(CodecError::new(format!(
                "the value nests deeper than {MAX_DEPTH} levels (options, structs, lists and maps inside one another)"
            )));
        }
        self.depth += 1;
        Ok(())
    }

    #[inline]
    fn put_tag(&mut self, t: u8) {
        self.begin();
        self.out.push(t);
    }

    #[inline]
    fn put_str(&mut self, s: &str) {
        format::put_varint64(&mut self.out, s.len() as u64);
        self.out.extend_from_slice(s.as_bytes());
    }

    /// A value inside an option or a newtype: one level deeper, and it must write something.
    fn inner<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        self.enter()?;
        let before = self.out.len();
        value.serialize(&mut *self)?;
        if self.out.len() == before {
            return Err(nothing());
        }
        self.depth -= 1;
        Ok(())
    }

    /// Opens a list, map or struct: tag, variant index, name, then the promised length.
    fn open(
        &mut self,
        t: u8,
        index: Option<u32>,
        name: Option<&str>,
        len: Option<usize>,
        list: bool,
    ) -> Result<Compound<'_>, CodecError> {
        self.put_tag(t);
        if let Some(index) = index {
            format::put_varint64(&mut self.out, u64::from(index));
        }
        if let Some(name) = name {
            self.put_str(name);
        }
        self.enter()?;
        let promised = len.unwrap_or(0);
        let count_at = self.out.len();
        format::put_varint64(&mut self.out, promised as u64);
        if list {
            // Every item takes at least one byte; a run of bytes adds a few. A length that
            // cannot be reserved is only a wrong promise: the buffer grows as it goes.
            let _ = self.out.try_reserve(promised.saturating_add(16));
        }
        Ok(Compound {
            width: self.out.len() - count_at,
            enc: self,
            count_at,
            promised,
            count: 0,
            key_pending: false,
        })
    }
}

fn nothing() -> CodecError {
    CodecError::new(
        "a value serialized to nothing (its `Serialize` returned without calling the serializer)",
    )
}

/// Rewrites the varint length at `at` (`width` bytes long) to `len`.
fn patch_len(out: &mut Vec<u8>, at: usize, width: usize, len: usize) {
    let mut buf = Vec::with_capacity(10);
    format::put_varint64(&mut buf, len as u64);
    out.splice(at..at + width, buf);
}

impl<'a> ser::Serializer for &'a mut Encoder {
    type Ok = ();
    type Error = CodecError;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn is_human_readable(&self) -> bool {
        true
    }

    fn serialize_bool(self, v: bool) -> Result<(), CodecError> {
        self.put_tag(if v { tag::TRUE } else { tag::FALSE });
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result<(), CodecError> {
        self.put_tag(tag::I8);
        self.out.push(v as u8);
        Ok(())
    }

    fn serialize_i16(self, v: i16) -> Result<(), CodecError> {
        self.put_tag(tag::I16);
        format::put_varint64(&mut self.out, format::zigzag64(i64::from(v)));
        Ok(())
    }

    fn serialize_i32(self, v: i32) -> Result<(), CodecError> {
        self.put_tag(tag::I32);
        format::put_varint64(&mut self.out, format::zigzag64(i64::from(v)));
        Ok(())
    }

    fn serialize_i64(self, v: i64) -> Result<(), CodecError> {
        self.put_tag(tag::I64);
        format::put_varint64(&mut self.out, format::zigzag64(v));
        Ok(())
    }

    fn serialize_i128(self, v: i128) -> Result<(), CodecError> {
        self.put_tag(tag::I128);
        format::put_varint(&mut self.out, format::zigzag128(v));
        Ok(())
    }

    #[inline]
    fn serialize_u8(self, v: u8) -> Result<(), CodecError> {
        if let Some(rest) = self.item.take() {
            // An item of a list: it joins (or starts) a run of raw bytes.
            if let Some(run) = &mut self.run {
                run.count += 1;
            } else {
                self.out.push(tag::U8_RUN);
                let len_at = self.out.len();
                let guessed = rest.max(1);
                format::put_varint64(&mut self.out, guessed as u64);
                self.run = Some(Run {
                    len_at,
                    width: self.out.len() - len_at,
                    guessed,
                    count: 1,
                });
            }
            self.out.push(v);
            return Ok(());
        }
        self.put_tag(tag::U8);
        self.out.push(v);
        Ok(())
    }

    fn serialize_u16(self, v: u16) -> Result<(), CodecError> {
        self.put_tag(tag::U16);
        format::put_varint64(&mut self.out, u64::from(v));
        Ok(())
    }

    fn serialize_u32(self, v: u32) -> Result<(), CodecError> {
        self.put_tag(tag::U32);
        format::put_varint64(&mut self.out, u64::from(v));
        Ok(())
    }

    fn serialize_u64(self, v: u64) -> Result<(), CodecError> {
        self.put_tag(tag::U64);
        format::put_varint64(&mut self.out, v);
        Ok(())
    }

    fn serialize_u128(self, v: u128) -> Result<(), CodecError> {
        self.put_tag(tag::U128);
        format::put_varint(&mut self.out, v);
        Ok(())
    }

    fn serialize_f32(self, v: f32) -> Result<(), CodecError> {
        self.put_tag(tag::F32);
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }

    fn serialize_f64(self, v: f64) -> Result<(), CodecError> {
        self.put_tag(tag::F64);
        self.out.extend_from_slice(&v.to_bits().to_le_bytes());
        Ok(())
    }

    fn serialize_char(self, v: char) -> Result<(), CodecError> {
        self.put_tag(tag::CHAR);
        format::put_varint64(&mut self.out, u64::from(u32::from(v)));
        Ok(())
    }

    fn serialize_str(self, v: &str) -> Result<(), CodecError> {
        self.put_tag(tag::STR);
        self.put_str(v);
        Ok(())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), CodecError> {
        self.put_tag(tag::BYTES);
        format::put_varint64(&mut self.out, v.len() as u64);
        self.out.extend_from_slice(v);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), CodecError> {
        self.put_tag(tag::NONE);
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), CodecError> {
        self.put_tag(tag::SOME);
        self.inner(value)
    }

    fn serialize_unit(self) -> Result<(), CodecError> {
        self.put_tag(tag::UNIT);
        Ok(())
    }

    fn serialize_unit_struct(self, name: &'static str) -> Result<(), CodecError> {
        self.put_tag(tag::UNIT_STRUCT);
        self.put_str(name);
        Ok(())
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<(), CodecError> {
        self.put_tag(tag::UNIT_VARIANT);
        format::put_varint64(&mut self.out, u64::from(index));
        self.put_str(variant);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<(), CodecError> {
        self.put_tag(tag::NEWTYPE_STRUCT);
        self.put_str(name);
        self.inner(value)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), CodecError> {
        self.put_tag(tag::NEWTYPE_VARIANT);
        format::put_varint64(&mut self.out, u64::from(index));
        self.put_str(variant);
        self.inner(value)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'a>, CodecError> {
        self.open(tag::SEQ, None, None, len, true)
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>, CodecError> {
        self.open(tag::TUPLE, None, None, Some(len), true)
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, CodecError> {
        self.open(tag::TUPLE_STRUCT, None, Some(name), Some(len), true)
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, CodecError> {
        self.open(
            tag::TUPLE_VARIANT,
            Some(index),
            Some(variant),
            Some(len),
            true,
        )
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a>, CodecError> {
        self.open(tag::MAP, None, None, len, false)
    }

    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Compound<'a>, CodecError> {
        self.open(tag::STRUCT, None, Some(name), Some(len), false)
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, CodecError> {
        self.open(
            tag::STRUCT_VARIANT,
            Some(index),
            Some(variant),
            Some(len),
            false,
        )
    }
}

/// A list, map or struct being written.
pub(super) struct Compound<'a> {
    enc: &'a mut Encoder,
    count_at: usize,
    width: usize,
    promised: usize,
    count: usize,
    key_pending: bool,
}

impl Compound<'_> {
    #[inline]
    fn item<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        let before = self.enc.out.len();
        self.enc.item = Some(self.promised.saturating_sub(self.count));
        value.serialize(&mut *self.enc)?;
        if self.enc.out.len() == before {
            return Err(nothing());
        }
        self.count += 1;
        Ok(())
    }

    #[inline]
    fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        let before = self.enc.out.len();
        value.serialize(&mut *self.enc)?;
        if self.enc.out.len() == before {
            return Err(nothing());
        }
        Ok(())
    }

    #[inline]
    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), CodecError> {
        self.enc.begin();
        self.enc.put_str(key);
        self.value(value)?;
        self.count += 1;
        Ok(())
    }

    fn end(self) -> Result<(), CodecError> {
        if self.key_pending {
            return Err(CodecError::new(
                "a map entry has a key but no value (its `Serialize` called `serialize_key` without `serialize_value`)",
            ));
        }
        self.enc.close_run();
        self.enc.depth -= 1;
        if self.count != self.promised {
            patch_len(&mut self.enc.out, self.count_at, self.width, self.count);
        }
        Ok(())
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = CodecError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        self.item(value)
    }

    fn end(self) -> Result<(), CodecError> {
        Compound::end(self)
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = CodecError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        self.item(value)
    }

    fn end(self) -> Result<(), CodecError> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = CodecError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        self.item(value)
    }

    fn end(self) -> Result<(), CodecError> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = CodecError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        self.item(value)
    }

    fn end(self) -> Result<(), CodecError> {
        Compound::end(self)
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = CodecError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), CodecError> {
        if self.key_pending {
            return Err(CodecError::new(
                "a map entry has two keys (its `Serialize` called `serialize_key` twice)",
            ));
        }
        self.value(key)?;
        self.key_pending = true;
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CodecError> {
        if !self.key_pending {
            return Err(CodecError::new(
                "a map entry has a value but no key (its `Serialize` called `serialize_value` first)",
            ));
        }
        self.value(value)?;
        self.key_pending = false;
        self.count += 1;
        Ok(())
    }

    fn end(self) -> Result<(), CodecError> {
        Compound::end(self)
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = CodecError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), CodecError> {
        self.field(key, value)
    }

    fn end(self) -> Result<(), CodecError> {
        Compound::end(self)
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = CodecError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), CodecError> {
        self.field(key, value)
    }

    fn end(self) -> Result<(), CodecError> {
        Compound::end(self)
    }
}
