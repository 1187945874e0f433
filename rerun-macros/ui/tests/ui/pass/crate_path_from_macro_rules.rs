//! `crate = $crate::…` from another crate's `macro_rules!` (here `rerun_macros_ui::idempotent_via!`),
//! around a function the caller writes: `$crate` keeps naming the crate that defined the macro,
//! even where the expansion is spanned on the caller's return type.
use rerun_core::{Error, MemoryStore};

rerun_macros_ui::idempotent_via! {
    #[idempotent(key = id, store = store)]
    fn charge(store: &MemoryStore, id: u64) -> Result<u64, Error> {
        Ok(id * 2)
    }
}

fn main() {
    let store = MemoryStore::new();
    assert_eq!(charge(&store, 2).unwrap(), 4);
    assert_eq!(charge(&store, 2).unwrap(), 4);
}
