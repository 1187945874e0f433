//! The conformance suite on `PostgresStore`, including the multi-process checks, against the
//! server at `RERUN_TEST_POSTGRES_URL` (skipped when unset, unless `RERUN_REQUIRE_SERVICES=1`).
//! Each fresh store gets its own table; the tables are dropped afterwards.
#![cfg(all(feature = "postgres", feature = "testing"))]

mod postgres_common;

use std::sync::Mutex;

use rerun_core::store::postgres::PostgresStore;
use rerun_core::testing::conformance::{self, Factory};
use rerun_core::Error;

struct Postgres {
    url: String,
    tables: Mutex<Vec<postgres_common::Table>>,
}

impl Factory for Postgres {
    type Store = PostgresStore;
    fn name(&self) -> &str {
        "postgres"
    }
    fn fresh(&self) -> Result<(PostgresStore, String), Error> {
        let table = conformance::unique("rc");
        let store = PostgresStore::builder(&self.url).table(&table).connect()?;
        self.tables
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(postgres_common::Table {
                url: self.url.clone(),
                name: table.clone(),
            });
        Ok((store, table))
    }
    fn reopen(&self, locator: &str) -> Result<PostgresStore, Error> {
        PostgresStore::builder(&self.url).table(locator).connect()
    }
}

#[test]
fn postgres_store_conforms() {
    let Some(url) = postgres_common::url() else {
        return;
    };
    let factory = Postgres {
        url,
        tables: Mutex::new(Vec::new()),
    };
    conformance::run(&factory);
    // Children exit inside `run`; only the parent gets here and drops the tables.
}
