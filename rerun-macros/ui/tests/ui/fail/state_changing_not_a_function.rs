use rerun_core::state_changing;

#[state_changing]
struct Mailer;

fn main() {}
