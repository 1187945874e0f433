use rerun_core::{read_only, state_changing};

#[read_only]
#[state_changing]
fn count(items: &[u8]) -> usize {
    items.len()
}

fn main() {}
