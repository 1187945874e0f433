//! # rerunctl: the operator's command line for rerun stores
//!
//! `rerunctl` opens a rerun store by URL and shows or settles the idempotency records in it,
//! without the application's code: which claims are stuck, what a key recorded, which
//! at-most-once calls died with an unknown outcome, and how many records each scope holds.
//!
//! ```text
//! rerunctl ls [--scope PREFIX] [--status STATUS]… [--older-than 10m] [--limit N] [--results]
//! rerunctl show SCOPE KEY
//! rerunctl forget SCOPE KEY [--yes] [--force]
//! rerunctl recover [--dry-run] [--scope PREFIX]
//! rerunctl purge
//! rerunctl stats [--scope PREFIX]
//! rerunctl completions SHELL
//! ```
//!
//! Every command takes `--store URL` (else `RERUN_STORE`, else SQLite at
//! `.rerun/rerun.sqlite3` under the current directory) and `--json`, before or after the
//! subcommand. Each subcommand's module documents what it does and its JSON document.
//!
//! ## Keys
//!
//! A key prints in its readable form ([`rerun_core::Key::readable_id`]) and is typed back the
//! same way: a plain text as itself (`evt_42`), a text that would read as something else in
//! quotes (`'"42"'` in a shell), numbers bare (`42`), tuples in parentheses (`'(cus_1, 42)'`),
//! bytes in hex (`0xab01`). A plain text key can also be typed as itself: `show` and `forget`
//! look up the text key of what was typed when it reads as no key (a UUID) or as a key with no
//! record (`1001`, read as a number first).
//!
//! ## Statuses
//!
//! Statuses print (tables, JSON `status` fields, the keys of `stats`) as `--status` takes
//! them: `in-progress`, `completed`, `unknown`, `released`.
//!
//! ## A store that does not exist yet
//!
//! No SQLite file at the path (the default `.rerun/rerun.sqlite3` included), or no rerun table
//! in the PostgreSQL database: nothing is created, a warning on stderr says that nothing
//! exists there, and the commands see an empty store (`ls` and `stats` succeed with nothing,
//! `show` and `forget` find nothing); `recover` and `purge`, which set out to change it, are
//! refused (exit 2).
//!
//! ## Exit status
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (an `ls` that matches nothing is a success with an empty list; a store that does not exist yet reads as an empty one, with a warning) |
//! | 1 | the record was not found, or a safety check refused (a live claim without `--force`, no `--yes` and no terminal to ask on, a "no" at the prompt, a record of a newer rerun without `--force`) |
//! | 2 | bad usage (unknown flags, a store URL that names no usable store, a store of another schema version) or a store error (unreachable server, refused credentials, a record that is corrupt or written by a newer rerun: `ls` lists the others first; `recover` leaves them and prints its summary first) |
//!
//! Errors go to stderr and say what to do; with `--json`, stdout also gets one document
//! `{"error": {"kind", "message", "help", "exit_code"}}` unless the command already printed its
//! own (`show` of a corrupt record prints the record, then exits 2; `ls` lists the records it
//! could read, then exits 2 naming those it could not).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cli;
mod commands;
mod failure;
mod output;
mod progress;
mod store;
mod target;

use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::Cli;
use crate::failure::Kind;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; usage errors to stderr with 2.
            let _ = e.print();
            if e.use_stderr() && std::env::args_os().any(|a| a == "--json") {
                failure::usage_document(&e.render().to_string());
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(failure::FAILURE));
        }
    };
    let ctx = cli::Context::new(&cli);
    match commands::run(&ctx, &cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) if failure.kind == Kind::BrokenPipe => ExitCode::SUCCESS,
        Err(failure) => {
            failure.report(ctx.json);
            ExitCode::from(failure.exit_code())
        }
    }
}
