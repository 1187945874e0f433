//! The process-wide store: `init`, the `RERUN_STORE` URL, and the SQLite default.

use std::sync::{Arc, OnceLock};

use crate::error::Error;
use crate::fork_lock::{ForkGuard, ForkLock};
use crate::store::DynStore;

static GLOBAL: OnceLock<Arc<dyn DynStore>> = OnceLock::new();
static CHOOSING: ForkLock<()> = ForkLock::new(());

/// Holds [`CHOOSING`] while the store is chosen, so that it is opened once. In a forked child
/// the lock may have been held by a thread of the parent at the fork (opening a store takes a
/// while), and no thread of the child will ever release it: there the store is chosen without
/// it (see [`ForkLock`]).
fn choosing() -> Option<ForkGuard<'static, ()>> {
    CHOOSING.lock(crate::process::current().forks)
}

/// The default store's path, under the current directory.
pub const DEFAULT_SQLITE_PATH: &str = ".rerun/rerun.sqlite3";

/// Sets the process-wide store used by `#[idempotent]` functions without `store = …`.
///
/// Call it once, before the first such call. A second call, or a call after the store was
/// already chosen from the environment, is [`Error::Config`].
///
/// ```
/// rerun_core::init(rerun_core::MemoryStore::new())?;
/// assert!(rerun_core::init(rerun_core::MemoryStore::new()).is_err());
/// # Ok::<(), rerun_core::Error>(())
/// ```
pub fn init<S: DynStore + 'static>(store: S) -> Result<(), Error> {
    let _choosing = choosing();
    let store: Arc<dyn DynStore> = Arc::new(store);
    let described = store.describe();
    match GLOBAL.set(store) {
        Ok(()) => {
            tracing::info!(store = %described, source = "rerun_core::init", "rerun: store chosen");
            Ok(())
        }
        Err(_) => Err(Error::config(format!(
            "rerun_core::init was called, but the global store is already set to {}; call init once, at start-up, before the first idempotent call",
            GLOBAL.get().map(|s| s.describe()).unwrap_or_default()
        ))),
    }
}

/// The process-wide store: the one given to [`init`], else the one `RERUN_STORE` names, else
/// SQLite at `.rerun/rerun.sqlite3` under the current directory. Chosen once, and logged once.
pub fn global() -> Result<&'static dyn DynStore, Error> {
    if let Some(store) = GLOBAL.get() {
        return Ok(&**store);
    }
    let _choosing = choosing();
    if let Some(store) = GLOBAL.get() {
        return Ok(&**store);
    }
    let (store, source) = match std::env::var("RERUN_STORE") {
        Ok(url) if !url.trim().is_empty() => (open_url(url.trim())?, "RERUN_STORE"),
        // Set, but not text: taking the default instead would have processes started with
        // the same setting share nothing, each with a store under its own directory.
        Err(std::env::VarError::NotUnicode(raw)) => {
            return Err(Error::config(format!(
                "RERUN_STORE is not valid UTF-8 ({}): give the store's URL in UTF-8 (a SQLite path too)",
                redact(&raw.to_string_lossy()).escape_debug()
            )))
        }
        _ => (default_store()?, "default"),
    };
    tracing::info!(store = %store.describe(), source, "rerun: store chosen");
    let store = GLOBAL.get_or_init(|| store);
    Ok(&**store)
}

/// Chooses the process-wide store now, from `RERUN_STORE` (or the SQLite default), opening it
/// and checking that it works: call it at start-up so that a bad URL, an unreachable server or
/// a folder that cannot be written is an error there, not at the first request on some worker
/// thread. Returns the store (the one `init` set, if it was called first).
///
/// ```no_run
/// fn main() -> Result<(), rerun_core::Error> {
///     let store = rerun_core::init_from_env()?; // fails fast, with the cause and what to do
///     tracing::info!(store = %store.describe(), "ready");
///     # Ok(())
/// }
/// ```
pub fn init_from_env() -> Result<&'static dyn DynStore, Error> {
    global()
}

fn default_store() -> Result<Arc<dyn DynStore>, Error> {
    #[cfg(feature = "sqlite")]
    {
        Ok(Arc::new(crate::store::sqlite::SqliteStore::open(
            DEFAULT_SQLITE_PATH,
        )?))
    }
    #[cfg(not(feature = "sqlite"))]
    {
        Err(Error::config(
            "no store was chosen: call rerun_core::init(store), set RERUN_STORE, or enable the `sqlite` feature for the default store",
        ))
    }
}

/// Hides the secrets of a store URL or connection string, for messages and logs: the password
/// of a URL (`postgres://app:***@db/app`), secret query parameters (`?password=***`,
/// `&sslpassword=***`, `&token=***`), and the same keys of a libpq `key=value` string
/// (`host=db password=*** dbname=app`, quoted values too).
///
/// ```
/// assert_eq!(rerun_core::redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
/// assert_eq!(rerun_core::redact("redis://h/0?password=secret"), "redis://h/0?password=***");
/// assert_eq!(
///     rerun_core::redact("host=h password='se cret' dbname=d"),
///     "host=h password=*** dbname=d"
/// );
/// ```
///
/// A password may hold `/`, `?` or `#` unencoded (drivers read credentials up to the `@`), and
/// is hidden all the same:
///
/// ```
/// assert_eq!(rerun_core::redact("postgres://u:Ab3/x+9=@db/app"), "postgres://u:***@db/app");
/// ```
pub fn redact(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return redact_key_values(url);
    };
    let mut ranges = secret_ranges(url, start);
    ranges.sort_unstable();
    let mut out = String::with_capacity(url.len());
    let mut at = 0;
    let mut ranges = ranges.into_iter().peekable();
    while let Some((from, mut to)) = ranges.next() {
        // Overlapping or touching ranges are hidden as one.
        while let Some(&(next_from, next_to)) = ranges.peek() {
            if next_from > to {
                break;
            }
            to = to.max(next_to);
            ranges.next();
        }
        if from < at {
            // Inside a range already hidden.
            at = at.max(to);
            continue;
        }
        out.push_str(&url[at..from]);
        out.push_str("***");
        at = to;
    }
    out.push_str(&url[at..]);
    out
}

/// The secrets [`redact`] hides in a store URL (its password, as either reading below finds it,
/// and the values of secret query parameters), for scrubbing a driver's message that repeats
/// them.
///
/// ```
/// assert_eq!(
///     rerun_core::url_secrets("postgres://u:pa/ss@h/db?sslpassword=k3y"),
///     ["pa/ss", "k3y"]
/// );
/// assert!(rerun_core::url_secrets("redis://h:6379/0").is_empty());
/// ```
pub fn url_secrets(url: &str) -> Vec<String> {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return Vec::new();
    };
    let mut secrets: Vec<String> = Vec::new();
    for (from, to) in secret_ranges(url, start) {
        let secret = &url[from..to];
        if !secret.is_empty() && !secrets.iter().any(|s| s == secret) {
            secrets.push(secret.to_owned());
        }
    }
    secrets
}

/// The byte ranges of `url` that hold secrets (`start`: where the part after `scheme://`
/// begins), hiding more rather than less:
///
/// - the password read up to any `@` of the URL: drivers read credentials up to the first or
///   the last, and a password may hold `/`, `?`, `#` or `@` unencoded (a URL parser's reading,
///   the userinfo ending at the last `@` before the first `/`, `?` or `#`, is among them);
/// - the values of secret query parameters, the query as a URL parser finds it.
///
/// Where the readings disagree (an `@` in a path or query, a port before it) both ranges are
/// hidden: a URL shows less than it could, never a secret.
fn secret_ranges(url: &str, start: usize) -> Vec<(usize, usize)> {
    let rest = &url[start..];
    let mut ranges = Vec::new();
    // `user:password@`: from after the user's `:` to the `@`.
    let password = |userinfo_end: usize| {
        rest[..userinfo_end]
            .find(':')
            .map(|colon| (start + colon + 1, start + userinfo_end))
    };
    // Every `@` may end the userinfo for some reader; the last one first.
    for (at, _) in rest.rmatch_indices('@') {
        ranges.extend(password(at));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if let Some(q) = rest[authority_end..].find('?') {
        let mut pos = start + authority_end + q + 1;
        for pair in url[pos..].split('&') {
            if let Some(eq) = pair.find('=') {
                if is_secret(&pair[..eq]) {
                    ranges.push((pos + eq + 1, pos + pair.len()));
                }
            }
            pos += pair.len() + 1;
        }
    }
    ranges
}

/// Names of connection parameters that hold secrets.
fn is_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "password",
        "passwd",
        "pass",
        "pwd",
        "secret",
        "token",
        "sslpassword",
        "sslkey",
        "auth",
    ]
    .iter()
    .any(|s| name == *s || name.ends_with(&format!("_{s}")))
}

/// Redacts a libpq `key=value` string, values quoted with `'…'` (and `\'` inside) or bare.
fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let (before, after) = rest.split_at(eq);
        // The key is the last word before `=` (libpq allows spaces around it).
        let trimmed = before.trim_end();
        let key_start = trimmed
            .rfind(|c: char| c.is_whitespace())
            .map_or(0, |i| i + 1);
        let key = &trimmed[key_start..];
        out.push_str(before);
        out.push('=');
        let value = &after[1..];
        let spaces = value.len() - value.trim_start().len();
        out.push_str(&value[..spaces]);
        let value = &value[spaces..];
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            let mut end = None;
            let mut escaped = false;
            for (i, c) in quoted.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '\'' if !escaped => {
                        end = Some(i + 2);
                        break;
                    }
                    _ => escaped = false,
                }
            }
            end.unwrap_or(value.len())
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        if is_secret(key) {
            out.push_str("***");
        } else {
            out.push_str(&value[..value_len]);
        }
        rest = &value[value_len..];
    }
    out.push_str(rest);
    out
}

/// The error for a URL whose store this build leaves out.
#[cfg_attr(
    all(feature = "sqlite", feature = "postgres", feature = "redis"),
    allow(dead_code)
)]
fn needs_feature(url: &str, feature: &str) -> Error {
    Error::config(format!(
        "RERUN_STORE={} needs rerun-core's `{feature}` feature; enable it in Cargo.toml",
        redact(url)
    ))
}

/// Opens the store a URL names: `memory:`, `sqlite:PATH`, `postgres://…` or `redis://…`.
///
/// ```
/// let store = rerun_core::open_url("memory:")?;
/// assert_eq!(store.describe(), "memory:");
/// let err = rerun_core::open_url("mongodb://db").err().map(|e| e.to_string());
/// assert!(err.is_some_and(|e| e.contains("expected")));
/// # Ok::<(), rerun_core::Error>(())
/// ```
pub fn open_url(url: &str) -> Result<Arc<dyn DynStore>, Error> {
    open(url, Open::CreateOrMigrate)
}

/// Opens the existing store a URL names, as it is, for tools that look at a store the services
/// own (`rerunctl`): the URLs of [`open_url`], but nothing is created, migrated or upgraded.
///
/// - `sqlite:PATH`: [`SqliteOptions::existing_only`](crate::store::sqlite::SqliteOptions::existing_only);
///   no file, folder or schema is created, and the journal mode is left alone.
/// - `postgres://…`: [`PostgresBuilder::existing_only`](crate::store::postgres::PostgresBuilder::existing_only);
///   no table, schema or function is created or replaced, no table migrated, and the table's
///   codec version is not raised (older services keep accepting it).
/// - `redis://…`: the upgrade sweep is off
///   ([`RedisOptions::upgrade_sweep`](crate::store::redis::RedisOptions::upgrade_sweep)), so
///   connecting writes no key (it loads rerun's scripts and functions, which hold no data). Redis
///   has no schema to check: a prefix with no records opens as an empty store. A record of rerun
///   0.1 that a call, an inspection or a scan meets is still upgraded in place.
/// - `memory:`: a new, empty store, as with [`open_url`].
///
/// A store that does not exist, or whose schema version differs from this build's, is
/// [`Error::Config`], saying what to do.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let url = format!("sqlite:{}", dir.path().join("rerun.sqlite3").display());
/// let err = rerun_core::open_url_existing(&url).err();
/// assert!(matches!(err, Some(rerun_core::Error::Config { .. })));
/// assert!(!dir.path().join("rerun.sqlite3").exists());
/// # Ok::<(), rerun_core::Error>(())
/// ```
pub fn open_url_existing(url: &str) -> Result<Arc<dyn DynStore>, Error> {
    open(url, Open::Existing)
}

/// How [`open`] opens a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    /// Creating it if missing and migrating it: [`open_url`].
    CreateOrMigrate,
    /// As it is: [`open_url_existing`].
    Existing,
}

/// Opens the store a URL names, as `how` says.
#[cfg_attr(
    not(all(feature = "sqlite", feature = "postgres", feature = "redis")),
    allow(unused_variables)
)]
fn open(url: &str, how: Open) -> Result<Arc<dyn DynStore>, Error> {
    let existing = how == Open::Existing;
    if url == "memory:" || url == "memory://" {
        return Ok(Arc::new(crate::store::memory::MemoryStore::new()));
    }
    if let Some(path) = url.strip_prefix("sqlite:") {
        let path = path.strip_prefix("//").unwrap_or(path);
        if path.is_empty() {
            return Err(Error::config(
                "RERUN_STORE=sqlite: needs a path, e.g. sqlite:.rerun/rerun.sqlite3",
            ));
        }
        #[cfg(feature = "sqlite")]
        return Ok(Arc::new(crate::store::sqlite::SqliteStore::open_with(
            path,
            crate::store::sqlite::SqliteOptions::new().existing_only(existing),
        )?));
        #[cfg(not(feature = "sqlite"))]
        return Err(needs_feature(url, "sqlite"));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return Ok(Arc::new(
            crate::store::postgres::PostgresStore::builder(url)
                .existing_only(existing)
                .connect()?,
        ));
        #[cfg(not(feature = "postgres"))]
        return Err(needs_feature(url, "postgres"));
    }
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        #[cfg(feature = "redis")]
        return Ok(Arc::new(crate::store::redis::RedisStore::connect_with(
            url,
            crate::store::redis::RedisOptions::new().upgrade_sweep(!existing),
        )?));
        #[cfg(not(feature = "redis"))]
        return Err(needs_feature(url, "redis"));
    }
    Err(Error::config(format!(
        "RERUN_STORE={} is not a store URL; expected `memory:`, `sqlite:PATH`, `postgres://…` or `redis://…`",
        redact(url)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("redis://:pw@h/0"), "redis://:***@h/0");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("sqlite:/tmp/x"), "sqlite:/tmp/x");
        assert_eq!(redact("memory:"), "memory:");
    }

    #[test]
    fn passwords_with_url_delimiters_are_hidden_whole() {
        let cases = [
            (
                "postgres://u:p@ss/word@h/db",
                "postgres://u:***@h/db",
                "p@ss/word",
            ),
            (
                "postgres://u:Ab3/x+9=@db/app",
                "postgres://u:***@db/app",
                "Ab3/x+9=",
            ),
            ("redis://:ab#cd@h", "redis://:***@h", "ab#cd"),
            ("redis://:a?b@h:6379/0", "redis://:***@h:6379/0", "a?b"),
            // An `@` after the password hides more, never less.
            ("redis://u:p@h/0?x=y@z", "redis://u:***@z", "p@h/0?x=y"),
        ];
        for (url, shown, password) in cases {
            assert_eq!(redact(url), shown, "{url}");
            assert_eq!(url_secrets(url).first().map(String::as_str), Some(password));
        }
        // An `@` in the query of a URL with no password is not a userinfo's end.
        assert_eq!(
            redact("redis://h/0?password=se@cret"),
            "redis://h/0?password=***"
        );
        assert_eq!(url_secrets("redis://h/0?password=se@cret"), ["se@cret"]);
        assert_eq!(redact("redis://user@h/0"), "redis://user@h/0");
        // A port before an `@` of the query: both readings hidden, the secret whole.
        for url in [
            "redis://h:6379/0?password=se@cret",
            "postgres://app@db:5432/x?sslpassword=se@cret",
            "postgres://[::1]:5432/x?password=se@cret",
        ] {
            let shown = redact(url);
            assert!(
                !shown.contains("cret") && !shown.contains("se@"),
                "{url} -> {shown}"
            );
            assert!(url_secrets(url).iter().any(|s| s == "se@cret"), "{url}");
        }
    }

    proptest::proptest! {
        #[test]
        fn no_password_is_ever_shown(
            password in "[a-zA-Z0-9/?#@:%+=._-]{1,24}",
            tail in "(/[a-z0-9@]{0,8})?(\\?[a-z]{1,5}=[a-z0-9@]{0,5})?",
        ) {
            let url = format!("postgres://app:{password}@db.internal:5432{tail}");
            let shown = redact(&url);
            proptest::prop_assert!(!shown.contains(&format!(":{password}@")), "{url} -> {shown}");
            proptest::prop_assert!(shown.starts_with("postgres://app:***@"), "{url} -> {shown}");
            proptest::prop_assert!(url_secrets(&url).contains(&password), "{url}");
        }

        #[test]
        fn no_query_secret_is_ever_shown(
            secret in "Z[a-z0-9@:/#%]{2,11}",
            host in "(h|h:6379|u@h:6379|\\[::1\\]:6379)",
        ) {
            let url = format!("redis://{host}/0?password={secret}");
            let shown = redact(&url);
            proptest::prop_assert!(!shown.contains(&secret), "{url} -> {shown}");
        }
    }

    #[test]
    fn redacts_query_parameters_and_key_values() {
        let cases = [
            (
                "postgres://h/db?sslmode=require&password=secret&user=u",
                "postgres://h/db?sslmode=require&password=***&user=u",
            ),
            (
                "postgres://u:a@b@h/db?PassWord=x",
                "postgres://u:***@h/db?PassWord=***",
            ),
            (
                "redis://h/0?prefix=app:&token=t0k",
                "redis://h/0?prefix=app:&token=***",
            ),
            (
                "host=db user=app password=secret dbname=app",
                "host=db user=app password=*** dbname=app",
            ),
            (
                "host=db password='it\\'s secret' dbname=app",
                "host=db password=*** dbname=app",
            ),
            ("password=secret", "password=***"),
            (
                "host=db sslpassword = x port=5432",
                "host=db sslpassword = *** port=5432",
            ),
        ];
        for (given, want) in cases {
            assert_eq!(redact(given), want, "{given}");
            assert!(
                !redact(given).contains("secret") || !given.contains("secret"),
                "{given}"
            );
        }
    }

    #[test]
    fn bad_urls_are_config_errors() {
        for url in ["mongodb://x", "sqlite:", "nonsense"] {
            let err = open_url(url).err().map(|e| e.kind_name());
            assert_eq!(err, Some("config"), "{url}");
        }
    }
}
