//! A process whose main thread ended while its other threads run on is alive: `/proc/PID/stat`
//! shows the first thread's zombie state, and a holder judged by it alone would be taken over
//! while its body still runs.
//!
//! Without the test harness: the test runs this binary again as the process under test, whose
//! `main` ends its own thread (and only it) with the `exit` system call.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rerun_core::holder::Liveness;
use rerun_core::Holder;

const CHILD: &str = "RERUN_TEST_ZOMBIE_LEADER_CHILD";

fn main() {
    if std::env::var_os(CHILD).is_some() {
        std::thread::spawn(|| std::thread::sleep(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(50));
        // Ends the calling thread only (`exit`, not `exit_group`).
        #[allow(unsafe_code)]
        // SAFETY: the thread ends here and never touches its stack again; nothing it owns is
        // shared with the thread left running.
        unsafe {
            libc::syscall(libc::SYS_exit, 0);
        }
        unreachable!("the exit system call returned");
    }
    // As the test harness answers `--list` (cargo-nextest asks it first).
    if std::env::args().any(|a| a == "--list") {
        println!("a_process_whose_main_thread_ended_is_alive: test");
        return;
    }
    print!("test a_process_whose_main_thread_ended_is_alive ... ");
    a_process_whose_main_thread_ended_is_alive();
    println!("ok\n\ntest result: ok. 1 passed; 0 failed; 0 ignored");
}

fn a_process_whose_main_thread_ended_is_alive() {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut child = Command::new(exe)
        .env(CHILD, "1")
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning the process under test: {e}"));
    let pid = child.id();
    let stat = |path: String| std::fs::read_to_string(path).unwrap_or_default();
    let fields = |text: &str| -> Vec<String> {
        let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        rest.split_whitespace().map(str::to_owned).collect()
    };
    // Wait until its main thread is a zombie.
    let until = Instant::now() + Duration::from_secs(10);
    let start = loop {
        let f = fields(&stat(format!("/proc/{pid}/stat")));
        if f.first().map(String::as_str) == Some("Z") {
            break f.get(19).cloned().unwrap_or_default();
        }
        assert!(Instant::now() < until, "the main thread never ended: {f:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mine = Holder::current().encode();
    let parts: Vec<&str> = mine.split('\t').collect();
    assert_eq!(parts.len(), 7, "{mine:?}");
    let pid_text = pid.to_string();
    let theirs = [
        parts[0], parts[1], parts[2], parts[3], &pid_text, &start, "1",
    ]
    .join("\t");
    let holder = Holder::decode(&theirs).unwrap_or_else(|| panic!("decoding {theirs:?}"));
    let alive = holder.liveness();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(alive, Liveness::Alive, "{holder:?}");
    let dead = holder.liveness();
    assert_eq!(
        dead,
        Liveness::Dead,
        "after it was killed and reaped: {holder:?}"
    );
}
