//! One module per subcommand: its arguments (`Args`), its long help (`ABOUT`, with its JSON
//! document), and `run`, which prints the command's output and returns how it ended.

pub mod completions;
pub mod forget;
pub mod ls;
pub mod purge;
pub mod recover;
pub mod show;
pub mod stats;

use crate::cli::{Command, Context};
use crate::failure::Failure;

/// Runs `command`.
pub fn run(ctx: &Context, command: &Command) -> Result<(), Failure> {
    match command {
        Command::Ls(args) => ls::run(ctx, args),
        Command::Show(args) => show::run(ctx, args),
        Command::Forget(args) => forget::run(ctx, args),
        Command::Recover(args) => recover::run(ctx, args),
        Command::Purge(args) => purge::run(ctx, args),
        Command::Stats(args) => stats::run(ctx, args),
        Command::Completions(args) => completions::run(ctx, args),
    }
}
