//! The one rule the ratio programs of this crate (`*_ratios`) measure and report by.
//!
//! A cell's sides run in interleaved rounds of one short window each, rotating which side goes
//! first, so that a stretch of noise on a shared machine (another process's build, a
//! checkpoint, closing connections) lands on every side alike and no side always inherits
//! another's aftermath. A side's rate is the median of its rounds' rates. A ratio between two
//! sides is the median of the ratios of their rounds: a round's windows are seconds apart at
//! most, so each ratio compares the machine with itself, and one slow stretch moves one ratio,
//! not the result. A side's client CPU per call is this process's CPU time over the side's
//! windows, every thread included, divided by its calls.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One window of one side: how many calls finished, in how long.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub calls: u64,
    pub took: Duration,
}

impl Window {
    fn rate(&self) -> f64 {
        self.calls as f64 / self.took.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// One side of a cell over all its rounds.
#[derive(Debug)]
pub struct Side {
    rates: Vec<f64>,
    calls: u64,
    cpu: Duration,
}

impl Side {
    /// Calls per second: the median round's.
    pub fn rate(&self) -> f64 {
        median(self.rates.clone())
    }

    /// This side against `other`: the median of the per-round ratios of their rates.
    pub fn vs(&self, other: &Side) -> f64 {
        median(
            self.rates
                .iter()
                .zip(&other.rates)
                .map(|(a, b)| a / b)
                .collect(),
        )
    }

    /// Microseconds a call, per caller: the median round's.
    pub fn us_per_call(&self, callers: usize) -> f64 {
        1e6 / self.rate() * callers as f64
    }

    /// Client CPU microseconds per call, over all the side's windows.
    pub fn cpu_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.calls.max(1) as f64
    }
}

/// Runs every side in `rounds` interleaved windows (at least one) and returns the sides in the
/// order given.
pub fn interleave<const N: usize>(
    rounds: usize,
    sides: [&mut dyn FnMut() -> Window; N],
) -> [Side; N] {
    let rounds = rounds.max(1);
    let mut out: [Side; N] = std::array::from_fn(|_| Side {
        rates: Vec::with_capacity(rounds),
        calls: 0,
        cpu: Duration::ZERO,
    });
    for round in 0..rounds {
        let mut this = [0.0; N];
        for step in 0..N {
            let at = (round + step) % N;
            let cpu = process_cpu();
            let window = sides[at]();
            let side = &mut out[at];
            side.cpu += process_cpu().saturating_sub(cpu);
            side.calls += window.calls;
            this[at] = window.rate();
        }
        for (side, rate) in out.iter_mut().zip(this) {
            side.rates.push(rate);
        }
    }
    out
}

/// One window of `f(thread, i)` on `threads` threads for about `window`, each thread reading
/// the clock once every `batch` calls.
pub fn on_threads(
    threads: usize,
    window: Duration,
    batch: u64,
    f: &(dyn Fn(usize, u64) + Sync),
) -> Window {
    let calls = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (calls, f) = (&calls, &f);
            s.spawn(move || {
                let mut i = 0;
                while start.elapsed() < window {
                    for _ in 0..batch {
                        f(t, i);
                        i += 1;
                    }
                    calls.fetch_add(batch, Ordering::Relaxed);
                }
            });
        }
    });
    Window {
        calls: calls.load(Ordering::Relaxed),
        took: start.elapsed(),
    }
}

/// The rounds a program runs: `RERUN_BENCH_ROUNDS`, else `default`.
pub fn rounds(default: usize) -> usize {
    std::env::var("RERUN_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(default)
}

/// The middle value (the upper one of an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// CPU time of this process so far (all threads).
fn process_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}
