//! The command line: global options, the subcommands, and what every command is given.

use std::io::IsTerminal as _;

use clap::{Parser, Subcommand};

use crate::commands::{completions, forget, ls, purge, recover, show, stats};

/// The exit status section of `--help`, also in the crate docs and the README.
const EXIT_STATUS: &str = "\
Exit status:
  0  success (an `ls` that matches nothing is a success with an empty list; so are
     `ls` and `stats` on a store that does not exist yet: a warning says so, nothing
     is created, and it reads as an empty store)
  1  the record was not found; a safety check refused (a live claim without --force,
     no --yes and no terminal to ask on, a \"no\" at the prompt, a record of a newer
     rerun without --force)
  2  bad usage (unknown flags, a store URL that names no usable store, `recover` or
     `purge` of a store that does not exist, a store of another schema version) or a store error (unreachable server, refused credentials, a
     record that is corrupt or was written by a newer rerun: `show` prints what it can
     read, `ls` lists the records it could read, `recover` prints its summary, then
     each exits 2)

Keys print as the commands take them: a plain text as itself (evt_42), a text that
reads as something else in quotes ('\"42\"'), numbers bare (42), tuples in parentheses
('(cus_1, 42)'), bytes in hex (0xab01). A plain text key can also be typed as itself
(1001, a UUID): when the text reads as no key, or as a key with no record, `show`
looks up its text key; `forget` takes only the key the text reads as, and says how to
type the text key when that one has the record.

Statuses print as --status takes them: in-progress, completed, unknown, released.

With --json, every command prints one JSON document on stdout (see each command's
--help); errors add {\"error\": {\"kind\", \"message\", \"help\", \"exit_code\"}}.";

/// The exit status in one line, under every command's help.
const EXIT_SHORT: &str = "Exit status: 0 success; 1 not found or refused by a safety check; 2 bad usage or a store error, a corrupt record included (`rerunctl --help` says more).";

/// Inspect and settle the idempotency records of a rerun store.
///
/// Opens the store named by --store (or RERUN_STORE, or SQLite at .rerun/rerun.sqlite3 under
/// the current directory): `memory:`, `sqlite:PATH`, `postgres://…`, `redis://…`.
#[derive(Debug, Parser)]
#[command(name = "rerunctl", version, propagate_version = true, after_long_help = EXIT_STATUS, after_help = EXIT_SHORT)]
pub struct Cli {
    /// The store: memory:, sqlite:PATH, postgres://…, redis://… [default: $RERUN_STORE, else
    /// sqlite:.rerun/rerun.sqlite3 under the current directory]
    #[arg(long, global = true, value_name = "URL")]
    pub store: Option<String>,
    /// Print one JSON document on stdout instead of text, for scripts
    #[arg(long, global = true)]
    pub json: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands, one module each under `commands/`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List records: scope, key, status, fence, age, holder and whether it is alive
    #[command(long_about = ls::ABOUT, after_help = EXIT_SHORT)]
    Ls(ls::Args),
    /// Show one record whole, its recorded result rendered readably
    #[command(long_about = show::ABOUT, after_help = EXIT_SHORT)]
    Show(show::Args),
    /// Forget a record, so that its key's next call runs afresh (asks first)
    #[command(long_about = forget::ABOUT, after_help = EXIT_SHORT)]
    Forget(forget::Args),
    /// Release the claims of dead holders, mark interrupted at-most-once calls unknown, purge
    /// expired records
    #[command(long_about = recover::ABOUT, after_help = EXIT_SHORT)]
    Recover(recover::Args),
    /// Delete completed records past their ttl
    #[command(long_about = purge::ABOUT, after_help = EXIT_SHORT)]
    Purge(purge::Args),
    /// Count records by scope and status; the oldest in-progress and unknown records
    #[command(long_about = stats::ABOUT, after_help = EXIT_SHORT)]
    Stats(stats::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[command(long_about = completions::ABOUT, after_help = EXIT_SHORT)]
    Completions(completions::Args),
}

/// What every command is given: the global options and what the terminal allows.
#[derive(Debug, Clone)]
pub struct Context {
    /// `--store`, if given.
    pub store: Option<String>,
    /// `--json`.
    pub json: bool,
    /// Whether stdin is a terminal (a prompt can be answered).
    pub stdin_is_terminal: bool,
    /// Whether stderr is a terminal (prompts and progress bars can be shown).
    pub stderr_is_terminal: bool,
}

impl Context {
    /// The context of a parsed command line.
    pub fn new(cli: &Cli) -> Context {
        Context {
            store: cli.store.clone(),
            json: cli.json,
            stdin_is_terminal: std::io::stdin().is_terminal(),
            stderr_is_terminal: std::io::stderr().is_terminal(),
        }
    }

    /// Whether a person can answer a question: stdin and stderr are both terminals.
    pub fn can_ask(&self) -> bool {
        self.stdin_is_terminal && self.stderr_is_terminal
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_go_before_or_after_the_subcommand() {
        for args in [
            &["rerunctl", "--store", "memory:", "--json", "ls"][..],
            &["rerunctl", "ls", "--store", "memory:", "--json"][..],
            &["rerunctl", "--json", "ls", "--store=memory:"][..],
        ] {
            let cli = Cli::try_parse_from(args).map_err(|e| e.to_string());
            let cli = cli.as_ref().map(|c| (c.store.as_deref(), c.json));
            assert_eq!(cli, Ok((Some("memory:"), true)), "{args:?}");
        }
    }

    #[test]
    fn usage_errors_exit_2() {
        let err = Cli::try_parse_from(["rerunctl", "ls", "--status", "done"]).err();
        assert_eq!(err.map(|e| e.exit_code()), Some(2));
        let err = Cli::try_parse_from(["rerunctl", "show", "only.scope"]).err();
        assert_eq!(err.map(|e| e.exit_code()), Some(2));
    }
}
