//! `cargo run -p rerun-examples --features metrics --bin metrics [-- --serve]`
fn main() -> std::process::ExitCode {
    let serve = std::env::args().any(|a| a == "--serve");
    let addr: std::net::SocketAddr = if serve {
        ([127, 0, 0, 1], 9464).into()
    } else {
        ([127, 0, 0, 1], 0).into()
    };
    rerun_examples::run_main("metrics", |dir, out| {
        rerun_examples::metrics::run(dir, out, addr)?;
        if serve {
            writeln!(out, "\nserving http://{addr}/metrics; Ctrl-C to stop")?;
            loop {
                std::thread::park();
            }
        }
        Ok(())
    })
}
