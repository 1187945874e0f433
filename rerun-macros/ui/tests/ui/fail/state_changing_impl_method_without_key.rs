use rerun_core::{converges, idempotent, read_only, state_changing, Error};

struct Mailer;

#[state_changing]
impl Mailer {
    #[idempotent(key = user, store = &rerun_core::MemoryStore::new())]
    fn send_welcome(&self, user: u64) -> Result<(), Error> {
        let _ = user;
        Ok(())
    }

    fn send_invoice(&self, user: u64) -> Result<(), Error> {
        let _ = user;
        Ok(())
    }

    fn send_reminder(&self, user: u64) -> Result<(), Error> {
        let _ = user;
        Ok(())
    }

    #[read_only]
    fn outbox_len(&self) -> usize {
        0
    }

    #[converges("sets the flag; setting it twice is harmless")]
    fn mark_verified(&self, user: u64) -> Result<(), Error> {
        let _ = user;
        Ok(())
    }
}

fn main() {}
