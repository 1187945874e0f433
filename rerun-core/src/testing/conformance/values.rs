//! Random keys of every `IntoKey` shape and random results of a zoo of serde shapes, for the
//! value-domain checks. Seeded, so a failure repeats.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::key::{IntoKey, KeyWriter};

/// A small deterministic generator (xorshift64*).
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, max: u64) -> Vec<u8> {
        let len = self.below(max + 1);
        // Small alphabets make collisions of naive encodings likely: hex digits, tags, `:`.
        let alphabet = b"\x00\x01\xab\xb1\x0f01:()sixbc";
        (0..len)
            .map(|_| {
                if self.below(2) == 0 {
                    alphabet[self.below(alphabet.len() as u64) as usize]
                } else {
                    self.next() as u8
                }
            })
            .collect()
    }
    fn text(&mut self, max: u64) -> String {
        let len = self.below(max + 1);
        let pieces = [
            "s", "i", "1", "2:", "(", ")", "x", "ab", "b1", "c", ":", "é", "\t", "\0",
        ];
        (0..len)
            .map(|_| pieces[self.below(pieces.len() as u64) as usize])
            .collect()
    }
}

/// A key value of any shape, compared as keys compare: integers by value whatever their width.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum KeyModel {
    Str(String),
    Int(i128),
    /// Only values above `i128::MAX` (smaller ones are `Int`).
    BigUint(u128),
    Bool(bool),
    Char(char),
    Bytes(Vec<u8>),
    Tuple(Vec<KeyModel>),
}

impl IntoKey for KeyModel {
    fn write_key(&self, w: &mut KeyWriter) {
        match self {
            KeyModel::Str(s) => w.str(s),
            KeyModel::Int(i) => w.int(*i),
            KeyModel::BigUint(u) => w.uint(*u),
            KeyModel::Bool(b) => w.bool(*b),
            KeyModel::Char(c) => w.char(*c),
            KeyModel::Bytes(b) => w.bytes(b),
            KeyModel::Tuple(parts) => w.tuple(|w| {
                for p in parts {
                    p.write_key(w);
                }
            }),
        }
    }
}

fn key(rng: &mut Rng, depth: u32) -> KeyModel {
    match rng.below(if depth > 2 { 7 } else { 8 }) {
        0 => KeyModel::Str(rng.text(6)),
        1 => KeyModel::Int(match rng.below(4) {
            0 => i128::MIN,
            1 => i128::from(rng.next() as i64),
            2 => i128::from(rng.below(20)),
            _ => -i128::from(rng.below(20)),
        }),
        2 => KeyModel::BigUint(u128::MAX - u128::from(rng.below(3))),
        3 => KeyModel::Bool(rng.below(2) == 0),
        4 => KeyModel::Char(char::from_u32(rng.below(0x3000) as u32).unwrap_or('x')),
        5 | 6 => KeyModel::Bytes(rng.bytes(4)),
        _ => KeyModel::Tuple((0..1 + rng.below(4)).map(|_| key(rng, depth + 1)).collect()),
    }
}

/// `n` random key values (some of them equal, on purpose).
pub(super) fn random_keys(seed: u64, n: usize) -> Vec<KeyModel> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| key(&mut rng, 0)).collect()
}

/// A unit struct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Unit;

/// A newtype struct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Cents(pub(super) i64);

/// Every variant shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) enum Shape {
    Empty,
    One(f32),
    Pair(u8, Option<()>),
    Named {
        at: u128,
        note: Option<Option<String>>,
    },
}

/// Bytes that serialize as bytes (not as a sequence).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Blob(pub(super) Vec<u8>);

impl Serialize for Blob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Blob, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Blob;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Blob, E> {
                Ok(Blob(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Blob, E> {
                Ok(Blob(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Blob, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element()? {
                    out.push(b);
                }
                Ok(Blob(out))
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// A result of many serde shapes at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Zoo {
    pub(super) float: f64,
    pub(super) single: f32,
    pub(super) nested: Option<Option<Option<u8>>>,
    pub(super) unit_opt: Option<()>,
    pub(super) unit: Unit,
    pub(super) cents: Cents,
    pub(super) shapes: Vec<Shape>,
    pub(super) wide: (i128, u128),
    pub(super) by_pair: BTreeMap<(u8, i64), String>,
    pub(super) by_bytes: BTreeMap<Vec<u8>, f64>,
    pub(super) blob: Blob,
    pub(super) raw: Vec<u8>,
    pub(super) text: String,
    pub(super) letter: char,
}

impl Zoo {
    /// Whether every float of `other` has the same bits as this one's (`PartialEq` says NaN is
    /// not NaN, and -0.0 is 0.0).
    pub(super) fn same_bits(&self, other: &Zoo) -> bool {
        let shapes = |z: &Zoo| -> Vec<u32> {
            z.shapes
                .iter()
                .filter_map(|s| match s {
                    Shape::One(f) => Some(f.to_bits()),
                    _ => None,
                })
                .collect()
        };
        let keyed = |z: &Zoo| -> Vec<u64> { z.by_bytes.values().map(|f| f.to_bits()).collect() };
        self.float.to_bits() == other.float.to_bits()
            && self.single.to_bits() == other.single.to_bits()
            && shapes(self) == shapes(other)
            && keyed(self) == keyed(other)
    }
}

fn float(rng: &mut Rng) -> f64 {
    match rng.below(8) {
        0 => f64::NAN,
        1 => f64::from_bits(0x7ff8_0000_dead_beef), // a NaN with a payload
        2 => f64::INFINITY,
        3 => f64::NEG_INFINITY,
        4 => -0.0,
        5 => f64::from_bits(rng.below(1 << 52)), // subnormal
        6 => f64::MIN_POSITIVE,
        _ => f64::from_bits(rng.next()),
    }
}

/// `n` random results.
pub(super) fn random_results(seed: u64, n: usize) -> Vec<Zoo> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let shapes = (0..rng.below(4))
                .map(|_| match rng.below(4) {
                    0 => Shape::Empty,
                    1 => Shape::One(float(&mut rng) as f32),
                    2 => Shape::Pair(rng.next() as u8, (rng.below(2) == 0).then_some(())),
                    _ => Shape::Named {
                        at: u128::from(rng.next()) << 64 | u128::from(rng.next()),
                        note: match rng.below(3) {
                            0 => None,
                            1 => Some(None),
                            _ => Some(Some(rng.text(5))),
                        },
                    },
                })
                .collect();
            let nested = match rng.below(4) {
                0 => None,
                1 => Some(None),
                2 => Some(Some(None)),
                _ => Some(Some(Some(rng.next() as u8))),
            };
            Zoo {
                float: float(&mut rng),
                single: f32::from_bits(rng.next() as u32),
                nested,
                unit_opt: (rng.below(2) == 0).then_some(()),
                unit: Unit,
                cents: Cents(rng.next() as i64),
                shapes,
                wide: (
                    i128::MIN + i128::from(rng.below(3)),
                    u128::MAX - u128::from(rng.below(3)),
                ),
                by_pair: (0..rng.below(3))
                    .map(|_| ((rng.next() as u8, rng.next() as i64), rng.text(3)))
                    .collect(),
                by_bytes: (0..rng.below(3))
                    .map(|_| (rng.bytes(3), float(&mut rng)))
                    .collect(),
                blob: Blob(rng.bytes(8)),
                raw: rng.bytes(8),
                text: rng.text(8),
                letter: char::from_u32(rng.below(0x11_0000) as u32).unwrap_or('\u{fffd}'),
            }
        })
        .collect()
}
