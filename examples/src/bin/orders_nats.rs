//! `cargo run -p rerun-examples --features orders --bin orders_nats`
fn main() -> std::process::ExitCode {
    rerun_examples::run_main("orders_nats", rerun_examples::orders::nats::run)
}
