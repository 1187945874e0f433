//! The `SCOPE KEY` arguments of `show` and `forget`: read as `ls` prints them, and what to say
//! when no record answers to them.

use std::ffi::OsStr;

use rerun_core::store::ScanFilter;
use rerun_core::Key;

use crate::failure::Failure;
use crate::output::{self, shell_word};
use crate::store::Opened;

/// How keys are typed, for messages.
const KEY_FORMS: &str = "type the key as `rerunctl ls` prints it: a plain text as itself (evt_42), a text that reads as something else in quotes ('\"42\"', '\"a b\"'), numbers bare (42), tuples in parentheses ('(cus_1, 42)'), bytes in hex (0xab01); quote it for your shell";

/// The key that `scope` and `key` name.
pub fn parse(scope: &OsStr, key: &OsStr) -> Result<Key, Failure> {
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
    Key::parse(scope.to_owned(), text).map_err(|e| {
        Failure::usage(format!(
            "KEY `{}` does not parse ({e})",
            output::terminal_safe(text)
        ))
        .help(KEY_FORMS)
    })
}

/// The failure for a key with no record, with a hint when the text was probably meant as
/// another key (a text typed bare that read as a number), or the scope holds no record at all.
pub fn not_found(opened: &Opened, key: &Key, typed: &OsStr) -> Failure {
    let scope = output::scope(key.scope());
    let mut failure = Failure::not_found(format!(
        "no record of {scope} {} in {}",
        key.readable_id(),
        opened.name
    ));
    // The text taken as a plain string key, when it read as something else (`42`, `true`).
    if let Some(text) = typed.to_str() {
        let as_text = Key::new(key.scope().to_owned(), text);
        if as_text != *key && matches!(opened.store.inspect(&as_text), Ok(Some(_))) {
            return failure.help(format!(
                "there is a record of the text key {}: `rerunctl show {} {}`",
                as_text.readable_id(),
                shell_word(key.scope()),
                shell_word(&as_text.readable_id())
            ));
        }
    }
    // One page, to tell a mistyped scope from a missing key; never a scan of the whole store.
    let filter = ScanFilter::new()
        .scope_prefix(key.scope())
        .without_results();
    if let Ok(page) = opened.store.scan_filtered(&filter, None, 50) {
        let in_scope = page.records.iter().any(|r| r.key.scope() == key.scope());
        failure = if in_scope {
            failure.help(format!(
                "`rerunctl ls --scope {}` lists the keys of this scope as they are typed",
                shell_word(key.scope())
            ))
        } else if page.next.is_none() {
            failure.help(format!(
                "the store holds no record of scope {scope}: check its spelling (`rerunctl stats` lists the scopes), or the store (--store, RERUN_STORE)"
            ))
        } else {
            failure.help(KEY_FORMS)
        };
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_as_ls_prints_them() {
        let k = |s: &str| parse(OsStr::new("billing.charge"), OsStr::new(s)).ok();
        assert_eq!(k("evt_42"), Some(Key::new("billing.charge", "evt_42")));
        assert_eq!(k("\"42\""), Some(Key::new("billing.charge", "42")));
        assert_eq!(k("42"), Some(Key::new("billing.charge", &42)));
        assert_eq!(
            k("(cus_1, 42)"),
            Some(Key::new("billing.charge", &("cus_1", 42)))
        );
        assert_eq!(k("(unclosed"), None);
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        let bad_scope = parse(OsStr::new("a\nb"), OsStr::new("k")).err();
        assert_eq!(bad_scope.map(|f| f.exit_code()), Some(2));
        let bad_key = parse(OsStr::new("s"), OsStr::new("(a,")).err();
        assert!(bad_key.is_some_and(|f| f.exit_code() == 2 && f.message.contains("does not parse")));
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
