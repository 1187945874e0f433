//! Who holds a claim, and whether that holder is provably dead.
//!
//! A holder is identified by boot id, PID namespace, pid and process start time, plus an attempt
//! id unique within the process (and its host name, for people). Death is provable only from
//! inside the holder's own process table: the same running kernel (boot id) **and** the same PID
//! namespace, with a `/proc` that shows that namespace. There, the holder is dead when its pid is
//! gone, or belongs to a process that started at another time (a reused pid is not the holder).
//! A pid we may not signal (`EPERM`) exists and is treated as alive.
//!
//! Nothing else proves anything: a host name is shared by containers with host networking,
//! cloned machines and every `localhost`; a different boot id may be another machine as well as
//! a reboot. Such holders are judged by their lease alone.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::process;

/// The identity of one attempt to run a key's body.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    /// Host name, for people: it proves nothing about liveness.
    pub host: Cow<'static, str>,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), empty where unknown.
    pub boot_id: Cow<'static, str>,
    /// Inode of the holder's PID namespace (`/proc/self/ns/pid`), 0 where unknown.
    pub pid_ns: u64,
    /// Process id, in the holder's PID namespace.
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
    /// The holder's process table is not ours to see (another kernel, another PID namespace,
    /// or an identity that was not recorded): only its lease can tell.
    Unknown,
}

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

/// The boot id of the running kernel.
pub fn this_boot() -> &'static str {
    &process::current().boot_id
}

impl process::Process {
    /// The holder of this generation's attempt `attempt`.
    pub(crate) fn holder(&'static self, attempt: u64) -> Holder {
        Holder {
            host: Cow::Borrowed(self.host.as_str()),
            boot_id: Cow::Borrowed(self.boot_id.as_str()),
            pid_ns: self.pid_ns,
            pid: self.pid,
            start_time: self.start_time,
            attempt,
        }
    }
}

impl Holder {
    /// A new attempt of this process (of this fork generation: a forked child is its own holder).
    pub fn current() -> Holder {
        process::current().holder(next_attempt())
    }

    /// Whether this holder is this process.
    pub fn is_this_process(&self) -> bool {
        let p = process::current();
        self.pid == p.pid
            && self.start_time == p.start_time
            && self.pid_ns == p.pid_ns
            && *self.boot_id == *p.boot_id
    }

    /// Whether this process can see the holder's process table (see the module docs).
    fn shares_process_table(&self) -> bool {
        let p = process::current();
        p.proc_is_ours
            && !p.boot_id.is_empty()
            && p.pid_ns != 0
            && *self.boot_id == *p.boot_id
            && self.pid_ns == p.pid_ns
    }

    /// What this process can tell about the holder (see the module docs).
    pub fn liveness(&self) -> Liveness {
        if !self.shares_process_table() {
            return Liveness::Unknown;
        }
        let p = process::current();
        if self.pid == p.pid {
            return if same_start(self.start_time, p.start_time) || self.start_time == 0 {
                Liveness::Alive
            } else {
                Liveness::Dead
            };
        }
        let Ok(pid) = i32::try_from(self.pid) else {
            // No process of this namespace has such a pid.
            return Liveness::Dead;
        };
        if pid <= 0 {
            return Liveness::Unknown;
        }
        let signal = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None);
        classify(signal, process::stat_of(self.pid), self.start_time)
    }

    /// The holder as one line of text, as stores keep it:
    /// `2\thost\tboot\tpid_ns\tpid\tstart\tattempt`, host and boot id escaped so that no
    /// name (a tab in a host name) can shift the fields.
    pub fn encode(&self) -> String {
        // Every claim encodes a holder of this process: its fields but the attempt are
        // encoded once per process.
        let p = process::current();
        let mut out = if self.is_this_process() && *self.host == *p.host {
            let prefix = p.holder_prefix.get_or_init(|| self.encode_prefix());
            let mut out = String::with_capacity(prefix.len() + 20);
            out.push_str(prefix);
            out
        } else {
            self.encode_prefix()
        };
        push_decimal(&mut out, self.attempt);
        out
    }

    /// The encoding up to the attempt, with its tab.
    fn encode_prefix(&self) -> String {
        let mut out = String::with_capacity(self.host.len() + self.boot_id.len() + 64);
        out.push_str("2\t");
        escape_into(&mut out, &self.host);
        out.push('\t');
        escape_into(&mut out, &self.boot_id);
        use std::fmt::Write as _;
        let _ = write!(
            out,
            "\t{}\t{}\t{}\t",
            self.pid_ns, self.pid, self.start_time
        );
        out
    }

    /// Parses [`Holder::encode`]'s text, and the five-field form of rerun 0.1
    /// (`host\tboot\tpid\tstart\tattempt`, read with an unknown PID namespace: such a holder is
    /// judged by its lease).
    pub fn decode(s: &str) -> Option<Holder> {
        let fields: Vec<&str> = s.split('\t').collect();
        match fields.as_slice() {
            ["2", host, boot, pid_ns, pid, start, attempt] => Some(Holder {
                host: Cow::Owned(unescape(host)?),
                boot_id: Cow::Owned(unescape(boot)?),
                pid_ns: pid_ns.parse().ok()?,
                pid: pid.parse().ok()?,
                start_time: start.parse().ok()?,
                attempt: attempt.parse().ok()?,
            }),
            [host, boot, pid, start, attempt] => Some(Holder {
                host: Cow::Owned((*host).to_owned()),
                boot_id: Cow::Owned((*boot).to_owned()),
                pid_ns: 0,
                pid: pid.parse().ok()?,
                start_time: start.parse().ok()?,
                attempt: attempt.parse().ok()?,
            }),
            _ => None,
        }
    }
}

/// Percent-escapes `%` and control characters.
fn escape_into(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    for c in s.chars() {
        if c == '%' || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
}

fn unescape(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_owned());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Whether two start times, each read through `/proc` and taken back to the boot's clock, are
/// one process's. A reader in a time namespace sees start times shifted by its boottime
/// offset and rounded down to a clock tick, so taking the offset off again can land a tick
/// away from what a reader outside saw: a tick apart is the same process. (A pid reused
/// within one tick then reads as alive, and its claim waits for its lease: the safe side.)
fn same_start(a: u64, b: u64) -> bool {
    a.abs_diff(b) <= 1
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
            Some((start, _)) if holder_start_time != 0 && !same_start(start, holder_start_time) => {
                Liveness::Dead
            }
            _ => Liveness::Alive,
        },
        Err(_) => Liveness::Alive,
        Ok(()) => match stat {
            Some((_, true)) => Liveness::Dead,
            Some((start, false))
                if holder_start_time != 0 && !same_start(start, holder_start_time) =>
            {
                Liveness::Dead
            }
            _ => Liveness::Alive,
        },
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut host = String::new();
        escape_into(&mut host, &self.host);
        write!(
            f,
            "process {} on {} (attempt {})",
            self.pid, host, self.attempt
        )
    }
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut host = String::new();
        escape_into(&mut host, &self.host);
        let boot: String = self.boot_id.chars().take(8).collect();
        write!(
            f,
            "Holder({}@{} boot={} pidns={} start={} attempt={})",
            self.pid, host, boot, self.pid_ns, self.start_time, self.attempt
        )
    }
}

/// Appends `n` in decimal, as `Display` writes it, without the formatting machinery (a holder
/// is encoded on every claim, and its attempt is its only part not encoded once per process).
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
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
    fn own_pid_with_other_start_time_is_dead() {
        let mut h = Holder::current();
        h.start_time += 2;
        assert_eq!(h.liveness(), Liveness::Dead);
    }

    #[test]
    fn another_kernel_or_namespace_proves_nothing() {
        // Another boot id: a reboot, or another machine; either way not our process table.
        let mut h = Holder::current();
        h.boot_id = "00000000-0000-0000-0000-000000000000".into();
        h.start_time += 1;
        assert_eq!(h.liveness(), Liveness::Unknown);
        // Another PID namespace on this kernel: pid 1 there is not pid 1 here.
        let mut h = Holder::current();
        h.pid_ns += 1;
        h.pid = 1;
        assert_eq!(h.liveness(), Liveness::Unknown);
        // A record of rerun 0.1, without a namespace.
        let mut h = Holder::current();
        h.pid_ns = 0;
        h.start_time += 1;
        assert_eq!(h.liveness(), Liveness::Unknown);
    }

    #[test]
    fn a_host_name_proves_nothing() {
        // Same process table, another name: still checked by pid (and alive).
        let mut h = Holder::current();
        h.host = "elsewhere.example".into();
        assert_eq!(h.liveness(), Liveness::Alive);
        // A tick away is the same process, read through another time namespace.
        h.start_time += 1;
        assert_eq!(h.liveness(), Liveness::Alive);
        h.start_time += 1;
        assert_eq!(h.liveness(), Liveness::Dead);
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
            classify(Err(Errno::EPERM), Some((7, false)), 5),
            Liveness::Dead
        );
        assert_eq!(classify(Ok(()), Some((5, false)), 5), Liveness::Alive);
        // A tick apart: one process, its start read through two time namespaces.
        assert_eq!(classify(Ok(()), Some((6, false)), 5), Liveness::Alive);
        assert_eq!(classify(Ok(()), Some((4, false)), 5), Liveness::Alive);
        assert_eq!(
            classify(Err(Errno::EPERM), Some((6, false)), 5),
            Liveness::Alive
        );
        assert_eq!(classify(Ok(()), Some((7, false)), 5), Liveness::Dead);
        assert_eq!(classify(Ok(()), Some((3, false)), 5), Liveness::Dead);
        assert_eq!(classify(Ok(()), Some((5, true)), 5), Liveness::Dead);
        assert_eq!(classify(Ok(()), None, 5), Liveness::Alive);
    }

    #[test]
    fn encode_round_trips_whatever_the_names() {
        let h = Holder::current();
        assert_eq!(Holder::decode(&h.encode()), Some(h.clone()));
        let mut odd = h;
        odd.host = "a\tb%c\nd".into();
        odd.boot_id = "\t".into();
        let text = odd.encode();
        assert_eq!(text.matches('\t').count(), 6, "{text:?}");
        assert_eq!(Holder::decode(&text), Some(odd));
        assert_eq!(Holder::decode("2\ta\tb\t1\tnotapid\t1\t2"), None);
        assert_eq!(Holder::decode("2\ta%zz\tb\t1\t1\t1\t2"), None);
    }

    #[test]
    fn this_process_encodes_as_any_holder_does() {
        // Holders of this process (from the cached part) encode as one built from scratch.
        let h = Holder::current();
        for attempt in [0, 7, 10, u64::MAX, h.attempt] {
            let mine = Holder {
                attempt,
                ..h.clone()
            };
            let expected = format!("{}{attempt}", mine.encode_prefix());
            assert_eq!(mine.encode(), expected);
            assert!(mine.encode().ends_with(&format!("\t{attempt}")));
            assert_eq!(Holder::decode(&mine.encode()), Some(mine));
        }
    }

    #[test]
    fn records_of_rerun_0_1_decode_without_a_namespace() {
        let h = Holder::decode("web-1\tboot\t42\t7\t3").expect("decodes");
        assert_eq!((h.pid, h.start_time, h.attempt, h.pid_ns), (42, 7, 3, 0));
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

    proptest::proptest! {
        /// The attempt is written as `Display` writes it, over the whole `u64` domain, after
        /// this process's prefix and after another holder's.
        #[test]
        fn attempts_are_written_as_display_writes_them(
            attempt in proptest::prop_oneof![proptest::prelude::any::<u64>(), 0u64..1000],
        ) {
            let mut mine = Holder::current();
            mine.attempt = attempt;
            let mut other = mine.clone();
            other.host = "elsewhere".into();
            for h in [mine, other] {
                let (prefix, written) = h.encode().rsplit_once('\t').map(|(p, a)| (p.to_owned(), a.to_owned())).unwrap_or_default();
                proptest::prop_assert_eq!(written, attempt.to_string());
                proptest::prop_assert!(prefix.starts_with("2\t"));
                proptest::prop_assert_eq!(Holder::decode(&h.encode()), Some(h.clone()));
            }
        }
    }
}
