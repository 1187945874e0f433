//! Whether two bodies hold the same value up to the order of sequence items and map entries.
//!
//! `encode_checked` compares a value's encoding with the encoding of what decodes from it.
//! They are equal byte for byte for almost every type; a `HashMap` or `HashSet` decodes into
//! an instance that iterates in another order, which is still the same value. When the bytes
//! differ, both bodies are brought into a canonical form (the items of every sequence and the
//! entries of every map sorted by their canonical bytes) and compared again. Tuples, structs
//! and variants keep their order: it is fixed by their type.

use super::error::DecodeError;
use super::format::{self, tag};
use super::read::{Head, Reader};

/// Whether `a` and `b` hold the same value, sequences and maps taken as unordered.
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    match (canonical(a), canonical(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn canonical(body: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut r = Reader::new(body);
    let mut out = Vec::with_capacity(body.len());
    let before = r.rest();
    let head = r.head()?;
    value(&mut r, before, head, &mut out)?;
    r.finish()?;
    Ok(out)
}

/// The bytes read between `before` and where `r` is now.
fn read_since<'de>(r: &Reader<'de>, before: &'de [u8]) -> &'de [u8] {
    before
        .get(..before.len() - r.rest().len())
        .unwrap_or_default()
}

/// Writes the canonical form of the value whose head was read from `before` on.
fn value<'de>(
    r: &mut Reader<'de>,
    before: &'de [u8],
    head: Head<'de>,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    out.extend_from_slice(read_since(r, before));
    match head {
        Head::Some | Head::NewtypeStruct(_) | Head::NewtypeVariant(..) => {
            r.enter()?;
            next(r, out)?;
            r.leave();
        }
        Head::Tuple(n) | Head::TupleStruct(_, n) | Head::TupleVariant(_, _, n) => {
            r.enter()?;
            let mut left = n;
            while left > 0 {
                let before = r.rest();
                match r.item_head()? {
                    Head::Run(bytes) => {
                        left = r.run_fits(bytes, left)?;
                        out.extend_from_slice(read_since(r, before));
                    }
                    head => {
                        left -= 1;
                        value(r, before, head, out)?;
                    }
                }
            }
            r.leave();
        }
        Head::Seq(n) => {
            r.enter()?;
            // How many items of each byte value the runs held (allocated at the first run).
            let mut counts: Vec<usize> = Vec::new();
            let mut bytes_seen = 0usize;
            let mut items = Vec::new();
            let mut spans = Vec::new();
            let mut left = n;
            while left > 0 {
                let before = r.rest();
                match r.item_head()? {
                    Head::Run(bytes) => {
                        left = r.run_fits(bytes, left)?;
                        bytes_seen += bytes.len();
                        counts.resize(256, 0);
                        for &b in bytes {
                            if let Some(c) = counts.get_mut(usize::from(b)) {
                                *c += 1;
                            }
                        }
                    }
                    head => {
                        left -= 1;
                        let start = items.len();
                        value(r, before, head, &mut items)?;
                        spans.push((start, items.len()));
                    }
                }
            }
            r.leave();
            if bytes_seen > 0 {
                out.push(tag::U8_RUN);
                format::put_varint64(out, bytes_seen as u64);
                for (b, &c) in counts.iter().enumerate() {
                    out.extend(std::iter::repeat_n(b as u8, c));
                }
            }
            sorted(&items, &mut spans, out);
        }
        Head::Map(n) => {
            r.enter()?;
            let mut entries = Vec::new();
            let mut spans = Vec::with_capacity(n);
            for _ in 0..n {
                let start = entries.len();
                next(r, &mut entries)?;
                next(r, &mut entries)?;
                spans.push((start, entries.len()));
            }
            r.leave();
            sorted(&entries, &mut spans, out);
        }
        Head::Struct(_, n) | Head::StructVariant(_, _, n) => {
            r.enter()?;
            for _ in 0..n {
                let name = r.str()?;
                format::put_varint64(out, name.len() as u64);
                out.extend_from_slice(name.as_bytes());
                next(r, out)?;
            }
            r.leave();
        }
        _ => {}
    }
    Ok(())
}

fn next(r: &mut Reader<'_>, out: &mut Vec<u8>) -> Result<(), DecodeError> {
    let before = r.rest();
    let head = r.head()?;
    value(r, before, head, out)
}

/// Appends the spans of `buf` in byte order.
fn sorted(buf: &[u8], spans: &mut [(usize, usize)], out: &mut Vec<u8>) {
    let span = |&(a, b): &(usize, usize)| buf.get(a..b).unwrap_or_default();
    spans.sort_unstable_by(|x, y| span(x).cmp(span(y)));
    for s in spans.iter() {
        out.extend_from_slice(span(s));
    }
}
