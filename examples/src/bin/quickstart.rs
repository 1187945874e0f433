//! `cargo run -p rerun-examples --bin quickstart`
fn main() -> std::process::ExitCode {
    rerun_examples::run_main("quickstart", |dir, out| {
        rerun_examples::quickstart::run(dir, out).map(|_| ())
    })
}
