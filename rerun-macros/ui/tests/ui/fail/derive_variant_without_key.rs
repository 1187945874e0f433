use rerun_core::Idempotent;

#[derive(serde::Serialize, Idempotent)]
enum ShopEvent {
    Paid {
        #[rerun(key)]
        order: String,
    },
    Refunded {
        order: String,
    },
}

fn main() {}
