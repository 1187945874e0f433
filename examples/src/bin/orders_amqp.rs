//! `cargo run -p rerun-examples --features orders --bin orders_amqp`
fn main() -> std::process::ExitCode {
    rerun_examples::run_main("orders_amqp", rerun_examples::orders::amqp::run)
}
