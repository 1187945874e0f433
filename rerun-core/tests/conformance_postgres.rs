//! The conformance suite on `PostgresStore`, including the multi-process checks, against the
//! server at `RERUN_TEST_POSTGRES_URL` (skipped when unset, unless `RERUN_REQUIRE_SERVICES=1`).
//! Each fresh store gets its own table; the tables are dropped afterwards.
#![cfg(all(feature = "postgres", feature = "testing"))]

mod postgres_common;

use std::sync::Mutex;
use std::time::Duration;

use rerun_core::store::postgres::PostgresStore;
use rerun_core::testing::conformance::{self, Factory, Hang};
use rerun_core::testing::proxy::Proxy;
use rerun_core::Error;

/// The operation timeout of the store behind the freezable proxy.
const HANG_TIMEOUT: Duration = Duration::from_secs(2);

struct Frozen(Proxy);

impl Hang for Frozen {
    fn freeze(&self) {
        self.0.freeze();
    }
    fn thaw(&self) {
        self.0.thaw();
    }
    fn op_timeout(&self) -> Duration {
        HANG_TIMEOUT
    }
}

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
    fn hanging(&self) -> Option<Result<(PostgresStore, Box<dyn Hang>), Error>> {
        let config: tokio_postgres::Config = match self.url.parse() {
            Ok(c) => c,
            Err(e) => return Some(Err(Error::config(format!("{}: {e}", self.url)))),
        };
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".to_owned(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let proxy = match Proxy::start(&format!("{host}:{port}")) {
            Ok(proxy) => proxy,
            Err(e) => return Some(Err(Error::store(None, "starting the proxy", e))),
        };
        let user = config.get_user().unwrap_or("postgres");
        let db = config.get_dbname().unwrap_or("postgres");
        let table = conformance::unique("rh");
        let via = format!("postgres://{user}@{}/{db}", proxy.addr());
        let store = PostgresStore::builder(&via)
            .table(&table)
            .op_timeout(HANG_TIMEOUT)
            .connect();
        if store.is_ok() {
            self.tables
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(postgres_common::Table {
                    url: self.url.clone(),
                    name: table,
                });
        }
        Some(store.map(|s| (s, Box::new(Frozen(proxy)) as Box<dyn Hang>)))
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
