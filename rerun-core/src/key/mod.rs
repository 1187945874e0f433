//! Dedupe keys: a scope plus a canonical encoding of the key's parts.
//!
//! The encoding is written by hand, not derived from `std::hash::Hash`, so the same values give
//! the same key in every process, build and machine. Every part starts with a tag that says
//! where the part ends (a length, a fixed size, or for integers the first non-digit, since no
//! tag is a digit), so a sequence of parts reads back one way only and distinct values never
//! encode alike:
//!
//! | value | encoding |
//! |---|---|
//! | `"ord_1"` (str, String) | `s5:ord_1` (length in bytes, `:`, the text) |
//! | `42`, `-7` (any integer type) | `i42`, `i-7` |
//! | `true`, `false` | `b1`, `b0` |
//! | `'x'` | `c1:x` |
//! | `[0xAB, 0x01]` (bytes) | `x2:ab01` (length in bytes, `:`, hex) |
//! | a uuid (feature `uuid`) | `u36:67e55044-10b1-426f-9247-bb680e5fe0c8` |
//! | [`KeyWriter::tagged`]`('d', "2024-05-01")` | `d10:2024-05-01` |
//! | [`KeyWriter::tagged`]`('7', "x")` (a reserved or non-letter tag) | `t1:71:x` |
//! | `("a", 7)` (tuple) | `(s1:ai7)` |
//!
//! Integers encode by value: `7u8` and `7i64` are one key. `str`, `String` and `Cow<str>` are
//! one key for the same text; byte slices, arrays and `Vec<u8>` for the same bytes.

mod readable;

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use compact_str::CompactString;

use crate::printable::hides_text;

pub use readable::ParseKeyError;

/// A dedupe key: the scope it lives in and the canonical encoding of its value.
///
/// ```
/// use rerun_core::Key;
/// let key = Key::new("billing.charge", &("cus_1", 42u64));
/// assert_eq!(key.scope(), "billing.charge");
/// assert_eq!(key.id(), "(s5:cus_1i42)");
/// assert_eq!(key, Key::new("billing.charge", &("cus_1", 42u32)));
/// ```
///
/// `Display` and `Debug` are made for logs: control characters are escaped and a scope or id
/// longer than 200 bytes is cut short with its length, so a key of any size gives a line of
/// bounded length.
///
/// ```
/// use rerun_core::Key;
/// assert_eq!(Key::new("mail", "a\nb").to_string(), r#"key mail/"a\nb""#);
/// let big = Key::new("upload", &vec![0u8; 1 << 20]);
/// assert!(big.to_string().len() < 300);
/// assert!(big.to_string().ends_with("…(2097154 bytes)"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    scope: Cow<'static, str>,
    id: CompactString,
}

impl Key {
    /// The key of `value` in `scope`.
    pub fn new<K: IntoKey + ?Sized>(scope: impl Into<Cow<'static, str>>, value: &K) -> Key {
        let mut writer = KeyWriter {
            out: CompactString::const_new(""),
        };
        value.write_key(&mut writer);
        Key {
            scope: scope.into(),
            id: writer.out,
        }
    }

    /// A key from its stored parts, as a store reads it back.
    pub fn from_parts(scope: impl Into<Cow<'static, str>>, id: impl Into<String>) -> Key {
        Key {
            scope: scope.into(),
            id: CompactString::from(id.into()),
        }
    }

    /// The scope (namespace) of the key.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The scope, as it was given (static or owned).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn scope_cow(&self) -> &Cow<'static, str> {
        &self.scope
    }

    /// The canonical encoding of the key's value.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The key's value as people read and type it (see the `readable` table in the module
    /// docs): a plain text as itself, other values in a short literal syntax.
    ///
    /// ```
    /// use rerun_core::Key;
    /// assert_eq!(Key::new("s", "evt_42").readable_id(), "evt_42");
    /// assert_eq!(Key::new("s", "42").readable_id(), r#""42""#);
    /// assert_eq!(Key::new("s", &("cus_1", 42u64, true)).readable_id(), "(cus_1, 42, true)");
    /// assert_eq!(Key::new("s", &[0xabu8, 1][..]).readable_id(), "0xab01");
    /// ```
    pub fn readable_id(&self) -> String {
        readable::readable(&self.id)
    }

    /// The key whose readable form ([`Key::readable_id`]) is `text`, in `scope`: a text typed
    /// as itself is the string key it reads as.
    ///
    /// ```
    /// use rerun_core::Key;
    /// assert_eq!(Key::parse("s", "evt_42")?, Key::new("s", "evt_42"));
    /// assert_eq!(Key::parse("s", "(cus_1, 42)")?, Key::new("s", &("cus_1", 42)));
    /// assert_eq!(Key::parse("s", r#""a b""#)?, Key::new("s", "a b"));
    /// assert!(Key::parse("s", "(unclosed").is_err());
    /// # Ok::<(), rerun_core::key::ParseKeyError>(())
    /// ```
    pub fn parse(scope: impl Into<Cow<'static, str>>, text: &str) -> Result<Key, ParseKeyError> {
        Ok(Key {
            scope: scope.into(),
            id: readable::parse(text)?,
        })
    }
}

/// How many bytes of a scope or an id `Display` and `Debug` show.
const SHOWN_BYTES: usize = 200;

/// A scope or id as it is shown in logs: control, line-separating and bidirectional-formatting
/// characters and `\` escaped (unless the text is a readable id, which has none raw), and cut after
/// [`SHOWN_BYTES`] with the full length.
struct Shown<'a>(&'a str, bool);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Shown(text, escape) = *self;
        let mut shown = 0;
        for c in text.chars() {
            if text.len() > SHOWN_BYTES && shown + c.len_utf8() > SHOWN_BYTES {
                return write!(f, "…({} bytes)", text.len());
            }
            shown += c.len_utf8();
            if escape && c == '\\' {
                f.write_str("\\\\")?;
            } else if hides_text(c) {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

impl Key {
    /// [`Key::readable_id`] as logs print it: characters a terminal would act on, or draw as
    /// nothing, escaped.
    pub(crate) fn shown_id(&self) -> String {
        Shown(&self.readable_id(), false).to_string()
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key {}/{}",
            Shown(&self.scope, true),
            Shown(&self.readable_id(), false)
        )
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Key({}/{})",
            Shown(&self.scope, true),
            Shown(&self.readable_id(), false)
        )
    }
}

/// Where a key's parts are written; see [`IntoKey`].
pub struct KeyWriter {
    out: CompactString,
}

/// Tags of the built-in parts (and of the escaped form of [`KeyWriter::tagged`]), which a
/// `tagged` part cannot use as they are.
const RESERVED_TAGS: [char; 6] = ['s', 'i', 'b', 'c', 'x', 't'];

impl KeyWriter {
    /// Writes a string part: `s{len}:{text}`.
    pub fn str(&mut self, s: &str) {
        self.head('s', s.len());
        self.out.push_str(s);
    }
    /// Writes an integer part: `i{decimal}` (every integer type encodes alike for one value).
    pub fn int(&mut self, v: i128) {
        self.number('i', v < 0, v.unsigned_abs(), false);
    }
    /// Writes an unsigned integer part too large for `i128`.
    pub fn uint(&mut self, v: u128) {
        self.number('i', false, v, false);
    }
    /// Writes a boolean part: `b1` or `b0`.
    pub fn bool(&mut self, v: bool) {
        self.out.push_str(if v { "b1" } else { "b0" });
    }
    /// Writes a char part: `c{len}:{char}`.
    pub fn char(&mut self, c: char) {
        self.head('c', c.len_utf8());
        self.out.push(c);
    }
    /// Writes a byte-string part: `x{len}:{hex}`, with the length in bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        self.head('x', b.len());
        self.out.reserve(b.len() * 2);
        for &byte in b {
            self.out.push(char::from(HEX[usize::from(byte >> 4)]));
            self.out.push(char::from(HEX[usize::from(byte & 15)]));
        }
    }
    /// Writes `{tag}{len}:`, the head of a part with a length.
    fn head(&mut self, tag: char, len: usize) {
        // A usize always fits in a u128.
        self.number(tag, false, len as u128, true);
    }

    /// Writes `tag`, a `-` when `negative`, `v` in decimal as `Display` writes it, and a `:`
    /// when `colon`: formatted on the stack and appended at once (keys are built on every call,
    /// and the formatting machinery costs more than the few digits of a typical key).
    fn number(&mut self, tag: char, negative: bool, v: u128, colon: bool) {
        // A tag (at most 4 bytes), a sign, u128::MAX's 39 digits, a colon.
        let mut buf = [0u8; 4 + 1 + 39 + 1];
        let mut at = buf.len();
        if colon {
            at -= 1;
            buf[at] = b':';
        }
        // 128-bit division only for the digits above u64's range (at most 20 of them).
        let mut wide = v;
        let mut n = loop {
            match u64::try_from(wide) {
                Ok(n) => break n,
                Err(_) => {
                    at -= 1;
                    buf[at] = b'0' + (wide % 10) as u8;
                    wide /= 10;
                }
            }
        };
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if negative {
            at -= 1;
            buf[at] = b'-';
        }
        let mut utf8 = [0u8; 4];
        let tag = tag.encode_utf8(&mut utf8).as_bytes();
        at -= tag.len();
        buf[at..at + tag.len()].copy_from_slice(tag);
        // ASCII digits after a whole char: always UTF-8.
        if let Ok(text) = std::str::from_utf8(&buf[at..]) {
            self.out.push_str(text);
        }
    }

    /// Writes a tuple of parts: `(`, the parts `f` writes in order, `)`.
    pub fn tuple(&mut self, f: impl FnOnce(&mut KeyWriter)) {
        self.out.push('(');
        f(self);
        self.out.push(')');
    }
    /// Writes a part of another crate's type as a tag and a text: `{tag}{len}:{body}`.
    ///
    /// Give each type its own tag: an ASCII letter other than `s`, `i`, `b`, `c`, `x` and `t`
    /// (which the built-in parts use), and other than `u` (uuids) unless the body is a uuid.
    /// Any other tag is still written injectively, in the escaped form
    /// `t{tag len}:{tag}{len}:{body}`, so no tag can make two values share an encoding.
    ///
    /// ```
    /// use rerun_core::key::{IntoKey, KeyWriter};
    /// use rerun_core::Key;
    ///
    /// struct Day(&'static str);
    /// impl IntoKey for Day {
    ///     fn write_key(&self, w: &mut KeyWriter) {
    ///         w.tagged('d', self.0)
    ///     }
    /// }
    /// assert_eq!(Key::new("s", &Day("2024-05-01")).id(), "d10:2024-05-01");
    /// ```
    pub fn tagged(&mut self, tag: char, body: &str) {
        if tag.is_ascii_alphabetic() && !RESERVED_TAGS.contains(&tag) {
            self.head(tag, body.len());
        } else {
            self.head('t', tag.len_utf8());
            self.head(tag, body.len());
        }
        self.out.push_str(body);
    }
}

/// A value usable as a dedupe key.
///
/// Implemented for `str`, `String`, all integer types, `bool`, `char`, byte slices and arrays,
/// references, `Box`, `Cow`, tuples of up to eight keys, and `uuid::Uuid` with feature `uuid`.
///
/// An implementation writes **one part** for every value: one call of a [`KeyWriter`] method
/// ([`KeyWriter::tagged`] for a type of its own), or one [`KeyWriter::tuple`] holding several.
/// A tuple writes its elements one after another, so an element that wrote no part or several
/// would share its neighbours' boundaries: `(Path(["a"]), Path(["b", "c"]))` and
/// `(Path(["a", "b"]), Path(["c"]))` would be one key. A variable number of parts (a list, a
/// path) goes inside a tuple of its own:
///
/// ```
/// use rerun_core::key::{IntoKey, KeyWriter};
/// use rerun_core::Key;
///
/// struct Path(Vec<&'static str>);
/// impl IntoKey for Path {
///     fn write_key(&self, w: &mut KeyWriter) {
///         w.tuple(|w| self.0.iter().for_each(|segment| w.str(segment)));
///     }
/// }
/// let a = Key::new("files", &(Path(vec!["a"]), Path(vec!["b", "c"])));
/// let b = Key::new("files", &(Path(vec!["a", "b"]), Path(vec!["c"])));
/// assert_ne!(a, b);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used as a rerun key",
    label = "this key expression has type `{Self}`",
    note = "a key is a string, an integer, a bool, a char, bytes, a uuid, or a tuple of these; use a field such as `order.id`, or implement `rerun_core::IntoKey`"
)]
pub trait IntoKey {
    /// Writes this value's canonical parts.
    fn write_key(&self, w: &mut KeyWriter);
}

impl IntoKey for str {
    fn write_key(&self, w: &mut KeyWriter) {
        w.str(self)
    }
}
impl IntoKey for String {
    fn write_key(&self, w: &mut KeyWriter) {
        w.str(self)
    }
}
impl IntoKey for bool {
    fn write_key(&self, w: &mut KeyWriter) {
        w.bool(*self)
    }
}
impl IntoKey for char {
    fn write_key(&self, w: &mut KeyWriter) {
        w.char(*self)
    }
}
impl IntoKey for [u8] {
    fn write_key(&self, w: &mut KeyWriter) {
        w.bytes(self)
    }
}
impl<const N: usize> IntoKey for [u8; N] {
    fn write_key(&self, w: &mut KeyWriter) {
        w.bytes(self)
    }
}
impl IntoKey for Vec<u8> {
    fn write_key(&self, w: &mut KeyWriter) {
        w.bytes(self)
    }
}
impl<T: IntoKey + ?Sized> IntoKey for &T {
    fn write_key(&self, w: &mut KeyWriter) {
        (**self).write_key(w)
    }
}
impl<T: IntoKey + ?Sized> IntoKey for &mut T {
    fn write_key(&self, w: &mut KeyWriter) {
        (**self).write_key(w)
    }
}
impl<T: IntoKey + ?Sized> IntoKey for Box<T> {
    fn write_key(&self, w: &mut KeyWriter) {
        (**self).write_key(w)
    }
}
impl<T: IntoKey + ?Sized> IntoKey for std::sync::Arc<T> {
    fn write_key(&self, w: &mut KeyWriter) {
        (**self).write_key(w)
    }
}
impl IntoKey for Cow<'_, str> {
    fn write_key(&self, w: &mut KeyWriter) {
        w.str(self)
    }
}

macro_rules! int_keys {
    ($($t:ty),*) => {$(
        impl IntoKey for $t {
            fn write_key(&self, w: &mut KeyWriter) { w.int(i128::from(*self)) }
        }
    )*};
}
int_keys!(i8, i16, i32, i64, i128, u8, u16, u32, u64);

impl IntoKey for u128 {
    fn write_key(&self, w: &mut KeyWriter) {
        w.uint(*self)
    }
}
impl IntoKey for usize {
    fn write_key(&self, w: &mut KeyWriter) {
        w.uint(*self as u128)
    }
}
impl IntoKey for isize {
    fn write_key(&self, w: &mut KeyWriter) {
        w.int(*self as i128)
    }
}

macro_rules! tuple_keys {
    ($(($($name:ident),+))*) => {$(
        impl<$($name: IntoKey),+> IntoKey for ($($name,)+) {
            #[allow(non_snake_case)]
            fn write_key(&self, w: &mut KeyWriter) {
                let ($($name,)+) = self;
                w.tuple(|w| { $($name.write_key(w);)+ });
            }
        }
    )*};
}
tuple_keys! {
    (A)
    (A, B)
    (A, B, C)
    (A, B, C, D)
    (A, B, C, D, E)
    (A, B, C, D, E, F)
    (A, B, C, D, E, F, G)
    (A, B, C, D, E, F, G, H)
}

#[cfg(feature = "uuid")]
impl IntoKey for uuid::Uuid {
    fn write_key(&self, w: &mut KeyWriter) {
        let mut buf = uuid::Uuid::encode_buffer();
        w.tagged('u', self.hyphenated().encode_lower(&mut buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_values_never_collide() {
        let keys = [
            Key::new("s", "ab"),
            Key::new("s", &("a", "b")),
            Key::new("s", &("ab",)),
            Key::new("s", &1u8),
            Key::new("s", "1"),
            Key::new("s", &true),
            Key::new("s", &'1'),
            Key::new("s", &[1u8][..]),
            Key::new("s", &(1u8, 2u8)),
            Key::new("s", &12u8),
            Key::new("s", "s1:a"),
            Key::new("s", "a"),
            Key::new("s", &Vec::<u8>::new()),
            Key::new("s", &("",)),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    /// Bytes ending in what looks like a bool part used to run into it: `(xab, b1)` and
    /// `(xabb1)` were one key.
    #[test]
    fn bytes_do_not_run_into_the_next_part() {
        let a = Key::new("s", &(vec![0xabu8], true));
        let b = Key::new("s", &(vec![0xabu8, 0xb1],));
        assert_ne!(a, b);
        assert_eq!(a.id(), "(x1:abb1)");
        assert_eq!(b.id(), "(x2:abb1)");
        assert_eq!(Key::new("s", &[0u8; 0]).id(), "x0:");
    }

    #[test]
    fn unchanged_encodings_keep_their_records() {
        assert_eq!(Key::new("s", "ord_1").id(), "s5:ord_1");
        assert_eq!(Key::new("s", &42u64).id(), "i42");
        assert_eq!(Key::new("s", &-7i32).id(), "i-7");
        assert_eq!(Key::new("s", &true).id(), "b1");
        assert_eq!(Key::new("s", &false).id(), "b0");
        assert_eq!(Key::new("s", &'x').id(), "c1:x");
        assert_eq!(Key::new("s", &("a", 7u8)).id(), "(s1:ai7)");
        assert_eq!(
            Key::new("s", &(u128::MAX, i128::MIN)).id(),
            format!("(i{}i{})", u128::MAX, i128::MIN)
        );
    }

    #[test]
    fn tags_outside_the_free_letters_are_escaped() {
        struct Tagged(char, &'static str);
        impl IntoKey for Tagged {
            fn write_key(&self, w: &mut KeyWriter) {
                w.tagged(self.0, self.1)
            }
        }
        let id = |tag, body| Key::new("s", &Tagged(tag, body)).id().to_owned();
        assert_eq!(id('d', "2024"), "d4:2024");
        assert_eq!(id('U', ""), "U0:");
        assert_eq!(id('u', "ab"), "u2:ab");
        assert_eq!(id('s', "ab"), "t1:s2:ab");
        assert_eq!(id('7', "x"), "t1:71:x");
        assert_eq!(id('é', "x"), "t2:é1:x");
        // A digit tag after an integer would read as more digits.
        assert_ne!(
            Key::new("s", &(1u8, Tagged('2', "x"))),
            Key::new("s", &(12u8, Tagged('d', "x")))
        );
        // A reserved tag does not pass for the built-in part.
        assert_ne!(Key::new("s", &Tagged('s', "ab")), Key::new("s", "ab"));
    }

    #[test]
    fn integer_width_does_not_matter() {
        assert_eq!(Key::new("s", &7u8), Key::new("s", &7i64));
        assert_eq!(Key::new("s", &7usize), Key::new("s", &7u128));
        assert_eq!(Key::new("s", &-7isize).id(), "i-7");
    }

    #[test]
    fn references_and_owned_agree() {
        let owned = String::from("ord_9");
        assert_eq!(Key::new("s", &owned), Key::new("s", "ord_9"));
        assert_eq!(
            Key::new("s", &&owned),
            Key::new("s", &Box::<str>::from("ord_9"))
        );
        assert_eq!(Key::new("s", &[1u8, 2]), Key::new("s", &vec![1u8, 2]));
        assert_eq!(Key::new("s", &[1u8, 2][..]), Key::new("s", &vec![1u8, 2]));
    }

    #[test]
    fn scope_separates_keys() {
        assert_ne!(Key::new("a", "x"), Key::new("b", "x"));
    }

    #[test]
    fn display_escapes_control_characters() {
        let key = Key::new("billing\tcharge", "a\nb\0c\u{1b}[31m\u{202e}\\");
        // The id reads as its readable form: quoted, every control escaped.
        assert_eq!(
            key.to_string(),
            r#"key billing\tcharge/"a\nb\0c\u{1b}[31m\u{202e}\\""#
        );
        assert_eq!(
            format!("{key:?}"),
            r#"Key(billing\tcharge/"a\nb\0c\u{1b}[31m\u{202e}\\")"#
        );
    }

    #[test]
    fn line_separators_and_bidi_marks_read_escaped_and_parse_back() {
        let key = Key::new("s", "a\u{2028}b\u{2029}c\u{61c}d");
        let readable = key.readable_id();
        assert_eq!(readable, r#""a\u{2028}b\u{2029}c\u{61c}d""#);
        assert_eq!(key.to_string(), format!("key s/{readable}"));
        assert_eq!(Key::parse("s", &readable), Ok(key.clone()));
        // The raw characters, typed in quotes, still name the same key.
        assert_eq!(Key::parse("s", "\"a\u{2028}b\u{2029}c\u{61c}d\""), Ok(key));
    }

    #[test]
    fn display_is_bounded() {
        let key = Key::new("s", &"é".repeat(1 << 19));
        let shown = key.to_string();
        assert!(shown.len() < 260, "{} bytes", shown.len());
        assert!(
            shown.ends_with(&format!("…({} bytes)", key.readable_id().len())),
            "{shown}"
        );
        assert!(shown.starts_with("key s/\"éé"), "{shown}");
        let scope: String = "a".repeat(300);
        let key = Key::from_parts(scope, "i1");
        assert_eq!(
            format!("{key:?}"),
            format!("Key({}…(300 bytes)/1)", "a".repeat(200))
        );
        // Exactly at the limit: shown whole.
        let key = Key::new("s", &"b".repeat(SHOWN_BYTES));
        assert_eq!(
            key.to_string(),
            format!("key s/{}", "b".repeat(SHOWN_BYTES))
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// An integer of one of the integer types.
        #[derive(Debug, Clone)]
        enum Int {
            I8(i8),
            I16(i16),
            I32(i32),
            I64(i64),
            I128(i128),
            Isize(isize),
            U8(u8),
            U16(u16),
            U32(u32),
            U64(u64),
            U128(u128),
            Usize(usize),
        }

        impl Int {
            /// The value: sign and magnitude.
            fn value(&self) -> (bool, u128) {
                fn signed(v: i128) -> (bool, u128) {
                    (v < 0, v.unsigned_abs())
                }
                match *self {
                    Int::I8(v) => signed(v.into()),
                    Int::I16(v) => signed(v.into()),
                    Int::I32(v) => signed(v.into()),
                    Int::I64(v) => signed(v.into()),
                    Int::I128(v) => signed(v),
                    Int::Isize(v) => signed(v as i128),
                    Int::U8(v) => (false, v.into()),
                    Int::U16(v) => (false, v.into()),
                    Int::U32(v) => (false, v.into()),
                    Int::U64(v) => (false, v.into()),
                    Int::U128(v) => (false, v),
                    Int::Usize(v) => (false, v as u128),
                }
            }
            fn write(&self, w: &mut KeyWriter) {
                match self {
                    Int::I8(v) => v.write_key(w),
                    Int::I16(v) => v.write_key(w),
                    Int::I32(v) => v.write_key(w),
                    Int::I64(v) => v.write_key(w),
                    Int::I128(v) => v.write_key(w),
                    Int::Isize(v) => v.write_key(w),
                    Int::U8(v) => v.write_key(w),
                    Int::U16(v) => v.write_key(w),
                    Int::U32(v) => v.write_key(w),
                    Int::U64(v) => v.write_key(w),
                    Int::U128(v) => v.write_key(w),
                    Int::Usize(v) => v.write_key(w),
                }
            }
        }

        /// A key value of any supported shape, written through the real `IntoKey` impls.
        #[derive(Debug, Clone)]
        enum Value {
            Str(String),
            OwnedString(String),
            CowStr(String),
            Int(Int),
            Bool(bool),
            Char(char),
            Bytes(Vec<u8>),
            ByteArray([u8; 2]),
            Tagged(char, String),
            #[cfg_attr(not(feature = "uuid"), allow(dead_code))]
            Uuid(u128),
            Tuple(Vec<Value>),
        }

        /// What a value means: two values are the same key exactly when these are equal.
        #[derive(Debug, PartialEq, Eq)]
        enum Meaning {
            Str(String),
            Int(bool, u128),
            Bool(bool),
            Char(char),
            Bytes(Vec<u8>),
            Tagged(char, String),
            Tuple(Vec<Meaning>),
        }

        impl Value {
            fn meaning(&self) -> Meaning {
                match self {
                    Value::Str(s) | Value::OwnedString(s) | Value::CowStr(s) => {
                        Meaning::Str(s.clone())
                    }
                    Value::Int(i) => {
                        let (negative, magnitude) = i.value();
                        Meaning::Int(negative && magnitude != 0, magnitude)
                    }
                    Value::Bool(b) => Meaning::Bool(*b),
                    Value::Char(c) => Meaning::Char(*c),
                    Value::Bytes(b) => Meaning::Bytes(b.clone()),
                    Value::ByteArray(b) => Meaning::Bytes(b.to_vec()),
                    Value::Tagged(tag, body) => Meaning::Tagged(*tag, body.clone()),
                    // A uuid is the tagged part `u` with its hyphenated text.
                    Value::Uuid(u) => Meaning::Tagged('u', uuid_text(*u)),
                    Value::Tuple(parts) => {
                        Meaning::Tuple(parts.iter().map(Value::meaning).collect())
                    }
                }
            }
        }

        #[cfg(feature = "uuid")]
        fn uuid_text(u: u128) -> String {
            uuid::Uuid::from_u128(u).hyphenated().to_string()
        }
        #[cfg(not(feature = "uuid"))]
        fn uuid_text(_: u128) -> String {
            String::new()
        }

        impl IntoKey for Value {
            fn write_key(&self, w: &mut KeyWriter) {
                match self {
                    Value::Str(s) => s.as_str().write_key(w),
                    Value::OwnedString(s) => s.write_key(w),
                    Value::CowStr(s) => Cow::<str>::Borrowed(s).write_key(w),
                    Value::Int(i) => i.write(w),
                    Value::Bool(b) => b.write_key(w),
                    Value::Char(c) => c.write_key(w),
                    Value::Bytes(b) => b.write_key(w),
                    Value::ByteArray(b) => b.write_key(w),
                    Value::Tagged(tag, body) => w.tagged(*tag, body),
                    #[cfg(feature = "uuid")]
                    Value::Uuid(u) => uuid::Uuid::from_u128(*u).write_key(w),
                    #[cfg(not(feature = "uuid"))]
                    Value::Uuid(_) => unreachable!("not generated without feature `uuid`"),
                    // Through the tuple impls themselves.
                    Value::Tuple(p) => match p.as_slice() {
                        [a] => (a,).write_key(w),
                        [a, b] => (a, b).write_key(w),
                        [a, b, c] => (a, b, c).write_key(w),
                        [a, b, c, d] => (a, b, c, d).write_key(w),
                        [a, b, c, d, e] => (a, b, c, d, e).write_key(w),
                        [a, b, c, d, e, f] => (a, b, c, d, e, f).write_key(w),
                        [a, b, c, d, e, f, g] => (a, b, c, d, e, f, g).write_key(w),
                        [a, b, c, d, e, f, g, h] => (a, b, c, d, e, f, g, h).write_key(w),
                        _ => unreachable!("tuples of 1..=8 are generated"),
                    },
                }
            }
        }

        /// Several parts written one after the other, without a tuple around them.
        struct Parts<'a>(&'a [Value]);
        impl IntoKey for Parts<'_> {
            fn write_key(&self, w: &mut KeyWriter) {
                for part in self.0 {
                    part.write_key(w);
                }
            }
        }

        fn id(value: &impl IntoKey) -> String {
            Key::new("s", value).id().to_owned()
        }

        /// Integers of every width, near zero (where values of different types meet) and at
        /// the extremes.
        fn int() -> impl Strategy<Value = Int> {
            prop_oneof![
                (-3i8..=3).prop_map(Int::I8),
                any::<i8>().prop_map(Int::I8),
                (-3i16..=300).prop_map(Int::I16),
                (-3i32..=3).prop_map(Int::I32),
                any::<i64>().prop_map(Int::I64),
                (-3i64..=3).prop_map(Int::I64),
                prop_oneof![Just(i128::MIN), Just(i128::MAX), -3i128..=3].prop_map(Int::I128),
                (-3isize..=3).prop_map(Int::Isize),
                (0u8..=3).prop_map(Int::U8),
                any::<u8>().prop_map(Int::U8),
                (0u16..=300).prop_map(Int::U16),
                (0u32..=3).prop_map(Int::U32),
                prop_oneof![Just(u64::MAX), 0u64..=3].prop_map(Int::U64),
                prop_oneof![
                    Just(u128::MAX),
                    Just(i128::MAX as u128),
                    Just(i128::MAX as u128 + 1),
                    0u128..=3
                ]
                .prop_map(Int::U128),
                (0usize..=3).prop_map(Int::Usize),
            ]
        }

        /// Texts from a small alphabet rich in the encoding's own characters, so that equal
        /// values and look-alikes come up often.
        fn text() -> impl Strategy<Value = String> {
            "[a1:(s)x\u{e9}\n]{0,4}"
        }

        fn tag() -> impl Strategy<Value = char> {
            prop_oneof![
                Just('s'),
                Just('i'),
                Just('b'),
                Just('c'),
                Just('x'),
                Just('t'),
                Just('u'),
                Just('d'),
                Just('D'),
                Just('1'),
                Just(':'),
                Just('('),
                Just('\u{e9}'),
                any::<char>(),
            ]
        }

        fn leaf() -> impl Strategy<Value = Value> {
            let uuid = if cfg!(feature = "uuid") {
                prop_oneof![Just(0u128), Just(1u128), any::<u128>()]
                    .prop_map(Value::Uuid)
                    .boxed()
            } else {
                text().prop_map(Value::Str).boxed()
            };
            prop_oneof![
                text().prop_map(Value::Str),
                text().prop_map(Value::OwnedString),
                text().prop_map(Value::CowStr),
                int().prop_map(Value::Int),
                any::<bool>().prop_map(Value::Bool),
                prop_oneof![Just('1'), Just(':'), Just('\u{e9}'), any::<char>()]
                    .prop_map(Value::Char),
                prop::collection::vec(
                    prop_oneof![
                        Just(0xabu8),
                        Just(0xb1),
                        Just(0xb0),
                        Just(0x31),
                        any::<u8>()
                    ],
                    0..4
                )
                .prop_map(Value::Bytes),
                any::<[u8; 2]>().prop_map(Value::ByteArray),
                (tag(), text()).prop_map(|(t, b)| Value::Tagged(t, b)),
                uuid,
            ]
        }

        fn value() -> impl Strategy<Value = Value> {
            leaf().prop_recursive(3, 24, 8, |inner| {
                prop::collection::vec(inner, 1..=8).prop_map(Value::Tuple)
            })
        }

        /// A value of the same meaning written through other types: other integer widths,
        /// `String` for `&str`, a `Vec` for an array.
        fn retyped(v: &Value) -> Value {
            match v {
                Value::Str(s) => Value::OwnedString(s.clone()),
                Value::OwnedString(s) => Value::CowStr(s.clone()),
                Value::CowStr(s) => Value::Str(s.clone()),
                Value::Int(i) => Value::Int(match i.value() {
                    (true, m) => match i128::try_from(m) {
                        Ok(m) => Int::I128(-m),
                        Err(_) => Int::I128(i128::MIN),
                    },
                    (false, m) => Int::U128(m),
                }),
                Value::ByteArray(b) => Value::Bytes(b.to_vec()),
                Value::Tuple(p) => Value::Tuple(p.iter().map(retyped).collect()),
                other => other.clone(),
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            #[test]
            fn same_key_exactly_when_same_value(a in value(), b in value()) {
                prop_assert_eq!(a.meaning() == b.meaning(), id(&a) == id(&b), "{:?} / {:?}: {} / {}", a, b, id(&a), id(&b));
            }

            /// The readable form reads back as the same key, never holds a raw control
            /// character, and two keys read alike only when they are one key.
            #[test]
            fn the_readable_form_round_trips(a in value(), b in value()) {
                let (ida, idb) = (id(&a), id(&b));
                let (ra, rb) = (readable::readable(&ida), readable::readable(&idb));
                prop_assert!(!ra.starts_with("raw!"), "{} read as {}", ida, ra);
                prop_assert_eq!(readable::parse(&ra).map(String::from), Ok(ida.clone()), "{}", ra);
                prop_assert!(!ra.chars().any(char::is_control), "{:?}", ra);
                prop_assert_eq!(ra == rb, ida == idb);
            }

            /// Any text at all reads back as the id it names (through `raw!` if it is not an
            /// encoding), and parsing never panics on what a person types.
            #[test]
            fn any_id_and_any_typing_are_safe(raw in ".{0,40}", typed in ".{0,40}") {
                let r = readable::readable(&raw);
                prop_assert_eq!(readable::parse(&r).map(String::from), Ok(raw.clone()), "{:?}", r);
                let _ = readable::parse(&typed);
            }

            #[test]
            fn other_types_of_one_value_are_one_key(a in value()) {
                prop_assert_eq!(id(&a), id(&retyped(&a)));
            }

            /// Numbers and lengths are written exactly as `Display` writes them, over every
            /// integer (the encoding of keys already stored must not move).
            #[test]
            fn numbers_are_written_as_display_writes_them(
                v in prop_oneof![any::<i128>(), any::<i64>().prop_map(i128::from), -1000i128..1000],
                u in prop_oneof![any::<u128>(), any::<u64>().prop_map(u128::from), 0u128..1000],
                text in ".{0,40}",
                tag in any::<char>(),
            ) {
                let mut w = KeyWriter { out: CompactString::default() };
                w.int(v);
                w.uint(u);
                w.str(&text);
                w.char(tag);
                w.tagged(tag, &text);
                w.bytes(text.as_bytes());
                let tagged = if tag.is_ascii_alphabetic() && !RESERVED_TAGS.contains(&tag) {
                    format!("{tag}{}:{text}", text.len())
                } else {
                    format!("t{}:{tag}{}:{text}", tag.len_utf8(), text.len())
                };
                let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
                let expected = format!(
                    "i{v}i{u}s{}:{text}c{}:{tag}{tagged}x{}:{hex}",
                    text.len(),
                    tag.len_utf8(),
                    text.len(),
                );
                prop_assert_eq!(w.out.as_str(), expected.as_str());
            }

            /// Parts written back to back read back one way only: no part runs into the next.
            #[test]
            fn concatenated_parts_never_collide(
                a in prop::collection::vec(value(), 0..5),
                b in prop::collection::vec(value(), 0..5),
            ) {
                let same = a.len() == b.len()
                    && a.iter().zip(&b).all(|(x, y)| x.meaning() == y.meaning());
                prop_assert_eq!(same, id(&Parts(&a)) == id(&Parts(&b)));
            }
        }
    }
}
