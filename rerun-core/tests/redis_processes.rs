//! Real processes sharing one `RedisStore` (reliability 4, 9 and 10): the test binary re-runs
//! itself as child processes (`RERUN_REDIS_CHILD` names the role), so every holder is a process
//! of its own with its own pid, connections and lease keeper.
#![cfg(feature = "redis")]

mod redis_util;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rerun_core::store::redis::{RedisOptions, RedisStore};
use rerun_core::{Call, Error, Key, Status, Store};

use redis_util::{cleanup, unique, url};

const CHILD: &str = "RERUN_REDIS_CHILD";
const PREFIX: &str = "RERUN_REDIS_CHILD_PREFIX";
const PROCESSES: usize = 8;
const CALLS: usize = 500;
const KEYS: usize = 100;
/// Starts every line a child says: libtest's own `test NAME ... ` may precede it on its line.
const MARK: &str = "REDIS-CHILD: ";

/// What a child said on `line`, if anything.
fn said(line: &str) -> Option<&str> {
    line.find(MARK).map(|at| line[at + MARK.len()..].trim_end())
}

fn open(url: &str, prefix: &str) -> RedisStore {
    // No upgrade sweep: one that ended after the test's cleanup would leave its marker behind.
    RedisStore::connect_with(url, RedisOptions::new().prefix(prefix).upgrade_sweep(false))
        .expect("connecting")
}

/// Starts this test binary again as a child running `test` in `role`.
fn spawn(
    test: &str,
    role: &str,
    prefix: &str,
    extra: &[(&str, String)],
) -> (Child, BufReader<ChildStdout>) {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, role)
        .env(PREFIX, prefix)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawning a child");
    let out = BufReader::new(child.stdout.take().expect("piped stdout"));
    (child, out)
}

/// Reads the child's stdout until a line starting with `tag`; returns its rest.
fn read_until(out: &mut BufReader<ChildStdout>, tag: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("reading the child");
        assert!(n > 0, "the child ended before printing {tag}");
        if let Some(rest) = said(&line).and_then(|l| l.strip_prefix(tag)) {
            return rest.trim().to_owned();
        }
    }
}

/// One line to the parent. Written to the process's stdout directly (not `println!`, which the
/// test harness may capture), and flushed at once: the parent acts on each line as it comes.
fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{MARK}{line}");
    let _ = out.flush();
}

fn role() -> Option<(String, String)> {
    Some((std::env::var(CHILD).ok()?, std::env::var(PREFIX).ok()?))
}

// ---- 8 processes x 500 calls --------------------------------------------------------------

fn storm_child(url: &str, prefix: &str) {
    let store = open(url, prefix);
    let me = std::process::id();
    let seed: usize = std::env::var("RERUN_REDIS_CHILD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for i in 0..CALLS {
        // Every process walks the keys in another order, so they meet on every key.
        let k = (i * 37 + seed * 13) % KEYS;
        let r = Call::new("storm", &k)
            .wait(Duration::from_secs(30))
            .run(&store, || {
                say(&format!("RAN {k}"));
                Ok::<_, Error>(format!("key {k} by process {me}"))
            });
        match r {
            Ok(out) => say(&format!("GOT {k} {}", out.value)),
            Err(e) => say(&format!("ERR {k} {}", e.kind_name())),
        }
    }
    say("DONE");
}

#[test]
fn eight_processes_share_the_store() {
    let Some(url) = url() else { return };
    if let Some((role, prefix)) = role() {
        if role == "storm" {
            storm_child(&url, &prefix);
        }
        return;
    }
    let prefix = format!("{}:", unique("storm"));
    let started = Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            spawn(
                "eight_processes_share_the_store",
                "storm",
                &prefix,
                &[("RERUN_REDIS_CHILD_SEED", i.to_string())],
            )
        })
        .collect();
    let mut ran: BTreeMap<usize, usize> = BTreeMap::new();
    let mut results: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    let mut calls = 0;
    for (mut child, out) in children {
        for line in out.lines() {
            let line = line.expect("a line");
            let Some(line) = said(&line) else { continue };
            let mut parts = line.splitn(3, ' ');
            let (tag, k, rest) = (
                parts.next(),
                parts.next().and_then(|k| k.parse::<usize>().ok()),
                parts.next(),
            );
            match (tag, k) {
                (Some("RAN"), Some(k)) => *ran.entry(k).or_default() += 1,
                (Some("GOT"), Some(k)) => {
                    calls += 1;
                    results
                        .entry(k)
                        .or_default()
                        .insert(rest.unwrap_or_default().to_owned());
                }
                (Some("ERR"), Some(_)) => {
                    calls += 1;
                    *errors
                        .entry(rest.unwrap_or_default().to_owned())
                        .or_default() += 1;
                }
                _ => {}
            }
        }
        assert!(child.wait().expect("waiting for a child").success());
    }
    let elapsed = started.elapsed();
    let executions: usize = ran.values().sum();
    println!(
        "redis process storm: {PROCESSES} processes x {CALLS} calls = {calls} calls over {KEYS} keys in {elapsed:?}; body executions {executions}; errors {errors:?}"
    );
    assert_eq!(calls, PROCESSES * CALLS);
    assert!(errors.is_empty(), "typed errors: {errors:?}");
    assert_eq!(ran.len(), KEYS);
    assert!(ran.values().all(|n| *n == 1), "a body ran twice: {ran:?}");
    assert!(
        results.values().all(|r| r.len() == 1),
        "a key gave two results: {results:?}"
    );
    cleanup(&url, &prefix);
}

// ---- a holder SIGKILLed mid-body: taken over at once ----------------------------------------

#[test]
fn a_killed_holder_is_taken_over_at_once() {
    let Some(url) = url() else { return };
    if let Some((role, prefix)) = role() {
        if role == "hold" {
            let store = open(&url, &prefix);
            let _ = Call::new("kill", "k")
                .lease(Duration::from_secs(30))
                .run(&store, || {
                    say("IN_BODY");
                    std::thread::sleep(Duration::from_secs(120));
                    Ok::<_, Error>("never".to_owned())
                });
        }
        return;
    }
    let prefix = format!("{}:", unique("sigkill"));
    let store = open(&url, &prefix);
    let (mut child, mut out) = spawn(
        "a_killed_holder_is_taken_over_at_once",
        "hold",
        &prefix,
        &[],
    );
    read_until(&mut out, "IN_BODY");
    let key = Key::new("kill", "k");
    let held = store.inspect(&key).unwrap().expect("the child's claim");
    assert_eq!(held.status, Status::InProgress);
    assert_eq!(held.holder.as_ref().map(|h| h.pid), Some(child.id()));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    let t = Instant::now();
    let out = Call::new("kill", "k")
        .lease(Duration::from_secs(30))
        .run(&store, || Ok::<_, Error>("successor".to_owned()))
        .unwrap();
    let took = t.elapsed();
    println!(
        "takeover of a SIGKILLed holder (30 s lease) took {took:?}; fence {} -> {}",
        held.fence, out.fence
    );
    assert_eq!(out.value, "successor");
    assert!(out.fence > held.fence);
    assert!(
        took < Duration::from_secs(1),
        "the takeover waited for the lease: {took:?}"
    );
    cleanup(&url, &prefix);
}

// ---- a holder SIGSTOPped past its lease: its completion is LeaseLost -------------------------

#[test]
fn a_stopped_holder_loses_its_claim_to_a_successor() {
    let Some(url) = url() else { return };
    if let Some((role, prefix)) = role() {
        if role == "zombie" {
            let store = open(&url, &prefix);
            let r = Call::new("zombie", "k")
                .lease(Duration::from_secs(1))
                .run(&store, || {
                    say("IN_BODY");
                    // The parent stops this process here, past the lease, then lets it go on.
                    std::thread::sleep(Duration::from_millis(500));
                    Ok::<_, Error>("zombie".to_owned())
                });
            match r {
                Ok(out) => say(&format!("RESULT ok {}", out.value)),
                Err(e) => say(&format!("RESULT err {}", e.kind_name())),
            }
        }
        return;
    }
    let prefix = format!("{}:", unique("sigstop"));
    let store = open(&url, &prefix);
    let (mut child, mut out) = spawn(
        "a_stopped_holder_loses_its_claim_to_a_successor",
        "zombie",
        &prefix,
        &[],
    );
    read_until(&mut out, "IN_BODY");
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let key = Key::new("zombie", "k");
    let held = store.inspect(&key).unwrap().expect("the child's claim");
    // Stopped, its keeper cannot renew: the lease runs out on Redis' clock although the
    // process still exists.
    std::thread::sleep(Duration::from_millis(1600));
    let succ = Call::new("zombie", "k")
        .run(&store, || Ok::<_, Error>("successor".to_owned()))
        .unwrap();
    assert!(!succ.replayed && succ.fence > held.fence);
    kill(pid, Signal::SIGCONT).unwrap();
    let verdict = read_until(&mut out, "RESULT");
    assert!(child.wait().unwrap().success());
    println!(
        "stopped holder (fence {}) after SIGCONT: {verdict}; successor fence {}",
        held.fence, succ.fence
    );
    assert_eq!(verdict, "err lease_lost");
    let again = Call::new("zombie", "k")
        .run(&store, || Ok::<_, Error>("third".to_owned()))
        .unwrap();
    assert_eq!(
        (again.value.as_str(), again.replayed, again.fence),
        ("successor", true, succ.fence)
    );
    cleanup(&url, &prefix);
}
