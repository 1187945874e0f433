//! The checks that need several processes: reliability 4 (process storm), 9 (dead holder,
//! fast takeover) and 10 (zombie holder). Children are the calling test binary run again with
//! the same test name; they find their role in `RERUN_CONFORMANCE_ROLE`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::checks::{run_checks, skewed, Check};
use super::report::{Report, Tally};
use super::{unique, Factory, Settings};
use crate::error::Error;
use crate::key::Key;
use crate::record::Status;
use crate::runtime::Call;
use crate::store::Store;

const ROLE: &str = "RERUN_CONFORMANCE_ROLE";
const LOCATOR: &str = "RERUN_CONFORMANCE_LOCATOR";
const ARGS: &str = "RERUN_CONFORMANCE_ARGS";
const LINE: &str = "RERUN-CHILD: ";

pub(super) fn child_role_requested() -> bool {
    std::env::var_os(ROLE).is_some()
}

pub(super) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{LINE}{line}");
    let _ = out.flush();
}

pub(super) fn arg(args: &serde_json::Value, name: &str) -> String {
    match &args[name] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(super) fn arg_u64(args: &serde_json::Value, name: &str) -> u64 {
    args[name].as_u64().unwrap_or(0)
}

/// Runs the role this child process was started for, then exits.
pub(super) fn run_child<F: Factory>(factory: &F) -> ! {
    let role = std::env::var(ROLE).unwrap_or_default();
    let locator = std::env::var(LOCATOR).unwrap_or_default();
    let args: serde_json::Value = std::env::var(ARGS)
        .ok()
        .and_then(|a| serde_json::from_str(&a).ok())
        .unwrap_or_default();
    let code = match factory.reopen(&locator) {
        Err(e) => {
            say(&format!("error reopening the store: {e}"));
            2
        }
        Ok(store) => match role.as_str() {
            "storm" => child_storm(&store, &args),
            "hold" => child_hold(&store, &args),
            "contend" => super::isolation::child_contend(&store, &args),
            "judge" => super::isolation::child_judge(&store, &args),
            "fork_hold" => super::isolation::child_fork_hold(&store, &args),
            other => {
                say(&format!("unknown role {other}"));
                2
            }
        },
    };
    std::process::exit(code)
}

/// Calls over skewed keys; each body execution appends `key` to the effects file.
fn child_storm<S: Store>(store: &S, args: &serde_json::Value) -> i32 {
    let scope = arg(args, "scope");
    let effects = arg(args, "effects");
    let calls = arg_u64(args, "calls");
    let keys = arg_u64(args, "keys").max(1);
    let mut seed = arg_u64(args, "seed") | 1;
    let mut seen: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    let mut errors: BTreeMap<&'static str, u64> = BTreeMap::new();
    for _ in 0..calls {
        let k = skewed(&mut seed, keys);
        let r = Call::new(scope.clone(), &k)
            .wait(Duration::from_secs(20))
            .run(store, || {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&effects)
                    .map_err(|e| Error::store(None, "opening the effects file", e))?;
                // One write of one line: O_APPEND keeps lines of all processes whole.
                f.write_all(format!("{k}\n").as_bytes())
                    .map_err(|e| Error::store(None, "writing the effects file", e))?;
                Ok::<_, Error>(format!("key {k} by pid {}", std::process::id()))
            });
        match r {
            Ok(o) => {
                seen.entry(k).or_default().insert(o.value);
            }
            Err(e) => *errors.entry(e.kind_name()).or_default() += 1,
        }
    }
    let summary = serde_json::json!({ "seen": seen, "errors": errors });
    say(&summary.to_string());
    0
}

/// Claims a key, says so, and holds it until the go-file appears; then reports its outcome.
fn child_hold<S: Store>(store: &S, args: &serde_json::Value) -> i32 {
    let scope = arg(args, "scope");
    let go = arg(args, "go");
    let lease = Duration::from_millis(arg_u64(args, "lease_ms"));
    let r = Call::new(scope, "held").lease(lease).run(store, || {
        say("claimed");
        while !std::path::Path::new(&go).exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok::<_, Error>("the first holder's result".to_owned())
    });
    match r {
        Ok(o) => say(&format!("ok {}", o.value)),
        Err(e) => say(&format!("error {}", e.kind_name())),
    }
    0
}

/// A child process of this test.
pub(super) struct Kid {
    pub(super) child: Child,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl Kid {
    pub(super) fn spawn(role: &str, locator: &str, args: serde_json::Value) -> Result<Kid, Error> {
        Kid::spawn_in(&[], role, locator, args)
    }

    /// Starts the child under `wrapper` (a program and its arguments that end by running the
    /// command it is given, such as `unshare --pid --fork --`).
    pub(super) fn spawn_in(
        wrapper: &[String],
        role: &str,
        locator: &str,
        args: serde_json::Value,
    ) -> Result<Kid, Error> {
        let test = std::thread::current()
            .name()
            .map(str::to_owned)
            .filter(|n| n != "main")
            .ok_or_else(|| {
                Error::config(
                    "the conformance suite must run inside a #[test] to start child processes",
                )
            })?;
        let exe = std::env::current_exe()
            .map_err(|e| Error::store(None, "finding the test binary", e))?;
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = command
            .args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(LOCATOR, locator)
            .env(ARGS, args.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::store(None, "starting a child process", e))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::store_msg(None, "the child has no stdout"))?;
        Ok(Kid {
            child,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// The next line the child said. libtest's own output is skipped; it may precede ours on
    /// the same line (`test name ... ` is printed without a newline).
    pub(super) fn next(&mut self) -> Option<String> {
        self.lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.find(LINE).map(|at| l[at + LINE.len()..].to_owned()))
    }

    pub(super) fn signal(&self, signal: Signal) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn run_all<F: Factory>(factory: &F, settings: &Settings, report: &mut Report) {
    let checks: [(&'static str, Check<F>); 5] = [
        ("process_storm", process_storm),
        ("dead_holder", dead_holder),
        ("zombie_holder", zombie_holder),
        ("namespaces", super::isolation::namespaces),
        ("forked_holder", super::isolation::forked_holder),
    ];
    run_checks(factory, settings, report, &checks);
}

/// Reliability 4: 8 processes x 500 calls over 100 skewed keys: per key, body once across all
/// processes and every result equal to the key's first.
fn process_storm<F: Factory>(factory: &F, settings: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (_store, locator) = factory.fresh()?;
    let dir = std::env::temp_dir().join(unique("rerun-storm"));
    std::fs::create_dir_all(&dir).map_err(|e| Error::store(None, "creating a temp dir", e))?;
    let effects = dir.join("effects");
    let scope = unique("conformance");
    let calls = settings.n(500);
    let kids: Vec<Kid> = (0..8u64)
        .map(|i| {
            Kid::spawn(
                "storm",
                &locator,
                serde_json::json!({
                    "scope": scope, "effects": effects.display().to_string(),
                    "calls": calls, "keys": 100, "seed": 0x5EED + i * 7919,
                }),
            )
        })
        .collect::<Result<_, _>>()?;
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for mut kid in kids {
        let Some(line) = kid.next() else {
            t.violations
                .push("a child process ended without a report".into());
            continue;
        };
        let summary: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        t.calls += calls;
        if let Some(map) = summary["seen"].as_object() {
            for (k, vs) in map {
                for v in vs.as_array().into_iter().flatten() {
                    seen.entry(k.clone())
                        .or_default()
                        .insert(v.as_str().unwrap_or("").to_owned());
                }
            }
        }
        if let Some(errors) = summary["errors"].as_object() {
            for (k, v) in errors {
                t.violations.push(format!("a child got {} {k} error(s)", v));
            }
        }
    }
    let effects = std::fs::read_to_string(&effects).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let mut per_key: BTreeMap<&str, u64> = BTreeMap::new();
    for line in effects.lines() {
        *per_key.entry(line).or_default() += 1;
    }
    t.bodies = per_key.values().sum();
    let twice: Vec<_> = per_key
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, n)| format!("{k}x{n}"))
        .collect();
    t.expect(
        twice.is_empty(),
        format!("bodies ran more than once across processes: {twice:?}"),
    );
    let diverged: Vec<_> = seen
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(k, _)| k.clone())
        .collect();
    t.expect(
        diverged.is_empty(),
        format!("keys with more than one result: {diverged:?}"),
    );
    t.results = seen.keys().cloned().collect();
    Ok(t)
}

/// Starts a holder child on `key` "held" of `scope` and waits until it has claimed.
pub(super) fn start_holder(
    locator: &str,
    scope: &str,
    go: &std::path::Path,
    lease: Duration,
) -> Result<Kid, Error> {
    start_holder_in(&[], locator, scope, go, lease)
}

/// [`start_holder`] under a wrapper command (see [`Kid::spawn_in`]).
pub(super) fn start_holder_in(
    wrapper: &[String],
    locator: &str,
    scope: &str,
    go: &std::path::Path,
    lease: Duration,
) -> Result<Kid, Error> {
    let mut kid = Kid::spawn_in(
        wrapper,
        "hold",
        locator,
        serde_json::json!({"scope": scope, "go": go.display().to_string(), "lease_ms": lease.as_millis() as u64}),
    )?;
    match kid.next().as_deref() {
        Some("claimed") => Ok(kid),
        other => Err(Error::store_msg(
            None,
            format!("the holder child did not claim: {other:?}"),
        )),
    }
}

/// Reliability 9: a holder SIGKILLed mid-body with a 30 s lease is taken over at once by a
/// caller on the same host, with the next fence.
fn dead_holder<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, locator) = factory.fresh()?;
    let mut times = Vec::new();
    for round in 0..5 {
        let scope = unique("conformance");
        let go = std::env::temp_dir().join(unique("rerun-go"));
        let mut kid = start_holder(&locator, &scope, &go, Duration::from_secs(30))?;
        let before = store.inspect(&Key::new(scope.clone(), "held"))?;
        kid.signal(Signal::SIGKILL);
        let _ = kid.child.wait();
        let started = Instant::now();
        t.calls += 1;
        match Call::new(scope.clone(), "held")
            .run(&store, || Ok::<_, Error>("successor".to_owned()))
        {
            Ok(o) => {
                times.push(started.elapsed());
                t.bodies += 1;
                t.results.insert(o.value);
                let old = before.as_ref().map(|r| r.fence).unwrap_or(0);
                t.expect(
                    o.fence > old,
                    format!("round {round}: fence {} not above {old}", o.fence),
                );
            }
            Err(e) => {
                t.error(&e);
                t.violations.push(format!(
                    "round {round}: the dead holder was not taken over at once: {e}"
                ));
            }
        }
    }
    times.sort();
    if let Some(max) = times.last() {
        t.notes
            .push(format!("takeover max {max:?} over {} kills", times.len()));
    }
    Ok(t)
}

/// Reliability 10: a holder SIGSTOPped past its lease loses it; a successor completes; the
/// holder, continued, gets `LeaseLost` and the store keeps the successor's result.
fn zombie_holder<F: Factory>(factory: &F, _: &Settings) -> Result<Tally, Error> {
    let mut t = Tally::default();
    let (store, locator) = factory.fresh()?;
    let scope = unique("conformance");
    let go = std::env::temp_dir().join(unique("rerun-go"));
    let lease = super::SHORT_LEASE;
    let mut kid = start_holder(&locator, &scope, &go, lease)?;
    kid.signal(Signal::SIGSTOP);
    std::thread::sleep(lease + Duration::from_millis(500));
    let bodies = AtomicU64::new(0);
    t.calls += 1;
    match Call::new(scope.clone(), "held")
        .lease(lease)
        .run(&store, || {
            bodies.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>("the successor's result".to_owned())
        }) {
        Ok(o) => {
            t.results.insert(o.value);
        }
        Err(e) => t
            .violations
            .push(format!("no successor took over the stopped holder: {e}")),
    }
    let _ = std::fs::write(&go, b"go");
    kid.signal(Signal::SIGCONT);
    let said = kid.next();
    let _ = std::fs::remove_file(&go);
    t.expect(
        said.as_deref() == Some("error lease_lost"),
        format!("the zombie holder reported {said:?}, not LeaseLost"),
    );
    let rec = store.inspect(&Key::new(scope.clone(), "held"))?;
    let kept = rec
        .as_ref()
        .filter(|r| r.status == Status::Completed)
        .and_then(|r| r.result.as_deref())
        .map(crate::codec::decode::<String>);
    t.expect(
        kept == Some(Ok("the successor's result".into())),
        format!("the store keeps {kept:?}"),
    );
    t.bodies = bodies.load(Ordering::SeqCst) + 1;
    Ok(t)
}
