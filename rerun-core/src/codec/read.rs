//! Reading a version-2 body: one value's head at a time, every length checked against the
//! bytes that are left, nesting counted. Shared by the decoder, the renderer and the
//! round-trip comparison; nothing here panics or allocates on behalf of the input.

use super::error::DecodeError;
use super::format::{self, tag, VarintError, MAX_DEPTH};

/// What one tag and the fixed data after it say. Containers carry their item count; their
/// items follow in the input.
#[derive(Clone, Copy, Debug)]
pub(super) enum Head<'de> {
    Unit,
    Bool(bool),
    None,
    Some,
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    I128(i128),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    U128(u128),
    F32(f32),
    F64(f64),
    Char(char),
    Str(&'de str),
    Bytes(&'de [u8]),
    UnitStruct(&'de str),
    UnitVariant(u32, &'de str),
    NewtypeStruct(&'de str),
    NewtypeVariant(u32, &'de str),
    Seq(usize),
    Tuple(usize),
    TupleStruct(&'de str, usize),
    TupleVariant(u32, &'de str, usize),
    Map(usize),
    Struct(&'de str, usize),
    StructVariant(u32, &'de str, usize),
    /// Only as items of a list: this many `u8` items.
    Run(&'de [u8]),
}

/// A cursor over a body.
pub(super) struct Reader<'de> {
    input: &'de [u8],
    body_len: usize,
    depth: usize,
}

impl<'de> Reader<'de> {
    pub(super) fn new(body: &'de [u8]) -> Reader<'de> {
        Reader {
            input: body,
            body_len: body.len(),
            depth: 0,
        }
    }

    /// The bytes not read yet.
    #[inline]
    pub(super) fn rest(&self) -> &'de [u8] {
        self.input
    }

    /// The next tag, without reading it.
    #[inline]
    pub(super) fn peek(&self) -> Option<u8> {
        self.input.first().copied()
    }

    /// An error about the body itself, with where in it.
    #[cold]
    pub(super) fn malformed(&self, what: impl std::fmt::Display) -> DecodeError {
        DecodeError::malformed(format!(
            "{what} at byte {} of the {}-byte result",
            self.body_len - self.input.len(),
            self.body_len
        ))
    }

    /// The whole body was one value.
    pub(super) fn finish(&self) -> Result<(), DecodeError> {
        if self.input.is_empty() {
            Ok(())
        } else {
            Err(self.malformed(format!("{} bytes follow the value", self.input.len())))
        }
    }

    #[inline]
    pub(super) fn enter(&mut self) -> Result<(), DecodeError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.malformed(format!("values nest deeper than {MAX_DEPTH} levels")));
        }
        self.depth += 1;
        Ok(())
    }

    #[inline]
    pub(super) fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, DecodeError> {
        match self.input.split_first() {
            Some((&b, rest)) => {
                self.input = rest;
                Ok(b)
            }
            None => Err(self.malformed("the body ends where a value should start")),
        }
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'de [u8], DecodeError> {
        match self.input.split_at_checked(n) {
            Some((taken, rest)) => {
                self.input = rest;
                Ok(taken)
            }
            None => Err(self.malformed(format!(
                "{n} bytes are promised but only {} are left",
                self.input.len()
            ))),
        }
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(bytes);
        Ok(a)
    }

    #[cold]
    fn varint_error(&self, e: VarintError) -> DecodeError {
        match e {
            VarintError::Truncated => self.malformed("the body ends inside a number"),
            VarintError::Invalid => {
                self.malformed("a number is too wide for its type or not in its shortest form")
            }
        }
    }

    #[inline]
    fn varint64(&mut self, bits: u32) -> Result<u64, DecodeError> {
        let mut input = self.input;
        match format::take_varint64(&mut input, bits) {
            Ok(v) => {
                self.input = input;
                Ok(v)
            }
            Err(e) => Err(self.varint_error(e)),
        }
    }

    fn varint128(&mut self) -> Result<u128, DecodeError> {
        let mut input = self.input;
        match format::take_varint(&mut input, 128) {
            Ok(v) => {
                self.input = input;
                Ok(v)
            }
            Err(e) => Err(self.varint_error(e)),
        }
    }

    /// A count of things that take at least `min_size` bytes each: more than the bytes left
    /// can hold is refused before anyone sizes a buffer by it.
    #[inline]
    fn count(&mut self, min_size: usize, what: &str) -> Result<usize, DecodeError> {
        let n = self.varint64(64)?;
        let left = self.input.len();
        match usize::try_from(n) {
            Ok(n) if n.saturating_mul(min_size) <= left => Ok(n),
            _ => Err(self.malformed(format!("{what} {n} cannot fit in the {left} bytes left"))),
        }
    }

    /// A length-prefixed UTF-8 string (names and string values).
    #[inline]
    pub(super) fn str(&mut self) -> Result<&'de str, DecodeError> {
        let n = self.count(1, "a string of length")?;
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes).map_err(|_| self.malformed("a string is not valid UTF-8"))
    }

    #[inline]
    fn index(&mut self) -> Result<u32, DecodeError> {
        let v = self.varint64(32)?;
        u32::try_from(v).map_err(|_| self.malformed("a variant index does not fit in 32 bits"))
    }

    /// Reads the head of a value that is not a list item.
    #[inline]
    pub(super) fn head(&mut self) -> Result<Head<'de>, DecodeError> {
        let t = self.byte()?;
        self.head_of(t)
    }

    /// Reads the head of a list item, which may be a run of `u8`.
    #[inline]
    pub(super) fn item_head(&mut self) -> Result<Head<'de>, DecodeError> {
        let t = self.byte()?;
        if t == tag::U8_RUN {
            let n = self.count(1, "a run of bytes of length")?;
            if n == 0 {
                return Err(self.malformed("an empty run of bytes"));
            }
            return Ok(Head::Run(self.take(n)?));
        }
        self.head_of(t)
    }

    fn head_of(&mut self, t: u8) -> Result<Head<'de>, DecodeError> {
        Ok(match t {
            tag::UNIT => Head::Unit,
            tag::FALSE => Head::Bool(false),
            tag::TRUE => Head::Bool(true),
            tag::NONE => Head::None,
            tag::SOME => Head::Some,
            tag::I8 => Head::I8(self.byte()? as i8),
            tag::I16 => Head::I16(self.zigzag(16)? as i16),
            tag::I32 => Head::I32(self.zigzag(32)? as i32),
            tag::I64 => Head::I64(self.zigzag(64)?),
            tag::I128 => Head::I128(format::unzigzag128(self.varint128()?)),
            tag::U8 => Head::U8(self.byte()?),
            tag::U16 => Head::U16(self.varint64(16)? as u16),
            tag::U32 => Head::U32(self.varint64(32)? as u32),
            tag::U64 => Head::U64(self.varint64(64)?),
            tag::U128 => Head::U128(self.varint128()?),
            tag::F32 => Head::F32(f32::from_bits(u32::from_le_bytes(self.array()?))),
            tag::F64 => Head::F64(f64::from_bits(u64::from_le_bytes(self.array()?))),
            tag::CHAR => {
                let v = self.varint64(32)?;
                match u32::try_from(v).ok().and_then(char::from_u32) {
                    Some(c) => Head::Char(c),
                    None => return Err(self.malformed(format!("{v:#x} is not a char"))),
                }
            }
            tag::STR => Head::Str(self.str()?),
            tag::BYTES => {
                let n = self.count(1, "a byte string of length")?;
                Head::Bytes(self.take(n)?)
            }
            tag::UNIT_STRUCT => Head::UnitStruct(self.str()?),
            tag::UNIT_VARIANT => {
                let index = self.index()?;
                Head::UnitVariant(index, self.str()?)
            }
            tag::NEWTYPE_STRUCT => Head::NewtypeStruct(self.str()?),
            tag::NEWTYPE_VARIANT => {
                let index = self.index()?;
                Head::NewtypeVariant(index, self.str()?)
            }
            tag::SEQ => Head::Seq(self.count(1, "a sequence of length")?),
            tag::TUPLE => Head::Tuple(self.count(1, "a tuple of length")?),
            tag::TUPLE_STRUCT => {
                let name = self.str()?;
                Head::TupleStruct(name, self.count(1, "a tuple struct of length")?)
            }
            tag::TUPLE_VARIANT => {
                let index = self.index()?;
                let name = self.str()?;
                Head::TupleVariant(index, name, self.count(1, "a tuple variant of length")?)
            }
            // A key and a value; a field name's length and a value.
            tag::MAP => Head::Map(self.count(2, "a map of length")?),
            tag::STRUCT => {
                let name = self.str()?;
                Head::Struct(name, self.count(2, "a struct with field count")?)
            }
            tag::STRUCT_VARIANT => {
                let index = self.index()?;
                let name = self.str()?;
                Head::StructVariant(
                    index,
                    name,
                    self.count(2, "a struct variant with field count")?,
                )
            }
            tag::U8_RUN => return Err(self.malformed("a run of bytes outside a list")),
            other => return Err(self.malformed(format!("unknown tag {other:#04x}"))),
        })
    }

    #[inline]
    fn zigzag(&mut self, bits: u32) -> Result<i64, DecodeError> {
        // Zigzag of an n-bit integer takes n bits.
        Ok(format::unzigzag64(self.varint64(bits)?))
    }

    /// Reads and discards one value (without recursing: a stack of what is left at each
    /// level).
    pub(super) fn skip(&mut self) -> Result<(), DecodeError> {
        enum Left {
            Values(usize),
            Items(usize),
            Fields(usize),
        }
        let mut stack: Vec<Left> = Vec::new();
        let mut head = self.head()?;
        loop {
            match head {
                Head::Some | Head::NewtypeStruct(_) | Head::NewtypeVariant(..) => {
                    self.enter()?;
                    stack.push(Left::Values(1));
                }
                Head::Seq(n)
                | Head::Tuple(n)
                | Head::TupleStruct(_, n)
                | Head::TupleVariant(_, _, n) => {
                    self.enter()?;
                    stack.push(Left::Items(n));
                }
                Head::Map(n) => {
                    self.enter()?;
                    // Checked against the bytes left, so it cannot overflow.
                    stack.push(Left::Values(n.saturating_mul(2)));
                }
                Head::Struct(_, n) | Head::StructVariant(_, _, n) => {
                    self.enter()?;
                    stack.push(Left::Fields(n));
                }
                _ => {}
            }
            head = loop {
                let Some(top) = stack.last_mut() else {
                    return Ok(());
                };
                match top {
                    Left::Values(0) | Left::Items(0) | Left::Fields(0) => {
                        stack.pop();
                        self.leave();
                    }
                    Left::Values(n) => {
                        *n -= 1;
                        break self.head()?;
                    }
                    Left::Fields(n) => {
                        *n -= 1;
                        self.str()?;
                        break self.head()?;
                    }
                    Left::Items(n) => match self.item_head()? {
                        Head::Run(bytes) => *n = self.run_fits(bytes, *n)?,
                        item => {
                            *n -= 1;
                            break item;
                        }
                    },
                }
            };
        }
    }

    /// A run of `bytes.len()` items inside a list with `left` items to go: how many are left
    /// after it.
    #[inline]
    pub(super) fn run_fits(&self, bytes: &[u8], left: usize) -> Result<usize, DecodeError> {
        left.checked_sub(bytes.len()).ok_or_else(|| {
            self.malformed(format!(
                "a run of {} bytes in a list with {left} items left",
                bytes.len()
            ))
        })
    }
}
