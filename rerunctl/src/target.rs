//! The `SCOPE KEY` arguments of `show` and `forget`: read as `ls` prints them, or as a plain
//! string key typed as itself; which record they name; and what to say when none answers.

use std::ffi::OsStr;

use rerun_core::store::ScanFilter;
use rerun_core::{Key, RecordView};

use crate::failure::Failure;
use crate::output::{self, shell_word};
use crate::store::Opened;

/// How keys are typed, for messages.
const KEY_FORMS: &str = "type the key as `rerunctl ls` prints it: a plain text as itself (evt_42), a text that reads as something else in quotes ('\"42\"', '\"a b\"'), numbers bare (42), tuples in parentheses ('(cus_1, 42)'), bytes in hex (0xab01); quote it for your shell";

/// What `SCOPE KEY` typed: the key its text reads as, and the plain string key of the same
/// text, which is looked up too (a string key `1001` typed as itself reads as the number 1001;
/// a UUID typed bare reads as no key at all).
#[derive(Debug, Clone)]
pub struct Target {
    /// The key the text reads as ([`Key::parse`]), or why it reads as none.
    parsed: Result<Key, String>,
    /// The text as a plain string key.
    as_text: Key,
    /// The text is in double quotes: a text key written out (`"42"`).
    quoted: bool,
}

impl Target {
    /// The keys the text may name, each once, in the order they are looked up: the key it
    /// reads as first, then the string key of the same text.
    pub fn candidates(&self) -> Vec<&Key> {
        match &self.parsed {
            // Typed in quotes, the text says it is a text key: no other is looked up.
            Ok(parsed) if self.quoted => vec![parsed],
            Ok(parsed) if *parsed != self.as_text => vec![parsed, &self.as_text],
            Ok(parsed) => vec![parsed],
            Err(_) => vec![&self.as_text],
        }
    }

    /// The key messages name when no record answers: the one the text reads as, else the
    /// string key.
    pub fn key(&self) -> &Key {
        self.parsed.as_ref().unwrap_or(&self.as_text)
    }
}

/// The `SCOPE KEY` that `scope` and `key` name. Only a scope that is not one and a key that
/// is not UTF-8 are refused (bad usage): any other text names at least its string key.
pub fn parse(scope: &OsStr, key: &OsStr) -> Result<Target, Failure> {
    let Some(scope) = scope.to_str() else {
        return Err(Failure::usage(format!(
            "SCOPE {} is not valid UTF-8, and every scope is",
            output::terminal_safe(&scope.to_string_lossy())
        ))
        .help("`rerunctl stats` lists the scopes of the store"));
    };
    if let Err(why) = rerun_core::scope::validate_scope(scope) {
        return Err(
            Failure::usage(format!("SCOPE {:?} is not a scope: {why}", scope))
                .help("`rerunctl stats` lists the scopes of the store"),
        );
    }
    let Some(text) = key.to_str() else {
        return Err(Failure::usage(format!(
            "KEY `{}` is not valid UTF-8",
            output::terminal_safe(&key.to_string_lossy())
        ))
        .help(format!(
            "write other characters as escapes in quotes ('\"caf\\u{{e9}}\"'), bytes in hex (0xcafe); {KEY_FORMS}"
        )));
    };
    Ok(Target {
        parsed: Key::parse(scope.to_owned(), text).map_err(|e| e.to_string()),
        as_text: Key::new(scope.to_owned(), text),
        quoted: text.trim_start().starts_with('"'),
    })
}

/// The record a [`Target`] names.
#[derive(Debug)]
pub struct Found {
    /// The key that has the record.
    pub key: Key,
    /// The record as the store reads it; `Err` holds the [`rerun_core::Error::Corrupt`] of a
    /// record that is there but cannot be read.
    pub record: Result<RecordView, rerun_core::Error>,
}

/// The record `target` names: of the key its text reads as, else of the string key of the
/// same text; a record that cannot be read counts as one found. None is "not found" (exit
/// 1); a store error is one (exit 2).
pub fn find(opened: &Opened, target: &Target) -> Result<Found, Failure> {
    for key in target.candidates() {
        if let Some(found) = find_key(opened, key)? {
            return Ok(found);
        }
    }
    Err(not_found(opened, target))
}

/// [`find`] for a command that changes the record (`forget`): only the key the text reads as,
/// or its string key when it reads as none. The string key of a text that reads as another key
/// is never taken in its place: the same command run twice would change two records (`7`,
/// then the text key `"7"` once the number is gone). When that string key has a record, the
/// failure says how to type it.
pub fn find_exact(opened: &Opened, target: &Target) -> Result<Found, Failure> {
    let Ok(parsed) = &target.parsed else {
        return find(opened, target);
    };
    if let Some(found) = find_key(opened, parsed)? {
        return Ok(found);
    }
    if *parsed != target.as_text && find_key(opened, &target.as_text)?.is_some() {
        let scope = output::scope(parsed.scope());
        return Err(Failure::not_found(format!(
            "no record of {scope} {} in {}",
            parsed.readable_id(),
            opened.name
        ))
        .help(format!(
            "the text key {} has a record; to act on it, type it as `rerunctl ls` prints it: {}",
            target.as_text.readable_id(),
            shell_word(&target.as_text.readable_id())
        )));
    }
    Err(not_found(opened, target))
}

/// The record of `key`, if there is one.
fn find_key(opened: &Opened, key: &Key) -> Result<Option<Found>, Failure> {
    match opened.store.inspect(key) {
        Ok(Some(record)) => Ok(Some(Found {
            key: key.clone(),
            record: Ok(record),
        })),
        Ok(None) => Ok(None),
        Err(e @ rerun_core::Error::Corrupt { .. }) => Ok(Some(Found {
            key: key.clone(),
            record: Err(e),
        })),
        Err(e) => Err(opened.failure("reading the record", e)),
    }
}

/// The failure for a target with no record, with a hint: the store does not exist, the text
/// reads as no key form, the scope holds no record at all (a mistyped scope), or how keys are
/// typed.
fn not_found(opened: &Opened, target: &Target) -> Failure {
    let key = target.key();
    let scope = output::scope(key.scope());
    let also = match &target.parsed {
        Ok(parsed) if *parsed != target.as_text => {
            format!(" (nor of the text key {})", target.as_text.readable_id())
        }
        _ => String::new(),
    };
    let failure = Failure::not_found(format!(
        "no record of {scope} {}{also} in {}",
        key.readable_id(),
        opened.name
    ));
    if opened.missing {
        return failure.help(
            "nothing exists at this store yet, and rerunctl created nothing: check the store (--store, RERUN_STORE), or run rerunctl in the directory your service runs in",
        );
    }
    if let Err(why) = &target.parsed {
        return failure.help(format!(
            "the text reads as no key form ({why}), so it was looked up as a text key; {KEY_FORMS}"
        ));
    }
    // One page, to tell a mistyped scope from a missing key; never a scan of the whole store.
    let filter = ScanFilter::new()
        .scope_prefix(key.scope())
        .without_results();
    match opened.store.scan_filtered(&filter, None, 50) {
        Ok(page) if page.records.iter().any(|r| r.key.scope() == key.scope()) => {
            failure.help(format!(
                "`rerunctl ls --scope {}` lists the keys of this scope as they are typed",
                shell_word(key.scope())
            ))
        }
        Ok(page) if page.next.is_none() => failure.help(format!(
            "the store holds no record of scope {scope}: check its spelling (`rerunctl stats` lists the scopes), or the store (--store, RERUN_STORE)"
        )),
        Ok(_) | Err(_) => failure.help(KEY_FORMS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Option<Vec<Key>> {
        let target = parse(OsStr::new("billing.charge"), OsStr::new(text)).ok()?;
        Some(target.candidates().into_iter().cloned().collect())
    }

    #[test]
    fn keys_are_read_as_ls_prints_them() {
        let s = |v: &str| Key::new("billing.charge", v);
        assert_eq!(keys("evt_42"), Some(vec![s("evt_42")]));
        // In quotes: the text key it writes out, and no other.
        assert_eq!(keys("\"42\""), Some(vec![s("42")]));
        assert_eq!(
            keys("(cus_1, 42)"),
            Some(vec![
                Key::new("billing.charge", &("cus_1", 42)),
                s("(cus_1, 42)")
            ])
        );
    }

    #[test]
    fn a_plain_string_key_can_be_typed_as_itself() {
        let s = |v: &str| Key::new("billing.charge", v);
        // A text that reads as a number: the number first, then the string key.
        assert_eq!(
            keys("1001"),
            Some(vec![Key::new("billing.charge", &1001), s("1001")])
        );
        // A text that reads as no key form: the string key alone.
        let uuid = "550e8400-e29b-41d4-a716-446655440000";
        assert_eq!(keys(uuid), Some(vec![s(uuid)]));
        assert_eq!(keys("(unclosed"), Some(vec![s("(unclosed")]));
        let target = parse(OsStr::new("billing.charge"), OsStr::new(uuid)).ok();
        assert_eq!(target.map(|t| t.key().clone()), Some(s(uuid)));
    }

    #[test]
    fn bad_scopes_are_usage_errors() {
        let bad_scope = parse(OsStr::new("a\nb"), OsStr::new("k")).err();
        assert_eq!(bad_scope.map(|f| f.exit_code()), Some(2));
    }

    #[cfg(unix)]
    #[test]
    fn a_key_that_is_not_utf8_is_refused_with_advice() {
        use std::os::unix::ffi::OsStrExt as _;
        let f = parse(OsStr::new("s"), OsStr::from_bytes(b"caf\xe9")).err();
        assert!(f.is_some_and(|f| f.message.contains("not valid UTF-8")
            && f.help.is_some_and(|h| h.contains("0xcafe"))));
    }
}
