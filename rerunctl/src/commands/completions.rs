//! `rerunctl completions SHELL`: a completion script for bash, zsh, fish, elvish or
//! PowerShell, printed on stdout.
//!
//! ```text
//! rerunctl completions bash > ~/.local/share/bash-completion/completions/rerunctl
//! rerunctl completions zsh > ~/.zfunc/_rerunctl
//! rerunctl completions fish > ~/.config/fish/completions/rerunctl.fish
//! ```

use clap::CommandFactory as _;
use clap_complete::Shell;
use serde::Serialize;

use crate::cli::{Cli, Context};
use crate::failure::Failure;
use crate::output;

/// Long help: what `completions` prints.
pub const ABOUT: &str = "\
Print a shell completion script on stdout.

  rerunctl completions bash > ~/.local/share/bash-completion/completions/rerunctl
  rerunctl completions zsh > ~/.zfunc/_rerunctl
  rerunctl completions fish > ~/.config/fish/completions/rerunctl.fish

Opens no store. JSON: {\"shell\", \"script\"}";

/// The arguments of `completions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}

#[derive(Serialize)]
struct Document {
    shell: String,
    script: String,
}

/// Runs `completions`.
pub fn run(ctx: &Context, args: &Args) -> Result<(), Failure> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "rerunctl", &mut script);
    let script = String::from_utf8_lossy(&script).into_owned();
    if ctx.json {
        output::print_json(&Document {
            shell: args.shell.to_string(),
            script,
        })
    } else {
        output::print_text(&script)
    }
}
