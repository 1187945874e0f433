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
    // same call sends again on every retry; 54: a program limit, such as an index row over
    // the B-tree's limit (54000: a key of rerun 0.1 that grew past it when the upgrade escaped
    // it), which no retry changes either.
    code.starts_with("28")
        || code.starts_with("22")
        || code.starts_with("54")
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

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;

    /// The errors a retry sends again as they are: an index row over the B-tree's limit (what
    /// the upgrade of a long rerun 0.1 key meets) is permanent; a statement timeout is not.
    #[test]
    fn program_limits_are_permanent() {
        let Some(url) = crate::testing::service_url("RERUN_TEST_POSTGRES_URL") else {
            return;
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            tokio::spawn(connection);
            client
                .batch_execute("CREATE TEMP TABLE rerun_limits (k text PRIMARY KEY)")
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            // Incompressible, and far over the B-tree's 2,704 bytes.
            let too_long = client
                .execute(
                    "INSERT INTO rerun_limits SELECT string_agg(md5(i::text), '') \
                     FROM generate_series(1, 200) i",
                    &[],
                )
                .await
                .err()
                .unwrap_or_else(|| panic!("an index row over the limit was accepted"));
            assert_eq!(too_long.code().map(|c| c.code()), Some("54000"));
            assert!(is_permanent(&too_long), "{too_long}");
            let timeout = client
                .batch_execute("SET statement_timeout = 1; SELECT pg_sleep(1)")
                .await
                .err()
                .unwrap_or_else(|| panic!("the statement outlived its timeout"));
            assert_eq!(timeout.code().map(|c| c.code()), Some("57014"));
            assert!(!is_permanent(&timeout), "{timeout}");
        });
    }
}
