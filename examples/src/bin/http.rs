//! `cargo run -p rerun-examples --features http --bin http` (a self-test), or `-- --serve` to keep serving.
fn main() -> std::process::ExitCode {
    if std::env::args().any(|a| a == "--serve") {
        return match rerun_examples::http::serve_forever() {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("http failed: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    rerun_examples::run_main("http", rerun_examples::http::run)
}
