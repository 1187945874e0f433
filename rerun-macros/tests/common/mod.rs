//! Stores for the behaviour tests: every test runs against `MemoryStore` and `SqliteStore`.

#![allow(dead_code)]

use std::sync::Arc;

use rerun_core::{DynStore, MemoryStore, SqliteStore};

pub struct TestStore {
    pub name: &'static str,
    pub store: Arc<dyn DynStore>,
    _dir: Option<tempfile::TempDir>,
}

pub fn stores() -> Vec<TestStore> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite = SqliteStore::open(dir.path().join("rerun.sqlite3")).expect("sqlite opens");
    vec![
        TestStore {
            name: "memory",
            store: Arc::new(MemoryStore::new()),
            _dir: None,
        },
        TestStore {
            name: "sqlite",
            store: Arc::new(sqlite),
            _dir: Some(dir),
        },
    ]
}

/// The store as the `&dyn DynStore` the annotated test functions take.
impl TestStore {
    pub fn get(&self) -> &dyn DynStore {
        &*self.store
    }
}
