//! Why a command failed, what to do about it, and its exit status.

use std::io::Write as _;

use rerun_core::{CorruptKind, Error, Key};

use crate::output;

/// Exit status of a command that found no record or that a safety check refused: see the crate
/// docs.
pub const REFUSED: u8 = 1;
/// Exit status of bad usage or a store error (a record that cannot be read is one).
pub const FAILURE: u8 = 2;

/// What kind of failure, which decides the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The record (or scope) was not found. Exit 1.
    NotFound,
    /// A safety check refused the action. Exit 1.
    Refused,
    /// A record cannot be read back: corrupt, or written by a newer rerun. A store error: exit 2.
    Corrupt,
    /// Bad usage: a bad argument, a bad URL, a store URL that names no usable store. Exit 2.
    Usage,
    /// The store failed or could not be reached. Exit 2.
    Store,
    /// Stdout was closed (`rerunctl ls | head`): stop quietly. Exit 0.
    BrokenPipe,
}

impl Kind {
    /// The stable name in JSON error documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::NotFound => "not_found",
            Kind::Refused => "refused",
            Kind::Corrupt => "corrupt",
            Kind::Usage => "usage",
            Kind::Store => "store",
            Kind::BrokenPipe => "broken_pipe",
        }
    }
}

/// A failed command: what happened and what to do.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Which kind, for the exit status.
    pub kind: Kind,
    /// What happened, one sentence.
    pub message: String,
    /// What to do about it.
    pub help: Option<String>,
    /// The command already printed its JSON document (no error document follows).
    pub document_printed: bool,
}

impl Failure {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
            help: None,
            document_printed: false,
        }
    }
    /// Not found (exit 1).
    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure::new(Kind::NotFound, message)
    }
    /// Refused by a safety check (exit 1).
    pub fn refused(message: impl Into<String>) -> Failure {
        Failure::new(Kind::Refused, message)
    }
    /// Bad usage (exit 2).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(Kind::Usage, message)
    }
    /// Stdout is gone.
    pub fn broken_pipe() -> Failure {
        Failure::new(Kind::BrokenPipe, "stdout was closed")
    }
    /// A record that cannot be read back (exit 2, a store error), with the advice that fits
    /// `kind`.
    pub fn corrupt(key: &Key, kind: &CorruptKind) -> Failure {
        let what = format!("{} {}", output::scope(key.scope()), key.readable_id());
        match kind {
            CorruptKind::UnknownVersion { found, supported } => Failure::new(
                Kind::Corrupt,
                format!(
                    "the record of {what} was written by a newer rerun (format version {found}; this rerunctl reads up to version {supported})"
                ),
            )
            .help(
                "use the rerunctl of the rerun release your service runs; the record is probably fine, do not forget it",
            ),
            CorruptKind::ForeignKey(why) => Failure::new(
                Kind::Corrupt,
                format!(
                    "the store holds {what}, a key rerun did not write: {why}; it was left untouched"
                ),
            )
            .help(
                "no call of rerun reaches it and `rerunctl forget` cannot name it: look at it, and delete it if it is not yours, with the store's own client (psql, sqlite3 or redis-cli)",
            ),
            other => Failure::new(
                Kind::Corrupt,
                format!("the record of {what} is corrupt: {other}; it was left untouched"),
            )
            .help(format!(
                "rerun never runs a key's body again on a corrupt record: once you know what its last run did, `rerunctl forget {} {} --yes` lets the next call run afresh",
                output::shell_word(key.scope()),
                output::shell_word(&key.readable_id()),
            )),
        }
    }
    /// A store error (exit 2), with `doing` naming what failed; a corrupt record is described as
    /// [`Failure::corrupt`] does.
    pub fn store(doing: &str, error: Error) -> Failure {
        match &error {
            Error::Corrupt { key, kind, .. } => Failure::corrupt(key, kind),
            Error::Config { message, .. } => {
                Failure::usage(format!("{doing}: {message}")).help(STORE_FORMS)
            }
            Error::Store {
                retryable, message, ..
            } => {
                let help = if *retryable {
                    "check that the server runs and is reachable from here, and the URL (--store, RERUN_STORE); then run the command again"
                } else {
                    "retrying will not help: fix the cause above (credentials, permissions, the database name), or name another store with --store"
                };
                // The store's own message, without its advice: ours follows, for an operator.
                Failure::new(Kind::Store, format!("{doing}: {message}")).help(help)
            }
            _ => Failure::new(Kind::Store, format!("{doing}: {error}")),
        }
    }
    /// Adds what to do.
    pub fn help(mut self, help: impl Into<String>) -> Failure {
        self.help = Some(help.into());
        self
    }
    /// Marks the command's own JSON document as printed.
    pub fn after_document(mut self) -> Failure {
        self.document_printed = true;
        self
    }
    /// Replaces every occurrence of `secrets` in the texts with `***`.
    pub fn scrub(mut self, secrets: &[String]) -> Failure {
        for secret in secrets {
            self.message = self.message.replace(secret.as_str(), "***");
            self.help = self.help.map(|h| h.replace(secret.as_str(), "***"));
        }
        self
    }

    /// The exit status.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            Kind::NotFound | Kind::Refused => REFUSED,
            Kind::Corrupt | Kind::Usage | Kind::Store => FAILURE,
            Kind::BrokenPipe => 0,
        }
    }

    /// Prints the failure on stderr (and, with `--json`, its document on stdout).
    pub fn report(&self, json: bool) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "error: {}", output::terminal_safe(&self.message));
        if let Some(help) = &self.help {
            let _ = writeln!(err, "  help: {}", output::terminal_safe(help));
        }
        if json && !self.document_printed {
            let doc = serde_json::json!({
                "error": {
                    "kind": self.kind.as_str(),
                    "message": self.message,
                    "help": self.help,
                    "exit_code": self.exit_code(),
                }
            });
            let _ = output::print_json(&doc);
        }
    }
}

/// The JSON error document of a usage error clap found (its message is already on stderr),
/// for a script that asked for `--json`.
pub fn usage_document(rendered: &str) {
    let first = rendered.lines().next().unwrap_or_default();
    let message = first.strip_prefix("error: ").unwrap_or(first);
    let help = rendered
        .lines()
        .find_map(|l| l.trim().strip_prefix("tip: "))
        .map(str::to_owned);
    let doc = serde_json::json!({
        "error": {
            "kind": Kind::Usage.as_str(),
            "message": message,
            "help": help.unwrap_or_else(|| "see `rerunctl --help`".to_owned()),
            "exit_code": FAILURE,
        }
    });
    let _ = output::print_json(&doc);
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Failure::broken_pipe()
        } else {
            Failure::new(Kind::Usage, format!("writing the output failed: {e}"))
        }
    }
}

/// The store URLs rerunctl opens, for messages.
pub const STORE_FORMS: &str = "name the store with --store URL (or RERUN_STORE): memory:, sqlite:PATH, postgres://USER@HOST:5432/DB, redis://HOST:6379";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_kinds() {
        assert_eq!(Failure::not_found("x").exit_code(), 1);
        assert_eq!(Failure::refused("x").exit_code(), 1);
        assert_eq!(Failure::usage("x").exit_code(), 2);
        // A record that cannot be read is a store error, not a "not found".
        let key = Key::new("s", "k");
        assert_eq!(
            Failure::corrupt(&key, &CorruptKind::Checksum).exit_code(),
            2
        );
        let newer = CorruptKind::UnknownVersion {
            found: 9,
            supported: 2,
        };
        assert_eq!(Failure::corrupt(&key, &newer).exit_code(), 2);
        let read = Failure::store(
            "reading the record",
            Error::corrupt(&key, CorruptKind::Checksum),
        );
        assert_eq!((read.kind, read.exit_code()), (Kind::Corrupt, 2));
        let store = Failure::store("opening", Error::store_msg(None, "connection refused"));
        assert_eq!((store.kind, store.exit_code()), (Kind::Store, 2));
        let config = Failure::store("opening", Error::config("bad url"));
        assert_eq!(config.exit_code(), 2);
    }

    #[test]
    fn newer_records_are_not_called_corrupt_in_the_advice() {
        let key = Key::new("billing.charge", "evt_1");
        let f = Failure::corrupt(
            &key,
            &CorruptKind::UnknownVersion {
                found: 9,
                supported: 2,
            },
        );
        assert!(f.message.contains("newer rerun"), "{}", f.message);
        assert!(f.help.is_some_and(|h| h.contains("do not forget")));
        let f = Failure::corrupt(&key, &CorruptKind::Checksum);
        assert!(f
            .help
            .is_some_and(|h| h.contains("rerunctl forget billing.charge evt_1 --yes")));
        // A key rerun did not write: no `forget` can reach it, so none is suggested.
        let f = Failure::corrupt(
            &Key::from_parts("billing.charge", "rerun:{billing.charge:s5:evt%3A1}"),
            &CorruptKind::ForeignKey("its name escapes a character as rerun does not".into()),
        );
        assert!(
            f.message.contains("a key rerun did not write"),
            "{}",
            f.message
        );
        assert!(f
            .help
            .is_some_and(|h| h.contains("redis-cli") && !h.contains("rerunctl forget ")));
    }

    #[test]
    fn scrubbing_hides_secrets() {
        let f = Failure::usage("could not log in as app:hunter22").scrub(&["hunter22".into()]);
        assert_eq!(f.message, "could not log in as app:***");
    }
}
