use rerun_core::state_changing;

struct User;
#[derive(Debug)]
struct MailError;

#[state_changing]
fn send_welcome_email(user: &User) -> Result<(), MailError> {
    let _ = user;
    Ok(())
}

fn main() {}
