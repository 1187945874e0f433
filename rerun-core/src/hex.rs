//! Bytes as lowercase hex, two digits each, and back: how rerun names bytes that are not text
//! (a fingerprint, a stored key that is not UTF-8, a scan cursor's raw values).

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lowercase hex.
pub(crate) fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The bytes of an even number of hex digits (either case), or `None`.
pub(crate) fn decode(digits: &str) -> Option<Vec<u8>> {
    let digits = digits.as_bytes();
    if digits.len() % 2 != 0 {
        return None;
    }
    digits
        .chunks_exact(2)
        .map(|pair| Some(value(pair[0])? << 4 | value(pair[1])?))
        .collect()
}

/// One hex digit's value. Only the digits themselves: no sign, no space.
fn value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let text = encode(&bytes);
            prop_assert_eq!(text.len(), bytes.len() * 2);
            prop_assert_eq!(decode(&text), Some(bytes));
        }

        #[test]
        fn only_hex_digits_decode(text in "[0-9a-fA-F+ x-]{0,12}|\\PC{0,12}") {
            // What decodes is exactly what `encode` writes, up to case.
            if let Some(bytes) = decode(&text) {
                prop_assert_eq!(encode(&bytes), text.to_ascii_lowercase());
            }
        }
    }

    #[test]
    fn digits_and_refusals() {
        assert_eq!(encode(&[0x00, 0xff, 0x1a]), "00ff1a");
        assert_eq!(decode("00FF1a"), Some(vec![0x00, 0xff, 0x1a]));
        for bad in ["0", "zz", "é0", "+f", "-1", " 1", "0x"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
