use rerun_core::{idempotent, state_changing, Error, MemoryStore};

/// Writes a method the lint of the `impl` block below cannot see.
macro_rules! setter {
    ($name:ident) => {
        fn $name(&self, value: u64) -> Result<(), Error> {
            let _ = value;
            Ok(())
        }
    };
}

struct Account {
    store: MemoryStore,
}

#[state_changing]
impl Account {
    #[idempotent(key = id, store = &self.store)]
    fn charge(&self, id: u64) -> Result<u64, Error> {
        Ok(id)
    }

    setter!(set_limit);
    setter! { set_balance }
}

fn main() {}
