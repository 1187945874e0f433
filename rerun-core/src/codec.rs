//! The envelope around a recorded result: a version, a checksum and the serde_json bytes.
//!
//! Layout: `b'R'`, version (1 byte), CRC-32 of the body (4 bytes, little endian), body. A bit
//! flip or a truncation fails the checksum; an unknown version is reported with its number;
//! a body that no longer decodes as the result type is a typed decode error. None of these is a
//! reason to run the body again.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::CorruptKind;

/// The envelope version this build writes and the newest it reads.
pub const CODEC_VERSION: u8 = 1;
const MAGIC: u8 = b'R';
const HEADER: usize = 6;

/// Encodes a result into its envelope.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&[MAGIC, CODEC_VERSION, 0, 0, 0, 0]);
    serde_json::to_writer(&mut out, value)?;
    let crc = crc32fast::hash(&out[HEADER..]);
    out[2..HEADER].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Checks an envelope and returns its body.
pub fn open(bytes: &[u8]) -> Result<&[u8], CorruptKind> {
    if bytes.len() < HEADER {
        return Err(CorruptKind::Truncated);
    }
    if bytes[0] != MAGIC {
        return Err(CorruptKind::Record(
            "the result does not start with rerun's envelope".into(),
        ));
    }
    if bytes[1] != CODEC_VERSION {
        return Err(CorruptKind::UnknownVersion {
            found: u32::from(bytes[1]),
            supported: u32::from(CODEC_VERSION),
        });
    }
    let crc = u32::from_le_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
    let body = &bytes[HEADER..];
    if crc32fast::hash(body) != crc {
        return Err(CorruptKind::Checksum);
    }
    Ok(body)
}

/// Decodes an envelope into the result type.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CorruptKind> {
    let body = open(bytes)?;
    serde_json::from_slice(body).map_err(|e| CorruptKind::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let bytes = encode(&("receipt", 42u32)).unwrap();
        assert_eq!(
            decode::<(String, u32)>(&bytes).unwrap(),
            ("receipt".into(), 42)
        );
    }

    #[test]
    fn every_bit_flip_and_truncation_is_caught() {
        let bytes = encode(&vec![1u8, 2, 3]).unwrap();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(
                decode::<Vec<u8>>(&b).is_err(),
                "flip of bit {i} went unnoticed"
            );
        }
        for len in 0..bytes.len() {
            assert!(decode::<Vec<u8>>(&bytes[..len]).is_err());
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
                supported: 1
            })
        );
    }
}
