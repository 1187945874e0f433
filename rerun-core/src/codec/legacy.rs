//! Version 1: results recorded as serde_json, by earlier builds. They are still read and
//! rendered; nothing writes them any more.
//!
//! serde_json is built with `float_roundtrip`, so a finite float reads back as exactly the
//! float that was written. What JSON itself lost when such a record was written (`Some(None)`
//! stored as `null`, a non-finite float stored as `null`) cannot be recovered.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::render::{Out, Stop};
use crate::error::CorruptKind;

pub(super) fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, CorruptKind> {
    serde_json::from_slice(body).map_err(|e| CorruptKind::Decode(e.to_string()))
}

/// Renders a version-1 body: JSON's values in the same notation as version 2 (`null` stays
/// `null`: it may have been `None`, `()` or a non-finite float).
pub(super) fn render(body: &[u8], out: &mut Out) -> Result<(), CorruptKind> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        CorruptKind::Record(format!(
            "the result's version-1 body is not valid JSON: {e}"
        ))
    })?;
    match value_of(&value, out) {
        Ok(()) | Err(Stop::Full) => Ok(()),
        Err(Stop::Bad(e)) => Err(e.into()),
    }
}

fn value_of(v: &Value, out: &mut Out) -> Result<(), Stop> {
    match v {
        Value::Null => out.text("null"),
        Value::Bool(b) => out.text(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => out.text(&u.to_string()),
            (_, Some(i), _) => out.text(&i.to_string()),
            (_, _, Some(f)) => out.float(f),
            _ => out.text(&n.to_string()),
        },
        Value::String(s) => out.str_lit(s),
        Value::Array(items) => out.list("[", items, "]", |out, item| value_of(item, out)),
        Value::Object(map) => out.list("{", map, "}", |out, (k, v)| {
            out.str_lit(k)?;
            out.text(": ")?;
            value_of(v, out)
        }),
    }
}
