use rerun_core::{idempotent, Error};

#[idempotent(key = order_id, store = &rerun_core::MemoryStore::new())]
fn charge(order_id: &str) -> Result<u64, Error> {
    let _peek = __rerun_call;
    let _store = __rerun_given;
    let _scope = __rerun_scope;
    __rerun_scope_marker();
    let _cell = &__RERUN_SCOPE;
    Ok(order_id.len() as u64)
}

fn main() {}
