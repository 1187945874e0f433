//! The conformance suite on `SqliteStore`, including the multi-process checks.

use rerun_core::testing::conformance::{self, Factory};
use rerun_core::{Error, SqliteStore};

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
