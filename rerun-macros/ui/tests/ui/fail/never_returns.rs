use rerun_core::idempotent;

#[idempotent(key = id)]
fn serve(id: u64) -> ! {
    loop {
        let _ = id;
    }
}

fn main() {}
