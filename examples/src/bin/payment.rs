//! `cargo run -p rerun-examples --bin payment`
fn main() -> std::process::ExitCode {
    rerun_examples::run_main("payment", |dir, out| {
        rerun_examples::payment::run(dir, out).map(|_| ())
    })
}
