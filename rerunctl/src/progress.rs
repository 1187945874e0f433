//! A progress line on stderr for scans that take more than a moment.
//!
//! It appears only when stderr is a terminal, and only after [`DELAY`]: a scan of a small store
//! prints nothing but its result, and output piped into a file or a script never holds a
//! progress line. Scans do not know their total (a store counts nothing up front), so the line
//! is a spinner with the counts so far.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a scan runs before its progress line appears.
pub const DELAY: Duration = Duration::from_millis(400);

/// The progress of one scan.
pub struct Progress {
    enabled: bool,
    started: Instant,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A progress line, shown only if `enabled` (stderr is a terminal) and the scan runs long.
    pub fn new(enabled: bool) -> Progress {
        Progress {
            enabled,
            started: Instant::now(),
            bar: None,
        }
    }

    /// Reports the counts so far; `message` is called only when the line is shown.
    pub fn update(&mut self, message: impl FnOnce() -> String) {
        if !self.enabled {
            return;
        }
        if self.bar.is_none() && self.started.elapsed() >= DELAY {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(120));
            self.bar = Some(bar);
        }
        if let Some(bar) = &self.bar {
            bar.set_message(message());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
