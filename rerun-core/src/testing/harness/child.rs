//! Real kills: the test binary re-runs its own test in a child process, which stops at the
//! crash point and tells the parent; the parent kills it with SIGKILL.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::hook::PointId;

const ENV_NAME: &str = "RERUN_HARNESS_CHILD_NAME";
const ENV_POINT: &str = "RERUN_HARNESS_CHILD_POINT";
const ENV_DIR: &str = "RERUN_HARNESS_CHILD_DIR";
/// The line a child prints when it stands at its crash point, waiting to be killed.
const AT_POINT: &str = "rerun-harness: standing at";
/// The line a child prints when its run ended without reaching the point.
const MISSED: &str = "rerun-harness: missed";
/// How long a child waits at its point before ending itself, should its parent be gone.
const ORPHAN_LIMIT: Duration = Duration::from_secs(300);

/// What a child process was started to do.
pub(crate) struct Order {
    /// The harness that should act (other harnesses of the same test skip).
    pub name: String,
    /// Where to stop.
    pub point: PointId,
    /// The world's directory.
    pub dir: PathBuf,
}

impl Order {
    /// The order of this process, when it is a harness child.
    pub(crate) fn from_env() -> Option<Order> {
        let name = std::env::var(ENV_NAME).ok()?;
        let point = std::env::var(ENV_POINT).ok()?;
        let dir = std::env::var_os(ENV_DIR)?;
        let (point, n) = point.rsplit_once('#')?;
        Some(Order {
            name,
            point: PointId {
                name: point.to_owned(),
                occurrence: n.parse().ok()?,
            },
            dir: PathBuf::from(dir),
        })
    }
}

/// Ends this child with its parent (on Linux), so a parent killed mid-check leaves no child
/// waiting at its point; elsewhere the wait at the point is bounded instead.
pub(crate) fn die_with_parent() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
}

/// The child's action at its point: tell the parent, then wait to be killed.
pub(crate) fn stand_at_point() -> Arc<dyn Fn(&PointId) + Send + Sync> {
    Arc::new(|point: &PointId| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "\n{AT_POINT} {}#{}", point.name, point.occurrence);
        let _ = out.flush();
        drop(out);
        let until = Instant::now() + ORPHAN_LIMIT;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
        // The parent never killed us: end like a crash anyway rather than run on.
        std::process::abort();
    })
}

/// Tells the parent the run ended without reaching the point, and ends the child.
pub(crate) fn missed(why: &str) -> ! {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{MISSED} {}", why.replace('\n', " "));
    let _ = out.flush();
    std::process::exit(3)
}

/// Why a real kill did not happen.
pub(crate) enum KillError {
    /// The child ran but did not stop at the point.
    NotReached(String),
    /// The child could not be run or killed.
    Failed(String),
}

/// Starts a child running `test_name` that stops at `point` in the world at `dir`, waits until
/// it stands there and kills it with SIGKILL. Returns the child's pid.
pub(crate) fn kill_at(
    test_name: &str,
    harness: &str,
    point: &PointId,
    dir: &Path,
    timeout: Duration,
) -> Result<u32, KillError> {
    let exe = std::env::current_exe()
        .map_err(|e| KillError::Failed(format!("cannot find the test binary to re-run: {e}")))?;
    let mut child = Command::new(&exe)
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ENV_NAME, harness)
        .env(ENV_POINT, format!("{}#{}", point.name, point.occurrence))
        .env(ENV_DIR, dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| KillError::Failed(format!("cannot start {}: {e}", exe.display())))?;
    let pid = child.id();

    // Both pipes are drained on their own threads so a chatty child never blocks on a full pipe.
    let (lines_tx, lines_rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take();
    let out_reader = std::thread::spawn(move || {
        if let Some(stdout) = stdout {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        }
    });
    let stderr = child.stderr.take();
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    });

    let deadline = crate::clock::deadline_in(timeout);
    let mut seen = Vec::new();
    let outcome = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines_rx.recv_timeout(left) {
            // libtest may have printed `test name ... ` on the same line before the mark.
            Ok(line) if line.contains(AT_POINT) => break Ok(()),
            Ok(line) if line.contains(MISSED) => {
                let why = line.split_once(MISSED).map_or("", |(_, why)| why.trim());
                break Err(KillError::NotReached(why.to_owned()));
            }
            Ok(line) => seen.push(line),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                break Err(KillError::NotReached(format!(
                    "the child did not reach the point within {timeout:?}"
                )))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Err(if seen.iter().any(|l| l.contains("running 0 tests")) {
                    KillError::Failed(format!(
                        "the test binary has no test named `{test_name}`; pass the test's full path with .test_name(…)"
                    ))
                } else {
                    KillError::NotReached(
                        "the child process ended before reaching the point".to_owned(),
                    )
                })
            }
        }
    };
    // Killed at the point, or (on any other outcome) so that nothing is left running.
    let killed = i32::try_from(pid)
        .map_err(|_| format!("pid {pid} out of range"))
        .and_then(|p| {
            kill(Pid::from_raw(p), Signal::SIGKILL).map_err(|e| format!("kill({pid}): {e}"))
        })
        .map_err(KillError::Failed);
    let status = child.wait();
    let _ = out_reader.join();
    let stderr = err_reader.join().unwrap_or_default();
    match outcome {
        Ok(()) => {
            killed?;
            match status {
                Ok(s) if s.code().is_none() => Ok(pid),
                Ok(s) => Err(KillError::Failed(format!(
                    "the child exited ({s}) instead of being killed"
                ))),
                Err(e) => Err(KillError::Failed(format!("waiting for the child: {e}"))),
            }
        }
        Err(KillError::NotReached(why)) => Err(KillError::NotReached(format!(
            "{why}{}",
            tail("child stderr", &stderr)
        ))),
        Err(KillError::Failed(why)) => Err(KillError::Failed(format!(
            "{why}{}",
            tail("child stderr", &stderr)
        ))),
    }
}

/// The last lines of a child's output, for a failure message.
fn tail(label: &str, text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    let from = lines.len().saturating_sub(12);
    format!("\n{label}:\n  {}", lines[from..].join("\n  "))
}
