//! `cargo run -p rerun-examples --bin webhook`
fn main() -> std::process::ExitCode {
    rerun_examples::run_main("webhook", |dir, out| {
        rerun_examples::webhook::run(dir, out).map(|_| ())
    })
}
