//! The record layout of format 2 (see `prelude.lua`, which writes it), read in Rust for
//! inspect and scan.

use crate::error::CorruptKind;

/// The format this build writes.
pub(super) const FORMAT: u8 = b'2';
const HEADER: usize = 103;
/// What a completed record stores where the instant it changed would be when it stores its
/// time to live in the expiry field instead (see `prelude.lua`): above every instant a field
/// holds.
pub(super) const RELATIVE: u64 = 9_999_999_999_999_999;
/// The longest holder a record keeps: its length is 4 digits.
pub(super) const MAX_HOLDER: usize = 9999;

/// A record as stored.
pub(super) struct Raw<'a> {
    pub(super) state: u8,
    pub(super) once: bool,
    pub(super) fence: u64,
    pub(super) lease_until: u64,
    pub(super) expires: u64,
    pub(super) changed: u64,
    pub(super) fingerprint: &'a [u8],
    pub(super) holder: &'a [u8],
    pub(super) result: &'a [u8],
}

/// Why a record's bytes cannot be read: written by a newer rerun, or malformed.
pub(super) enum Unreadable {
    Newer(u32),
    Corrupt(CorruptKind),
}

/// The number a field's decimal digits spell: one digit or more and nothing else, as the
/// scripts read a field (`prelude.lua`), so that no record is replayed here that a script calls
/// corrupt (`str::parse::<u64>` would also take a leading `+`); `None` past `u64::MAX`. Without
/// `str`'s UTF-8 check and general parser, a replay's five fields cost about 600 client
/// instructions less (callgrind).
fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d))
    })
}

/// Reads a record's bytes.
pub(super) fn parse(raw: &[u8]) -> Result<Raw<'_>, Unreadable> {
    let bad = |why: &str| Unreadable::Corrupt(CorruptKind::Record(why.to_owned()));
    let Some(&format) = raw.first() else {
        return Err(bad("the record is empty"));
    };
    if format != FORMAT {
        return match (format as char).to_digit(10) {
            Some(v) if v > u32::from(FORMAT - b'0') => Err(Unreadable::Newer(v)),
            _ => Err(bad("the record has an unknown format")),
        };
    }
    if raw.len() < HEADER {
        return Err(bad("the record is shorter than its header"));
    }
    let num = |from: usize| digits(&raw[from..from + 16]);
    let (Some(fence), Some(lease_until), Some(expires), Some(changed)) =
        (num(3), num(19), num(35), num(51))
    else {
        return Err(bad("a number in the record is malformed"));
    };
    let Some(holder_len) = digits(&raw[99..103]).and_then(|n| usize::try_from(n).ok()) else {
        return Err(bad("the holder's length is malformed"));
    };
    let Some(holder) = raw.get(HEADER..HEADER + holder_len) else {
        return Err(bad("the record is truncated"));
    };
    Ok(Raw {
        state: raw[1],
        once: raw[2] == b'1',
        fence,
        lease_until,
        expires,
        changed,
        fingerprint: &raw[67..99],
        holder,
        result: &raw[HEADER + holder_len..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(st: u8, fence: u64, holder: &str, result: &[u8]) -> Vec<u8> {
        let mut out = vec![FORMAT, st, b'0'];
        for n in [fence, 5, 6, 7] {
            out.extend_from_slice(format!("{n:016}").as_bytes());
        }
        out.extend_from_slice(&[9u8; 32]);
        out.extend_from_slice(format!("{:04}", holder.len()).as_bytes());
        out.extend_from_slice(holder.as_bytes());
        out.extend_from_slice(result);
        out
    }

    proptest::proptest! {
        /// `digits` reads every byte string as the standard parser does, except that it takes
        /// digits alone, as the scripts do: the digits, signs, spaces and bytes of damaged
        /// records, and numbers at and past `u64::MAX`.
        #[test]
        fn digits_read_as_the_scripts_do(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    6 => proptest::sample::select(b"0123456789".to_vec()),
                    1 => proptest::sample::select(b"+- a\t.\xff\x00".to_vec()),
                ],
                0..24,
            ),
            big in u64::MAX - 1000..=u64::MAX,
        ) {
            let standard = |b: &[u8]| {
                let all_digits = b.iter().all(u8::is_ascii_digit);
                let parsed = std::str::from_utf8(b).ok().and_then(|s| s.parse::<u64>().ok());
                parsed.filter(|_| all_digits)
            };
            proptest::prop_assert_eq!(digits(&bytes), standard(&bytes));
            for n in [big.to_string(), format!("{big}0"), format!("+{big}")] {
                proptest::prop_assert_eq!(digits(n.as_bytes()), standard(n.as_bytes()));
            }
        }
    }

    /// The scripts write the marker the reader looks for, and no instant a field holds (the
    /// scripts keep them at or below 2^53 - 1 microseconds) can be taken for it.
    #[test]
    fn the_relative_marker_is_the_scripts_and_no_instant() {
        assert!(
            include_str!("prelude.lua").contains(&format!("local RELATIVE = '{RELATIVE:016}'\n"))
        );
        assert!(include_str!("prelude.lua").contains("local WIDEST = 9007199254740991\n"));
        const { assert!(RELATIVE > 9_007_199_254_740_991) };
    }

    #[test]
    fn reads_what_the_scripts_write() {
        let raw = build(b'c', 1_799_000_000_000_123, "h\t1", b"\x00result");
        let Ok(r) = parse(&raw) else { panic!("parses") };
        assert_eq!(
            (r.state, r.fence, r.lease_until, r.expires, r.changed),
            (b'c', 1_799_000_000_000_123, 5, 6, 7)
        );
        assert_eq!(
            (r.holder, r.result, r.fingerprint.len()),
            (&b"h\t1"[..], &b"\x00result"[..], 32)
        );
        for cut in 0..raw.len() - 7 {
            assert!(parse(&raw[..cut]).is_err(), "{cut}");
        }
        let mut newer = raw.clone();
        newer[0] = b'7';
        assert!(matches!(parse(&newer), Err(Unreadable::Newer(7))));
    }
}
