//! rerun's examples, each a program a user would recognise. The logic of each lives in a module
//! here (so tests can call the operations); `src/bin/<name>.rs` runs it:
//!
//! ```text
//! cargo run -p rerun-examples --bin quickstart   # a webhook redelivered, a double-clicked payment
//! cargo run -p rerun-examples --bin webhook      # a Stripe-like event handler with #[derive(Idempotent)]
//! cargo run -p rerun-examples --bin payment      # an at-most-once charge with `reconcile`
//! cargo run -p rerun-examples --bin worker       # a job worker that dies halfway and converges
//! cargo run -p rerun-examples --bin startup      # a one-time migration, two instances at once
//! cargo run -p rerun-examples --features metrics --bin metrics     # rerun's metrics for Prometheus
//! cargo run -p rerun-examples --features http --bin http           # a payments API behind the Idempotency-Key layer
//! cargo run -p rerun-examples --features orders --bin orders_nats  # an order-events consumer on NATS JetStream
//! cargo run -p rerun-examples --features orders --bin orders_amqp  # the same consumer on RabbitMQ
//! ```
//!
//! Every program works in a fresh temporary directory, so each run prints the same story. The
//! last four need the package's features `metrics`, `http` and `orders` (both order-events
//! consumers), which bring in what they use (an HTTP server and client, PostgreSQL, the brokers'
//! clients): the first five build without them.

use std::fmt;

#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(feature = "orders")]
pub mod orders;
pub mod payment;
pub mod quickstart;
pub mod startup;
pub mod webhook;
pub mod worker;

/// The error of the examples' own operations: rerun's, or the example's world failing.
#[derive(Debug)]
pub enum AppError {
    /// rerun refused or failed the call (payload mismatch, in progress, outcome unknown, …).
    Rerun(rerun_core::Error),
    /// The example's database failed.
    Db(rusqlite::Error),
    /// A business outcome, such as a declined card.
    Refused(String),
    /// A service the example talks to (PostgreSQL, a broker) failed.
    Service(String),
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Rerun(e) => write!(f, "{e}"),
            AppError::Db(e) => write!(f, "database: {e}"),
            AppError::Refused(why) => f.write_str(why),
            AppError::Service(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for AppError {}

impl From<rerun_core::Error> for AppError {
    fn from(e: rerun_core::Error) -> Self {
        AppError::Rerun(e)
    }
}

impl From<rusqlite::Error> for AppError {
    fn from(e: rusqlite::Error) -> Self {
        AppError::Db(e)
    }
}

impl From<std::io::Error> for AppError {
    fn from(e: std::io::Error) -> Self {
        AppError::Refused(format!("i/o: {e}"))
    }
}

/// Runs `f` where a crash is simulated by a panic, without printing the panic: the examples
/// crash on purpose to show what a rerun does.
pub fn crash_quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok();
    std::panic::set_hook(hook);
    out
}

/// Runs an example's `main` with a fresh temporary directory and stdout; exits 1 on an error.
pub fn run_main(
    name: &str,
    f: impl FnOnce(&std::path::Path, &mut dyn std::io::Write) -> Result<(), AppError>,
) -> std::process::ExitCode {
    let result = tempfile::Builder::new()
        .prefix(&format!("rerun-{name}-"))
        .tempdir()
        .map_err(AppError::from)
        .and_then(|dir| f(dir.path(), &mut std::io::stdout().lock()));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name} failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
