//! Which store to open (`--store`, else `RERUN_STORE`, else the SQLite default under the
//! current directory), and opening it as it is: with `rerun_core::open_url_existing`, which
//! creates, migrates and upgrades nothing (no table, file or schema made by mistake, no codec
//! version raised above what the services read, no journal mode switched, no upgrade sweep), and
//! refuses a store that is missing or of another schema version than this build's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rerun_core::{DynStore, DEFAULT_SQLITE_PATH};

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
    let (url, source) = choose(flag)?;
    let secrets = secrets_of(&url);
    let shown = rerun_core::redact(&url);
    let opened = check_scheme(&url, source)
        .and_then(|()| check_sqlite_exists(&url, source))
        .and_then(|()| {
            rerun_core::open_url_existing(&url)
                .map_err(|e| Failure::store(&format!("cannot open the store {shown}"), e))
        })
        .map_err(|f| f.scrub(&secrets))?;
    let mut name = opened.describe();
    for secret in &secrets {
        name = name.replace(secret.as_str(), "***");
    }
    Ok(Opened {
        name,
        store: opened,
        secrets,
    })
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

/// Refuses a SQLite path with no database: opening it would create an empty store, and an
/// operator who mistyped a path (or ran `rerunctl` in the wrong directory) would be told that
/// nothing is stuck.
fn check_sqlite_exists(url: &str, source: Source) -> Result<(), Failure> {
    let Some(path) = url.strip_prefix("sqlite:") else {
        return Ok(());
    };
    let path = Path::new(path.strip_prefix("//").unwrap_or(path));
    if path.as_os_str().is_empty() || path.is_file() {
        // An empty path is rerun-core's to refuse, with its own message.
        return Ok(());
    }
    let what = if path.exists() {
        "is not a file"
    } else {
        "does not exist"
    };
    let shown = crate::output::terminal_safe(&path.display().to_string()).into_owned();
    Err(match source {
        Source::Default => {
            Failure::usage(format!("no store here: the default store {shown} {what}")).help(
                format!("run rerunctl in the directory your service runs in, or {STORE_FORMS}"),
            )
        }
        Source::Flag | Source::Env => Failure::usage(format!(
            "the SQLite store {shown} ({}) {what}",
            origin(source)
        ))
        .help("check the path: rerunctl opens existing stores and never creates one"),
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
    fn a_missing_sqlite_file_is_refused_not_created() {
        let dir = std::env::temp_dir().join(format!("rerunctl-missing-{}", std::process::id()));
        let url = format!("sqlite:{}/nope.sqlite3", dir.display());
        let err = check_sqlite_exists(&url, Source::Flag).err();
        assert_eq!(err.map(|f| f.exit_code()), Some(2));
        assert!(!dir.exists());
        assert!(check_sqlite_exists("memory:", Source::Flag).is_ok());
    }
}
