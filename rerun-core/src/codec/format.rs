//! The constants of the format: envelope layout, value tags, limits, and the varint helpers
//! shared by the encoder, the decoder and the renderer.

/// The first byte of every envelope.
pub(super) const MAGIC: u8 = b'R';
/// Magic, version, CRC-32.
pub(super) const HEADER: usize = 6;
/// The version that stored serde_json bodies.
pub(super) const VERSION_JSON: u8 = 1;
/// The version of the tagged binary body.
pub(super) const VERSION_BINARY: u8 = 2;

/// How deeply values may nest (options, newtypes, sequences, maps, structs, variants).
///
/// The encoder refuses deeper values and the decoder refuses deeper bodies, so everything
/// `encode` writes decodes, and a corrupt body cannot exhaust the stack. Decoding recurses
/// through the result type's `Deserialize` once per level; in an unoptimized build that is a
/// few KiB a level, and 256 levels stay well inside the 2 MiB stack of a spawned thread (or
/// a tokio worker).
pub(crate) const MAX_DEPTH: usize = 256;

/// One byte per value says what follows. See the table in the module docs.
pub(super) mod tag {
    pub(crate) const UNIT: u8 = 0x01;
    pub(crate) const FALSE: u8 = 0x02;
    pub(crate) const TRUE: u8 = 0x03;
    pub(crate) const NONE: u8 = 0x04;
    pub(crate) const SOME: u8 = 0x05;
    pub(crate) const I8: u8 = 0x06;
    pub(crate) const I16: u8 = 0x07;
    pub(crate) const I32: u8 = 0x08;
    pub(crate) const I64: u8 = 0x09;
    pub(crate) const I128: u8 = 0x0a;
    pub(crate) const U8: u8 = 0x0b;
    pub(crate) const U16: u8 = 0x0c;
    pub(crate) const U32: u8 = 0x0d;
    pub(crate) const U64: u8 = 0x0e;
    pub(crate) const U128: u8 = 0x0f;
    pub(crate) const F32: u8 = 0x10;
    pub(crate) const F64: u8 = 0x11;
    pub(crate) const CHAR: u8 = 0x12;
    pub(crate) const STR: u8 = 0x13;
    pub(crate) const BYTES: u8 = 0x14;
    pub(crate) const UNIT_STRUCT: u8 = 0x15;
    pub(crate) const UNIT_VARIANT: u8 = 0x16;
    pub(crate) const NEWTYPE_STRUCT: u8 = 0x17;
    pub(crate) const NEWTYPE_VARIANT: u8 = 0x18;
    pub(crate) const SEQ: u8 = 0x19;
    pub(crate) const TUPLE: u8 = 0x1a;
    pub(crate) const TUPLE_STRUCT: u8 = 0x1b;
    pub(crate) const TUPLE_VARIANT: u8 = 0x1c;
    pub(crate) const MAP: u8 = 0x1d;
    pub(crate) const STRUCT: u8 = 0x1e;
    pub(crate) const STRUCT_VARIANT: u8 = 0x1f;
    /// Only as an item of a list (seq, tuple, tuple struct, tuple variant): that many `u8`
    /// items, one raw byte each.
    pub(crate) const U8_RUN: u8 = 0x20;
}

/// Appends `v` as an unsigned LEB128 varint (7 bits a byte, low bits first).
#[inline]
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends `v` as a varint; the common width, without 128-bit arithmetic.
#[inline]
pub(super) fn put_varint64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Zigzag: small magnitudes of either sign become small unsigned numbers.
#[inline]
pub(super) fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub(super) fn unzigzag64(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[inline]
pub(super) fn zigzag128(v: i128) -> u128 {
    ((v << 1) ^ (v >> 127)) as u128
}

#[inline]
pub(super) fn unzigzag128(v: u128) -> i128 {
    ((v >> 1) as i128) ^ -((v & 1) as i128)
}

/// Why a varint could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum VarintError {
    /// The input ended inside it.
    Truncated,
    /// It does not fit the width, or it is not in its shortest form.
    Invalid,
}

/// Reads a varint of at most `bits` bits in its shortest form from the front of `input`.
///
/// Each value has exactly one encoding, so a decoded body re-encodes to the same bytes.
#[inline]
pub(super) fn take_varint(input: &mut &[u8], bits: u32) -> Result<u128, VarintError> {
    let mut value: u128 = 0;
    let mut shift: u32 = 0;
    let mut rest = *input;
    loop {
        let Some((&byte, tail)) = rest.split_first() else {
            return Err(VarintError::Truncated);
        };
        rest = tail;
        let chunk = u128::from(byte & 0x7f);
        if shift >= bits || (shift > 0 && (chunk << shift) >> shift != chunk) {
            return Err(VarintError::Invalid);
        }
        value |= chunk << shift;
        if byte & 0x80 == 0 {
            // A last byte of zero after others is padding: not the shortest form.
            if byte == 0 && shift > 0 {
                return Err(VarintError::Invalid);
            }
            if bits < 128 && value >> bits != 0 {
                return Err(VarintError::Invalid);
            }
            *input = rest;
            return Ok(value);
        }
        shift += 7;
    }
}

/// [`take_varint`] for widths up to 64 bits, without 128-bit arithmetic.
#[inline]
pub(super) fn take_varint64(input: &mut &[u8], bits: u32) -> Result<u64, VarintError> {
    let mut value: u64 = 0;
    let mut shift: u32 = 0;
    let mut rest = *input;
    loop {
        let Some((&byte, tail)) = rest.split_first() else {
            return Err(VarintError::Truncated);
        };
        rest = tail;
        let chunk = u64::from(byte & 0x7f);
        if shift >= bits || (shift > 0 && (chunk << shift) >> shift != chunk) {
            return Err(VarintError::Invalid);
        }
        value |= chunk << shift;
        if byte & 0x80 == 0 {
            if byte == 0 && shift > 0 {
                return Err(VarintError::Invalid);
            }
            if bits < 64 && value >> bits != 0 {
                return Err(VarintError::Invalid);
            }
            *input = rest;
            return Ok(value);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_in_their_shortest_form() {
        for v in [0u128, 1, 127, 128, 300, u128::from(u64::MAX), u128::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut input = out.as_slice();
            assert_eq!(take_varint(&mut input, 128), Ok(v));
            assert!(input.is_empty());
            if let Ok(v64) = u64::try_from(v) {
                let mut out64 = Vec::new();
                put_varint64(&mut out64, v64);
                assert_eq!(out64, out);
                let mut input = out.as_slice();
                assert_eq!(take_varint64(&mut input, 64), Ok(v64));
            }
        }
        // Padded, too wide, truncated.
        assert_eq!(
            take_varint(&mut &[0x80, 0x00][..], 128),
            Err(VarintError::Invalid)
        );
        assert_eq!(
            take_varint64(&mut &[0x80, 0x00][..], 64),
            Err(VarintError::Invalid)
        );
        assert_eq!(
            take_varint64(&mut &[0x80, 0x02][..], 8),
            Err(VarintError::Invalid)
        );
        assert_eq!(
            take_varint64(&mut &[0xff; 11][..], 64),
            Err(VarintError::Invalid)
        );
        assert_eq!(
            take_varint(&mut &[0xff; 20][..], 128),
            Err(VarintError::Invalid)
        );
        assert_eq!(
            take_varint64(&mut &[0x80][..], 64),
            Err(VarintError::Truncated)
        );
        let mut max = Vec::new();
        put_varint(&mut max, u128::MAX);
        *max.last_mut().unwrap() += 1;
        assert_eq!(
            take_varint(&mut max.as_slice(), 128),
            Err(VarintError::Invalid)
        );
    }

    #[test]
    fn zigzag_is_exact_at_the_ends() {
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag64(zigzag64(v)), v);
        }
        for v in [0i128, -1, 1, i128::MIN, i128::MAX] {
            assert_eq!(unzigzag128(zigzag128(v)), v);
        }
        assert_eq!(zigzag64(-1), 1);
        assert_eq!(zigzag64(1), 2);
    }
}
