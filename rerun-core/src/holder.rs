//! Who holds a claim, and whether that holder is provably dead.
//!
//! A holder is identified by host, boot id, pid and process start time, plus an attempt id
//! unique within the process. On the holder's own host, death is provable: the boot id changed
//! (the machine rebooted), the pid is gone, or the pid now belongs to a process that started at
//! another time (a reused pid is not the holder). A pid we may not signal (`EPERM`) exists and is
//! treated as alive. On another host nothing is provable, and only the lease decides.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The identity of one attempt to run a key's body.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    /// Host name.
    pub host: Cow<'static, str>,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), empty where unknown.
    pub boot_id: Cow<'static, str>,
    /// Process id.
    pub pid: u32,
    /// Process start time in clock ticks since boot (field 22 of `/proc/PID/stat`), 0 where unknown.
    pub start_time: u64,
    /// An id unique among this process's attempts.
    pub attempt: u64,
}

/// What can be said of a holder from this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The holder's process runs (or may run: a pid we may not signal).
    Alive,
    /// The holder's process is provably gone.
    Dead,
    /// The holder is on another host: only its lease can tell.
    Unknown,
}

struct Process {
    host: String,
    boot_id: String,
    pid: u32,
    start_time: u64,
}

static PROCESS: OnceLock<Process> = OnceLock::new();
static NEXT_BLOCK: AtomicU64 = AtomicU64::new(0);
const BLOCK: u64 = 1 << 16;

thread_local! {
    /// The next attempt id of this thread and the end of its block: threads draw blocks of ids
    /// from one counter, so concurrent calls do not contend on it.
    static ATTEMPTS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

fn next_attempt() -> u64 {
    ATTEMPTS.with(|a| {
        let (mut next, mut end) = a.get();
        if next == end {
            next = NEXT_BLOCK.fetch_add(1, Ordering::Relaxed) * BLOCK + 1;
            end = next + BLOCK - 1;
        }
        a.set((next + 1, end));
        next
    })
}

fn process() -> &'static Process {
    PROCESS.get_or_init(|| {
        let pid = std::process::id();
        Process {
            host: host_name(),
            boot_id: boot_id(),
            pid,
            start_time: start_time_of(pid).unwrap_or(0),
        }
    })
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The boot id of the running kernel, read once.
pub fn this_boot() -> &'static str {
    &process().boot_id
}

/// The boot id of this machine, empty where the kernel does not expose one.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Field 22 of `/proc/PID/stat` (start time) and whether the process is a zombie.
fn stat_of(pid: u32) -> Option<(u64, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    // `rest` starts at field 3 (state); start time is field 22.
    let start = fields.nth(18)?.parse().ok()?;
    Some((start, state == "Z" || state == "X"))
}

fn start_time_of(pid: u32) -> Option<u64> {
    stat_of(pid).map(|(start, _)| start)
}

impl Holder {
    /// A new attempt of this process.
    pub fn current() -> Holder {
        let p = process();
        Holder {
            host: Cow::Borrowed(p.host.as_str()),
            boot_id: Cow::Borrowed(p.boot_id.as_str()),
            pid: p.pid,
            start_time: p.start_time,
            attempt: next_attempt(),
        }
    }

    /// Whether this holder is this process.
    pub fn is_this_process(&self) -> bool {
        let p = process();
        self.pid == p.pid
            && self.start_time == p.start_time
            && *self.boot_id == *p.boot_id
            && *self.host == *p.host
    }

    /// What this process can tell about the holder (see the module docs).
    pub fn liveness(&self) -> Liveness {
        let p = process();
        if *self.host != *p.host {
            return Liveness::Unknown;
        }
        if p.boot_id.is_empty() || self.boot_id.is_empty() {
            return Liveness::Unknown;
        }
        if *self.boot_id != *p.boot_id {
            return Liveness::Dead;
        }
        if self.pid == p.pid {
            return if self.start_time == p.start_time {
                Liveness::Alive
            } else {
                Liveness::Dead
            };
        }
        let Ok(pid) = i32::try_from(self.pid) else {
            return Liveness::Dead;
        };
        let signal = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None);
        classify(signal, stat_of(self.pid), self.start_time)
    }

    /// The holder as one line of text, as stores keep it: `host\tboot\tpid\tstart\tattempt`.
    pub fn encode(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}",
            self.host, self.boot_id, self.pid, self.start_time, self.attempt
        )
    }

    /// Parses [`Holder::encode`]'s text.
    pub fn decode(s: &str) -> Option<Holder> {
        let mut it = s.split('\t');
        let host = it.next()?;
        let boot_id = it.next()?;
        let pid = it.next()?.parse().ok()?;
        let start_time = it.next()?.parse().ok()?;
        let attempt = it.next()?.parse().ok()?;
        if it.next().is_some() {
            return None;
        }
        Some(Holder {
            host: Cow::Owned(host.to_owned()),
            boot_id: Cow::Owned(boot_id.to_owned()),
            pid,
            start_time,
            attempt,
        })
    }
}

/// Decides liveness from `kill(pid, 0)` and `/proc/PID/stat`; apart for testing every branch.
fn classify(
    signal: nix::Result<()>,
    stat: Option<(u64, bool)>,
    holder_start_time: u64,
) -> Liveness {
    match signal {
        Err(nix::errno::Errno::ESRCH) => Liveness::Dead,
        // The pid exists but belongs to someone we may not signal: alive, unless its start
        // time shows it is another process.
        Err(nix::errno::Errno::EPERM) => match stat {
            Some((start, _)) if holder_start_time != 0 && start != holder_start_time => {
                Liveness::Dead
            }
            _ => Liveness::Alive,
        },
        Err(_) => Liveness::Alive,
        Ok(()) => match stat {
            Some((_, true)) => Liveness::Dead,
            Some((start, false)) if holder_start_time != 0 && start != holder_start_time => {
                Liveness::Dead
            }
            _ => Liveness::Alive,
        },
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process {} on {} (attempt {})",
            self.pid, self.host, self.attempt
        )
    }
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Holder({}@{} boot={} start={} attempt={})",
            self.pid,
            self.host,
            &self.boot_id[..self.boot_id.len().min(8)],
            self.start_time,
            self.attempt
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    #[test]
    fn this_process_is_alive() {
        let h = Holder::current();
        assert!(h.is_this_process());
        assert_eq!(h.liveness(), Liveness::Alive);
        assert_ne!(Holder::current().attempt, h.attempt);
    }

    #[test]
    fn own_pid_with_other_start_time_or_boot_is_dead() {
        let mut h = Holder::current();
        h.start_time += 1;
        assert_eq!(h.liveness(), Liveness::Dead);
        let mut h = Holder::current();
        h.boot_id = "00000000-0000-0000-0000-000000000000".into();
        assert_eq!(h.liveness(), Liveness::Dead);
    }

    #[test]
    fn other_host_is_unknown() {
        let mut h = Holder::current();
        h.host = "elsewhere.example".into();
        assert_eq!(h.liveness(), Liveness::Unknown);
    }

    #[test]
    fn classify_covers_every_branch() {
        assert_eq!(classify(Err(Errno::ESRCH), None, 5), Liveness::Dead);
        assert_eq!(classify(Err(Errno::EPERM), None, 5), Liveness::Alive);
        assert_eq!(
            classify(Err(Errno::EPERM), Some((5, false)), 5),
            Liveness::Alive
        );
        assert_eq!(
            classify(Err(Errno::EPERM), Some((6, false)), 5),
            Liveness::Dead
        );
        assert_eq!(classify(Ok(()), Some((5, false)), 5), Liveness::Alive);
        assert_eq!(classify(Ok(()), Some((6, false)), 5), Liveness::Dead);
        assert_eq!(classify(Ok(()), Some((5, true)), 5), Liveness::Dead);
        assert_eq!(classify(Ok(()), None, 5), Liveness::Alive);
    }

    #[test]
    fn encode_round_trips() {
        let h = Holder::current();
        assert_eq!(Holder::decode(&h.encode()), Some(h));
        assert_eq!(Holder::decode("a\tb\tnotapid\t1\t2"), None);
    }

    #[test]
    fn reaped_child_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let mut h = Holder::current();
        h.pid = pid;
        // The pid is gone (or reused by another process with another start time).
        assert_eq!(h.liveness(), Liveness::Dead);
    }
}
