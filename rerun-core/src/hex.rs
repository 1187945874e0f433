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
    if digits.len() % 2 != 0 {
        return None;
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| {
            digits
                .get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
        })
        .collect()
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
        fn any_text_decodes_or_is_refused(text in "\\PC{0,12}") {
            let _ = decode(&text);
        }
    }

    #[test]
    fn digits_and_refusals() {
        assert_eq!(encode(&[0x00, 0xff, 0x1a]), "00ff1a");
        assert_eq!(decode("00FF1a"), Some(vec![0x00, 0xff, 0x1a]));
        for bad in ["0", "zz", "é0"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
