//! The harness over the `startup` example: a one-time schema migration (a literal key), killed
//! at every crash point, then started again.

use rerun_core::testing::{SafeToRerun, WorldDir};
use rerun_core::{Key, SqliteStore};
use rerun_examples::startup::{migrate_v3, open_app_db};
use rerun_examples::AppError;

struct Service {
    store: SqliteStore,
    db: rusqlite::Connection,
}

#[derive(Debug, PartialEq)]
struct Seen {
    customers: Vec<String>,
    migration: Option<rerun_core::Status>,
}

fn observe(s: &Service) -> Seen {
    let customers =
        s.db.prepare("SELECT * FROM customers ORDER BY name")
            .and_then(|mut stmt| {
                let n = stmt.column_count();
                stmt.query_map([], |r| {
                    (0..n)
                        .map(|i| {
                            r.get::<_, rusqlite::types::Value>(i)
                                .map(|v| format!("{v:?}"))
                        })
                        .collect::<Result<Vec<_>, _>>()
                        .map(|cols| cols.join(" "))
                })?
                .collect()
            })
            .unwrap_or_else(|e| vec![e.to_string()]);
    Seen {
        customers,
        migration: rerun_tests::status_of(&s.store, &Key::new("startup.migrate", "migrate-v3")),
    }
}

#[test]
fn migration_is_safe_to_rerun() {
    let report = SafeToRerun::new(
        "startup.migrate_v3",
        |dir: &WorldDir| -> Result<Service, AppError> {
            Ok(Service {
                store: dir.sqlite_store()?,
                db: open_app_db(dir.path())?,
            })
        },
        |s: &Service| migrate_v3(&s.store, &s.db),
        observe,
    )
    .check();
    rerun_tests::print_sweep(&report);
    report.assert_passed();
}
