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
//! bytes in hex (`0xab01`).
//!
//! ## Exit status
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (an `ls` that matches nothing is a success with an empty list) |
//! | 1 | the record was not found, a safety check refused (a live claim without `--force`, no `--yes` and no terminal to ask on, a "no" at the prompt), or a record is corrupt or written by a newer rerun (`ls` lists the others first; `recover` leaves them and prints its summary first) |
//! | 2 | bad usage (unknown flags, a key that does not parse, a store that does not exist) or a store error (unreachable server, refused credentials) |
//!
//! Errors go to stderr and say what to do; with `--json`, stdout also gets one document
//! `{"error": {"kind", "message", "help", "exit_code"}}` unless the command already printed its
//! own (`show` of a corrupt record prints the record, then exits 1; `ls` lists the records it
//! could read, then exits 1 naming those it could not).
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
