//! Examples: the envelope, the exact cases JSON lost, the pinned layout, the checked
//! encoding, version 1, rendering, limits.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

use super::format::{tag, HEADER, MAX_DEPTH};
use super::*;

fn body(bytes: &[u8]) -> &[u8] {
    &bytes[HEADER..]
}

/// An envelope around any body, as a writer of `version` would seal it.
fn sealed(version: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![b'R', version];
    out.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

fn round_trip<T: Serialize + DeserializeOwned>(value: &T) -> T {
    let bytes = encode_checked(value).unwrap();
    decode(&bytes).unwrap()
}

#[test]
fn round_trip_of_a_tuple() {
    let bytes = encode(&("receipt", 42u32)).unwrap();
    assert_eq!(version_of(&bytes), Ok(2));
    assert_eq!(
        decode::<(String, u32)>(&bytes).unwrap(),
        ("receipt".into(), 42)
    );
}

#[test]
fn every_bit_flip_and_truncation_is_caught() {
    let values = [
        encode(&vec![1u8, 2, 3]).unwrap(),
        encode(&(Some(None::<u8>), -0.0f64, "x", vec![(1u8, 'c')])).unwrap(),
    ];
    for bytes in values {
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(
                decode::<serde_json::Value>(&b).is_err(),
                "flip of bit {i} went unnoticed"
            );
            assert!(render(&b).is_err(), "flip of bit {i} rendered");
        }
        for len in 0..bytes.len() {
            assert!(decode::<serde_json::Value>(&bytes[..len]).is_err());
            assert!(render(&bytes[..len]).is_err());
        }
    }
}

#[test]
fn unknown_version_and_changed_type_are_typed() {
    let mut bytes = encode(&1u8).unwrap();
    assert!(matches!(
        decode::<String>(&bytes),
        Err(CorruptKind::Decode(_))
    ));
    bytes[1] = 9;
    assert_eq!(
        decode::<u8>(&bytes),
        Err(CorruptKind::UnknownVersion {
            found: 9,
            supported: 2
        })
    );
    assert_eq!(version_of(&bytes), decode::<u8>(&bytes).map(|_| 0));
    bytes[1] = 0;
    assert!(matches!(
        decode::<u8>(&bytes),
        Err(CorruptKind::UnknownVersion { found: 0, .. })
    ));
    assert_eq!(decode::<u8>(&[]), Err(CorruptKind::Truncated));
    assert!(matches!(
        decode::<u8>(b"X\x02\0\0\0\0\x01"),
        Err(CorruptKind::Record(_))
    ));
}

#[test]
fn what_json_lost_comes_back() {
    assert_eq!(round_trip(&Some(None::<u32>)), Some(None));
    assert_eq!(round_trip(&Some(())), Some(()));
    assert_eq!(round_trip(&Some(Some(None::<()>))), Some(Some(None)));
    assert!(round_trip(&Some(f64::NAN)).unwrap().is_nan());
    assert_eq!(round_trip(&f64::INFINITY), f64::INFINITY);
    assert_eq!(round_trip(&f64::NEG_INFINITY), f64::NEG_INFINITY);
    assert_eq!(round_trip(&-0.0f64).to_bits(), (-0.0f64).to_bits());
    for bits in [
        0x7ff8_0000_0000_0001u64,
        0xfff0_0000_0000_0001,
        0x0000_0000_0000_0001,
        0x8000_0000_0000_0001,
        0x3fb9_9999_9999_999a,
    ] {
        assert_eq!(round_trip(&f64::from_bits(bits)).to_bits(), bits);
    }
    for bits in [0x7fc0_0001u32, 0xff80_0001, 0x0000_0001] {
        assert_eq!(round_trip(&f32::from_bits(bits)).to_bits(), bits);
    }
    assert_eq!(round_trip(&i128::MIN), i128::MIN);
    assert_eq!(round_trip(&u128::MAX), u128::MAX);
}

/// The layout of version 2, pinned: changing it needs a new version.
#[test]
fn the_layout_is_pinned() {
    let cases: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (encode(&()).unwrap(), vec![tag::UNIT]),
        (encode(&true).unwrap(), vec![tag::TRUE]),
        (
            encode(&Some(None::<u8>)).unwrap(),
            vec![tag::SOME, tag::NONE],
        ),
        (encode(&-1i32).unwrap(), vec![tag::I32, 0x01]),
        (encode(&300u64).unwrap(), vec![tag::U64, 0xac, 0x02]),
        (encode(&7u8).unwrap(), vec![tag::U8, 7]),
        (encode(&-2i8).unwrap(), vec![tag::I8, 0xfe]),
        (
            encode(&1.0f64).unwrap(),
            vec![tag::F64, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f],
        ),
        (encode(&'é').unwrap(), vec![tag::CHAR, 0xe9, 0x01]),
        (encode("ab").unwrap(), vec![tag::STR, 2, b'a', b'b']),
        (
            encode(&vec![1u8, 2, 3]).unwrap(),
            vec![tag::SEQ, 3, tag::U8_RUN, 3, 1, 2, 3],
        ),
        (
            encode(&(1u8, "a", 2u8, 3u8)).unwrap(),
            vec![
                tag::TUPLE,
                4,
                tag::U8_RUN,
                1,
                1,
                tag::STR,
                1,
                b'a',
                tag::U8_RUN,
                2,
                2,
                3,
            ],
        ),
        (
            encode(&Point { x: 1, y: -1 }).unwrap(),
            vec![
                tag::STRUCT,
                5,
                b'P',
                b'o',
                b'i',
                b'n',
                b't',
                2,
                1,
                b'x',
                tag::I32,
                2,
                1,
                b'y',
                tag::I32,
                1,
            ],
        ),
        (
            encode(&Status::Paid(5)).unwrap(),
            vec![
                tag::NEWTYPE_VARIANT,
                1,
                4,
                b'P',
                b'a',
                b'i',
                b'd',
                tag::U32,
                5,
            ],
        ),
        (
            encode(&Status::Open).unwrap(),
            vec![tag::UNIT_VARIANT, 0, 4, b'O', b'p', b'e', b'n'],
        ),
    ];
    for (bytes, expected) in cases {
        assert_eq!(body(&bytes), expected.as_slice());
        assert_eq!(bytes[1], CODEC_VERSION);
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Point {
    x: i32,
    y: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Status {
    Open,
    Paid(u32),
    Split(u8, String),
    Closed { at: u64, by: Option<String> },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Marker;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Cents(i64);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    id: String,
    cents: u64,
    note: Option<Option<String>>,
}

#[test]
fn byte_vectors_cost_a_byte_an_element() {
    let v: Vec<u8> = (0..=255).cycle().take(10_000).collect();
    let bytes = encode_checked(&v).unwrap();
    assert!(bytes.len() < v.len() + 16, "{}", bytes.len());
    assert_eq!(decode::<Vec<u8>>(&bytes).unwrap(), v);
    let a = [7u8; 32];
    let bytes = encode_checked(&a).unwrap();
    assert!(bytes.len() < 32 + 12);
    assert_eq!(decode::<[u8; 32]>(&bytes).unwrap(), a);
    // Mixed with other items, and nested.
    let mixed = vec![vec![1u8, 2], vec![], vec![3]];
    assert_eq!(round_trip(&mixed), mixed);
    let t = (1u8, 2u8, "x".to_owned(), 3u8, Some(4u8), 5u8);
    assert_eq!(round_trip(&t), t);
}

#[test]
fn bytes_stay_bytes() {
    let b = Bytes(vec![0, 1, 2, 255]);
    let bytes = encode_checked(&b).unwrap();
    assert_eq!(body(&bytes), &[tag::BYTES, 4, 0, 1, 2, 255]);
    assert_eq!(decode::<Bytes>(&bytes).unwrap(), b);
    // A run of bytes also reads as a byte buffer; bytes are not a sequence.
    assert_eq!(
        decode::<Bytes>(&encode(&vec![1u8, 2]).unwrap()).unwrap(),
        Bytes(vec![1, 2])
    );
    assert!(matches!(
        decode::<Vec<u8>>(&bytes),
        Err(CorruptKind::Decode(_))
    ));
}

/// Serialized with `serialize_bytes`, read with `deserialize_byte_buf`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Bytes(pub(super) Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes(v))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Bytes, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = a.next_element()? {
                    v.push(b);
                }
                Ok(Bytes(v))
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// A sequence and a map that do not say their length up front, or say a wrong one.
struct Unsized {
    items: Vec<u8>,
    entries: Vec<(String, i64)>,
    claim: Option<usize>,
}

impl Serialize for Unsized {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(2)?;
        t.serialize_element(&SeqOf(&self.items, self.claim))?;
        t.serialize_element(&MapOf(&self.entries, self.claim))?;
        t.end()
    }
}

struct SeqOf<'a>(&'a [u8], Option<usize>);

impl Serialize for SeqOf<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(self.1)?;
        for b in self.0 {
            seq.serialize_element(b)?;
        }
        seq.end()
    }
}

struct MapOf<'a>(&'a [(String, i64)], Option<usize>);

impl Serialize for MapOf<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(self.1)?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[test]
fn lengths_not_given_or_wrong_are_written_as_they_turn_out() {
    let items: Vec<u8> = (0..200).collect();
    let mut entries: Vec<(String, i64)> = (0..150).map(|i| (format!("k{i}"), -i)).collect();
    entries.sort();
    let exact = encode(&(
        items.clone(),
        entries.iter().cloned().collect::<BTreeMap<_, _>>(),
    ))
    .unwrap();
    for claim in [
        None,
        Some(0),
        Some(1),
        Some(149),
        Some(150),
        Some(200),
        Some(100_000),
        Some(usize::MAX),
    ] {
        let bytes = encode(&Unsized {
            items: items.clone(),
            entries: entries.clone(),
            claim,
        })
        .unwrap();
        assert_eq!(bytes, exact, "claim {claim:?}");
        let (i, e): (Vec<u8>, BTreeMap<String, i64>) = decode(&bytes).unwrap();
        assert_eq!(i, items);
        assert_eq!(e.len(), 150);
    }
}

#[test]
fn integers_widen_as_serde_does() {
    let bytes = encode(&200u8).unwrap();
    assert_eq!(decode::<u64>(&bytes), Ok(200));
    assert_eq!(decode::<i64>(&bytes), Ok(200));
    assert_eq!(decode::<u128>(&bytes), Ok(200));
    assert_eq!(decode::<f64>(&bytes), Ok(200.0));
    assert!(matches!(decode::<i8>(&bytes), Err(CorruptKind::Decode(_))));
    let bytes = encode(&-5i8).unwrap();
    assert_eq!(decode::<i128>(&bytes), Ok(-5));
    assert!(matches!(decode::<u32>(&bytes), Err(CorruptKind::Decode(_))));
    assert_eq!(
        decode::<i64>(&encode(&(u64::MAX >> 1)).unwrap()),
        Ok(i64::MAX)
    );
    assert_eq!(decode::<i128>(&encode(&-5i16).unwrap()), Ok(-5));
    assert_eq!(
        decode::<u128>(&encode(&u64::MAX).unwrap()),
        Ok(u128::from(u64::MAX))
    );
    assert!(matches!(
        decode::<u64>(&encode(&u128::MAX).unwrap()),
        Err(CorruptKind::Decode(_))
    ));
    // A value written as `T` reads as `Option<T>` and as a newtype around `T`.
    assert_eq!(decode::<Option<u32>>(&encode(&3u32).unwrap()), Ok(Some(3)));
    assert_eq!(decode::<Cents>(&encode(&3i64).unwrap()), Ok(Cents(3)));
    // A unit variant written by its name.
    assert_eq!(decode::<Status>(&encode("Open").unwrap()), Ok(Status::Open));
}

#[test]
fn a_type_that_changed_is_a_decode_error_naming_why() {
    let bytes = encode(&Point { x: 1, y: 2 }).unwrap();
    let err = decode::<(i32, i32, i32)>(&bytes).unwrap_err();
    assert!(matches!(err, CorruptKind::Decode(_)), "{err:?}");
    let err = decode::<Status>(&encode(&Status::Paid(1)).unwrap());
    assert_eq!(err, Ok(Status::Paid(1)));
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    enum Renamed {
        Open,
        Paid(String),
    }
    let err = decode::<Renamed>(&encode(&Status::Paid(1)).unwrap()).unwrap_err();
    assert!(err.to_string().contains("expected a string"), "{err}");
    let err = decode::<Renamed>(&encode(&Status::Split(1, "a".into())).unwrap()).unwrap_err();
    assert!(err.to_string().contains("Split"), "{err}");
    // Fewer items than stored.
    let err = decode::<(u8, u8)>(&encode(&(1u8, 2u8, 3u8)).unwrap()).unwrap_err();
    assert!(err.to_string().contains("3 items"), "{err}");
}

#[test]
fn enums_of_every_shape_and_serde_representation_round_trip() {
    let all = vec![
        Status::Open,
        Status::Paid(7),
        Status::Split(1, "x".into()),
        Status::Closed {
            at: 9,
            by: Some("ops".into()),
        },
    ];
    assert_eq!(round_trip(&all), all);

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "t", content = "c")]
    enum Adjacent {
        A,
        B(Status),
        C { x: Option<f64> },
    }
    let v = vec![
        Adjacent::A,
        Adjacent::B(Status::Closed { at: 1, by: None }),
        Adjacent::C { x: Some(1.5) },
    ];
    assert_eq!(round_trip(&v), v);

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "kind")]
    enum Internal {
        A { x: Vec<Status> },
        B(Point),
        C,
    }
    let v = vec![
        Internal::A { x: all.clone() },
        Internal::B(Point { x: 1, y: 2 }),
        Internal::C,
    ];
    assert_eq!(round_trip(&v), v);

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(untagged)]
    enum Untagged {
        S(Status),
        M(Marker),
        C(Cents),
        O(Option<Option<u8>>),
    }
    let v = vec![
        Untagged::S(Status::Open),
        Untagged::S(Status::Closed { at: 1, by: None }),
        Untagged::M(Marker),
        Untagged::C(Cents(-4)),
    ];
    assert_eq!(round_trip(&v), v);
}

/// A hand-written variant identifier that asks for the variant's index.
#[test]
fn enums_read_by_index() {
    #[derive(Debug, PartialEq)]
    struct ByIndex(u32);
    impl<'de> Deserialize<'de> for ByIndex {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByIndex, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = ByIndex;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an enum")
                }
                fn visit_enum<A: de::EnumAccess<'de>>(self, a: A) -> Result<ByIndex, A::Error> {
                    use serde::de::VariantAccess;
                    let (i, v): (u32, _) = a.variant()?;
                    v.newtype_variant::<u32>()?;
                    Ok(ByIndex(i))
                }
            }
            d.deserialize_enum("Status", &["Open", "Paid"], V)
        }
    }
    assert_eq!(
        decode::<ByIndex>(&encode(&Status::Paid(3)).unwrap()),
        Ok(ByIndex(1))
    );
}

#[test]
fn flatten_and_json_values_round_trip() {
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Outer {
        id: u32,
        #[serde(flatten)]
        point: Point,
        #[serde(flatten)]
        rest: BTreeMap<String, serde_json::Value>,
    }
    let v = Outer {
        id: 3,
        point: Point { x: 1, y: 2 },
        rest: [
            (
                "k".to_owned(),
                serde_json::json!({"a": [1, -2, 2.5, null, "s"]}),
            ),
            ("n".to_owned(), serde_json::json!(null)),
        ]
        .into_iter()
        .collect(),
    };
    assert_eq!(round_trip(&v), v);
    let j = serde_json::json!({"a": [1, {"b": false}], "c": -1, "d": 1e300, "e": ""});
    assert_eq!(round_trip(&j), j);
    // Any struct reads as a `serde_json::Value`.
    let as_json: serde_json::Value =
        decode(&encode(&Status::Closed { at: 1, by: None }).unwrap()).unwrap();
    assert_eq!(
        as_json,
        serde_json::json!({"Closed": {"at": 1, "by": null}})
    );
}

#[test]
fn hash_maps_and_sets_pass_the_check_in_any_order() {
    let m: HashMap<String, u32> = (0..100).map(|i| (format!("k{i}"), i)).collect();
    assert_eq!(round_trip(&m), m);
    let s: HashSet<u64> = (0..100).map(|i| i * 7919).collect();
    assert_eq!(round_trip(&s), s);
    let s: HashSet<u8> = (0..=255).collect();
    assert_eq!(round_trip(&s), s);
    let nested: HashMap<u8, HashSet<String>> = (0..20)
        .map(|i| (i, (0..i).map(|j| j.to_string()).collect()))
        .collect();
    assert_eq!(round_trip(&nested), nested);
}

/// Serializes as a string, but reads only an integer.
#[derive(Debug, PartialEq)]
struct Picky(u32);

impl Serialize for Picky {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Picky {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Picky, D::Error> {
        u32::deserialize(d).map(Picky)
    }
}

/// Reads back a different value than it wrote.
#[derive(Debug, PartialEq)]
struct Drifts(u32);

impl Serialize for Drifts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.0)
    }
}

impl<'de> Deserialize<'de> for Drifts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Drifts, D::Error> {
        u32::deserialize(d).map(|v| Drifts(v + 1))
    }
}

#[test]
fn a_value_that_does_not_read_back_as_itself_is_refused() {
    assert!(encode(&Picky(1)).is_ok());
    let err = encode_checked(&Picky(1)).unwrap_err();
    assert!(err.to_string().contains("round trip"), "{err}");
    assert!(err.to_string().contains("Picky"), "{err}");
    let err = encode_checked(&vec![Drifts(1)]).unwrap_err();
    assert!(err.to_string().contains("different value"), "{err}");
    // The checked encoding is the plain one when it passes.
    let r = Receipt {
        id: "ch_1".into(),
        cents: 500,
        note: Some(None),
    };
    assert_eq!(encode_checked(&r).unwrap(), encode(&r).unwrap());
}

/// What `Serialize` impls can get wrong is refused by `encode` itself.
#[test]
fn broken_serialize_impls_are_codec_errors() {
    struct Nothing;
    impl Serialize for Nothing {
        fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("no can do"))
        }
    }
    assert_eq!(encode(&Nothing).unwrap_err().to_string(), "no can do");
    struct KeyOnly;
    impl Serialize for KeyOnly {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(None)?;
            m.serialize_key(&1)?;
            m.end()
        }
    }
    assert!(encode(&KeyOnly)
        .unwrap_err()
        .to_string()
        .contains("no value"));
    let err: CodecError = serde::ser::Error::custom("x");
    let _: &dyn std::error::Error = &err;
    assert_eq!(format!("{err:?}"), "CodecError(\"x\")");
}

#[test]
fn human_readable_types_store_their_string_form() {
    let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let bytes = encode_checked(&ip).unwrap();
    assert_eq!(body(&bytes)[0], tag::STR);
    assert_eq!(render(&bytes).unwrap(), "\"127.0.0.1\"");
    assert_eq!(decode::<std::net::IpAddr>(&bytes), Ok(ip));
}

#[test]
fn version_one_records_still_decode_and_render() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Old {
        id: String,
        amount: f64,
        tags: Vec<u8>,
        note: Option<String>,
    }
    let old = Old {
        id: "ch_1".into(),
        amount: 0.1 + 0.2,
        tags: vec![1, 2],
        note: None,
    };
    let bytes = sealed(1, &serde_json::to_vec(&old).unwrap());
    assert_eq!(version_of(&bytes), Ok(1));
    assert_eq!(decode::<Old>(&bytes), Ok(old));
    assert_eq!(
        render(&bytes).unwrap(),
        "{\"amount\": 0.30000000000000004, \"id\": \"ch_1\", \"note\": null, \"tags\": [1, 2]}"
    );
    // Every float JSON can hold reads back exactly.
    for bits in [
        0x3fb9_9999_9999_999au64,
        0x0000_0000_0000_0001,
        0x7fef_ffff_ffff_ffff,
    ] {
        let f = f64::from_bits(bits);
        let bytes = sealed(1, &serde_json::to_vec(&f).unwrap());
        assert_eq!(decode::<f64>(&bytes).map(f64::to_bits), Ok(bits));
    }
    let bytes = sealed(1, b"[1, \"a\\n\", -3, 1.5e300, {\"k\": true}]");
    assert_eq!(
        render(&bytes).unwrap(),
        "[1, \"a\\n\", -3, 1.5e300, {\"k\": true}]"
    );
    assert!(matches!(
        decode::<u8>(&sealed(1, b"\"x\"")),
        Err(CorruptKind::Decode(_))
    ));
    assert!(matches!(
        render(&sealed(1, b"{")),
        Err(CorruptKind::Record(_))
    ));
}

#[test]
fn render_is_pinned() {
    #[derive(Serialize)]
    struct Everything {
        receipt: Receipt,
        list: Vec<u8>,
        map: BTreeMap<(u8, u8), &'static str>,
        json: BTreeMap<&'static str, i32>,
        unit: (),
        none: Option<u8>,
        some: Option<f64>,
        floats: (f64, f64, f64, f64, f32, f64),
        bytes: Bytes,
        statuses: Vec<Status>,
        marker: Marker,
        cents: Cents,
        single: (char,),
        wide: (i128, u128),
        text: &'static str,
    }
    let v = Everything {
        receipt: Receipt {
            id: "ch_1".into(),
            cents: 500,
            note: Some(None),
        },
        list: vec![1, 2, 3],
        map: [((1, 2), "x")].into_iter().collect(),
        json: [("a", 1)].into_iter().collect(),
        unit: (),
        none: None,
        some: Some(1.5),
        floats: (f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.1, 1e300),
        bytes: Bytes(b"\x00ab\"\\\n\xff".to_vec()),
        statuses: vec![
            Status::Open,
            Status::Paid(5),
            Status::Split(1, "a".into()),
            Status::Closed { at: 1, by: None },
        ],
        marker: Marker,
        cents: Cents(-7),
        single: ('\'',),
        wide: (i128::MIN, u128::MAX),
        text: "tab\there\nnul\0 \u{1b}[31m \u{202e} é",
    };
    assert_eq!(
        render(&encode(&v).unwrap()).unwrap(),
        "Everything { receipt: Receipt { id: \"ch_1\", cents: 500, note: Some(None) }, \
         list: [1, 2, 3], map: {(1, 2): \"x\"}, json: {\"a\": 1}, unit: (), none: None, \
         some: Some(1.5), floats: (NaN, inf, -inf, -0.0, 0.1, 1e300), \
         bytes: b\"\\x00ab\\\"\\\\\\n\\xff\", \
         statuses: [Open, Paid(5), Split(1, \"a\"), Closed { at: 1, by: None }], \
         marker: Marker, cents: Cents(-7), single: ('\\'',), \
         wide: (-170141183460469231731687303715884105728, 340282366920938463463374607431768211455), \
         text: \"tab\\there\\nnul\\0 \\u{1b}[31m \\u{202e} é\" }"
    );
    #[derive(Serialize)]
    struct Empty {}
    assert_eq!(render(&encode(&Empty {}).unwrap()).unwrap(), "Empty {}");
    assert_eq!(render(&encode(&(1u8,)).unwrap()).unwrap(), "(1,)");
    assert_eq!(render(&encode(&Vec::<u8>::new()).unwrap()).unwrap(), "[]");
}

#[test]
fn render_never_emits_a_raw_control_character() {
    let every_char: String = (0..=0x10ffffu32).filter_map(char::from_u32).collect();
    let controls: Vec<char> = every_char.chars().filter(|c| c.is_control()).collect();
    assert!(controls.len() >= 65);
    #[derive(Serialize)]
    struct Odd {
        s: String,
        c: Vec<char>,
        b: Bytes,
        m: BTreeMap<String, u8>,
    }
    let v = Odd {
        s: every_char.clone(),
        c: controls.clone(),
        b: Bytes((0..=255).collect()),
        m: controls.iter().map(|c| (c.to_string(), 1)).collect(),
    };
    let text = render(&encode(&v).unwrap()).unwrap();
    assert!(!text.chars().any(char::is_control));
    // Names that are not identifiers are quoted and escaped too.
    let mut b = vec![
        tag::STRUCT,
        3,
        b'a',
        b'\n',
        b'b',
        1,
        2,
        b'\t',
        0x07,
        tag::UNIT,
    ];
    let text = render(&sealed(2, &b)).unwrap();
    assert_eq!(text, "\"a\\nb\" { \"\\t\\u{7}\": () }");
    b[0] = tag::UNIT_STRUCT;
    b.truncate(5);
    assert_eq!(render(&sealed(2, &b)).unwrap(), "\"a\\nb\"");
}

#[test]
fn render_limited_cuts_with_a_marker() {
    let bytes = encode(&vec![123_456u32; 100_000]).unwrap();
    let text = render_limited(&bytes, 20).unwrap();
    assert_eq!(text, "[123456, 123456, 123…");
    assert_eq!(
        render_limited(&encode("héllo").unwrap(), 4).unwrap(),
        "\"hél…"
    );
    assert_eq!(render_limited(&encode(&1u8).unwrap(), 1).unwrap(), "1");
    assert_eq!(render_limited(&encode(&10u8).unwrap(), 1).unwrap(), "1…");
    assert_eq!(render_limited(&encode(&1u8).unwrap(), 0).unwrap(), "…");
    let old = sealed(1, b"[1, 2, 3]");
    assert_eq!(render_limited(&old, 4).unwrap(), "[1, …");
}

#[test]
fn a_50_mb_byte_vector_round_trips_at_its_size() {
    let v: Vec<u8> = (0..50_000_000u32).map(|i| (i % 251) as u8).collect();
    let bytes = encode_checked(&v).unwrap();
    assert!(bytes.len() < 51_000_000, "{}", bytes.len());
    assert!(bytes.capacity() < 51_000_000, "{}", bytes.capacity());
    let back: Vec<u8> = decode(&bytes).unwrap();
    assert!(back == v);
}

/// `depth` options inside one another around a unit.
fn nested_options(depth: usize) -> Vec<u8> {
    let mut b = vec![tag::SOME; depth];
    b.push(tag::UNIT);
    b
}

#[test]
fn nesting_is_limited_on_both_sides() {
    // As deep as allowed: decodes (as JSON, whose values nest), renders.
    let mut deep = serde_json::Value::Null;
    for _ in 0..MAX_DEPTH {
        deep = serde_json::Value::Array(vec![deep]);
    }
    let bytes = encode_checked(&deep).unwrap();
    assert_eq!(decode::<serde_json::Value>(&bytes).unwrap(), deep);
    assert!(render(&bytes).unwrap().starts_with("[[[["));
    // One deeper: refused by the encoder, and by the decoder when it meets such bytes.
    let deeper = serde_json::Value::Array(vec![deep]);
    assert!(encode(&deeper)
        .unwrap_err()
        .to_string()
        .contains("deeper than 256"));
    let bytes = sealed(2, &nested_options(MAX_DEPTH + 1));
    let err = decode::<serde_json::Value>(&bytes).unwrap_err();
    assert!(
        matches!(&err, CorruptKind::Record(m) if m.contains("deeper than 256")),
        "{err:?}"
    );
    assert!(matches!(render(&bytes), Err(CorruptKind::Record(_))));
    assert!(decode::<de::IgnoredAny>(&bytes).is_err());
    assert!(decode::<de::IgnoredAny>(&sealed(2, &nested_options(MAX_DEPTH))).is_ok());
    // Far deeper input stops at the limit, without exhausting the stack.
    let bytes = sealed(2, &nested_options(1_000_000));
    assert!(decode::<serde_json::Value>(&bytes).is_err());
    assert!(render(&bytes).is_err());
}

/// A type that nests an option and a newtype around itself reads a stored value of another
/// type (here a unit) through the fallbacks that read `T` as `Option<T>` and as a newtype of
/// `T`; they consume nothing, and count as levels, so the read ends at the limit with an error
/// instead of recursing until the stack runs out.
#[test]
fn self_nesting_types_stop_at_the_limit_on_values_of_another_type() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Link(Option<Box<Link>>);
    #[derive(Debug, Serialize, Deserialize)]
    struct Wrapped(Box<Option<Wrapped>>);
    let bytes = sealed(2, &[tag::UNIT]);
    let err = decode::<Link>(&bytes).unwrap_err();
    assert!(
        matches!(&err, CorruptKind::Record(m) if m.contains("deeper than 256")),
        "{err:?}"
    );
    assert!(decode::<Wrapped>(&bytes).is_err());
    // What this build writes reads back.
    let chain = Link(Some(Box::new(Link(None))));
    let back: Link = decode(&encode_checked(&chain).unwrap()).unwrap();
    assert!(matches!(back, Link(Some(inner)) if inner.0.is_none()));
}

#[test]
fn malformed_bodies_are_record_errors_and_allocate_nothing_they_cannot_back() {
    let huge = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    let mut cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x00],
        vec![0xee],
        vec![tag::U8_RUN, 1, 1],
        vec![tag::U8],
        vec![tag::U16, 0xff, 0xff, 0x04],
        vec![tag::U32, 0x80, 0x00],
        vec![tag::CHAR, 0x80, 0xb0, 0x03],
        vec![tag::STR, 1, 0xff],
        vec![tag::SEQ, 2, tag::U8_RUN, 3, 1, 2, 3],
        vec![tag::SEQ, 1, tag::U8_RUN, 0],
        vec![tag::F64, 0, 0],
    ];
    for t in [tag::SEQ, tag::MAP, tag::STR, tag::BYTES, tag::TUPLE] {
        let mut b = vec![t];
        b.extend_from_slice(&huge);
        cases.push(b);
    }
    cases.push([&[tag::STRUCT, 1, b'S'][..], &huge[..]].concat());
    for case in cases {
        let bytes = sealed(2, &case);
        for err in [
            decode::<serde_json::Value>(&bytes).unwrap_err(),
            decode::<Vec<u8>>(&bytes).unwrap_err(),
            decode::<de::IgnoredAny>(&bytes).unwrap_err(),
            render(&bytes).unwrap_err(),
        ] {
            assert!(matches!(&err, CorruptKind::Record(_)), "{case:x?}: {err:?}");
        }
    }
    let trailing = sealed(2, &[tag::UNIT, tag::UNIT]);
    assert!(matches!(decode::<()>(&trailing), Err(CorruptKind::Record(m)) if m.contains("follow")));
    let err = decode::<String>(&sealed(2, &[tag::SEQ, 0x80, 0x80, 0x04])).unwrap_err();
    assert!(err.to_string().contains("cannot fit"), "{err}");
}

#[test]
fn ignored_fields_are_skipped() {
    #[derive(Serialize)]
    struct Wide {
        a: u8,
        extra: (Vec<Status>, BTreeMap<i8, Option<f32>>, Bytes, Vec<u8>),
        b: String,
    }
    #[derive(Debug, PartialEq, Deserialize)]
    struct Narrow {
        a: u8,
        b: String,
    }
    let bytes = encode(&Wide {
        a: 1,
        extra: (
            vec![Status::Split(1, "z".into())],
            [(-1, Some(1.0))].into_iter().collect(),
            Bytes(vec![1]),
            vec![1, 2, 3],
        ),
        b: "x".into(),
    })
    .unwrap();
    assert_eq!(
        decode::<Narrow>(&bytes),
        Ok(Narrow {
            a: 1,
            b: "x".into()
        })
    );
}

/// serde's buffering behind untagged enums and `flatten` has no 128-bit integers: such a
/// value cannot be read back, and is refused before anything is recorded.
#[test]
fn wide_integers_through_untagged_and_flatten_are_refused() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(untagged)]
    enum Wide {
        I(i128),
        S(String),
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Flat {
        a: i128,
        #[serde(flatten)]
        rest: BTreeMap<String, u128>,
    }
    assert_eq!(round_trip(&Wide::S("x".into())), Wide::S("x".into()));
    let err = encode_checked(&Wide::I(1)).unwrap_err();
    assert!(err.to_string().contains("round trip"), "{err}");
    let f = Flat {
        a: i128::MIN,
        rest: BTreeMap::new(),
    };
    assert_eq!(round_trip(&f), f);
    let f = Flat {
        a: 1,
        rest: [("b".to_owned(), 7)].into_iter().collect(),
    };
    assert!(encode_checked(&f).is_err());
    // Outside such buffering the full range is exact.
    assert_eq!(round_trip(&(i128::MIN, u128::MAX)), (i128::MIN, u128::MAX));
}

#[test]
fn the_runtime_replays_exactly_and_records_nothing_that_would_not_replay() {
    use crate::{Call, Error, MemoryStore};
    let store = MemoryStore::new();
    let first = Call::new("codec.test", "exact")
        .run(&store, || {
            Ok::<_, Error>((Some(None::<u8>), f64::NAN, Some(())))
        })
        .unwrap();
    assert!(!first.replayed);
    let again = Call::new("codec.test", "exact")
        .run(&store, || {
            Ok::<_, Error>((None::<Option<u8>>, 0.0f64, None::<()>))
        })
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.value.0, Some(None));
    assert_eq!(again.value.1.to_bits(), f64::NAN.to_bits());
    assert_eq!(again.value.2, Some(()));

    let refused = Call::new("codec.test", "picky").run(&store, || Ok::<_, Error>(Picky(1)));
    match refused {
        Err(e @ Error::Codec { .. }) => assert!(e.to_string().contains("round trip"), "{e}"),
        other => panic!("{other:?}"),
    }
    // Nothing was recorded: the next call runs its body.
    let next = Call::new("codec.test", "picky")
        .run(&store, || Ok::<_, Error>(7u32))
        .unwrap();
    assert!(!next.replayed);
    assert_eq!(next.value, 7);
}
