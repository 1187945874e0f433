//! Dedupe keys: a scope plus a canonical encoding of the key's parts.
//!
//! The encoding is written by hand, not derived from `std::hash::Hash`, so the same values give
//! the same key in every process, build and machine. Every part is tagged with its kind and
//! length-prefixed where it has a length, so distinct values never encode alike:
//!
//! | value | encoding |
//! |---|---|
//! | `"ord_1"` (str, String) | `s5:ord_1` |
//! | `42` (any integer type) | `i42` |
//! | `true` | `b1` |
//! | `'x'` | `c1:x` |
//! | `[0xAB, 0x01]` (bytes) | `xab01` |
//! | `("a", 7)` (tuple) | `(s1:ai7)` |

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// A dedupe key: the scope it lives in and the canonical encoding of its value.
///
/// ```
/// use rerun_core::Key;
/// let key = Key::new("billing.charge", &("cus_1", 42u64));
/// assert_eq!(key.scope(), "billing.charge");
/// assert_eq!(key.id(), "(s5:cus_1i42)");
/// assert_eq!(key, Key::new("billing.charge", &("cus_1", 42u32)));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    scope: Cow<'static, str>,
    id: String,
}

impl Key {
    /// The key of `value` in `scope`.
    pub fn new<K: IntoKey + ?Sized>(scope: impl Into<Cow<'static, str>>, value: &K) -> Key {
        let mut writer = KeyWriter {
            out: String::with_capacity(24),
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
            id: id.into(),
        }
    }

    /// The scope (namespace) of the key.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The canonical encoding of the key's value.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key {}/{}", self.scope, self.id)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({}/{})", self.scope, self.id)
    }
}

/// Where a key's parts are written; see [`IntoKey`].
pub struct KeyWriter {
    out: String,
}

impl KeyWriter {
    /// Writes a string part.
    pub fn str(&mut self, s: &str) {
        let _ = write!(self.out, "s{}:", s.len());
        self.out.push_str(s);
    }
    /// Writes an integer part (every integer type encodes alike for the same value).
    pub fn int(&mut self, v: i128) {
        let _ = write!(self.out, "i{v}");
    }
    /// Writes an unsigned integer part too large for `i128`.
    pub fn uint(&mut self, v: u128) {
        let _ = write!(self.out, "i{v}");
    }
    /// Writes a boolean part.
    pub fn bool(&mut self, v: bool) {
        self.out.push_str(if v { "b1" } else { "b0" });
    }
    /// Writes a char part.
    pub fn char(&mut self, c: char) {
        let _ = write!(self.out, "c{}:{c}", c.len_utf8());
    }
    /// Writes a byte-string part, hex encoded.
    pub fn bytes(&mut self, b: &[u8]) {
        self.out.push('x');
        for byte in b {
            let _ = write!(self.out, "{byte:02x}");
        }
    }
    /// Writes a tuple of parts: `f` writes the parts in order.
    pub fn tuple(&mut self, f: impl FnOnce(&mut KeyWriter)) {
        self.out.push('(');
        f(self);
        self.out.push(')');
    }
    /// Writes an already tagged, self-delimiting part (for `IntoKey` impls of other crates' types).
    pub fn tagged(&mut self, tag: char, body: &str) {
        let _ = write!(self.out, "{tag}{}:", body.len());
        self.out.push_str(body);
    }
}

/// A value usable as a dedupe key.
///
/// Implemented for `str`, `String`, all integer types, `bool`, `char`, byte slices and arrays,
/// references, `Box`, `Cow`, tuples of up to eight keys, and `uuid::Uuid` with feature `uuid`.
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
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
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
    }

    #[test]
    fn scope_separates_keys() {
        assert_ne!(Key::new("a", "x"), Key::new("b", "x"));
    }
}
