//! The process-wide store (contract 7): `init`, `RERUN_STORE`, and the SQLite default, each
//! chosen once and logged once. The global store is set once per process, so every case runs
//! in a child process of this test binary.

use std::process::Command;
use std::sync::{Arc, Mutex};

use rerun_core::{Call, Error};

const CASE: &str = "RERUN_GLOBAL_CASE";

/// A `tracing` writer that keeps what was logged.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn child(case: &str) {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();
    let result: Result<String, Error> = (|| {
        if case == "init-twice" {
            rerun_core::init(rerun_core::MemoryStore::new())?;
            return match rerun_core::init(rerun_core::MemoryStore::new()) {
                Err(e @ Error::Config { .. }) => Ok(format!("second init refused: {e}")),
                other => Ok(format!("second init: {other:?}")),
            };
        }
        #[cfg(feature = "postgres")]
        if case == "fork-while-choosing" {
            return fork_while_choosing();
        }
        let store = rerun_core::global()?;
        let again = rerun_core::global()?;
        let out = Call::new("global", "k").run(store, || Ok::<_, Error>(1u8))?;
        let replay = Call::new("global", "k").run(again, || Ok::<_, Error>(2u8))?;
        Ok(format!(
            "{} {} {}",
            store.describe(),
            out.value,
            replay.value
        ))
    })();
    let logged = String::from_utf8_lossy(&logs.0.lock().unwrap()).to_string();
    let chosen = logged.matches("rerun: store chosen").count();
    match result {
        Ok(s) => println!("RESULT ok {s} | logged {chosen}"),
        Err(e) => println!("RESULT err {} {e} | logged {chosen}", e.kind_name()),
    }
}

/// A thread chooses the global store, slowly (a PostgreSQL server that accepts and never
/// answers), and another thread forks meanwhile: the child, where the lock the chooser held is
/// never released, still chooses a store of its own (here `memory:`) instead of hanging.
#[cfg(feature = "postgres")]
#[allow(unsafe_code)]
fn fork_while_choosing() -> Result<String, Error> {
    use nix::sys::wait::waitpid;
    use nix::unistd::{fork, ForkResult};
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    std::env::set_var(
        "RERUN_STORE",
        format!("postgres://u@127.0.0.1:{port}/x?connect_timeout=3"),
    );
    let chooser = std::thread::spawn(move || {
        let _accepted = silent.accept();
        std::thread::sleep(std::time::Duration::from_secs(4));
    });
    let slow = std::thread::spawn(|| rerun_core::global().map(|_| ()));
    std::thread::sleep(std::time::Duration::from_millis(400));
    // SAFETY: the child only sets its environment, chooses a store and leaves with `_exit`; an
    // alarm ends it if it hangs.
    let status = match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            std::env::set_var("RERUN_STORE", "memory:");
            // SAFETY: `alarm` only arms a timer.
            unsafe { libc::alarm(5) };
            let code = match rerun_core::global() {
                Ok(store) if store.describe() == "memory:" => 0,
                _ => 2,
            };
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
        Ok(ForkResult::Parent { child }) => waitpid(child, None),
        Err(e) => panic!("fork failed: {e}"),
    };
    let _ = slow.join();
    let _ = chooser.join();
    Ok(format!("child {status:?}"))
}

fn run_case(case: &str, store: Option<&std::ffi::OsStr>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "global_store_is_chosen_once",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CASE, case)
    .current_dir(dir.path());
    match store {
        Some(url) => cmd.env("RERUN_STORE", url),
        None => cmd.env_remove("RERUN_STORE"),
    };
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .lines()
        .find_map(|l| l.find("RESULT ").map(|i| l[i + 7..].to_owned()))
        .unwrap_or_else(|| panic!("no result from case {case}: {text}"));
    if case == "default" {
        assert!(
            dir.path().join(".rerun/rerun.sqlite3").exists(),
            "the default file was not created"
        );
    }
    line
}

#[test]
fn global_store_is_chosen_once() {
    if let Ok(case) = std::env::var(CASE) {
        child(&case);
        return;
    }
    let default = run_case("default", None);
    // The default store is named by its absolute path.
    assert!(
        default.starts_with("ok sqlite:/")
            && default.ends_with("/.rerun/rerun.sqlite3 1 1 | logged 1"),
        "{default}"
    );
    let memory = run_case("env", Some("memory:".as_ref()));
    assert_eq!(memory, "ok memory: 1 1 | logged 1");
    let sqlite = run_case("env", Some("sqlite:state/r.db".as_ref()));
    // A relative path is resolved against the working directory once, when the store opens.
    assert!(
        sqlite.starts_with("ok sqlite:/") && sqlite.ends_with("/state/r.db 1 1 | logged 1"),
        "{sqlite}"
    );
    let bad = run_case("env", Some("mongodb://user:hunter2@db/x".as_ref()));
    assert!(bad.starts_with("err config"), "{bad}");
    assert!(
        bad.contains("mongodb://user:***@db/x") && bad.contains("expected"),
        "{bad}"
    );
    assert!(!bad.contains("hunter2"), "the password leaked: {bad}");
    // A setting that is not UTF-8 (a Latin-1 path) is refused, not taken for no setting: each
    // process would then have a default store of its own, under its own directory.
    let latin1 = std::os::unix::ffi::OsStrExt::from_bytes(b"sqlite:d\xe5ta/r.db");
    let not_text = run_case("env", Some(latin1));
    assert!(
        not_text.starts_with("err config") && not_text.contains("UTF-8"),
        "{not_text}"
    );
    let twice = run_case("init-twice", None);
    assert!(twice.starts_with("ok second init refused"), "{twice}");
    assert!(twice.ends_with("logged 1"), "{twice}");
    #[cfg(feature = "postgres")]
    {
        let forked = run_case("fork-while-choosing", None);
        assert!(forked.starts_with("ok child Ok(Exited("), "{forked}");
        assert!(forked.contains(", 0))"), "{forked}");
    }
}
