//! A one-line, Rust-like rendering of a recorded result, for operators.
//!
//! `Receipt { id: "ch_1", cents: 500, note: Some(None) }`, `[1, 2, 3]`,
//! `{"a": 1, (1, 2): "x"}`, `()`, `None`, `Some(1.5)`, `NaN`, `inf`, `-0.0`, `b"\x00ab"`,
//! `Paid`, `Paid(5)`, `Paid { at: 1 }`. Strings, chars, byte strings and odd names are quoted
//! and escaped, so the output never holds a raw control character (or a line break).

use std::fmt::{self, Write as _};

use super::error::DecodeError;
use super::read::{Head, Reader};

/// Where the rendering goes, with an optional budget of characters.
pub(super) struct Out {
    text: String,
    chars: usize,
    limit: Option<usize>,
    full: bool,
}

/// Why rendering stopped early.
pub(super) enum Stop {
    /// The budget ran out; what fits is in the output.
    Full,
    /// The body is malformed.
    Bad(DecodeError),
}

impl From<DecodeError> for Stop {
    fn from(e: DecodeError) -> Stop {
        Stop::Bad(e)
    }
}

impl From<fmt::Error> for Stop {
    fn from(_: fmt::Error) -> Stop {
        Stop::Full
    }
}

type Done = Result<(), Stop>;

/// The marker appended to a rendering cut short by its budget.
pub(super) const CUT: &str = "…";

impl Out {
    pub(super) fn new(limit: Option<usize>) -> Out {
        Out {
            text: String::new(),
            chars: 0,
            limit,
            full: false,
        }
    }

    /// The text, with [`CUT`] after it if it was cut short.
    pub(super) fn finish(mut self) -> String {
        if self.full {
            self.text.push_str(CUT);
        }
        self.text
    }

    #[inline]
    fn put(&mut self, s: &str) -> Done {
        self.write_str(s).map_err(|_| Stop::Full)
    }

    /// A string literal, escaped as Rust's `Debug` does: no control character stays raw.
    pub(super) fn str_lit(&mut self, s: &str) -> Done {
        write!(self, "{s:?}")?;
        Ok(())
    }

    pub(super) fn float(&mut self, v: f64) -> Done {
        // `Debug` writes the shortest form that reads back exactly, `-0.0`, `inf`, `NaN`.
        write!(self, "{v:?}")?;
        Ok(())
    }

    /// A name: bare when it looks like an identifier, quoted otherwise.
    fn name(&mut self, s: &str) -> Done {
        if !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_') {
            self.put(s)
        } else {
            self.str_lit(s)
        }
    }

    fn bytes_lit(&mut self, bytes: &[u8]) -> Done {
        self.put("b\"")?;
        for &b in bytes {
            match b {
                b'"' => self.put("\\\"")?,
                b'\\' => self.put("\\\\")?,
                b'\n' => self.put("\\n")?,
                b'\r' => self.put("\\r")?,
                b'\t' => self.put("\\t")?,
                0x20..=0x7e => self.put(std::str::from_utf8(&[b]).unwrap_or("?"))?,
                _ => write!(self, "\\x{b:02x}")?,
            }
        }
        self.put("\"")
    }

    /// `[`, the items of a JSON array or map through `item`, `]`.
    pub(super) fn list<T>(
        &mut self,
        open: &str,
        items: impl IntoIterator<Item = T>,
        close: &str,
        mut item: impl FnMut(&mut Out, T) -> Done,
    ) -> Done {
        self.put(open)?;
        for (i, x) in items.into_iter().enumerate() {
            if i > 0 {
                self.put(", ")?;
            }
            item(self, x)?;
        }
        self.put(close)
    }

    pub(super) fn text(&mut self, s: &str) -> Done {
        self.put(s)
    }
}

impl fmt::Write for Out {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.full {
            return Err(fmt::Error);
        }
        if let Some(limit) = self.limit {
            let n = s.chars().count();
            if self.chars + n > limit {
                let room = limit - self.chars;
                let cut = s.char_indices().nth(room).map_or(s.len(), |(i, _)| i);
                self.text.push_str(s.get(..cut).unwrap_or_default());
                self.chars = limit;
                self.full = true;
                return Err(fmt::Error);
            }
            self.chars += n;
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// Renders a version-2 body.
pub(super) fn body(body: &[u8], out: &mut Out) -> Result<(), DecodeError> {
    let mut r = Reader::new(body);
    let rendered = r
        .head()
        .map_err(Stop::Bad)
        .and_then(|head| value(&mut r, head, out));
    match rendered {
        Ok(()) => r.finish(),
        Err(Stop::Full) => Ok(()),
        Err(Stop::Bad(e)) => Err(e),
    }
}

fn next(r: &mut Reader<'_>, out: &mut Out) -> Done {
    let head = r.head()?;
    value(r, head, out)
}

/// Containers recurse through here; everything else is written by [`scalar`], so the frame
/// that repeats once per level stays small.
fn value<'de>(r: &mut Reader<'de>, head: Head<'de>, out: &mut Out) -> Done {
    match head {
        Head::Some => wrapped(r, None, out),
        Head::NewtypeStruct(name) | Head::NewtypeVariant(_, name) => wrapped(r, Some(name), out),
        Head::Seq(n) => items(r, None, n, "[", "]", out),
        Head::Tuple(n) => items(r, None, n, "(", if n == 1 { ",)" } else { ")" }, out),
        Head::TupleStruct(name, n) | Head::TupleVariant(_, name, n) => {
            items(r, Some(name), n, "(", ")", out)
        }
        Head::Map(n) => map(r, n, out),
        Head::Struct(name, n) | Head::StructVariant(_, name, n) => fields(r, name, n, out),
        Head::Run(_) => Err(Stop::Bad(r.malformed("a run of bytes outside a list"))),
        other => scalar(other, out),
    }
}

#[inline(never)]
fn scalar(head: Head<'_>, out: &mut Out) -> Done {
    match head {
        Head::Unit => out.put("()"),
        Head::Bool(v) => out.put(if v { "true" } else { "false" }),
        Head::None => out.put("None"),
        Head::I8(v) => Ok(write!(out, "{v}")?),
        Head::I16(v) => Ok(write!(out, "{v}")?),
        Head::I32(v) => Ok(write!(out, "{v}")?),
        Head::I64(v) => Ok(write!(out, "{v}")?),
        Head::I128(v) => Ok(write!(out, "{v}")?),
        Head::U8(v) => Ok(write!(out, "{v}")?),
        Head::U16(v) => Ok(write!(out, "{v}")?),
        Head::U32(v) => Ok(write!(out, "{v}")?),
        Head::U64(v) => Ok(write!(out, "{v}")?),
        Head::U128(v) => Ok(write!(out, "{v}")?),
        Head::F32(v) => Ok(write!(out, "{v:?}")?),
        Head::F64(v) => out.float(v),
        Head::Char(c) => Ok(write!(out, "{c:?}")?),
        Head::Str(s) => out.str_lit(s),
        Head::Bytes(b) => out.bytes_lit(b),
        Head::UnitStruct(name) | Head::UnitVariant(_, name) => out.name(name),
        _ => Ok(()),
    }
}

#[inline(never)]
fn byte(b: u8, out: &mut Out) -> Done {
    Ok(write!(out, "{b}")?)
}

/// `Some(x)`, `Name(x)`.
fn wrapped(r: &mut Reader<'_>, name: Option<&str>, out: &mut Out) -> Done {
    match name {
        Some(name) => out.name(name)?,
        None => out.put("Some")?,
    }
    out.put("(")?;
    r.enter()?;
    next(r, out)?;
    r.leave();
    out.put(")")
}

fn map(r: &mut Reader<'_>, n: usize, out: &mut Out) -> Done {
    r.enter()?;
    out.put("{")?;
    for i in 0..n {
        if i > 0 {
            out.put(", ")?;
        }
        next(r, out)?;
        out.put(": ")?;
        next(r, out)?;
    }
    r.leave();
    out.put("}")
}

fn fields(r: &mut Reader<'_>, name: &str, n: usize, out: &mut Out) -> Done {
    r.enter()?;
    if !name.is_empty() {
        out.name(name)?;
        out.put(" ")?;
    }
    if n == 0 {
        r.leave();
        return out.put("{}");
    }
    out.put("{ ")?;
    for i in 0..n {
        if i > 0 {
            out.put(", ")?;
        }
        out.name(r.str()?)?;
        out.put(": ")?;
        next(r, out)?;
    }
    r.leave();
    out.put(" }")
}

fn items(
    r: &mut Reader<'_>,
    name: Option<&str>,
    n: usize,
    open: &str,
    close: &str,
    out: &mut Out,
) -> Done {
    r.enter()?;
    if let Some(name) = name {
        out.name(name)?;
    }
    out.put(open)?;
    let mut left = n;
    let mut first = true;
    while left > 0 {
        match r.item_head()? {
            Head::Run(bytes) => {
                left = r.run_fits(bytes, left)?;
                for b in bytes {
                    if !first {
                        out.put(", ")?;
                    }
                    first = false;
                    byte(*b, out)?;
                }
            }
            head => {
                left -= 1;
                if !first {
                    out.put(", ")?;
                }
                first = false;
                value(r, head, out)?;
            }
        }
    }
    r.leave();
    out.put(close)
}
