//! Properties: arbitrary values of a zoo of types replay exactly (floats by their bits), and
//! arbitrary bytes never make decoding or rendering panic.

use std::collections::BTreeMap;
use std::fmt::Debug;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::format::HEADER;
use super::tests::Bytes;
use super::*;

/// Equality that tells floats apart by their bits (NaN payloads, `-0.0`).
trait Same {
    fn same(&self, other: &Self) -> bool;
}

macro_rules! same_by_eq {
    ($($t:ty),*) => { $(impl Same for $t { fn same(&self, o: &Self) -> bool { self == o } })* };
}

same_by_eq!(
    bool,
    i8,
    i16,
    i32,
    i64,
    i128,
    u8,
    u16,
    u32,
    u64,
    u128,
    char,
    String,
    (),
    Value,
    Bytes
);

impl Same for f32 {
    fn same(&self, o: &Self) -> bool {
        self.to_bits() == o.to_bits()
    }
}

impl Same for f64 {
    fn same(&self, o: &Self) -> bool {
        self.to_bits() == o.to_bits()
    }
}

impl<T: Same> Same for Option<T> {
    fn same(&self, o: &Self) -> bool {
        match (self, o) {
            (Some(a), Some(b)) => a.same(b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl<T: Same> Same for Vec<T> {
    fn same(&self, o: &Self) -> bool {
        self.len() == o.len() && self.iter().zip(o).all(|(a, b)| a.same(b))
    }
}

impl<T: Same, const N: usize> Same for [T; N] {
    fn same(&self, o: &Self) -> bool {
        self.iter().zip(o).all(|(a, b)| a.same(b))
    }
}

impl<K: Same, V: Same> Same for BTreeMap<K, V> {
    fn same(&self, o: &Self) -> bool {
        self.len() == o.len()
            && self
                .iter()
                .zip(o)
                .all(|((k1, v1), (k2, v2))| k1.same(k2) && v1.same(v2))
    }
}

macro_rules! same_tuple {
    ($(($($t:ident $i:tt),+)),*) => {$(
        impl<$($t: Same),+> Same for ($($t,)+) {
            fn same(&self, o: &Self) -> bool { $(self.$i.same(&o.$i))&&+ }
        }
    )*};
}

same_tuple!((A 0), (A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3), (A 0, B 1, C 2, D 3, E 4));
same_tuple!((A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7));
same_tuple!((A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9));

#[derive(Debug, Clone, Serialize, Deserialize)]
struct UnitS;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Newtype(f64);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TupleS(u8, String, f32, i128);

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Shapes {
    Unit,
    Newtype(f64),
    Tuple(u8, Option<()>, u128),
    Struct {
        a: Option<Option<f32>>,
        b: Vec<u8>,
        c: char,
    },
}

impl Same for UnitS {
    fn same(&self, _: &Self) -> bool {
        true
    }
}

impl Same for Newtype {
    fn same(&self, o: &Self) -> bool {
        self.0.same(&o.0)
    }
}

impl Same for TupleS {
    fn same(&self, o: &Self) -> bool {
        self.0 == o.0 && self.1 == o.1 && self.2.same(&o.2) && self.3 == o.3
    }
}

impl Same for Shapes {
    fn same(&self, o: &Self) -> bool {
        match (self, o) {
            (Shapes::Unit, Shapes::Unit) => true,
            (Shapes::Newtype(a), Shapes::Newtype(b)) => a.same(b),
            (Shapes::Tuple(a, b, c), Shapes::Tuple(x, y, z)) => a == x && b == y && c == z,
            (Shapes::Struct { a, b, c }, Shapes::Struct { a: x, b: y, c: z }) => {
                a.same(x) && b == y && c == z
            }
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum Untagged {
    Int(i64),
    Float(f64),
    Text(String),
    List(Vec<u8>),
    Rec { x: Option<f64>, y: (u8, bool) },
}

impl Same for Untagged {
    fn same(&self, o: &Self) -> bool {
        match (self, o) {
            (Untagged::Int(a), Untagged::Int(b)) => a == b,
            (Untagged::Float(a), Untagged::Float(b)) => a.same(b),
            (Untagged::Text(a), Untagged::Text(b)) => a == b,
            (Untagged::List(a), Untagged::List(b)) => a == b,
            (Untagged::Rec { x, y }, Untagged::Rec { x: a, y: b }) => x.same(a) && y == b,
            _ => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Inner {
    s: String,
    v: Vec<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type")]
enum Tagged {
    A { x: f64, y: Option<Option<u8>> },
    B(Inner),
    C,
}

impl Same for Tagged {
    fn same(&self, o: &Self) -> bool {
        match (self, o) {
            (Tagged::A { x, y }, Tagged::A { x: a, y: b }) => x.same(a) && y == b,
            (Tagged::B(a), Tagged::B(b)) => a == b,
            (Tagged::C, Tagged::C) => true,
            _ => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Flat {
    id: u32,
    #[serde(flatten)]
    inner: Inner,
    #[serde(flatten)]
    extra: BTreeMap<String, i64>,
}

same_by_eq!(Flat);

fn f64s() -> impl Strategy<Value = f64> {
    prop_oneof![
        select(vec![
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
            f64::EPSILON,
            0.1,
        ]),
        // NaN, any sign and payload.
        (any::<bool>(), 1u64..1 << 52)
            .prop_map(|(s, m)| f64::from_bits(u64::from(s) << 63 | 0x7ff0_0000_0000_0000 | m)),
        // Subnormal.
        (any::<bool>(), 1u64..1 << 52).prop_map(|(s, m)| f64::from_bits(u64::from(s) << 63 | m)),
        // Any bits (mostly normal).
        any::<u64>().prop_map(f64::from_bits),
    ]
}

fn f32s() -> impl Strategy<Value = f32> {
    prop_oneof![
        select(vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            f32::MAX
        ]),
        (any::<bool>(), 1u32..1 << 23)
            .prop_map(|(s, m)| f32::from_bits(u32::from(s) << 31 | 0x7f80_0000 | m)),
        (any::<bool>(), 1u32..1 << 23).prop_map(|(s, m)| f32::from_bits(u32::from(s) << 31 | m)),
        any::<u32>().prop_map(f32::from_bits),
    ]
}

fn i128s() -> impl Strategy<Value = i128> {
    prop_oneof![select(vec![i128::MIN, i128::MAX, 0, -1]), any::<i128>()]
}

fn u128s() -> impl Strategy<Value = u128> {
    prop_oneof![
        select(vec![0, u128::MAX, u128::from(u64::MAX) + 1]),
        any::<u128>()
    ]
}

/// Strings biased towards NUL, control characters, quotes and line separators.
fn strings() -> impl Strategy<Value = String> {
    let odd = select(vec![
        '\0', '\n', '\t', '\r', '\u{1b}', '\u{7f}', '\u{85}', '\u{2028}', '"', '\\', '\u{202e}',
    ]);
    vec(prop_oneof![any::<char>(), odd], 0..16).prop_map(String::from_iter)
}

fn shapes() -> impl Strategy<Value = Shapes> {
    prop_oneof![
        Just(Shapes::Unit),
        f64s().prop_map(Shapes::Newtype),
        (any::<u8>(), any::<Option<()>>(), u128s()).prop_map(|(a, b, c)| Shapes::Tuple(a, b, c)),
        (
            proptest::option::of(proptest::option::of(f32s())),
            vec(any::<u8>(), 0..8),
            any::<char>()
        )
            .prop_map(|(a, b, c)| Shapes::Struct { a, b, c }),
    ]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        f64s()
            .prop_filter("JSON holds finite floats", |f| f.is_finite())
            .prop_map(Value::from),
        strings().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(strings(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn inner() -> impl Strategy<Value = Inner> {
    (strings(), vec(any::<i32>(), 0..6)).prop_map(|(s, v)| Inner { s, v })
}

fn untagged() -> impl Strategy<Value = Untagged> {
    prop_oneof![
        any::<i64>().prop_map(Untagged::Int),
        f64s().prop_map(Untagged::Float),
        strings().prop_map(Untagged::Text),
        vec(any::<u8>(), 0..8).prop_map(Untagged::List),
        (proptest::option::of(f64s()), any::<(u8, bool)>())
            .prop_map(|(x, y)| Untagged::Rec { x, y }),
    ]
}

fn tagged() -> impl Strategy<Value = Tagged> {
    prop_oneof![
        (f64s(), any::<Option<Option<u8>>>()).prop_map(|(x, y)| Tagged::A { x, y }),
        inner().prop_map(Tagged::B),
        Just(Tagged::C),
    ]
}

fn flat() -> impl Strategy<Value = Flat> {
    (
        any::<u32>(),
        inner(),
        btree_map("x_[a-z]{0,4}", any::<i64>(), 0..4),
    )
        .prop_map(|(id, inner, extra)| Flat { id, inner, extra })
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// Encodes with the check, decodes, compares exactly; the bytes also decode without their
/// type and render on one line.
fn check<T: Serialize + DeserializeOwned + Same + Debug>(value: &T) -> Result<(), TestCaseError> {
    let bytes = encode_checked(value).map_err(fail)?;
    let back: T = decode(&bytes).map_err(fail)?;
    prop_assert!(back.same(value), "{:?} came back as {:?}", value, back);
    decode::<IgnoredAny>(&bytes).map_err(fail)?;
    let text = render(&bytes).map_err(fail)?;
    prop_assert!(!text.chars().any(char::is_control), "{}", text);
    Ok(())
}

fn sealed(body: &[u8]) -> Vec<u8> {
    let mut out = vec![b'R', 2];
    out.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Decodes and renders as many types as it can think of; only panics matter.
fn poke(bytes: &[u8]) {
    let _ = decode::<Value>(bytes);
    let _ = decode::<IgnoredAny>(bytes);
    let _ = decode::<Vec<u8>>(bytes);
    let _ = decode::<Bytes>(bytes);
    let _ = decode::<String>(bytes);
    let _ = decode::<(u8, char, Option<Option<()>>)>(bytes);
    let _ = decode::<Vec<Shapes>>(bytes);
    let _ = decode::<BTreeMap<String, f64>>(bytes);
    let _ = decode::<Untagged>(bytes);
    let _ = decode::<Tagged>(bytes);
    let _ = decode::<Flat>(bytes);
    let _ = decode::<(i128, u128, f32)>(bytes);
    let _ = render(bytes);
    let _ = render_limited(bytes, 8);
}

proptest! {
    #[test]
    fn floats_of_every_class_round_trip_bit_for_bit(
        a in vec(f64s(), 0..16),
        b in vec(f32s(), 0..16),
        c in proptest::option::of(f64s()),
        d in f64s(),
    ) {
        check(&a)?;
        check(&b)?;
        check(&c)?;
        check(&d)?;
    }

    #[test]
    fn nested_options_round_trip(
        a in any::<Option<Option<Option<i32>>>>(),
        b in any::<Option<()>>(),
        c in any::<Option<Option<()>>>(),
        d in proptest::option::of(proptest::option::of(f64s())),
    ) {
        check(&a)?;
        check(&b)?;
        check(&c)?;
        check(&d)?;
    }

    #[test]
    fn structs_and_enums_of_every_shape_round_trip(
        s in vec(shapes(), 0..8),
        t in (any::<u8>(), strings(), f32s(), i128s()),
        n in f64s(),
    ) {
        check(&s)?;
        check(&(UnitS, Newtype(n), TupleS(t.0, t.1, t.2, t.3)))?;
        check(&vec![UnitS, UnitS])?;
    }

    #[test]
    fn integers_of_every_width_round_trip(
        small in any::<(i8, i16, i32, i64, u8, u16, u32, u64)>(),
        wide in (i128s(), u128s()),
    ) {
        check(&small)?;
        check(&wide)?;
        check(&(small.3, small.7, wide.0, wide.1, small.0, small.4, small.1, small.5, small.2, small.6))?;
    }

    #[test]
    fn maps_with_any_keys_round_trip(
        a in btree_map((any::<u8>(), any::<i64>()), strings(), 0..8),
        b in btree_map(vec(any::<u8>(), 0..6), f64s(), 0..8),
        c in btree_map(any::<Option<i16>>(), vec(any::<char>(), 0..3), 0..8),
    ) {
        check(&a)?;
        check(&b)?;
        check(&c)?;
    }

    #[test]
    fn bytes_and_byte_vectors_round_trip(
        bytes in vec(any::<u8>(), 0..64),
        lists in vec(vec(any::<u8>(), 0..8), 0..6),
        arr in any::<[u8; 32]>(),
        mixed in (any::<u8>(), vec(any::<u8>(), 0..4), any::<u8>(), any::<u8>()),
    ) {
        check(&Bytes(bytes.clone()))?;
        check(&bytes)?;
        check(&lists)?;
        check(&arr)?;
        check(&mixed)?;
        let encoded = encode(&bytes).map_err(fail)?;
        prop_assert!(encoded.len() <= HEADER + bytes.len() + 4);
    }

    #[test]
    fn chars_and_strings_round_trip(
        chars in vec(any::<char>(), 0..16),
        texts in vec(strings(), 0..8),
    ) {
        check(&chars)?;
        check(&texts)?;
    }

    #[test]
    fn nested_vectors_round_trip(
        a in vec(vec(vec(any::<i16>(), 0..4), 0..4), 0..4),
        b in vec(vec(any::<Option<u8>>(), 0..6), 0..4),
    ) {
        check(&a)?;
        check(&b)?;
    }

    #[test]
    fn json_values_round_trip(v in json()) {
        check(&v)?;
    }

    #[test]
    fn untagged_internally_tagged_and_flattened_round_trip(
        u in vec(untagged(), 0..6),
        t in vec(tagged(), 0..6),
        f in flat(),
    ) {
        check(&u)?;
        check(&t)?;
        check(&f)?;
    }

    #[test]
    fn any_bit_flip_or_truncation_of_any_value_is_caught(
        v in (vec(shapes(), 0..4), json(), strings()),
        at in any::<proptest::sample::Index>(),
        cut in any::<proptest::sample::Index>(),
    ) {
        let bytes = encode(&v).map_err(fail)?;
        let bit = at.index(bytes.len() * 8);
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(decode::<IgnoredAny>(&flipped).is_err());
        prop_assert!(render(&flipped).is_err());
        let short = &bytes[..cut.index(bytes.len())];
        prop_assert!(decode::<IgnoredAny>(short).is_err());
        prop_assert!(render(short).is_err());
    }

    #[test]
    fn random_bodies_with_a_valid_checksum_never_panic(body in vec(any::<u8>(), 0..64)) {
        poke(&sealed(&body));
    }

    #[test]
    fn mutated_encodings_with_a_valid_checksum_never_panic(
        v in (vec(shapes(), 0..4), json(), vec(untagged(), 0..3), tagged(), flat()),
        edits in vec((any::<proptest::sample::Index>(), any::<u8>()), 1..4),
        cut in proptest::option::of(any::<proptest::sample::Index>()),
    ) {
        let bytes = encode(&v).map_err(fail)?;
        let mut body = bytes[HEADER..].to_vec();
        for (at, b) in edits {
            let i = at.index(body.len());
            body[i] = b;
        }
        if let Some(cut) = cut {
            body.truncate(cut.index(body.len()));
        }
        poke(&sealed(&body));
    }
}
