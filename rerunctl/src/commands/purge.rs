//! `rerunctl purge`: delete completed records past their ttl.
//!
//! Deletes in batches through [`Store::purge_expired`](rerun_core::Store::purge_expired)
//! until a batch comes back short, with a progress line on a terminal. Expiry is decided by
//! the store on its own clock, and an expired record no longer replays, so purging changes no
//! call's outcome, except an at-most-once call's, whose record is answered while it exists:
//! purged, its next call runs the body. (Redis expires its records by itself: there, purge
//! deletes nothing.)

use serde::Serialize;

use crate::cli::Context;
use crate::failure::Failure;
use crate::output;
use crate::progress::Progress;

/// Long help: what `purge` does, and its JSON document.
pub const ABOUT: &str = "\
Delete completed records past their ttl, in batches, with a progress line on a terminal.
Expiry is decided by the store on its own clock; an expired record no longer replays, so
purging changes no call's outcome, except an at-most-once (`once`) call's: its record is
answered while it exists, past its ttl too, and once purged its next call runs the body.
Redis expires records by itself: there, nothing is left to purge.

JSON: {\"store\", \"purged\"}";

/// Records deleted per store call.
const BATCH: usize = 1000;

/// The arguments of `purge`.
#[derive(Debug, clap::Args)]
pub struct Args {}

#[derive(Serialize)]
struct Document<'a> {
    store: &'a str,
    purged: u64,
}

/// Runs `purge`.
pub fn run(ctx: &Context, _args: &Args) -> Result<(), Failure> {
    let opened = crate::store::open_to_change(ctx.store.as_deref())?;
    let mut progress = Progress::new(ctx.stderr_is_terminal);
    let mut purged = 0u64;
    loop {
        let n = opened
            .store
            .purge_expired(BATCH)
            .map_err(|e| opened.failure("purging expired records", e).help(format!(
                "{purged} expired records were deleted before this; running `rerunctl purge` again goes on where it stopped"
            )))?;
        purged += n;
        progress.update(|| format!("purging: {purged} expired records deleted"));
        if n < BATCH as u64 {
            break;
        }
    }
    drop(progress);
    if ctx.json {
        output::print_json(&Document {
            store: &opened.name,
            purged,
        })
    } else {
        output::print_text(&format!(
            "purged {purged} expired records from {}\n",
            output::terminal_safe(&opened.name)
        ))
    }
}
