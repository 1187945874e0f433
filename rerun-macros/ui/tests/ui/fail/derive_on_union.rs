use rerun_core::Idempotent;

#[derive(Idempotent)]
union Bits {
    int: u32,
    float: f32,
}

fn main() {}
