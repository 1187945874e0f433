//! The identity of this process: what a holder records about itself, and what it takes to prove
//! from here that another holder is gone.
//!
//! Read once per process *generation*: a child made by `fork()` is a new generation, with its own
//! pid, start time, lease keeper and pooled connections, and keeps none of its parent's. Fork is
//! detected through `pthread_atfork` (a counter bumped in every child, so checking it costs one
//! relaxed atomic load and no system call); the identity of a generation is cached per thread.
//!
//! What is recorded, and why each part is needed before a holder can be judged dead:
//!
//! | part | source | why |
//! |---|---|---|
//! | boot id | `/proc/sys/kernel/random/boot_id` | the same running kernel: a pid means nothing on another kernel |
//! | PID namespace | inode of `/proc/self/ns/pid` | the same process table: pid 1 of one container is not pid 1 of another |
//! | pid, start time | `getpid`, field 22 of `/proc/self/stat` | the process itself, not a later one that reuses its pid |
//! | host name | `gethostname` | shown to people only: it proves nothing |
//!
//! A pid can only be checked through `/proc` when this process's `/proc` shows its own PID
//! namespace (`/proc/self` names our own pid); a `/proc` mounted from another namespace (a
//! container started with `unshare --pid` but without a fresh `/proc`) proves nothing, and
//! holders are then judged by their leases alone.
//!
//! Times are normalized for time namespaces (`/proc/self/timens_offsets`): the monotonic clock of
//! the local stores and process start times read the same in every time namespace of one boot.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

use crate::fork_lock::ForkLock;

/// What one process generation knows about itself.
pub(crate) struct Process {
    /// The fork count this identity was read at.
    pub(crate) forks: u64,
    /// Host name, for people.
    pub(crate) host: String,
    /// Boot id of the running kernel, empty where unknown.
    pub(crate) boot_id: String,
    /// Inode of this process's PID namespace, 0 where unknown.
    pub(crate) pid_ns: u64,
    /// Process id in its own namespace.
    pub(crate) pid: u32,
    /// Start time in clock ticks since boot, normalized to the boot's own clock; 0 where unknown.
    pub(crate) start_time: u64,
    /// Whether `/proc` shows this process's own PID namespace, so other pids can be checked there.
    pub(crate) proc_is_ours: bool,
    /// This time namespace's offset of `CLOCK_BOOTTIME`, in nanoseconds (0 outside one).
    pub(crate) boottime_offset_ns: i128,
    /// The lease keeper of this generation, started on first use.
    pub(crate) keeper: OnceLock<&'static crate::runtime::keeper::Keeper>,
    /// This process's part of an encoded holder (all but the attempt), built on first use.
    pub(crate) holder_prefix: OnceLock<String>,
}

/// Bumped in every child process right after `fork()`.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// The generation shared by this process's threads.
static SHARED: ForkLock<Option<&'static Process>> = ForkLock::new(None);

thread_local! {
    /// This thread's copy of the current generation.
    static CACHED: Cell<Option<&'static Process>> = const { Cell::new(None) };
}

/// The identity of the current process generation.
pub(crate) fn current() -> &'static Process {
    let forks = FORKS.load(Ordering::Relaxed);
    if let Some(p) = CACHED.with(Cell::get).filter(|p| p.forks == forks) {
        return p;
    }
    let p = shared(forks);
    CACHED.with(|c| c.set(Some(p)));
    p
}

/// The generation for `forks`, shared by the process's threads.
fn shared(forks: u64) -> &'static Process {
    watch_forks();
    // After a fork, a thread of the parent may have held this lock at the moment of the fork,
    // and no thread of the child will ever release it. The lock is only a cache: rather than
    // wait on such a lock, compute a private identity (correct, only slower: each thread then
    // has its own keeper). A holder of this generation is waited for.
    let guard = SHARED.lock(forks);
    match guard {
        Some(mut slot) => match *slot {
            Some(p) if p.forks == forks => p,
            _ => {
                let p = read(forks);
                *slot = Some(p);
                p
            }
        },
        None => read(forks),
    }
}

/// Registers the fork counter, once per process (a child inherits the registration).
fn watch_forks() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: `pthread_atfork` only records the three function pointers; the child handler
        // does an atomic increment and closes the child's copies of held lock descriptors
        // (atomic swaps and `close`), which are async-signal-safe, allocate nothing and take no
        // lock, as a handler that runs in a freshly forked child must.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        if rc != 0 {
            tracing::error!(
                code = rc,
                "rerun could not register its fork handler; a forked child would hold claims under its parent's identity"
            );
        }
    });
}

extern "C" fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
    crate::lock::close_in_forked_child();
}

/// Reads this process's identity: once per generation, leaked (a few hundred bytes per fork).
fn read(forks: u64) -> &'static Process {
    let pid = std::process::id();
    let offset = boottime_offset_ns();
    let proc_is_ours = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse::<u32>().ok()))
        == Some(pid);
    Box::leak(Box::new(Process {
        forks,
        host: host_name(),
        boot_id: boot_id(),
        pid_ns: namespace_inode("/proc/self/ns/pid").unwrap_or(0),
        pid,
        start_time: stat_of_self()
            .map(|start| normalize_start(start, offset))
            .unwrap_or(0),
        proc_is_ours,
        boottime_offset_ns: offset,
        keeper: OnceLock::new(),
        holder_prefix: OnceLock::new(),
    }))
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The inode in a namespace link such as `pid:[4026531836]`.
fn namespace_inode(link: &str) -> Option<u64> {
    let target = std::fs::read_link(link).ok()?;
    let text = target.to_str()?;
    let inner = text.split_once('[')?.1.strip_suffix(']')?;
    inner.parse().ok()
}

/// The `CLOCK_BOOTTIME` offset of this process's time namespace, in nanoseconds.
fn boottime_offset_ns() -> i128 {
    let Ok(text) = std::fs::read_to_string("/proc/self/timens_offsets") else {
        return 0;
    };
    text.lines()
        .find_map(|line| {
            let mut parts = line.split_whitespace();
            if parts.next()? != "boottime" {
                return None;
            }
            let secs: i128 = parts.next()?.parse().ok()?;
            let nanos: i128 = parts.next()?.parse().ok()?;
            Some(secs * 1_000_000_000 + nanos)
        })
        .unwrap_or(0)
}

/// Clock ticks per second of `/proc/PID/stat` times.
fn ticks_per_second() -> i128 {
    static TICKS: OnceLock<i128> = OnceLock::new();
    *TICKS.get_or_init(|| {
        nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|t| *t > 0)
            .map(i128::from)
            .unwrap_or(100)
    })
}

/// A start time read through `/proc` from inside a time namespace is shifted by that
/// namespace's boottime offset; this takes it back to the boot's own clock.
pub(crate) fn normalize_start(start: u64, offset_ns: i128) -> u64 {
    let shift = offset_ns * ticks_per_second() / 1_000_000_000;
    u64::try_from(i128::from(start) - shift).unwrap_or(0)
}

fn stat_of_self() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&text).map(|(start, _)| start)
}

/// Start time (field 22) and whether the process is a zombie, from the text of
/// `/proc/PID/stat`.
pub(crate) fn parse_stat(stat: &str) -> Option<(u64, bool)> {
    // The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    // `rest` starts at field 3 (state); start time is field 22.
    let start = fields.nth(18)?.parse().ok()?;
    Some((start, state == "Z" || state == "X"))
}

/// Start time (normalized) and zombie state of another process of this PID namespace. A
/// process whose first thread ended (`pthread_exit` in `main`) shows that thread's zombie state
/// in `/proc/PID/stat` while its other threads run on: it is a zombie only when none of its
/// threads is left running.
pub(crate) fn stat_of(pid: u32) -> Option<(u64, bool)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (start, zombie) = parse_stat(&text)?;
    let zombie = zombie && !any_thread_runs(pid);
    Some((normalize_start(start, current().boottime_offset_ns), zombie))
}

/// Whether a thread of process `pid` other than a zombie is listed in `/proc/PID/task`.
fn any_thread_runs(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|text| parse_stat(&text))
            .is_some_and(|(_, zombie)| !zombie)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_itself() {
        let p = current();
        assert_eq!(p.pid, std::process::id());
        assert!(
            p.proc_is_ours,
            "this test runs with a /proc of its own namespace"
        );
        assert_ne!(p.pid_ns, 0);
        assert!(!p.boot_id.is_empty());
        assert_ne!(p.start_time, 0);
        assert!(std::ptr::eq(p, current()), "cached per generation");
    }

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_stat(line), Some((98765, false)));
        let zombie = "7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(zombie), Some((5, true)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S"), None);
    }

    #[test]
    fn start_times_shift_back_by_the_namespace_offset() {
        let tps = ticks_per_second();
        assert_eq!(normalize_start(1000, 0), 1000);
        // A namespace whose boot clock runs 5 s ahead sees start times 5 s later.
        let five_s = 5_000_000_000;
        assert_eq!(normalize_start(1000 + 5 * tps as u64, five_s), 1000);
        assert_eq!(normalize_start(10, i128::from(u32::MAX) * 1_000_000_000), 0);
    }

    #[test]
    fn namespace_links_parse() {
        assert!(namespace_inode("/proc/self/ns/pid").is_some());
        assert_eq!(namespace_inode("/nonexistent"), None);
    }
}
