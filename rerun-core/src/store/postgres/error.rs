//! PostgreSQL errors as rerun errors: the whole cause in the message, and a verdict on whether
//! a retry can help.

use crate::error::Error;
use crate::key::Key;

/// The driver's error with every cause it carries, on one line: tokio-postgres' own `Display`
/// says only "db error" and keeps the server's message ("database \"app\" does not exist") in
/// its source.
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text.replace('\n', "; ")
}

/// Whether no retry can fix this error: a role, database or password the server refuses, a
/// privilege it withholds, a table that is not rerun's, data the server cannot take.
pub(crate) fn is_permanent(e: &tokio_postgres::Error) -> bool {
    let Some(db) = e.as_db_error() else {
        return false;
    };
    let code = db.code().code();
    // 28: invalid authorization (unknown role, wrong password); 3D000: unknown database;
    // 42501: insufficient privilege; 42P01/42703: undefined table/column (not rerun's table);
    // 42601/42809: a statement the server cannot run on what it finds (a syntax error, an
    // object of another kind under rerun's name); 3F000: unknown schema; 22: data exception,
    // such as a key with a character the database's encoding cannot hold (22P05), which the
    // same call sends again on every retry.
    code.starts_with("28")
        || code.starts_with("22")
        || matches!(
            code,
            "3D000" | "42501" | "42P01" | "42703" | "42601" | "42809" | "3F000"
        )
}

/// A store error for `e`, raised while doing `what`.
pub(crate) fn store_error(key: Option<&Key>, what: String, e: tokio_postgres::Error) -> Error {
    let what = format!("{what}: {}", describe(&e));
    if is_permanent(&e) {
        Error::store_permanent(key, what, e)
    } else {
        Error::store(key, what, e)
    }
}
