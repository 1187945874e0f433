//! `rerunctl show SCOPE KEY`: one record whole.
//!
//! Status, fence, holder with its liveness, lease or expiry, fingerprint, and the recorded
//! result rendered readably and whole. A record whose result cannot be read back (corrupt, or
//! written by a newer rerun) is shown as far as it can be, then the command exits 2, as for a
//! store error.

use std::ffi::OsString;
use std::fmt::Write as _;

use rerun_core::holder::Liveness;
use rerun_core::{RecordView, Status};
use serde::Serialize;

use crate::cli::Context;
use crate::failure::Failure;
use crate::output::{self, RecordJson, ResultJson};

/// Long help: what `show` prints, and its JSON document.
pub const ABOUT: &str = "\
Show one record whole: status, fence, holder with its liveness, lease or expiry, fingerprint,
and the recorded result rendered readably (`Receipt { id: \"ch_1\", cents: 500 }`), whole.

KEY is typed as `rerunctl ls` prints it: evt_42, '\"42\"', 42, '(cus_1, 42)', 0xab01; a plain
text key also as itself (1001, a UUID): when the text reads as no key, or as a key with no
record, its text key is looked up.
Exits 1 when there is no such record, and 2 when the record cannot be read back (corrupt, or
written by a newer rerun): it is then shown as far as it can be.

JSON: {\"store\", \"scope\", \"key\", \"status\", \"fence\", \"once\", \"age_ms\", \"holder\" | null,
\"holder_alive\" | null, \"live\", \"lease_remaining_ms\", \"expires_in_ms\", \"fingerprint\" (hex),
\"result\": {\"bytes\", \"rendered\", \"cut\": false, \"corrupt\": {\"kind\", \"message\"} | null} | null}";

/// The arguments of `show`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The record's scope (billing.charge)
    #[arg(value_name = "SCOPE")]
    pub scope: OsString,
    /// The record's key, as `rerunctl ls` prints it (a plain text key also as itself)
    #[arg(value_name = "KEY", allow_hyphen_values = true)]
    pub key: OsString,
}

#[derive(Serialize)]
struct Document<'a> {
    store: &'a str,
    #[serde(flatten)]
    record: RecordJson,
    fingerprint: String,
    result: Option<ResultJson>,
}

/// Runs `show`.
pub fn run(ctx: &Context, args: &Args) -> Result<(), Failure> {
    let target = crate::target::parse(&args.scope, &args.key)?;
    let opened = crate::store::open(ctx.store.as_deref())?;
    let record = crate::target::find(&opened, &target)?
        .record
        .map_err(|e| opened.failure("reading the record", e))?;
    let (result, corrupt) = match record.result.as_deref() {
        Some(bytes) => {
            let (json, corrupt) = ResultJson::render(bytes, None);
            (Some(json), corrupt)
        }
        None => (None, None),
    };
    if ctx.json {
        output::print_json(&Document {
            store: &opened.name,
            record: RecordJson::from(&record),
            fingerprint: record.fingerprint.to_hex(),
            result,
        })?;
    } else {
        output::print_text(&human(&record, result.as_ref()))?;
    }
    match corrupt {
        Some(kind) => Err(Failure::corrupt(&record.key, &kind).after_document()),
        None => Ok(()),
    }
}

/// The record as `field  value` lines.
fn human(r: &RecordView, result: Option<&ResultJson>) -> String {
    let mut lines: Vec<(&str, String)> = vec![
        ("scope", output::scope(r.key.scope()).into_owned()),
        ("key", r.key.readable_id()),
        ("status", status_line(r)),
        ("fence", r.fence.to_string()),
        (
            "once",
            if r.once {
                "yes (at-most-once: its body never starts twice on its own)".to_owned()
            } else {
                "no".to_owned()
            },
        ),
    ];
    lines.push((
        "holder",
        match &r.holder {
            None => "-".to_owned(),
            Some(h) => {
                let liveness = match h.liveness() {
                    Liveness::Alive => "alive",
                    Liveness::Dead => "dead (its process is gone)",
                    Liveness::Unknown => {
                        "unknown (another host, boot or PID namespace: only its lease tells)"
                    }
                };
                format!(
                    "{}, attempt {}: {liveness}",
                    output::holder_short(h),
                    h.attempt
                )
            }
        },
    ));
    match r.status {
        Status::InProgress => lines.push((
            "lease",
            match r.lease_remaining {
                Some(left) => format!("runs {} more", output::duration(left)),
                None => {
                    "ran out: the next call (or `rerunctl recover`) takes the claim over".to_owned()
                }
            },
        )),
        Status::Completed => lines.push((
            "expires",
            match r.expires_in {
                Some(left) => format!("in {}", output::duration(left)),
                None => "expired: `rerunctl purge` deletes it".to_owned(),
            },
        )),
        Status::Released | Status::Unknown => {}
    }
    lines.push((
        "age",
        r.age
            .map_or_else(|| "unknown".to_owned(), |a| output::duration(a) + " ago"),
    ));
    lines.push(("fingerprint", r.fingerprint.to_hex()));
    if let Some(result) = result {
        let size = format!(" ({} bytes)", result.bytes);
        lines.push(("result", result.human() + &size));
    }
    let mut out = String::new();
    for (name, value) in lines {
        let _ = writeln!(out, "{name:<12} {value}");
    }
    out
}

/// The status and what it means for the key's next call.
fn status_line(r: &RecordView) -> String {
    let meaning = match r.status {
        Status::InProgress if output::is_live_claim(r) => "a live claim: its body runs",
        Status::InProgress => "a stale claim: its holder is gone or its lease ran out",
        Status::Completed => "its result is recorded and replayed",
        Status::Released => "given back after a failed attempt: the next call runs afresh",
        Status::Unknown => {
            "an at-most-once call died mid-body: check what it did, then `rerunctl forget` it"
        }
    };
    format!("{} ({meaning})", output::status_word(r.status))
}
