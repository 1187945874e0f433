//! Locks that heal themselves: a lock file for a step that guards a local resource (a
//! directory, a port, a device) rather than a key.
//!
//! [`LockFile`] holds a kernel lock on the file (`flock(LOCK_EX | LOCK_NB)`, the lock behind
//! `std::fs::File::try_lock`, called through `nix` so that the crate keeps its minimum Rust
//! version) and writes a record of its holder (host, boot id, pid, process start time) into it:
//! - the kernel releases the lock the moment its holder dies, however it dies (SIGKILL, power
//!   loss of the process, a panic with `panic = "abort"`): a dead holder's lock is free at
//!   once, with no stale-lock cleanup and no "is that pid still ours?" guessing;
//! - the file is opened close-on-exec, so a child process started while the lock is held does
//!   not inherit it and cannot keep it alive after its parent dies; a child forked without
//!   `exec` (a prefork server's worker) gets its copy closed at the fork, for the same reason
//!   (up to [`FORK_CLOSED`] locks held at once; more are inherited as the kernel does). So a
//!   process that daemonizes by forking takes its locks after the fork: the parent's end when
//!   it exits, and the child never had them;
//! - the holder record is only for the message a refused caller gets ("held by process 4242
//!   on build-7, started …"), never for the decision;
//! - on a network filesystem (NFS, SMB/CIFS, AFS, 9p, FUSE, Ceph, Lustre…) a kernel lock may be
//!   local to one machine or emulated, so [`LockFile`] refuses with
//!   [`LockError::NetworkFilesystem`] rather than pretend.
//!
//! The file is never deleted: deleting a lock file while another process has it open would
//! let two processes lock two different files of the same name.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::holder::{Holder, Liveness};

/// How many lock files held at once have their descriptors closed in a forked child.
pub const FORK_CLOSED: usize = 64;

/// The descriptors of the lock files this process holds (-1: a free slot), closed in a forked
/// child by [`close_in_forked_child`]. Lock-free: the fork handler may take no lock.
static HELD: [AtomicI32; FORK_CLOSED] = [const { AtomicI32::new(-1) }; FORK_CLOSED];

/// Notes `fd` as a held lock's; its slot, or `None` when every slot is taken (said once).
fn note_held(fd: RawFd) -> Option<usize> {
    let slot = HELD.iter().position(|slot| {
        slot.compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    });
    if slot.is_none() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                limit = FORK_CLOSED,
                "rerun: more lock files are held at once than a forked child has closed for it; a child forked now keeps the rest held while it runs"
            );
        });
    }
    slot
}

/// Closes, in a child just forked, its copies of the parent's lock descriptors: a child that
/// outlived its parent would otherwise keep the parent's lock held (a lock belongs to the open
/// file description, which a fork shares). Called from the fork handler, so it only does what
/// is async-signal-safe: atomic swaps and `close`.
pub(crate) fn close_in_forked_child() {
    for slot in &HELD {
        let fd = slot.swap(-1, Ordering::SeqCst);
        if fd >= 0 {
            let _ = nix::unistd::close(fd);
        }
    }
}

/// Who holds (or last held) a lock file, as written into it.
///
/// ```
/// use rerun_core::holder::Liveness;
/// use rerun_core::lock::LockFile;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("app.lock");
/// let lock = LockFile::try_acquire(&path)?;
/// let holder = LockFile::read_holder(&path).expect("the holder's record");
/// assert_eq!(holder.pid, std::process::id());
/// assert_eq!(holder.liveness(), Liveness::Alive);
/// drop(lock);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    /// Host name.
    pub host: String,
    /// The kernel's boot id.
    pub boot_id: String,
    /// Inode of the holder's PID namespace (0 where unknown).
    pub pid_ns: u64,
    /// Process id.
    pub pid: u32,
    /// Process start time in clock ticks since boot.
    pub start_time: u64,
    /// When the lock was taken, in milliseconds since the Unix epoch.
    pub acquired_unix_ms: u64,
}

impl LockHolder {
    fn current() -> LockHolder {
        let h = Holder::current();
        LockHolder {
            host: h.host.to_string(),
            boot_id: h.boot_id.to_string(),
            pid_ns: h.pid_ns,
            pid: h.pid,
            start_time: h.start_time,
            acquired_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        }
    }

    fn encode(&self) -> String {
        format!(
            "host={}\nboot_id={}\npid_ns={}\npid={}\nstart_time={}\nacquired_unix_ms={}\n",
            self.host.replace(['\n', '\r'], " "),
            self.boot_id.replace(['\n', '\r'], " "),
            self.pid_ns,
            self.pid,
            self.start_time,
            self.acquired_unix_ms
        )
    }

    fn decode(text: &str) -> Option<LockHolder> {
        let mut h = LockHolder {
            host: String::new(),
            boot_id: String::new(),
            pid_ns: 0,
            pid: 0,
            start_time: 0,
            acquired_unix_ms: 0,
        };
        let mut seen_pid = false;
        for line in text.lines() {
            let (name, value) = line.split_once('=')?;
            match name {
                "host" => h.host = value.to_owned(),
                "boot_id" => h.boot_id = value.to_owned(),
                "pid_ns" => h.pid_ns = value.parse().ok()?,
                "pid" => {
                    h.pid = value.parse().ok()?;
                    seen_pid = true;
                }
                "start_time" => h.start_time = value.parse().ok()?,
                "acquired_unix_ms" => h.acquired_unix_ms = value.parse().ok()?,
                _ => {}
            }
        }
        seen_pid.then_some(h)
    }

    /// Whether the recorded process still runs, as far as this process can tell.
    pub fn liveness(&self) -> Liveness {
        Holder {
            host: self.host.clone().into(),
            boot_id: self.boot_id.clone().into(),
            pid_ns: self.pid_ns,
            pid: self.pid,
            start_time: self.start_time,
            attempt: 0,
        }
        .liveness()
    }
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "process {} on {}", self.pid, self.host)
    }
}

/// Why a lock file could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another live process holds the lock.
    #[error("{} is locked by {}; it is released as soon as that process exits{}", path.display(), holder_text(holder), hint(holder))]
    #[non_exhaustive]
    Held {
        /// The lock file.
        path: PathBuf,
        /// The holder's record, when it could be read.
        holder: Option<LockHolder>,
    },
    /// The file is on a network filesystem, where a kernel lock does not exclude other machines.
    #[error("{} is on a network filesystem ({fs}), where a file lock may not exclude other machines; put the lock file on a local disk (e.g. under /run or /var/lock)", path.display())]
    #[non_exhaustive]
    NetworkFilesystem {
        /// The lock file.
        path: PathBuf,
        /// The filesystem's name (`nfs`, `cifs`, …).
        fs: &'static str,
    },
    /// Opening, locking or writing the file failed.
    #[error("lock file {}: {what}: {source}", path.display())]
    #[non_exhaustive]
    Io {
        /// The lock file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn holder_text(holder: &Option<LockHolder>) -> String {
    match holder {
        Some(h) => h.to_string(),
        None => "another process (its record is not written yet)".to_owned(),
    }
}

fn hint(holder: &Option<LockHolder>) -> &'static str {
    match holder.as_ref().map(LockHolder::liveness) {
        // The recorded holder is gone, yet the kernel lock is held: a process that shares the
        // open file (one forked without exec) still has it.
        Some(Liveness::Dead) => {
            "; the recorded holder is gone, so a process it forked still holds the file open"
        }
        _ => "",
    }
}

/// A held lock file; the lock is released when this value is dropped or its process dies.
///
/// ```
/// use rerun_core::lock::{LockError, LockFile};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("reindex.lock");
/// let lock = LockFile::try_acquire(&path)?;
/// // A second taker (in this or any other process) is refused with the holder's identity.
/// match LockFile::try_acquire(&path) {
///     Err(LockError::Held { holder: Some(h), .. }) => assert_eq!(h.pid, std::process::id()),
///     other => panic!("expected Held, got {other:?}"),
/// }
/// drop(lock);
/// let _again = LockFile::try_acquire(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LockFile {
    /// Held for its destructor, which unlocks; `None` only while dropping.
    file: Option<Flock<File>>,
    /// The fork generation of the process that took the lock (see `process`).
    forks: u64,
    /// Its slot in [`HELD`], if it got one.
    slot: Option<usize>,
    path: PathBuf,
    holder: LockHolder,
}

impl Drop for LockFile {
    /// Unlocks, in the process that took the lock. A child forked after it shares the lock
    /// (one open file description), and unlocking there would unlock the parent's too: a
    /// child's copy is left as it is (its descriptor was closed at the fork, or closes when the
    /// child exits, neither of which unlocks while the parent holds it).
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            if crate::process::current().forks != self.forks {
                std::mem::forget(file);
            } else if let Some(slot) = self.slot {
                let _ = HELD[slot].compare_exchange(
                    file.as_raw_fd(),
                    -1,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
        }
    }
}

impl LockFile {
    /// Takes the lock at `path` (creating the file) or fails at once with
    /// [`LockError::Held`] naming the holder.
    pub fn try_acquire(path: impl AsRef<Path>) -> Result<LockFile, LockError> {
        let path = path.as_ref().to_path_buf();
        refuse_network_filesystem(&path)?;
        let io = |what, source| LockError::Io {
            path: path.clone(),
            what,
            source,
        };
        // The generation before the lock: reading it registers the fork handler, which closes
        // a forked child's copy of the descriptor noted below.
        let forks = crate::process::current().forks;
        // std opens every file with O_CLOEXEC: a child process does not inherit the lock.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io("opening", e))?;
        // Noted before it is locked, so that no fork between the two leaves a child holding it
        // (closing a copy that is not locked yet is harmless); let go of below unless locked.
        let fd = file.as_raw_fd();
        let slot = note_held(fd);
        let unnote = || {
            if let Some(slot) = slot {
                let _ = HELD[slot].compare_exchange(fd, -1, Ordering::SeqCst, Ordering::SeqCst);
            }
        };
        let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                unnote();
                let mut text = String::new();
                let holder = file
                    .read_to_string(&mut text)
                    .ok()
                    .and_then(|_| LockHolder::decode(&text));
                return Err(LockError::Held { path, holder });
            }
            Err((_, errno)) => {
                unnote();
                return Err(io("locking", std::io::Error::from(errno)));
            }
        };
        // Held from here: an error below drops it, which unlocks.
        let mut lock = LockFile {
            file: Some(file),
            forks,
            slot,
            path: path.clone(),
            holder: LockHolder::current(),
        };
        let holder = lock.holder.encode();
        let Some(file) = lock.file.as_mut() else {
            return Err(io("writing the holder", std::io::ErrorKind::Other.into()));
        };
        file.set_len(0).map_err(|e| io("writing the holder", e))?;
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(holder.as_bytes()))
            .and_then(|_| file.flush())
            .map_err(|e| io("writing the holder", e))?;
        Ok(lock)
    }

    /// Takes the lock at `path`, retrying while another process holds it, for up to `wait`
    /// (`Duration::MAX`: until it is free).
    pub fn acquire(path: impl AsRef<Path>, wait: Duration) -> Result<LockFile, LockError> {
        let deadline = crate::clock::deadline_in(wait);
        let mut pause = Duration::from_millis(1);
        loop {
            match LockFile::try_acquire(path.as_ref()) {
                Err(LockError::Held { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(
                        pause.min(deadline.saturating_duration_since(Instant::now())),
                    );
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                other => return other,
            }
        }
    }

    /// Reads the holder record of the lock file at `path` without taking the lock: who holds
    /// it, or who held it last. `None` if the file is missing or has no record.
    pub fn read_holder(path: impl AsRef<Path>) -> Option<LockHolder> {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|t| LockHolder::decode(&t))
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This process's record in the file.
    pub fn holder(&self) -> &LockHolder {
        &self.holder
    }

    /// Releases the lock now (dropping does the same: closing the file releases it).
    pub fn release(self) {
        drop(self);
    }
}

/// Filesystems on which a kernel lock may not exclude another machine (`f_type` of statfs).
const NETWORK_FILESYSTEMS: &[(u32, &str)] = &[
    (0x6969, "nfs"),
    (0x517B, "smb"),
    (0xFF53_4D42, "cifs"),
    (0xFE53_4D42, "smb2"),
    (0x5346_414F, "afs"),
    (0x6B41_4653, "kafs"),
    (0x7375_7245, "coda"),
    (0x0102_1997, "9p"),
    (0x6573_5546, "fuse (e.g. sshfs)"),
    (0x00C3_6400, "ceph"),
    (0x0BD0_0BD0, "lustre"),
    (0x564C, "ncp"),
    (0x0116_1970, "gfs2"),
    (0x7461_636F, "ocfs2"),
];

/// The name of the network filesystem with this `f_type`, if it is one.
fn network_filesystem(f_type: u64) -> Option<&'static str> {
    let magic = (f_type & 0xFFFF_FFFF) as u32;
    NETWORK_FILESYSTEMS
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

/// The network filesystem `path` is on, if any; checks the file, or its directory before it
/// exists.
pub(crate) fn network_filesystem_at(path: &Path) -> std::io::Result<Option<&'static str>> {
    let probe = if path.exists() {
        path.to_path_buf()
    } else {
        match path.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => parent.to_path_buf(),
            None => PathBuf::from("."),
        }
    };
    let stat = nix::sys::statfs::statfs(&probe).map_err(std::io::Error::from)?;
    #[allow(clippy::unnecessary_cast)]
    let f_type = stat.filesystem_type().0 as u64;
    Ok(network_filesystem(f_type))
}

/// Refuses a path on a network filesystem.
fn refuse_network_filesystem(path: &Path) -> Result<(), LockError> {
    match network_filesystem_at(path) {
        Err(source) => Err(LockError::Io {
            path: path.to_path_buf(),
            what: "checking the filesystem",
            source,
        }),
        Ok(Some(fs)) => Err(LockError::NetworkFilesystem {
            path: path.to_path_buf(),
            fs,
        }),
        Ok(None) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_filesystems_are_recognized() {
        assert_eq!(network_filesystem(0x6969), Some("nfs"));
        assert_eq!(network_filesystem(0xFF53_4D42), Some("cifs"));
        // As a sign-extended 32-bit value, as some libcs report it.
        assert_eq!(network_filesystem(0xFFFF_FFFF_FF53_4D42), Some("cifs"));
        assert_eq!(network_filesystem(0xEF53), None); // ext4
        assert_eq!(network_filesystem(0x0102_1994), None); // tmpfs
        assert_eq!(network_filesystem(0x9123_683E), None); // btrfs
        assert_eq!(network_filesystem(0x794C_7630), None); // overlayfs
    }

    #[test]
    fn network_filesystem_error_says_what_to_do() {
        let e = LockError::NetworkFilesystem {
            path: "/mnt/share/app.lock".into(),
            fs: "nfs",
        };
        let text = e.to_string();
        assert!(
            text.contains("/mnt/share/app.lock")
                && text.contains("nfs")
                && text.contains("local disk"),
            "{text}"
        );
    }

    #[test]
    fn holder_record_round_trips() {
        let h = LockHolder::current();
        assert_eq!(LockHolder::decode(&h.encode()), Some(h));
        assert_eq!(LockHolder::decode(""), None);
        assert_eq!(LockHolder::decode("pid=notanumber\n"), None);
    }
}
