//! `cargo run -p rerun-examples --bin startup`
fn main() -> std::process::ExitCode {
    rerun_examples::run_main("startup", |dir, out| {
        rerun_examples::startup::run(dir, out).map(|_| ())
    })
}
