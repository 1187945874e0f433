//! Which store to open (`--store`, else `RERUN_STORE`, else the SQLite default under the
//! current directory), and opening it as it is: with `rerun_core::open_url_existing`, which
//! creates, migrates and upgrades nothing (no table, file or schema made by mistake, no codec
//! version raised above what the services read, no journal mode switched, no upgrade sweep), and
//! refuses a store of another schema version than this build's, or otherwise unusable.
//!
//! A store that does not exist yet (no SQLite file at the path, no rerun table in the
//! PostgreSQL database) holds no record: it is not created, a warning on stderr says that
//! nothing exists there, and the commands run on an empty store of this process's memory
//! instead, so that `ls` lists nothing, `stats` counts nothing, and `show` and `forget` find
//! nothing. `recover` and `purge`, which set out to change the store, are refused instead
//! ([`open_to_change`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rerun_core::{DynStore, Error, MemoryStore, DEFAULT_SQLITE_PATH};

use crate::failure::{Failure, STORE_FORMS};

/// Where the store's URL came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Flag,
    Env,
    Default,
}

/// An open store.
pub struct Opened {
    /// The store.
    pub store: Arc<dyn DynStore>,
    /// The store's own description, without secrets.
    pub name: String,
    /// The secrets of its URL, to scrub from any later message.
    pub secrets: Vec<String>,
    /// Nothing exists at the store's URL yet: `store` is an empty stand-in, and a warning said
    /// so.
    pub missing: bool,
}

impl Opened {
    /// A store failure while `doing` something, with the URL's secrets scrubbed.
    pub fn failure(&self, doing: &str, error: rerun_core::Error) -> Failure {
        Failure::store(doing, error).scrub(&self.secrets)
    }
}

/// Opens the existing store that `flag` (`--store`), `RERUN_STORE` or the default names, as it
/// is.
pub fn open(flag: Option<&str>) -> Result<Opened, Failure> {
    open_as(flag, Purpose::Read)
}

/// [`open`], for a command that sets out to change the store (`recover`, `purge`): a store
/// that does not exist is refused (exit 2), not read as empty. A recovery run from the wrong
/// directory, or of a mistyped path, that "recovered nothing" with success would leave the
/// claims it was meant for stuck, and a scheduled one would do so for good.
pub fn open_to_change(flag: Option<&str>) -> Result<Opened, Failure> {
    open_as(flag, Purpose::Change)
}

/// What a command opens a store for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Read,
    Change,
}

fn open_as(flag: Option<&str>, purpose: Purpose) -> Result<Opened, Failure> {
    let (url, source) = choose(flag)?;
    let secrets = secrets_of(&url);
    let shown = rerun_core::redact(&url);
    let scrub = |text: String| {
        secrets
            .iter()
            .fold(text, |text, secret| text.replace(secret.as_str(), "***"))
    };
    check_scheme(&url, source).map_err(|f| f.scrub(&secrets))?;
    let missing = match sqlite_missing(&url, source).map_err(|f| f.scrub(&secrets))? {
        Some(missing) => missing,
        None => match rerun_core::open_url_existing(&url) {
            Ok(store) => {
                return Ok(Opened {
                    name: scrub(store.describe()),
                    store,
                    secrets,
                    missing: false,
                })
            }
            Err(e) => match postgres_missing(&url, &e) {
                Some(missing) => missing,
                None => {
                    return Err(Failure::store(&format!("cannot open the store {shown}"), e)
                        .scrub(&secrets))
                }
            },
        },
    };
    let Missing { name, why } = missing;
    let name = scrub(name);
    if purpose == Purpose::Change {
        return Err(Failure::usage(format!(
            "nothing exists at {name}: {}; there is nothing to change, and nothing was created",
            scrub(why)
        ))
        .help(missing_hint(source)));
    }
    warn_missing(&name, &scrub(why), source);
    Ok(Opened {
        name,
        store: Arc::new(MemoryStore::new()),
        secrets,
        missing: true,
    })
}

/// A store that does not exist yet: its name as the commands print it, and what is missing.
struct Missing {
    name: String,
    why: String,
}

/// The warning for a store that does not exist yet, on stderr (a script reading `--json` on
/// stdout gets its usual document).
fn warn_missing(name: &str, why: &str, source: Source) {
    crate::output::note(&format!(
        "warning: nothing exists at {name}: {why}; nothing was created, and it reads as an empty store"
    ));
    crate::output::note(&format!("  help: {}", missing_hint(source)));
}

/// What to do about a store that does not exist yet.
fn missing_hint(source: Source) -> String {
    match source {
        Source::Default => format!(
            "a service of rerun creates its store when it first starts; if yours already runs, run rerunctl in the directory it runs in, or {STORE_FORMS}"
        ),
        Source::Flag | Source::Env => format!(
            "a service of rerun creates its store when it first starts; if yours already runs, check the URL ({})",
            origin(source)
        ),
    }
}

/// The URL to open and where it came from.
fn choose(flag: Option<&str>) -> Result<(String, Source), Failure> {
    if let Some(url) = flag {
        let url = url.trim();
        if url.is_empty() {
            return Err(Failure::usage("--store was given an empty URL").help(STORE_FORMS));
        }
        return Ok((url.to_owned(), Source::Flag));
    }
    match std::env::var("RERUN_STORE") {
        Ok(url) if !url.trim().is_empty() => Ok((url.trim().to_owned(), Source::Env)),
        Ok(_) | Err(std::env::VarError::NotPresent) => {
            let path = default_path();
            Ok((format!("sqlite:{}", path.display()), Source::Default))
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Failure::usage("RERUN_STORE is not valid UTF-8").help(STORE_FORMS))
        }
    }
}

/// The default store's path: `.rerun/rerun.sqlite3` under the current directory.
fn default_path() -> PathBuf {
    match std::env::current_dir() {
        Ok(dir) => dir.join(DEFAULT_SQLITE_PATH),
        Err(_) => PathBuf::from(DEFAULT_SQLITE_PATH),
    }
}

/// Where a URL came from, for messages.
fn origin(source: Source) -> &'static str {
    match source {
        Source::Flag => "--store",
        Source::Env => "RERUN_STORE",
        Source::Default => "the default store",
    }
}

/// Refuses a URL of a store rerun does not have, saying where it came from.
fn check_scheme(url: &str, source: Source) -> Result<(), Failure> {
    let known = [
        "memory:",
        "sqlite:",
        "postgres://",
        "postgresql://",
        "redis://",
        "rediss://",
    ];
    if known.iter().any(|scheme| url.starts_with(scheme)) {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "`{}` ({}) is not a store URL",
        crate::output::terminal_safe(&rerun_core::redact(url)),
        origin(source)
    ))
    .help(STORE_FORMS))
}

/// A SQLite URL whose path names nothing at all (not a file, folder or link: opening it would
/// create an empty store), as [`Missing`]; `None` for every other URL. A path where something
/// other than a file is, or whose metadata cannot be read, is refused (exit 2): it names no
/// usable store, and no store is missing there either.
fn sqlite_missing(url: &str, source: Source) -> Result<Option<Missing>, Failure> {
    let Some(path) = url.strip_prefix("sqlite:") else {
        return Ok(None);
    };
    let path = Path::new(path.strip_prefix("//").unwrap_or(path));
    if path.as_os_str().is_empty() {
        // rerun-core's to refuse, with its own message.
        return Ok(None);
    }
    let shown = || crate::output::terminal_safe(&path.display().to_string()).into_owned();
    let refuse = |what: String| match source {
        Source::Default => Failure::usage(format!(
            "no store here: the default store {} {what}",
            shown()
        ))
        .help(format!(
            "run rerunctl in the directory your service runs in, or {STORE_FORMS}"
        )),
        Source::Flag | Source::Env => Failure::usage(format!(
            "the SQLite store {} ({}) {what}",
            shown(),
            origin(source)
        ))
        .help("check the path: rerunctl opens existing stores and never creates one"),
    };
    // The link itself, not what it points to: a dangling link is something, not nothing.
    match std::fs::symlink_metadata(path) {
        Ok(_) if path.is_file() => Ok(None),
        Ok(_) if path.is_dir() => Err(refuse("is a folder, not a file".to_owned())),
        Ok(_) if !path.exists() => Err(refuse(
            "is a link to nothing (a file that does not exist)".to_owned(),
        )),
        Ok(_) => Err(refuse("is not a file".to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
            Ok(Some(Missing {
                name: format!("sqlite:{}", absolute.display()),
                why: "the file does not exist".to_owned(),
            }))
        }
        Err(e) => Err(refuse(format!("cannot be looked at: {e}"))),
    }
}

/// Whether `error`, from opening `url`, says that there is no rerun table in the PostgreSQL
/// database, as [`Missing`].
///
/// rerun-core tells this apart from other refusals (another schema version, a table rerun did
/// not create) by the words of its [`Error::Config`] message only; they are matched as
/// `PostgresStore::check_existing` writes them.
fn postgres_missing(url: &str, error: &Error) -> Option<Missing> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return None;
    }
    let Error::Config { message, .. } = error else {
        return None;
    };
    let rest = message.strip_prefix("PostgreSQL at ")?;
    let (server, rest) = rest.split_once(": there is no rerun table ")?;
    let (table, _) = rest.split_once(" (with ")?;
    if !message.contains("this store opens existing tables only") {
        return None;
    }
    Some(Missing {
        name: format!("{server} (table {table})"),
        why: format!("there is no rerun table {table} in the database"),
    })
}

/// The secrets of a URL that `rerun_core::redact` hides, so that messages of drivers that
/// repeat them can be scrubbed.
fn secrets_of(url: &str) -> Vec<String> {
    let mut secrets = rerun_core::url_secrets(url);
    // A secret of a character or two would scrub every occurrence of that text in a message.
    secrets.retain(|s| s.len() >= 3);
    secrets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_found_in_userinfo_and_query() {
        assert_eq!(secrets_of("postgres://u:hunter22@h/db"), vec!["hunter22"]);
        assert_eq!(
            secrets_of("redis://h/0?password=s3cret&prefix=app:"),
            vec!["s3cret"]
        );
        assert!(secrets_of("sqlite:/tmp/x").is_empty());
        assert!(secrets_of("redis://h:6379").is_empty());
        // A password may hold `/`, as drivers read credentials up to the `@`.
        assert_eq!(secrets_of("postgres://u:pa/ss@h/db"), vec!["pa/ss"]);
    }

    #[test]
    fn a_missing_sqlite_file_is_missing_not_created() {
        let dir = std::env::temp_dir().join(format!("rerunctl-missing-{}", std::process::id()));
        let url = format!("sqlite:{}/nope.sqlite3", dir.display());
        let missing = sqlite_missing(&url, Source::Flag).ok().flatten();
        assert!(missing.is_some_and(|m| m.name.ends_with("/nope.sqlite3")));
        assert!(!dir.exists());
        assert!(matches!(sqlite_missing("memory:", Source::Flag), Ok(None)));
        // A folder is no store, and not a missing one either.
        let folder = format!("sqlite:{}", std::env::temp_dir().display());
        let refused = sqlite_missing(&folder, Source::Flag).err();
        assert_eq!(refused.map(|f| f.exit_code()), Some(2));
    }

    #[test]
    fn only_a_missing_postgres_table_is_missing() {
        let url = "postgres://u@h/db";
        let missing = Error::config(
            "PostgreSQL at h:5432/db: there is no rerun table public.t (with public.t_meta and public.t_fence beside it), and this store opens existing tables only: check the database",
        );
        let found = postgres_missing(url, &missing);
        assert!(found.is_some_and(|m| m.name == "h:5432/db (table public.t)"));
        assert!(postgres_missing("redis://h", &missing).is_none());
        for other in [
            "the rerun table public.t has schema version 1, older than this build's 2",
            "the rerun table public.t has no schema version in public.t_meta; it was not created by rerun",
        ] {
            assert!(postgres_missing(url, &Error::config(other)).is_none(), "{other}");
        }
        let down = Error::store_msg(None, "there is no rerun table");
        assert!(postgres_missing(url, &down).is_none());
    }
}
