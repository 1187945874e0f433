//! Where a scan's page ends: the last row's key, as stored.
//!
//! rerun writes every key as two text columns of valid UTF-8, and a cursor names such a key as
//! every store's does ([`encode_cursor`]). A row written by something else may hold a blob in
//! a key column, or text that is not UTF-8 (the table's columns take either). A scan reads past
//! such a row (it is unreadable, the rest of the page is not), so a page that ends on it must
//! name its exact bytes, or the next page would start before it again: such a cursor is `~`,
//! then each column's type and value (`t` text and `b` blob in hex, `i` an integer, `r` a
//! float's bits in hex, `n` NULL), separated by `:`. No cursor of [`encode_cursor`] starts with
//! `~` (it starts with the scope's length).

use std::fmt::Write as _;

use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};

use crate::error::{CorruptKind, Error};
use crate::hex::{decode as unhex, encode as hex};
use crate::key::Key;
use crate::store::{decode_cursor, encode_cursor, Unreadable};

/// One key column's stored value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Stored {
    Null,
    Integer(i64),
    Real(f64),
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

impl Stored {
    fn of(value: ValueRef<'_>) -> Stored {
        match value {
            ValueRef::Null => Stored::Null,
            ValueRef::Integer(i) => Stored::Integer(i),
            ValueRef::Real(f) => Stored::Real(f),
            ValueRef::Text(t) => Stored::Text(t.to_vec()),
            ValueRef::Blob(b) => Stored::Blob(b.to_vec()),
        }
    }

    /// The value as text for a person to read: invalid UTF-8 replaced.
    fn lossy(&self) -> String {
        match self {
            Stored::Null => String::new(),
            Stored::Integer(i) => i.to_string(),
            Stored::Real(f) => f.to_string(),
            Stored::Text(b) | Stored::Blob(b) => String::from_utf8_lossy(b).into_owned(),
        }
    }

    /// What is wrong with the value as a key column, or `None` when it is valid text.
    fn fault(&self) -> Option<String> {
        match self {
            Stored::Text(t) if std::str::from_utf8(t).is_ok() => None,
            Stored::Text(t) => Some(format!("text that is not UTF-8 (bytes {})", hex(t))),
            Stored::Blob(b) => Some(format!("a blob (bytes {})", hex(b))),
            Stored::Integer(i) => Some(format!("the integer {i}")),
            Stored::Real(f) => Some(format!("the number {f}")),
            Stored::Null => Some("NULL".to_owned()),
        }
    }

    fn encode(&self, out: &mut String) {
        match self {
            Stored::Null => out.push('n'),
            Stored::Integer(i) => {
                let _ = write!(out, "i{i}");
            }
            Stored::Real(f) => {
                let _ = write!(out, "r{:016x}", f.to_bits());
            }
            Stored::Text(t) => {
                out.push('t');
                out.push_str(&hex(t));
            }
            Stored::Blob(b) => {
                out.push('b');
                out.push_str(&hex(b));
            }
        }
    }

    fn decode(s: &str) -> Option<Stored> {
        let (tag, rest) = s.split_at_checked(1)?;
        match tag {
            "n" if rest.is_empty() => Some(Stored::Null),
            "i" => rest.parse().ok().map(Stored::Integer),
            "r" if rest.len() == 16 => u64::from_str_radix(rest, 16)
                .ok()
                .map(|bits| Stored::Real(f64::from_bits(bits))),
            "t" => unhex(rest).map(Stored::Text),
            "b" => unhex(rest).map(Stored::Blob),
            _ => None,
        }
    }
}

impl ToSql for Stored {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Stored::Null => ValueRef::Null,
            Stored::Integer(i) => ValueRef::Integer(*i),
            Stored::Real(f) => ValueRef::Real(*f),
            // Bound as text, byte for byte: SQLite compares text keys by their bytes.
            Stored::Text(t) => ValueRef::Text(t),
            Stored::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

/// A row's key columns as a scan reads them.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum RowKey {
    /// Both columns hold valid text: a key of rerun's.
    Key(Key),
    /// Something else: the exact values, for the cursor.
    Raw(Stored, Stored),
}

impl RowKey {
    /// Reads the key columns `scope` and `id` (a copy of the stored values only when one is not
    /// valid text).
    pub(super) fn read(scope: ValueRef<'_>, id: ValueRef<'_>) -> RowKey {
        match (scope, id) {
            (ValueRef::Text(s), ValueRef::Text(i)) => {
                match (std::str::from_utf8(s), std::str::from_utf8(i)) {
                    (Ok(s), Ok(i)) => RowKey::Key(Key::from_parts(s.to_owned(), i.to_owned())),
                    _ => RowKey::Raw(Stored::of(scope), Stored::of(id)),
                }
            }
            _ => RowKey::Raw(Stored::of(scope), Stored::of(id)),
        }
    }

    /// For a row whose key is not text: the row as a scan names it (invalid UTF-8 replaced)
    /// and what is wrong with its key.
    pub(super) fn not_text(&self) -> Option<Unreadable> {
        let RowKey::Raw(scope, id) = self else {
            return None;
        };
        let faults: Vec<String> = [("scope", scope), ("id", id)]
            .into_iter()
            .filter_map(|(column, v)| v.fault().map(|f| format!("its {column} is {f}")))
            .collect();
        Some(Unreadable {
            key: Key::from_parts(scope.lossy(), id.lossy()),
            kind: CorruptKind::ForeignKey(format!(
                "{} (the row is named with invalid UTF-8 replaced)",
                faults.join(", ")
            )),
        })
    }

    /// The cursor of a page that ends on this row.
    pub(super) fn cursor(&self) -> String {
        match self {
            RowKey::Key(key) => encode_cursor(key),
            RowKey::Raw(scope, id) => {
                let mut out = String::from("~");
                scope.encode(&mut out);
                out.push(':');
                id.encode(&mut out);
                out
            }
        }
    }

    /// Parses [`RowKey::cursor`].
    pub(super) fn from_cursor(cursor: &str) -> Result<RowKey, Error> {
        let Some(raw) = cursor.strip_prefix('~') else {
            return decode_cursor(cursor).map(RowKey::Key);
        };
        raw.split_once(':')
            .and_then(|(scope, id)| Some(RowKey::Raw(Stored::decode(scope)?, Stored::decode(id)?)))
            .ok_or_else(|| Error::config(format!("{cursor:?} is not a scan cursor of this store")))
    }

    /// The two values a page after this row binds (`?1`, `?2`).
    pub(super) fn params(&self) -> (Stored, Stored) {
        match self {
            RowKey::Key(key) => (
                Stored::Text(key.scope().as_bytes().to_vec()),
                Stored::Text(key.id().as_bytes().to_vec()),
            ),
            RowKey::Raw(scope, id) => (scope.clone(), id.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stored() -> impl Strategy<Value = Stored> {
        prop_oneof![
            Just(Stored::Null),
            any::<i64>().prop_map(Stored::Integer),
            any::<u64>().prop_map(|bits| Stored::Real(f64::from_bits(bits))),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Stored::Text),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Stored::Blob),
        ]
    }

    proptest! {
        /// Every stored key round-trips through its cursor to the same values (a float by its
        /// bits, NaN included).
        #[test]
        fn a_raw_cursor_names_the_exact_values(scope in stored(), id in stored()) {
            let row = RowKey::Raw(scope, id);
            let back = RowKey::from_cursor(&row.cursor()).unwrap();
            let bits = |r: &RowKey| match r {
                RowKey::Raw(s, i) => [s, i].map(|v| match v {
                    Stored::Real(f) => Stored::Integer(f.to_bits() as i64),
                    other => other.clone(),
                }),
                RowKey::Key(_) => unreachable!(),
            };
            prop_assert_eq!(bits(&back), bits(&row));
        }

        /// Text keys keep the cursor every store writes, and any string parses to a cursor
        /// or to a typed error, never a panic.
        #[test]
        fn text_keys_keep_the_common_cursor(scope in ".{0,12}", id in ".{0,12}", junk in "\\PC{0,20}") {
            let key = Key::from_parts(scope, id);
            let row = RowKey::Key(key.clone());
            prop_assert_eq!(row.cursor(), encode_cursor(&key));
            prop_assert_eq!(RowKey::from_cursor(&row.cursor()).unwrap(), row);
            let _ = RowKey::from_cursor(&junk);
            let _ = RowKey::from_cursor(&format!("~{junk}"));
        }
    }

    #[test]
    fn a_key_that_is_not_text_is_named_and_described() {
        let row = RowKey::read(ValueRef::Text(b"s"), ValueRef::Blob(&[0x00, 0xff]));
        let named = row.not_text().unwrap();
        assert_eq!(named.key, Key::from_parts("s", "\0\u{fffd}"));
        let kind = named.kind.to_string();
        assert!(kind.contains("its id is a blob (bytes 00ff)"), "{kind}");
        let row = RowKey::read(ValueRef::Text(&[0xc3]), ValueRef::Text(b"k"));
        let kind = row.not_text().unwrap().kind.to_string();
        assert!(
            kind.contains("its scope is text that is not UTF-8 (bytes c3)"),
            "{kind}"
        );
        assert_eq!(
            RowKey::read(ValueRef::Text(b"s"), ValueRef::Text(b"k")),
            RowKey::Key(Key::from_parts("s", "k"))
        );
        assert!(RowKey::from_cursor("~x:n").is_err());
        assert!(RowKey::from_cursor("~t0:n").is_err());
        assert!(RowKey::from_cursor("~tzz:n").is_err());
    }
}
