//! The readable form of a key: how people read and type a key (logs, `rerunctl`), one-to-one
//! with the canonical encoding.
//!
//! | value | encoding | readable |
//! |---|---|---|
//! | `"evt_42"` | `s6:evt_42` | `evt_42` |
//! | `"42"`, `"a b"`, `"true"` | `s2:42`, … | `"42"`, `"a b"`, `"true"` |
//! | `42`, `-7` | `i42`, `i-7` | `42`, `-7` |
//! | `true` | `b1` | `true` |
//! | `'x'` | `c1:x` | `'x'` |
//! | `[0xAB, 0x01]` | `x2:ab01` | `0xab01` |
//! | `("a", 7)` | `(s1:ai7)` | `(a, 7)` |
//! | `("a",)` | `(s1:a)` | `(a,)` |
//! | a uuid | `u36:67e5…` | `u!"67e5…"` |
//! | `tagged('d', "2024-05-01")` | `d10:2024-05-01` | `d!"2024-05-01"` |
//!
//! A string is written bare when it starts with a letter or `_` and holds only letters, digits
//! and `_ . : @ / + = -` (and is not `true` or `false`); otherwise it is quoted, with `\"`,
//! `\\`, `\n`, `\r`, `\t`, `\0` and `\u{…}` escapes, so a readable key never holds a raw
//! control, line-separating or bidirectional-formatting character
//! ([`crate::printable::hides_text`]). An id that is not a canonical encoding (written by hand
//! into a store) reads as `raw!"…"`.

use std::fmt::Write as _;

use compact_str::CompactString;

use super::KeyWriter;

/// One part of an encoded id.
enum Part<'a> {
    Str(&'a str),
    Int(&'a str),
    Bool(bool),
    Char(char),
    Bytes(&'a str),
    Tuple(Vec<Part<'a>>),
    Tagged(char, &'a str),
}

/// How many tuples deep a readable key may nest. An encoded id read from a store may hold
/// anything; one nested deeper is shown in its raw form rather than walked on the stack, and
/// a readable key nested deeper does not parse.
const MAX_NESTING: usize = 256;
// The parser's error message names the limit.
const _: () = assert!(MAX_NESTING == 256);

/// Reads `{len}:`, the length as rerun writes it (digits, no sign, no leading zero), and the
/// position of its colon.
fn length(rest: &str) -> Option<(usize, usize)> {
    let colon = rest.find(':')?;
    let len: usize = rest[..colon].parse().ok()?;
    if rest[..colon].starts_with('+') || (colon > 1 && rest.starts_with('0')) {
        return None;
    }
    Some((len, colon))
}

/// Reads `{len}:` and the `len` bytes after it. A length past the end of the text (however
/// large: an id read from a store may claim any length) reads as no part.
fn sized(rest: &str) -> Option<(&str, &str)> {
    let (len, colon) = length(rest)?;
    let end = colon.checked_add(1)?.checked_add(len)?;
    let body = rest.get(colon + 1..end)?;
    Some((body, &rest[end..]))
}

/// The first part of `s` and what follows it; `depth` is how many tuples it is inside.
fn part(s: &str, depth: usize) -> Option<(Part<'_>, &str)> {
    let mut chars = s.chars();
    let tag = chars.next()?;
    let rest = chars.as_str();
    match tag {
        's' => sized(rest).map(|(b, r)| (Part::Str(b), r)),
        'i' => {
            let end = rest
                .char_indices()
                .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
                .map_or(rest.len(), |(i, _)| i);
            let digits = &rest[..end];
            let body = digits.strip_prefix('-').unwrap_or(digits);
            // As rerun writes an integer: no leading zero, no `-0`, within 128 bits.
            let canonical = !body.is_empty()
                && (body == "0" || !body.starts_with('0'))
                && digits != "-0"
                && (digits.parse::<i128>().is_ok() || digits.parse::<u128>().is_ok());
            canonical.then_some((Part::Int(digits), &rest[end..]))
        }
        'b' => match rest.as_bytes().first() {
            Some(b'1') => Some((Part::Bool(true), &rest[1..])),
            Some(b'0') => Some((Part::Bool(false), &rest[1..])),
            _ => None,
        },
        'c' => {
            let (body, r) = sized(rest)?;
            let mut cs = body.chars();
            let c = cs.next()?;
            cs.next().is_none().then_some((Part::Char(c), r))
        }
        'x' => {
            let (len, colon) = length(rest)?;
            let end = len.checked_mul(2)?.checked_add(colon + 1)?;
            let hex = rest.get(colon + 1..end)?;
            hex.bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                .then_some((Part::Bytes(hex), &rest[end..]))
        }
        '(' if depth < MAX_NESTING => {
            let mut items = Vec::new();
            let mut r = rest;
            loop {
                if let Some(after) = r.strip_prefix(')') {
                    return (!items.is_empty()).then_some((Part::Tuple(items), after));
                }
                let (p, next) = part(r, depth + 1)?;
                items.push(p);
                r = next;
            }
        }
        't' => {
            let (tag, r) = sized(rest)?;
            let mut tc = tag.chars();
            let t = tc.next()?;
            // Only a tag that cannot be written bare is escaped (`KeyWriter::tagged`).
            if tc.next().is_some()
                || (t.is_ascii_alphabetic() && !super::RESERVED_TAGS.contains(&t))
            {
                return None;
            }
            let (body, r) = sized(r)?;
            Some((Part::Tagged(t, body), r))
        }
        t if t.is_ascii_alphabetic() => sized(rest).map(|(b, r)| (Part::Tagged(t, b), r)),
        _ => None,
    }
}

/// Whether a string can be written bare.
fn is_bare(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.:@/+=-".contains(c))
        && s != "true"
        && s != "false"
}

fn quote_into(out: &mut String, s: &str, delimiter: char) {
    out.push(delimiter);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if c == delimiter => {
                out.push('\\');
                out.push(c);
            }
            c if super::hides_text(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(delimiter);
}

fn render(part: &Part<'_>, out: &mut String) {
    match part {
        Part::Str(s) if is_bare(s) => out.push_str(s),
        Part::Str(s) => quote_into(out, s, '"'),
        Part::Int(digits) => out.push_str(digits),
        Part::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Part::Char(c) => quote_into(out, c.encode_utf8(&mut [0; 4]), '\''),
        Part::Bytes(hex) => {
            out.push_str("0x");
            out.push_str(hex);
        }
        Part::Tuple(items) => {
            out.push('(');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render(item, out);
            }
            if items.len() == 1 {
                out.push(',');
            }
            out.push(')');
        }
        Part::Tagged(tag, body) => {
            if tag.is_ascii_alphabetic() {
                out.push(*tag);
            } else {
                quote_into(out, tag.encode_utf8(&mut [0; 4]), '\'');
            }
            out.push('!');
            quote_into(out, body, '"');
        }
    }
}

/// The readable form of an encoded id (see the module docs).
pub(crate) fn readable(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    // `part` reads only the forms rerun writes: an id in another form (a length with a
    // leading zero, an integer wider than 128 bits), read from a store, is shown raw, never as
    // the readable form of another key. The rendering is read back to make sure of it.
    if let Some((p, "")) = part(id, 0) {
        render(&p, &mut out);
        if parse(&out).is_ok_and(|back| back == id) {
            return out;
        }
        out.clear();
    }
    out.push_str("raw!");
    quote_into(&mut out, id, '"');
    out
}

/// A readable key that does not parse, with where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseKeyError {
    /// Byte offset in the text.
    pub at: usize,
    /// What was expected there.
    pub expected: &'static str,
}

impl std::fmt::Display for ParseKeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at byte {}: expected {}", self.at, self.expected)
    }
}

impl std::error::Error for ParseKeyError {}

struct Parser<'a> {
    text: &'a str,
    at: usize,
    /// How many tuples the parser is inside.
    depth: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }
    fn fail<T>(&self, expected: &'static str) -> Result<T, ParseKeyError> {
        Err(ParseKeyError {
            at: self.at,
            expected,
        })
    }
    fn skip_spaces(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start_matches(' ').len();
    }
    fn eat(&mut self, c: char) -> bool {
        if self.rest().starts_with(c) {
            self.at += c.len_utf8();
            true
        } else {
            false
        }
    }

    /// A quoted text after its opening delimiter, to the closing one.
    fn quoted(&mut self, delimiter: char) -> Result<String, ParseKeyError> {
        let mut out = String::new();
        loop {
            let Some(c) = self.rest().chars().next() else {
                return self.fail("a closing quote");
            };
            self.at += c.len_utf8();
            match c {
                c if c == delimiter => return Ok(out),
                '\\' => {
                    let Some(e) = self.rest().chars().next() else {
                        return self.fail("an escape");
                    };
                    self.at += e.len_utf8();
                    match e {
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        '0' => out.push('\0'),
                        '\\' | '"' | '\'' => out.push(e),
                        'u' => {
                            let rest = self.rest();
                            let Some(close) = rest.strip_prefix('{').and_then(|r| r.find('}'))
                            else {
                                return self.fail("`{hex}` after `\\u`");
                            };
                            let hex = &rest[1..close + 1];
                            let Some(c) =
                                u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)
                            else {
                                return self.fail("a unicode scalar value in `\\u{…}`");
                            };
                            out.push(c);
                            self.at += close + 2;
                        }
                        _ => {
                            return self
                                .fail("one of the escapes \\n \\r \\t \\0 \\\\ \\\" \\' \\u{…}")
                        }
                    }
                }
                c => out.push(c),
            }
        }
    }

    fn value(&mut self, w: &mut KeyWriter) -> Result<(), ParseKeyError> {
        self.skip_spaces();
        let rest = self.rest();
        let Some(first) = rest.chars().next() else {
            return self.fail("a key");
        };
        match first {
            '"' => {
                self.at += 1;
                let s = self.quoted('"')?;
                w.str(&s);
            }
            '\'' => {
                self.at += 1;
                let s = self.quoted('\'')?;
                let mut cs = s.chars();
                let (Some(c), None) = (cs.next(), cs.next()) else {
                    return self.fail("one character between single quotes");
                };
                if self.eat('!') {
                    if !self.eat('"') {
                        return self.fail("a quoted body after `!`");
                    }
                    let body = self.quoted('"')?;
                    w.tagged(c, &body);
                } else {
                    w.char(c);
                }
            }
            '(' => {
                if self.depth >= MAX_NESTING {
                    return self.fail("a key nested at most 256 tuples deep");
                }
                self.at += 1;
                self.depth += 1;
                let mut err = None;
                let mut count = 0;
                w.tuple(|w| loop {
                    self.skip_spaces();
                    if self.eat(')') {
                        break;
                    }
                    if let Err(e) = self.value(w) {
                        err = Some(e);
                        break;
                    }
                    count += 1;
                    self.skip_spaces();
                    if self.eat(',') {
                        continue;
                    }
                    if !self.eat(')') {
                        err = Some(ParseKeyError {
                            at: self.at,
                            expected: "`,` or `)`",
                        });
                    }
                    break;
                });
                self.depth -= 1;
                if let Some(e) = err {
                    return Err(e);
                }
                if count == 0 {
                    return self.fail("at least one item in a tuple");
                }
            }
            c if c == '0' && rest.starts_with("0x") => {
                let hex: &str = &rest[2..];
                let end = hex
                    .find(|c: char| !c.is_ascii_hexdigit())
                    .unwrap_or(hex.len());
                let digits = &hex[..end];
                if digits.len() % 2 != 0 {
                    return self.fail("an even number of hex digits after `0x`");
                }
                let Some(bytes) = crate::hex::decode(digits) else {
                    return self.fail("hex digits after `0x`");
                };
                w.bytes(&bytes);
                self.at += 2 + end;
            }
            c if c.is_ascii_digit() || c == '-' => {
                let end = rest
                    .char_indices()
                    .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
                    .map_or(rest.len(), |(i, _)| i);
                let digits = &rest[..end];
                match digits.parse::<i128>() {
                    Ok(v) => w.int(v),
                    Err(_) => match digits.parse::<u128>() {
                        Ok(v) => w.uint(v),
                        Err(_) => {
                            return self
                                .fail("an integer (or quote a text that starts with a digit)")
                        }
                    },
                }
                self.at += end;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "_.:@/+=-".contains(c)))
                    .unwrap_or(rest.len());
                let word = &rest[..end];
                self.at += end;
                if self.eat('!') {
                    let mut tag = word.chars();
                    let (Some(t), None) = (tag.next(), tag.next()) else {
                        if word == "raw" {
                            return self.fail("`raw!\"…\"` alone, not inside another key");
                        }
                        return self.fail("a one-letter tag before `!`");
                    };
                    if !self.eat('"') {
                        return self.fail("a quoted body after `!`");
                    }
                    let body = self.quoted('"')?;
                    w.tagged(t, &body);
                } else {
                    match word {
                        "true" => w.bool(true),
                        "false" => w.bool(false),
                        s => w.str(s),
                    }
                }
            }
            _ => return self.fail("a key: text, a number, true/false, 'c', 0x…, (…) or tag!\"…\""),
        }
        Ok(())
    }
}

/// The encoded id of a readable key (see the module docs).
pub(crate) fn parse(text: &str) -> Result<CompactString, ParseKeyError> {
    let mut p = Parser {
        text,
        at: 0,
        depth: 0,
    };
    p.skip_spaces();
    if p.rest().starts_with("raw!\"") {
        p.at += 5;
        let id = p.quoted('"')?;
        p.skip_spaces();
        return if p.rest().is_empty() {
            Ok(CompactString::from(id))
        } else {
            p.fail("the end of the key")
        };
    }
    let mut w = KeyWriter {
        out: CompactString::with_capacity(text.len() + 8),
    };
    p.value(&mut w)?;
    p.skip_spaces();
    if !p.rest().is_empty() {
        return p.fail("the end of the key");
    }
    Ok(w.out)
}

#[cfg(test)]
mod tests {
    use crate::Key;

    /// An id read from a store may claim any length: one past the end of the text, however
    /// large, shows the raw id (a length that wrapped around would read as another key's form).
    #[test]
    fn oversized_lengths_show_the_raw_id() {
        assert_eq!(Key::from_parts("s", "x1:ab").readable_id(), "0xab");
        for id in [
            "s18446744073709551615:",
            "s18446744073709551614:ab",
            "x9223372036854775809:ab",
            "x18446744073709551615:",
            "c18446744073709551615:a",
            "t1:d18446744073709551615:a",
            "(s18446744073709551615:)",
        ] {
            let key = Key::from_parts("s", id);
            assert!(key.readable_id().starts_with("raw!"), "{id}: {key}");
            assert_eq!(Key::parse("s", &key.readable_id()).unwrap().id(), id);
        }
    }

    /// An id in a form rerun does not write, read from a store, shows raw: its readable form
    /// would otherwise read back as another id (another key for `rerunctl show` or `forget`).
    #[test]
    fn non_canonical_ids_show_the_raw_id() {
        for id in [
            "x01:ab",
            "x+1:ab",
            "s01:a",
            "i340282366920938463463374607431768211456",
            "i-170141183460469231731687303715884105729",
            "t1:d1:x",
            "(x01:ab)",
        ] {
            let key = Key::from_parts("s", id);
            let shown = key.readable_id();
            assert!(shown.starts_with("raw!"), "{id}: {shown}");
            assert_eq!(Key::parse("s", &shown).unwrap().id(), id);
        }
    }

    /// Tuples nest up to 256 deep both ways; a deeper id shows raw rather than walking the
    /// stack, and deeper text is an error, not a stack overflow.
    #[test]
    fn nesting_is_bounded() {
        let nested = |n: usize, inner: &str| format!("{}{inner}{}", "(".repeat(n), ")".repeat(n));
        // A tuple of one is written `(x,)`.
        let text = |n: usize| format!("{}1{}", "(".repeat(n), ",)".repeat(n));
        let key = Key::from_parts("s", nested(256, "i1"));
        assert_eq!(key.readable_id(), text(256));
        assert_eq!(Key::parse("s", &key.readable_id()).unwrap(), key);

        let deep = Key::from_parts("s", nested(100_000, "i1"));
        assert!(deep.readable_id().starts_with("raw!\"((("));
        assert_eq!(Key::parse("s", &deep.readable_id()).unwrap(), deep);

        let err = Key::parse("s", &text(257)).unwrap_err();
        assert_eq!(err.at, 256);
        assert!(err.expected.contains("256"), "{err}");
        assert!(Key::parse("s", &text(100_000)).is_err());
    }
}
