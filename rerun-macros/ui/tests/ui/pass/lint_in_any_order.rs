//! `#[state_changing]` is satisfied by `#[idempotent(key = …)]` or `#[converges("…")]`,
//! above or below it, and on `impl` blocks by `#[read_only]` too.
use rerun_core::{converges, idempotent, read_only, state_changing, Error, MemoryStore};

#[derive(serde::Serialize)]
struct User {
    id: u64,
}

#[state_changing]
#[idempotent(key = user.id, once, store = &MemoryStore::new())]
fn send_welcome_email(user: &User) -> Result<(), Error> {
    let _ = user.id;
    Ok(())
}

#[idempotent(key = user.id, store = &MemoryStore::new())]
#[state_changing]
fn send_goodbye_email(user: &User) -> Result<(), Error> {
    let _ = user.id;
    Ok(())
}

#[state_changing]
#[converges("sets the flag; setting it twice is harmless")]
fn mark_verified(user: &User) -> Result<(), Error> {
    let _ = user.id;
    Ok(())
}

#[converges("deletes by id; deleting twice is harmless")]
#[state_changing]
fn delete(user: &User) -> Result<(), Error> {
    let _ = user.id;
    Ok(())
}

struct Accounts {
    store: MemoryStore,
}

#[state_changing]
impl Accounts {
    #[idempotent(key = user.id, scope = "accounts.open", store = &self.store)]
    fn open(&self, user: &User) -> Result<u64, Error> {
        Ok(user.id)
    }

    #[converges("an upsert by id")]
    fn rename(&self, user: &User) -> Result<(), Error> {
        let _ = user.id;
        Ok(())
    }

    #[read_only]
    fn count(&self) -> usize {
        self.store.len()
    }
}

fn main() {
    let accounts = Accounts { store: MemoryStore::new() };
    let user = User { id: 1 };
    send_welcome_email(&user).unwrap();
    send_goodbye_email(&user).unwrap();
    mark_verified(&user).unwrap();
    delete(&user).unwrap();
    accounts.open(&user).unwrap();
    accounts.rename(&user).unwrap();
    assert_eq!(accounts.count(), 1);
}
