//! The conformance suite on `MemoryStore` (in-process checks only).

use std::collections::HashMap;
use std::sync::Mutex;

use rerun_core::testing::conformance::{self, Factory};
use rerun_core::{Error, MemoryStore};

#[derive(Default)]
struct Memory {
    stores: Mutex<HashMap<String, MemoryStore>>,
}

impl Factory for Memory {
    type Store = MemoryStore;
    fn name(&self) -> &str {
        "memory"
    }
    fn fresh(&self) -> Result<(MemoryStore, String), Error> {
        let store = MemoryStore::new();
        let locator = conformance::unique("memory");
        self.stores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(locator.clone(), store.clone());
        Ok((store, locator))
    }
    fn reopen(&self, locator: &str) -> Result<MemoryStore, Error> {
        self.stores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(locator)
            .cloned()
            .ok_or_else(|| Error::config(format!("no memory store {locator}")))
    }
    fn shared_between_processes(&self) -> bool {
        false
    }
}

#[test]
fn memory_store_conforms() {
    conformance::run(&Memory::default());
}
