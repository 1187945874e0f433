//! Holders in other namespaces and in forked processes (reliability 23 and 24), with real
//! namespaces (`unshare`) and a real `fork()`.
//!
//! Creating namespaces needs root (as CI runs). Where `unshare` cannot make them, the check
//! says so in its notes, and counts as a violation only under `RERUN_REQUIRE_SERVICES=1`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::processes::{arg, arg_u64, say, start_holder_in, Kid};
use super::report::Tally;
use super::{unique, Factory, Settings};
use crate::error::Error;
use crate::runtime::Call;
use crate::store::Store;

/// The lease of the holders here: long enough for several contenders' attempts.
const LEASE: Duration = Duration::from_secs(2);

/// Calls `scope`/"held" without waiting, and says what happened.
pub(super) fn child_contend<S: Store>(store: &S, args: &serde_json::Value) -> i32 {
    let r =
        Call::new(arg(args, "scope"), "held").run(store, || Ok::<_, Error>("contender".to_owned()));
    match r {
        Ok(_) => say("ran"),
        Err(e) => say(e.kind_name()),
    }
    0
}

/// Plants a claim of a holder that has this process's pid and another start time (in the
/// host's namespace, provably a dead one), then calls the key and says what happened.
pub(super) fn child_judge<S: Store>(store: &S, args: &serde_json::Value) -> i32 {
    let key = crate::key::Key::new(arg(args, "scope"), "judged");
    let mut reused = crate::holder::Holder::current();
    reused.start_time = reused.start_time.wrapping_add(2);
    let planted = store.claim(&crate::record::ClaimRequest {
        key: &key,
        fingerprint: &crate::fingerprint::Fingerprint::EMPTY,
        holder: &reused,
        lease: Duration::from_secs(30),
        once: false,
        steal: None,
    });
    if let Err(e) = planted {
        say(&format!("planting failed: {e}"));
        return 2;
    }
    match Call::with_key(key).run(store, || Ok::<_, Error>("judge".to_owned())) {
        Ok(_) => say("ran"),
        Err(e) => say(e.kind_name()),
    }
    0
}

/// Uses rerun, forks, and exits: the forked child claims `scope`/"held", holds it for
/// `hold_ms` (renewing its lease itself), then records its result and exits.
pub(super) fn child_fork_hold<S: Store>(store: &S, args: &serde_json::Value) -> i32 {
    let scope = arg(args, "scope");
    let hold = Duration::from_millis(arg_u64(args, "hold_ms"));
    // The parent uses rerun first: its identity, its keeper and its connections exist before
    // the fork, as in a server that forks workers after it started.
    if let Err(e) = Call::new(scope.clone(), "warm-up").run(store, || Ok::<_, Error>(())) {
        say(&format!("warm-up failed: {e}"));
        return 2;
    }
    match fork() {
        Ok(true) => {
            // The forked child.
            let r = Call::new(scope, "held").lease(LEASE).run(store, || {
                say(&format!("claimed {}", std::process::id()));
                std::thread::sleep(hold);
                Ok::<_, Error>("the forked child's result".to_owned())
            });
            match r {
                Ok(o) => say(&format!("ok {}", o.value)),
                Err(e) => say(&format!("error {e}")),
            }
            // Never back into the test harness: this process is a copy of a test.
            std::process::exit(0);
        }
        // The parent exits at once: the child holds its claim across its parent's exit.
        Ok(false) => 0,
        Err(e) => {
            say(&format!("fork failed: {e}"));
            2
        }
    }
}

/// `fork()`; `Ok(true)` in the child.
#[allow(unsafe_code)]
fn fork() -> Result<bool, nix::Error> {
    // SAFETY: the forked child only does what a child of this test process may: it runs on the
    // thread that forked, and uses rerun's own state, which is fork-aware (a new process
    // generation with its own identity, keeper and connections). It never returns into the
    // test harness.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(true),
        nix::unistd::ForkResult::Parent { .. } => Ok(false),
    }
}

/// Whether this machine lets us make PID and mount namespaces; the reason when not.
fn namespaces_available() -> Result<(), String> {
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("`unshare` could not run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`unshare --pid --fork --mount-proc` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Reliability 23: holders this process cannot judge by their pid (another PID namespace on
/// this kernel; a `/proc` of another namespace; another boot id under the same host name) are
/// never taken over while they live and renew, and are taken over after their lease once
/// killed, not before.
pub(super) fn namespaces<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    if let Err(why) = namespaces_available() {
        let why = format!("cannot create namespaces here: {why}");
        if crate::testing::services_required() {
            t.violations.push(why);
        } else {
            t.notes.push(format!("skipped: {why}"));
        }
        return Ok(t);
    }
    let (store, locator) = factory.fresh()?;
    let dir = std::env::temp_dir().join(unique("rerun-ns"));
    std::fs::create_dir_all(&dir).map_err(|e| Error::store(None, "creating a temp dir", e))?;
    let fake_boot = dir.join("boot_id");
    std::fs::write(&fake_boot, "11111111-2222-4333-8444-555555555555\n")
        .map_err(|e| Error::store(None, "writing a boot id", e))?;
    let in_pid_ns = words(&[
        "unshare",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--",
    ]);
    let with_foreign_proc = words(&["unshare", "--pid", "--fork", "--kill-child", "--"]);
    let with_other_boot = vec![
        "unshare".to_owned(),
        "--mount".to_owned(),
        "--uts".to_owned(),
        "--fork".to_owned(),
        "--kill-child".to_owned(),
        "--".to_owned(),
        "sh".to_owned(),
        "-c".to_owned(),
        format!(
            "mount --bind '{}' /proc/sys/kernel/random/boot_id && exec \"$0\" \"$@\"",
            fake_boot.display()
        ),
    ];
    // A process whose /proc shows another PID namespace cannot check pids: a holder of its
    // own namespace whose pid it would misread in that /proc is not judged dead.
    let args = serde_json::json!({ "scope": unique("conformance") });
    t.calls += 1;
    match Kid::spawn_in(&with_foreign_proc, "judge", &locator, args).map(|mut k| k.next()) {
        Ok(Some(said)) if said == "in_progress" => {}
        Ok(said) => t.violations.push(format!(
            "a process with a /proc of another namespace judged a holder by it: {said:?}"
        )),
        Err(e) => t
            .violations
            .push(format!("foreign-proc: the child could not start: {e}")),
    }
    let cases: [(&str, &[String], &[String]); 2] = [
        // Two containers with host networking: each holder is pid 1 of its own namespace.
        ("pid-namespaces", &in_pid_ns, &in_pid_ns),
        // Two "machines" with one host name: another boot id recorded.
        ("other-boot-id", &with_other_boot, &[]),
    ];
    for (name, holder_ns, contender_ns) in cases {
        let scope = unique("conformance");
        let go = dir.join(unique("go"));
        let mut holder = match start_holder_in(holder_ns, &locator, &scope, &go, LEASE) {
            Ok(kid) => kid,
            Err(e) => {
                t.violations
                    .push(format!("{name}: the holder could not start: {e}"));
                continue;
            }
        };
        // While it lives (and renews), nobody takes it over: not this process, not a
        // contender in a namespace of its own.
        let until = Instant::now() + LEASE * 2;
        while Instant::now() < until {
            t.calls += 1;
            match Call::new(scope.clone(), "held").run(&store, || Ok::<_, Error>("here".to_owned()))
            {
                Err(Error::InProgress { .. }) => {}
                Ok(_) => {
                    t.bodies += 1;
                    t.violations
                        .push(format!("{name}: a live holder was taken over"));
                    break;
                }
                Err(e) => t.error(&e),
            }
            std::thread::sleep(Duration::from_millis(150));
        }
        let args = serde_json::json!({ "scope": scope });
        match Kid::spawn_in(contender_ns, "contend", &locator, args).map(|mut k| k.next()) {
            Ok(Some(said)) if said == "in_progress" => {}
            Ok(said) => t.violations.push(format!(
                "{name}: a contender in another namespace got {said:?}, not in_progress"
            )),
            Err(e) => t
                .violations
                .push(format!("{name}: the contender could not start: {e}")),
        }
        t.calls += 1;
        // Killed, it is taken over once its lease ends, and not before.
        holder.signal(Signal::SIGKILL);
        let _ = holder.child.wait();
        let killed = Instant::now();
        t.calls += 1;
        match Call::new(scope.clone(), "held")
            .wait(LEASE * 4)
            .run(&store, || Ok::<_, Error>("successor".to_owned()))
        {
            Ok(o) => {
                t.bodies += 1;
                t.results.insert(o.value);
                let after = killed.elapsed();
                t.notes
                    .push(format!("{name}: taken over {after:?} after the kill"));
                // The lease was renewed at most a third of it before the kill.
                t.expect(
                    after >= LEASE / 2,
                    format!("{name}: a killed holder was taken over {after:?} after its kill, before its lease could have ended"),
                );
            }
            Err(e) => t.violations.push(format!(
                "{name}: the killed holder was not taken over after its lease: {e}"
            )),
        }
        let _ = std::fs::remove_file(&go);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(t)
}

/// Reliability 24: a child forked after rerun was used in its parent holds its own claim, as
/// itself (its own pid), renewed by itself, across its parent's exit.
pub(super) fn forked_holder<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, locator) = factory.fresh()?;
    let scope = unique("conformance");
    let hold = LEASE * 3;
    let mut kid = Kid::spawn(
        "fork_hold",
        &locator,
        serde_json::json!({ "scope": scope, "hold_ms": hold.as_millis() as u64 }),
    )?;
    let parent = kid.child.id();
    let claimed = kid.next();
    let Some(child_pid) = claimed
        .as_deref()
        .and_then(|l| l.strip_prefix("claimed "))
        .and_then(|p| p.parse::<u32>().ok())
    else {
        t.violations
            .push(format!("the forked child did not claim: {claimed:?}"));
        return Ok(t);
    };
    // Its parent is gone by now (or soon): the claim must not go with it.
    let _ = kid.child.wait();
    let view = store.inspect(&crate::key::Key::new(scope.clone(), "held"))?;
    let recorded_pid = view.as_ref().and_then(|v| v.holder.as_ref()).map(|h| h.pid);
    t.expect(
        recorded_pid == Some(child_pid) && child_pid != parent,
        format!("the forked child ({child_pid}, parent {parent}) is recorded as holder pid {recorded_pid:?}"),
    );
    let until = Instant::now() + hold - LEASE / 2;
    while Instant::now() < until {
        t.calls += 1;
        match Call::new(scope.clone(), "held").run(&store, || Ok::<_, Error>("here".to_owned())) {
            Err(Error::InProgress { .. }) => {}
            Ok(_) => {
                t.bodies += 1;
                t.violations.push(
                    "the forked child's live claim was taken over (its parent exited, or it did not renew)"
                        .into(),
                );
                break;
            }
            Err(e) => t.error(&e),
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let said = kid.next();
    t.bodies += 1;
    t.expect(
        said.as_deref() == Some("ok the forked child's result"),
        format!("the forked child reported {said:?}"),
    );
    Ok(t)
}
