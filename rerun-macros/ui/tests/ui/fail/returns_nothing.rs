use rerun_core::idempotent;

#[idempotent(key = id)]
fn send_email(id: u64) {
    let _ = id;
}

fn main() {}
