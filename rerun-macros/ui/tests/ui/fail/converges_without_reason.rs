use rerun_core::{converges, state_changing};

struct User;

#[state_changing]
#[converges]
fn mark_verified(user: &User) -> Result<(), ()> {
    let _ = user;
    Ok(())
}

#[converges("")]
fn mark_seen(user: &User) -> Result<(), ()> {
    let _ = user;
    Ok(())
}

#[converges(because)]
fn mark_read(user: &User) -> Result<(), ()> {
    let _ = user;
    Ok(())
}

fn main() {}
