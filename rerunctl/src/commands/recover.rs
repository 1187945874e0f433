//! `rerunctl recover`: what [`rerun_core::recover`] does, with a progress line and a summary.
//!
//! Reads the in-progress and unknown records only (through
//! [`Store::scan_filtered`](rerun_core::Store::scan_filtered)), releases the claims whose
//! holder is provably dead or whose lease ran out, marks interrupted at-most-once calls
//! unknown, leaves live claims alone, then purges expired records. Every change is fenced, so
//! it is safe beside running services and beside another recovery. `--dry-run` counts what it
//! would do and changes nothing.

use rerun_core::{Recover, Recovery};
use serde::Serialize;

use crate::cli::Context;
use crate::failure::{Failure, Kind};
use crate::output::{self, Table};
use crate::progress::Progress;

/// Long help: what `recover` does, and its JSON document.
pub const ABOUT: &str = "\
Bring the records a crash left behind to a known state, as rerun_core::recover does: release
the claims whose holder is provably dead (on this host) or whose lease ran out, mark
interrupted at-most-once calls unknown, leave live claims alone, purge expired records.
Reads only in-progress and unknown records. Every change is fenced: safe beside running
services and another recovery. --dry-run changes nothing and counts what would change.
Exits 2 when records could not be read (left as they are; `rerunctl ls` names them), after
its summary, as on a store error, after saying what the run had changed before it.

JSON: {\"store\", \"dry_run\", \"scope\" | null, \"scanned\", \"released\", \"marked_unknown\",
\"unknown\", \"live\", \"moved_meanwhile\", \"purged\", \"unreadable\" (records that cannot be read, left
as they are; `rerunctl ls` names them)}";

/// The arguments of `recover`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Count what would change; change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Only records whose scope starts with PREFIX (expired records are then not purged)
    #[arg(long, value_name = "PREFIX")]
    pub scope: Option<String>,
}

#[derive(Serialize)]
struct Document<'a> {
    store: &'a str,
    dry_run: bool,
    scope: Option<&'a str>,
    scanned: u64,
    released: u64,
    marked_unknown: u64,
    unknown: u64,
    live: u64,
    moved_meanwhile: u64,
    purged: u64,
    unreadable: u64,
}

/// Runs `recover`.
pub fn run(ctx: &Context, args: &Args) -> Result<(), Failure> {
    let opened = crate::store::open_to_change(ctx.store.as_deref())?;
    let mut progress = Progress::new(ctx.stderr_is_terminal);
    // What the run had done when it last said, kept for an error that stops it.
    let mut so_far = Recovery::default();
    let verb = if args.dry_run {
        "planning"
    } else {
        "recovering"
    };
    let mut recover =
        Recover::new(&*opened.store)
            .dry_run(args.dry_run)
            .on_page(|now: &Recovery| {
                so_far = *now;
                progress.update(|| {
                    format!(
                        "{verb}: {} claims read, {} released, {} marked unknown, {} live",
                        now.scanned, now.released, now.marked_unknown, now.live
                    )
                })
            });
    if let Some(prefix) = &args.scope {
        recover = recover.scope_prefix(prefix.clone());
    }
    let done = recover.run();
    drop(progress);
    let done = match done {
        Ok(done) => done,
        Err(e) => {
            let failure = opened.failure("recovering", e);
            if args.dry_run || so_far.changed_nothing() {
                return Err(failure);
            }
            let help = format!(
                "before the error it released {} stale claims and marked {} unknown{}; run it again: what it changed stays, and it goes on from there",
                so_far.released,
                so_far.marked_unknown,
                if so_far.purged > 0 {
                    format!(", and purged {} expired records", so_far.purged)
                } else {
                    String::new()
                }
            );
            return Err(failure.help(help));
        }
    };

    if ctx.json {
        output::print_json(&Document {
            store: &opened.name,
            dry_run: args.dry_run,
            scope: args.scope.as_deref(),
            scanned: done.scanned,
            released: done.released,
            marked_unknown: done.marked_unknown,
            unknown: done.unknown,
            live: done.live,
            moved_meanwhile: done.moved_meanwhile,
            purged: done.purged,
            unreadable: done.unreadable,
        })?;
        if done.unreadable > 0 {
            return Err(unreadable(done.unreadable).after_document());
        }
        return Ok(());
    }
    output::print_text(&human(&opened.name, args, &done))?;
    if done.unknown + done.marked_unknown > 0 {
        output::note(
            "unknown outcomes await a decision: `rerunctl ls --status unknown` lists them; check what each did, then `rerunctl forget SCOPE KEY`",
        );
    }
    if done.unreadable > 0 {
        return Err(unreadable(done.unreadable));
    }
    Ok(())
}

/// Exit 2 (a store error), as `ls` does when records cannot be read: a run that left some
/// behind did not bring every record to a known state.
fn unreadable(count: u64) -> Failure {
    Failure::new(
        Kind::Corrupt,
        format!("{count} records cannot be read and were left as they are"),
    )
    .help("`rerunctl ls` names them, `rerunctl show SCOPE KEY` says what is wrong with each (one written by a newer rerun is fine: do not forget it)")
}

/// The summary, one line per count.
fn human(store: &str, args: &Args, done: &Recovery) -> String {
    let (release, mark, purge) = if args.dry_run {
        ("would release", "would mark unknown", "would purge")
    } else {
        ("released", "marked unknown", "purged")
    };
    let scope = args.scope.as_deref().map_or_else(String::new, |p| {
        format!(" (scopes starting with {})", output::scope(p))
    });
    let mut out = format!(
        "{} {}{scope}: {} in-progress and unknown records read\n",
        if args.dry_run {
            "dry run of"
        } else {
            "recovered"
        },
        output::terminal_safe(store),
        done.scanned
    );
    let purged = if args.dry_run || args.scope.is_some() {
        "expired records purged: none by a dry run or a --scope recovery (`rerunctl purge` purges)"
            .to_owned()
    } else {
        format!("{purge}: expired records")
    };
    let rows = [
        (
            done.released,
            format!("{release}: stale claims, their next call runs afresh"),
        ),
        (
            done.marked_unknown,
            format!("{mark}: interrupted at-most-once calls"),
        ),
        (done.live, "live claims left alone".to_owned()),
        (
            done.unknown,
            "unknown outcomes already awaiting a decision".to_owned(),
        ),
        (
            done.moved_meanwhile,
            "moved by another process meanwhile".to_owned(),
        ),
        (done.purged, purged),
        (
            done.unreadable,
            "unreadable records left as they are".to_owned(),
        ),
    ];
    let mut table = Table::new(&[("", true), ("", false)]);
    for (n, what) in rows {
        table.row(vec![n.to_string(), what]);
    }
    // The table's header row is empty: skip it.
    let rendered = table.render();
    for line in rendered.lines().skip(1) {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}
