use rerun_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
#[rerun(once, reconcile = already_sent)]
struct Welcome {
    #[rerun(key)]
    user: u64,
}

fn already_sent(_w: &Welcome) -> bool {
    false
}

fn main() {}
