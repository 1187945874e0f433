//! The decoder: a self-describing `serde::Deserializer` over a version-2 body.
//!
//! `deserialize_any` visits every value as what it was written as, so untagged and
//! internally tagged enums, `#[serde(flatten)]` and `serde_json::Value` work; the typed entry
//! points (`deserialize_option`, `deserialize_enum`, `deserialize_newtype_struct`,
//! `deserialize_ignored_any`) use the tags those types need. Integers are visited at the
//! width they were written with; serde's primitive visitors widen them (or refuse values out
//! of range) themselves.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, IntoDeserializer, Unexpected, Visitor};

use super::error::DecodeError;
use super::format::tag;
use super::read::{Head, Reader};

type Result<T> = std::result::Result<T, DecodeError>;

/// Decodes a whole body as `T`.
pub(super) fn from_body<T: de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    let mut r = Reader::new(body);
    let value = T::deserialize(&mut r)?;
    r.finish()?;
    Ok(value)
}

fn unexpected<'a>(head: &'a Head<'a>) -> Unexpected<'a> {
    match *head {
        Head::Unit => Unexpected::Unit,
        Head::Bool(b) => Unexpected::Bool(b),
        Head::None | Head::Some => Unexpected::Option,
        Head::I8(v) => Unexpected::Signed(v.into()),
        Head::I16(v) => Unexpected::Signed(v.into()),
        Head::I32(v) => Unexpected::Signed(v.into()),
        Head::I64(v) => Unexpected::Signed(v),
        Head::I128(_) => Unexpected::Other("an i128"),
        Head::U8(v) => Unexpected::Unsigned(v.into()),
        Head::U16(v) => Unexpected::Unsigned(v.into()),
        Head::U32(v) => Unexpected::Unsigned(v.into()),
        Head::U64(v) => Unexpected::Unsigned(v),
        Head::U128(_) => Unexpected::Other("a u128"),
        Head::F32(v) => Unexpected::Float(v.into()),
        Head::F64(v) => Unexpected::Float(v),
        Head::Char(c) => Unexpected::Char(c),
        Head::Str(s) => Unexpected::Str(s),
        Head::Bytes(b) => Unexpected::Bytes(b),
        Head::UnitStruct(_) => Unexpected::Other("a unit struct"),
        Head::UnitVariant(..) => Unexpected::UnitVariant,
        Head::NewtypeStruct(_) => Unexpected::NewtypeStruct,
        Head::NewtypeVariant(..) => Unexpected::NewtypeVariant,
        Head::Seq(_) | Head::Run(_) => Unexpected::Seq,
        Head::Tuple(_) => Unexpected::Other("a tuple"),
        Head::TupleStruct(..) => Unexpected::Other("a tuple struct"),
        Head::TupleVariant(..) => Unexpected::TupleVariant,
        Head::Map(_) => Unexpected::Map,
        Head::Struct(..) => Unexpected::Other("a struct"),
        Head::StructVariant(..) => Unexpected::StructVariant,
    }
}

impl<'de> Reader<'de> {
    /// Visits the value whose head was just read.
    fn visit<V: Visitor<'de>>(&mut self, head: Head<'de>, visitor: V) -> Result<V::Value> {
        match head {
            Head::Unit | Head::UnitStruct(_) => visitor.visit_unit(),
            Head::Bool(v) => visitor.visit_bool(v),
            Head::None => visitor.visit_none(),
            Head::Some => {
                self.enter()?;
                let value = visitor.visit_some(&mut *self)?;
                self.leave();
                Ok(value)
            }
            Head::I8(v) => visitor.visit_i8(v),
            Head::I16(v) => visitor.visit_i16(v),
            Head::I32(v) => visitor.visit_i32(v),
            Head::I64(v) => visitor.visit_i64(v),
            Head::I128(v) => visitor.visit_i128(v),
            Head::U8(v) => visitor.visit_u8(v),
            Head::U16(v) => visitor.visit_u16(v),
            Head::U32(v) => visitor.visit_u32(v),
            Head::U64(v) => visitor.visit_u64(v),
            Head::U128(v) => visitor.visit_u128(v),
            Head::F32(v) => visitor.visit_f32(v),
            Head::F64(v) => visitor.visit_f64(v),
            Head::Char(v) => visitor.visit_char(v),
            Head::Str(v) => visitor.visit_borrowed_str(v),
            Head::Bytes(v) => visitor.visit_borrowed_bytes(v),
            // As a self-describing format without enums does: a unit variant is its name, a
            // variant with data a one-entry map from its name to the data.
            Head::UnitVariant(_, name) => visitor.visit_borrowed_str(name),
            // Transparent, so `Content` (untagged, flatten) and `serde_json::Value` take it.
            Head::NewtypeStruct(_) => {
                self.enter()?;
                let value = de::Deserializer::deserialize_any(&mut *self, visitor)?;
                self.leave();
                Ok(value)
            }
            Head::NewtypeVariant(_, name) => self.variant_map(name, Body::Value, visitor),
            Head::TupleVariant(_, name, n) => self.variant_map(name, Body::Items(n), visitor),
            Head::StructVariant(_, name, n) => self.variant_map(name, Body::Fields(n), visitor),
            Head::Seq(n) | Head::Tuple(n) | Head::TupleStruct(_, n) => self.items(n, visitor),
            Head::Map(n) => self.entries(n, visitor),
            Head::Struct(_, n) => self.fields(n, visitor),
            Head::Run(_) => Err(self.malformed("a run of bytes outside a list")),
        }
    }

    /// The items of a list, one level deeper; all of them must be read.
    fn items<V: Visitor<'de>>(&mut self, n: usize, visitor: V) -> Result<V::Value> {
        self.enter()?;
        let mut items = Items {
            r: self,
            left: n,
            run: &[],
        };
        let value = visitor.visit_seq(&mut items)?;
        let unread = items.left + items.run.len();
        if unread > 0 {
            return Err(de::Error::custom(format!(
                "the stored list has {n} items, the type reads only {}",
                n - unread
            )));
        }
        self.leave();
        Ok(value)
    }

    fn entries<V: Visitor<'de>>(&mut self, n: usize, visitor: V) -> Result<V::Value> {
        self.enter()?;
        let mut entries = Entries { r: self, left: n };
        let value = visitor.visit_map(&mut entries)?;
        if entries.left > 0 {
            return Err(de::Error::custom(format!(
                "the stored map has {n} entries, the type reads only {}",
                n - entries.left
            )));
        }
        self.leave();
        Ok(value)
    }

    fn fields<V: Visitor<'de>>(&mut self, n: usize, visitor: V) -> Result<V::Value> {
        self.enter()?;
        let mut fields = Fields { r: self, left: n };
        let value = visitor.visit_map(&mut fields)?;
        if fields.left > 0 {
            return Err(de::Error::custom(format!(
                "the stored struct has {n} fields, the type reads only {}",
                n - fields.left
            )));
        }
        self.leave();
        Ok(value)
    }

    fn variant_map<V: Visitor<'de>>(
        &mut self,
        name: &'de str,
        body: Body,
        visitor: V,
    ) -> Result<V::Value> {
        let mut map = VariantMap {
            r: self,
            name,
            body,
            state: 0,
        };
        let value = visitor.visit_map(&mut map)?;
        if map.state != 2 {
            return Err(de::Error::custom(format!(
                "the type did not read the data of the stored variant `{name}`"
            )));
        }
        Ok(value)
    }
}

impl<'de> de::Deserializer<'de> for &mut Reader<'de> {
    type Error = DecodeError;

    fn is_human_readable(&self) -> bool {
        true
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        let head = self.head()?;
        self.visit(head, visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.peek() {
            Some(tag::NONE) | Some(tag::SOME) => self.deserialize_any(visitor),
            // A value written as `T` read as `Option<T>`. Counted as a level: this consumes
            // nothing, so a type that nests options and newtypes around itself
            // (`struct Link(Option<Box<Link>>)`) would otherwise recurse until the stack ends.
            _ => {
                self.enter()?;
                let value = visitor.visit_some(&mut *self)?;
                self.leave();
                Ok(value)
            }
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        if self.peek() == Some(tag::NEWTYPE_STRUCT) {
            self.head()?;
            self.enter()?;
            let value = visitor.visit_newtype_struct(&mut *self)?;
            self.leave();
            Ok(value)
        } else {
            // A value written as `T` read as a newtype around `T` (a level, as above).
            self.enter()?;
            let value = visitor.visit_newtype_struct(&mut *self)?;
            self.leave();
            Ok(value)
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        let head = self.head()?;
        let (index, name, shape) = match head {
            Head::UnitVariant(i, name) => (Some(i), name, Shape::Unit),
            Head::NewtypeVariant(i, name) => (Some(i), name, Shape::Newtype),
            Head::TupleVariant(i, name, n) => (Some(i), name, Shape::Tuple(n)),
            Head::StructVariant(i, name, n) => (Some(i), name, Shape::Struct(n)),
            // A unit variant written by its name.
            Head::Str(name) => (None, name, Shape::Unit),
            other => {
                return Err(de::Error::invalid_type(unexpected(&other), &visitor));
            }
        };
        visitor.visit_enum(Enum {
            r: self,
            index,
            name,
            shape,
        })
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.skip()?;
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

/// A list's items; a run of `u8` is handed out one byte at a time.
struct Items<'a, 'de> {
    r: &'a mut Reader<'de>,
    left: usize,
    run: &'de [u8],
}

impl<'de> de::SeqAccess<'de> for Items<'_, 'de> {
    type Error = DecodeError;

    #[inline]
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if let Some((&b, rest)) = self.run.split_first() {
            self.run = rest;
            return seed.deserialize(b.into_deserializer()).map(Some);
        }
        if self.left == 0 {
            return Ok(None);
        }
        if self.r.peek() == Some(tag::U8_RUN) {
            if let Head::Run(bytes) = self.r.item_head()? {
                self.left = self.r.run_fits(bytes, self.left)?;
                if let Some((&b, rest)) = bytes.split_first() {
                    self.run = rest;
                    return seed.deserialize(b.into_deserializer()).map(Some);
                }
            }
            return Err(self.r.malformed("a broken run of bytes"));
        }
        self.left -= 1;
        seed.deserialize(&mut *self.r).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left + self.run.len())
    }
}

/// A map's entries: keys and values are values.
struct Entries<'a, 'de> {
    r: &'a mut Reader<'de>,
    left: usize,
}

impl<'de> de::MapAccess<'de> for Entries<'_, 'de> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.r).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(&mut *self.r)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

/// A struct's fields: each key is a bare name.
struct Fields<'a, 'de> {
    r: &'a mut Reader<'de>,
    left: usize,
}

impl<'de> de::MapAccess<'de> for Fields<'_, 'de> {
    type Error = DecodeError;

    #[inline]
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let name = self.r.str()?;
        seed.deserialize(BorrowedStrDeserializer::new(name))
            .map(Some)
    }

    #[inline]
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(&mut *self.r)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

/// What follows a variant's head.
#[derive(Clone, Copy)]
enum Body {
    Value,
    Items(usize),
    Fields(usize),
}

/// A variant with data seen through `deserialize_any`: `{name: data}`.
struct VariantMap<'a, 'de> {
    r: &'a mut Reader<'de>,
    name: &'de str,
    body: Body,
    state: u8,
}

impl<'de> de::MapAccess<'de> for VariantMap<'_, 'de> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if self.state != 0 {
            return Ok(None);
        }
        self.state = 1;
        seed.deserialize(BorrowedStrDeserializer::new(self.name))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        if self.state != 1 {
            return Err(de::Error::custom("a variant's data was read twice"));
        }
        self.state = 2;
        seed.deserialize(BodyOf {
            r: &mut *self.r,
            body: self.body,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(usize::from(self.state == 0))
    }
}

/// The data of a variant, as a value of its own (one level below the variant).
struct BodyOf<'a, 'de> {
    r: &'a mut Reader<'de>,
    body: Body,
}

impl<'de> BodyOf<'_, 'de> {
    /// A newtype variant's value, one level down.
    fn value<T>(self, f: impl FnOnce(&mut Reader<'de>) -> Result<T>) -> Result<T> {
        self.r.enter()?;
        let value = f(&mut *self.r)?;
        self.r.leave();
        Ok(value)
    }
}

impl<'de> de::Deserializer<'de> for BodyOf<'_, 'de> {
    type Error = DecodeError;

    fn is_human_readable(&self) -> bool {
        true
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.body {
            Body::Value => self.value(|r| de::Deserializer::deserialize_any(r, visitor)),
            Body::Items(n) => self.r.items(n, visitor),
            Body::Fields(n) => self.r.fields(n, visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.body {
            Body::Value => self.value(|r| de::Deserializer::deserialize_option(r, visitor)),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        match self.body {
            Body::Value => {
                self.value(|r| de::Deserializer::deserialize_newtype_struct(r, name, visitor))
            }
            _ => visitor.visit_newtype_struct(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        match self.body {
            Body::Value => {
                self.value(|r| de::Deserializer::deserialize_enum(r, name, variants, visitor))
            }
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.body {
            Body::Value => self.value(|r| de::Deserializer::deserialize_ignored_any(r, visitor)),
            _ => self.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

/// The shape a stored variant has.
#[derive(Clone, Copy)]
enum Shape {
    Unit,
    Newtype,
    Tuple(usize),
    Struct(usize),
}

impl Shape {
    fn unexpected(self) -> Unexpected<'static> {
        match self {
            Shape::Unit => Unexpected::UnitVariant,
            Shape::Newtype => Unexpected::NewtypeVariant,
            Shape::Tuple(_) => Unexpected::TupleVariant,
            Shape::Struct(_) => Unexpected::StructVariant,
        }
    }
}

/// A variant read through `deserialize_enum`.
struct Enum<'a, 'de> {
    r: &'a mut Reader<'de>,
    index: Option<u32>,
    name: &'de str,
    shape: Shape,
}

impl<'de, 'a> de::EnumAccess<'de> for Enum<'a, 'de> {
    type Error = DecodeError;
    type Variant = Enum<'a, 'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self)> {
        let id = seed.deserialize(VariantId {
            index: self.index,
            name: self.name,
        })?;
        Ok((id, self))
    }
}

impl<'de> de::VariantAccess<'de> for Enum<'_, 'de> {
    type Error = DecodeError;

    fn unit_variant(self) -> Result<()> {
        match self.shape {
            Shape::Unit => Ok(()),
            other => Err(de::Error::invalid_type(
                other.unexpected(),
                &"a unit variant",
            )),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value> {
        match self.shape {
            Shape::Newtype => {
                self.r.enter()?;
                let value = seed.deserialize(&mut *self.r)?;
                self.r.leave();
                Ok(value)
            }
            other => Err(de::Error::invalid_type(
                other.unexpected(),
                &"a newtype variant",
            )),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value> {
        match self.shape {
            Shape::Tuple(n) => self.r.items(n, visitor),
            other => Err(de::Error::invalid_type(
                other.unexpected(),
                &"a tuple variant",
            )),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        match self.shape {
            Shape::Struct(n) => self.r.fields(n, visitor),
            other => Err(de::Error::invalid_type(
                other.unexpected(),
                &"a struct variant",
            )),
        }
    }
}

/// A variant's identifier: its name, or its index to a visitor that asks for an integer.
struct VariantId<'de> {
    index: Option<u32>,
    name: &'de str,
}

impl<'de> VariantId<'de> {
    fn by_index<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.index {
            Some(i) => visitor.visit_u32(i),
            None => visitor.visit_borrowed_str(self.name),
        }
    }
}

impl<'de> de::Deserializer<'de> for VariantId<'de> {
    type Error = DecodeError;

    fn is_human_readable(&self) -> bool {
        true
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_borrowed_str(self.name)
    }

    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.by_index(visitor)
    }

    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.by_index(visitor)
    }

    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.by_index(visitor)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.by_index(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}
