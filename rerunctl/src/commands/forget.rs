//! `rerunctl forget SCOPE KEY`: forget a record, so that its key's next call runs afresh.
//!
//! The operator's way to settle what rerun will not settle on its own: an at-most-once call
//! whose outcome is unknown (after checking what it did), a corrupt record, a result that must
//! not be replayed. Two safety checks come first:
//!
//! - a live claim (in progress, lease running, holder not provably dead) is refused without
//!   `--force`: forgetting it lets a second run start while the first still runs;
//! - it asks before it deletes, on a terminal; without one it refuses unless `--yes`.
//!
//! A record that cannot be read (corrupt) can still be forgotten: that is how it is cleared;
//! but one written by a newer rerun only with `--force`, since it may be a live claim.

use std::ffi::OsString;
use std::io::BufRead as _;
use std::io::Write as _;

use rerun_core::RecordView;
use serde::Serialize;

use crate::cli::Context;
use crate::failure::Failure;
use crate::output::{self, shell_word, RecordJson};

/// Long help: what `forget` does, and its JSON document.
pub const ABOUT: &str = "\
Forget a record, so that its key's next call runs afresh: how an operator settles an
at-most-once call whose outcome is unknown (after checking what it did), or a corrupt record.

Asks first on a terminal; without one, refuses (exit 1) unless --yes. Refuses a live claim (in
progress, lease running, holder not provably dead) unless --force (exit 1): forgetting it would
let a second run start while the first one still runs. A record written by a newer rerun is
refused the same way: this rerunctl cannot tell whether it is a live claim.

KEY is typed as `rerunctl ls` prints it; a text that reads as no key (a UUID) is its text key.
Only the record of the key the text reads as is forgotten, never the text key of the same
text in its place (`7` is the number; the text key is '\"7\"'): run twice, the command
forgets no second record. A record is forgotten only if it is still the one found when it is
deleted.

JSON: {\"store\", \"scope\", \"key\", \"forgotten\": true, \"was\": {the record as in `show`, without
its result} | null (a record that could not be read)}";

/// The arguments of `forget`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The record's scope (billing.charge)
    #[arg(value_name = "SCOPE")]
    pub scope: OsString,
    /// The record's key, as `rerunctl ls` prints it
    #[arg(value_name = "KEY", allow_hyphen_values = true)]
    pub key: OsString,
    /// Do not ask: forget it (needed without a terminal)
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Forget it even if it is a live claim (its holder may still be running its body)
    #[arg(long)]
    pub force: bool,
}

#[derive(Serialize)]
struct Document<'a> {
    store: &'a str,
    scope: &'a str,
    key: String,
    forgotten: bool,
    was: Option<RecordJson>,
}

/// Runs `forget`.
pub fn run(ctx: &Context, args: &Args) -> Result<(), Failure> {
    let target = crate::target::parse(&args.scope, &args.key)?;
    let opened = crate::store::open(ctx.store.as_deref())?;
    // Only a record that was found is forgotten, under the key that has it.
    let found = crate::target::find_exact(&opened, &target)?;
    let key = found.key;
    let typed = format!(
        "{} {}",
        shell_word(key.scope()),
        shell_word(&key.readable_id())
    );
    // A corrupt record cannot be read, but it can be forgotten: that is how it is cleared.
    let record: Option<RecordView> = match found.record {
        Ok(record) => Some(record),
        // A newer rerun's record is probably fine, and may be a live claim this build cannot
        // see: forgetting it is a `--force`, as for a live claim.
        Err(rerun_core::Error::Corrupt {
            kind: kind @ rerun_core::CorruptKind::UnknownVersion { .. },
            ..
        }) if !args.force => {
            // A safety check refusing (exit 1), as for a live claim.
            return Err(Failure::refused(Failure::corrupt(&key, &kind).message).help(format!(
                "use the rerunctl of the rerun release your service runs: this one cannot tell whether the record is a live claim, so it does not forget it without `rerunctl forget {typed} --force`"
            )));
        }
        Err(rerun_core::Error::Corrupt { kind, .. }) => {
            output::note(&format!(
                "note: the record of {typed} cannot be read ({kind}); forgetting it clears it"
            ));
            None
        }
        Err(e) => return Err(opened.failure("reading the record", e)),
    };

    if let Some(r) = record.as_ref().filter(|r| output::is_live_claim(r)) {
        let holder = r
            .holder
            .as_ref()
            .map_or_else(|| "its holder".to_owned(), output::holder_short);
        let lease = r.lease_remaining.map_or_else(String::new, |l| {
            format!(", its lease runs {} more", output::duration(l))
        });
        if !args.force {
            return Err(Failure::refused(format!(
                "{typed} is a live claim ({holder} runs its body{lease}); forgetting it would let a second run start while this one still runs"
            ))
            .help(format!(
                "wait for it to finish (`rerunctl show {typed}`); if you know its holder is gone for good, `rerunctl forget {typed} --force`"
            )));
        }
    }

    if !args.yes {
        let what = match &record {
            Some(r) if r.once && r.status == rerun_core::Status::InProgress => format!(
                "{}, fence {}, at most once: its body may have had its effect",
                output::status_word(r.status),
                r.fence
            ),
            Some(r) => format!("{}, fence {}", output::status_word(r.status), r.fence),
            None => "unreadable".to_owned(),
        };
        if !ctx.can_ask() {
            return Err(Failure::refused(format!(
                "not forgetting {typed} ({what}) without a confirmation, and there is no terminal to ask on"
            ))
            .help(format!("to forget it, `rerunctl forget {typed} --yes`")));
        }
        if !confirm(&format!(
            "Forget {typed} ({what})? Its next call runs afresh. [y/N] "
        ))? {
            return Err(Failure::refused(format!("{typed} was not forgotten")));
        }
    }

    // Forget exactly the record that was shown (and confirmed). A new claim moves the fence
    // on, and `forget_if` leaves that newer record alone; but the holder shown renews and
    // completes under the same fence, so the record is read again first, and left alone if its
    // status changed or it became a live claim again (unless forced) while the question waited.
    if let Some(shown) = &record {
        let now = opened.store.inspect(&key);
        match &now {
            Ok(Some(r)) if r.fence == shown.fence && r.status == shown.status => {
                if !args.force && output::is_live_claim(r) {
                    return Err(Failure::refused(format!(
                        "{typed} became a live claim again while the question waited (its holder renewed its lease): not forgetting it"
                    ))
                    .help(format!(
                        "wait for it to finish (`rerunctl show {typed}`); if you know its holder is gone for good, `rerunctl forget {typed} --force`"
                    )));
                }
            }
            _ => return Err(changed(&opened, &typed, now)),
        }
    }
    // An unreadable
    // record has no fence to hold it to: it is read again just before, and forgotten only if
    // it is still unreadable (a record written meanwhile, readable, is left alone).
    let forgotten = match &record {
        Some(r) => opened.store.forget_if(&key, r.fence),
        None => match opened.store.inspect(&key) {
            // Rewritten meanwhile by a newer rerun (perhaps a live claim): as above.
            Err(rerun_core::Error::Corrupt {
                kind: kind @ rerun_core::CorruptKind::UnknownVersion { .. },
                ..
            }) if !args.force => {
                return Err(Failure::refused(Failure::corrupt(&key, &kind).message).help(format!(
                    "it was rewritten by a newer rerun meanwhile; use the rerunctl of that release, or `rerunctl forget {typed} --force`"
                )))
            }
            Err(rerun_core::Error::Corrupt { .. }) => opened.store.forget(&key),
            now => return Err(changed(&opened, &typed, now)),
        },
    }
    .map_err(|e| opened.failure("forgetting the record", e))?;
    if !forgotten {
        return Err(changed(&opened, &typed, opened.store.inspect(&key)));
    }
    if ctx.json {
        output::print_json(&Document {
            store: &opened.name,
            scope: key.scope(),
            key: key.readable_id(),
            forgotten,
            was: record.as_ref().map(RecordJson::from),
        })
    } else {
        let was = record.as_ref().map_or_else(String::new, |r| {
            format!(
                " (was {}, fence {})",
                output::status_word(r.status),
                r.fence
            )
        });
        output::print_text(&format!(
            "forgot {}{was}: its next call runs afresh\n",
            output::terminal_safe(&typed)
        ))
    }
}

/// Why the record of `typed` was not forgotten, from what reading it again (`now`) found.
fn changed(
    opened: &crate::store::Opened,
    typed: &str,
    now: Result<Option<RecordView>, rerun_core::Error>,
) -> Failure {
    match now {
        Ok(Some(r)) => Failure::refused(format!(
            "{typed} changed before it could be forgotten (now {}, fence {}): not forgetting a record that was not the one shown",
            output::status_word(r.status),
            r.fence
        ))
        .help(format!("look at it again with `rerunctl show {typed}`")),
        Ok(None) => Failure::not_found(format!(
            "{typed} was gone before it could be forgotten: something else forgot or purged it meanwhile"
        )),
        Err(e) => opened.failure("reading the record again", e),
    }
}

/// Asks `question` on stderr and reads the answer from stdin: `y` or `yes` is a yes.
fn confirm(question: &str) -> Result<bool, Failure> {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{}", output::terminal_safe(question));
    let _ = err.flush();
    drop(err);
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::refused(format!("could not read the answer: {e}")))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}
