//! The conformance suite on `SqliteStore`, including the multi-process checks.

use std::sync::Mutex;
use std::time::Duration;

use rerun_core::store::sqlite::SqliteOptions;
use rerun_core::testing::conformance::{self, Factory, Hang};
use rerun_core::{Error, SqliteStore};

/// How long the hanging store's calls wait for the write lock.
const HANG_TIMEOUT: Duration = Duration::from_secs(2);

/// Holds the file's write lock from another connection while frozen.
struct WriteLock {
    conn: Mutex<rusqlite::Connection>,
}

impl Hang for WriteLock {
    fn freeze(&self) {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.execute_batch("BEGIN IMMEDIATE")
            .expect("taking the write lock");
    }
    fn thaw(&self) {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.execute_batch("ROLLBACK")
            .expect("giving the write lock back");
    }
    fn op_timeout(&self) -> Duration {
        HANG_TIMEOUT
    }
}

struct Sqlite {
    dir: std::path::PathBuf,
}

impl Factory for Sqlite {
    type Store = SqliteStore;
    fn name(&self) -> &str {
        "sqlite"
    }
    fn fresh(&self) -> Result<(SqliteStore, String), Error> {
        let path = self
            .dir
            .join(format!("{}.sqlite3", conformance::unique("db")));
        Ok((SqliteStore::open(&path)?, path.display().to_string()))
    }
    fn reopen(&self, locator: &str) -> Result<SqliteStore, Error> {
        SqliteStore::open(locator)
    }
    fn hanging(&self) -> Option<Result<(SqliteStore, Box<dyn Hang>), Error>> {
        let path = self
            .dir
            .join(format!("{}.sqlite3", conformance::unique("hung")));
        let store =
            match SqliteStore::open_with(&path, SqliteOptions::new().busy_timeout(HANG_TIMEOUT)) {
                Ok(store) => store,
                Err(e) => return Some(Err(e)),
            };
        let conn = rusqlite::Connection::open(&path).expect("a second connection");
        Some(Ok((
            store,
            Box::new(WriteLock {
                conn: Mutex::new(conn),
            }),
        )))
    }
}

#[test]
fn sqlite_store_conforms() {
    // Children of this test reopen the parent's files, so the folder must be shared: it is
    // passed down through the environment.
    let dir = match std::env::var_os("RERUN_SQLITE_CONFORMANCE_DIR") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            let dir = std::env::temp_dir().join(conformance::unique("rerun-sqlite-conformance"));
            std::fs::create_dir_all(&dir).expect("a temp dir");
            std::env::set_var("RERUN_SQLITE_CONFORMANCE_DIR", &dir);
            dir
        }
    };
    conformance::run(&Sqlite { dir: dir.clone() });
    let _ = std::fs::remove_dir_all(dir);
}
