//! End-to-end tests of the built `rerunctl` binary on real stores: SQLite always, PostgreSQL
//! and Redis when `RERUN_TEST_POSTGRES_URL` / `RERUN_TEST_REDIS_URL` are set (a notice and a
//! skip otherwise; a failure with `RERUN_REQUIRE_SERVICES=1`).

mod common;

use std::time::{Duration, Instant};

use rerun_core::{Call, Error, Key};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use common::{ctl, kill, on, spawn_holder, Backend};

#[derive(Debug, Serialize, Deserialize)]
struct Receipt {
    id: String,
    cents: u64,
}

fn receipt(id: &str) -> Receipt {
    Receipt {
        id: id.to_owned(),
        cents: 500,
    }
}

/// Records of every key shape in `billing.charge`, released ones in `mail.send`.
fn seed(store: &Backend) -> Vec<Key> {
    let s = store.open();
    let mut keys = Vec::new();
    for i in 1..=3 {
        let key = format!("evt_{i}");
        Call::new("billing.charge", key.as_str())
            .run(&*s, || Ok::<_, Error>(receipt(&format!("ch_{i}"))))
            .expect("a completed record");
        keys.push(Key::new("billing.charge", key.as_str()));
    }
    macro_rules! record {
        ($key:expr) => {{
            Call::new("billing.charge", &$key)
                .run(&*s, || Ok::<_, Error>(receipt("odd")))
                .expect("a completed record");
            keys.push(Key::new("billing.charge", &$key));
        }};
    }
    record!("42");
    record!(42i64);
    record!(-7i64);
    record!(("cus_1", 42u32));
    record!([0xabu8, 0x01][..]);
    record!("line\nbreak\u{1b}[2J");
    record!("ünï cödé");
    for i in 0..2u32 {
        let _ = Call::new("mail.send", &i).run(&*s, || Err::<u32, _>(Error::config("smtp down")));
    }
    keys
}

/// No raw control character but line ends reaches the terminal.
fn assert_terminal_safe(text: &str) {
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "a raw control character in {text:?}"
    );
}

fn every_command_on(store: &Backend) {
    let name = store.name();
    let keys = seed(store);

    // ls: every record, keys in the form `show` takes back.
    let ls = on(store, &["ls", "--json"]).expect(0).json();
    assert_eq!(ls["count"], 12, "{name}: {ls:#}");
    assert_eq!(ls["more"], false);
    let listed: Vec<(String, String)> = ls["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            let scope = r["scope"].as_str().expect("scope").to_owned();
            let key = r["key"].as_str().expect("key").to_owned();
            (scope, key)
        })
        .collect();
    for key in &keys {
        let typed = key.readable_id();
        assert!(
            listed.contains(&(key.scope().to_owned(), typed.clone())),
            "{name}: {typed} not listed in {listed:?}"
        );
    }
    assert!(listed.contains(&("billing.charge".into(), "evt_1".into())));
    assert!(listed.contains(&("billing.charge".into(), "\"42\"".into())));
    assert!(listed.contains(&("billing.charge".into(), "42".into())));
    for (scope, key) in &listed {
        let shown = on(store, &["show", scope, key, "--json"]).expect(0).json();
        assert_eq!(shown["key"].as_str(), Some(key.as_str()), "{name}");
        assert_eq!(shown["scope"].as_str(), Some(scope.as_str()), "{name}");
    }

    // ls, as people read it: aligned, nothing raw on the terminal.
    let human = on(store, &["ls"]).expect(0);
    assert_terminal_safe(&human.stdout);
    let header = human.stdout.lines().next().unwrap_or_default();
    for column in ["SCOPE", "KEY", "STATUS", "FENCE", "AGE", "HOLDER", "ALIVE"] {
        assert!(header.contains(column), "{name}: {header}");
    }
    assert!(human.stdout.contains(r#""line\nbreak\u{1b}[2J""#), "{name}");
    let line = human
        .stdout
        .lines()
        .find(|l| l.contains(" evt_1 "))
        .unwrap_or_default();
    assert!(
        line.starts_with("billing.charge") && line.contains("completed"),
        "{line}"
    );

    // Filters.
    let released = on(store, &["ls", "--status", "released", "--json"])
        .expect(0)
        .json();
    assert_eq!(released["count"], 2, "{name}");
    let mail = on(store, &["ls", "--scope", "mail.", "--json"])
        .expect(0)
        .json();
    assert_eq!(mail["count"], 2, "{name}");
    let none = on(store, &["ls", "--scope", "nosuch.", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        (none["count"].clone(), none["records"].clone()),
        (Value::from(0), Value::Array(vec![]))
    );
    let nothing = on(store, &["ls", "--status", "in-progress"]).expect(0);
    assert!(nothing.stdout.is_empty() && nothing.stderr.contains("no records match"));
    let old = on(store, &["ls", "--older-than", "100d", "--json"])
        .expect(0)
        .json();
    assert_eq!(old["count"], 0, "{name}: nothing is 100 days old");
    let limited = on(store, &["ls", "--limit", "3", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        (limited["count"].clone(), limited["more"].clone()),
        (Value::from(3), Value::Bool(true))
    );

    // show: the result rendered readably, whole.
    let shown = on(store, &["show", "billing.charge", "evt_2", "--json"])
        .expect(0)
        .json();
    assert_eq!(shown["status"], "completed");
    assert_eq!(
        shown["result"]["rendered"], r#"Receipt { id: "ch_2", cents: 500 }"#,
        "{name}"
    );
    assert_eq!(shown["fingerprint"].as_str().map(str::len), Some(64));
    let text = on(store, &["show", "billing.charge", "evt_2"])
        .expect(0)
        .stdout;
    assert!(
        text.contains(r#"Receipt { id: "ch_2", cents: 500 }"#),
        "{text}"
    );
    let int = on(store, &["show", "billing.charge", "-7"])
        .expect(0)
        .stdout;
    assert!(
        int.contains("-7"),
        "{name}: a negative key is a key, not a flag"
    );

    // stats: counts by scope and status.
    let stats = on(store, &["stats", "--json"]).expect(0).json();
    assert_eq!(stats["total"], 12, "{name}: {stats:#}");
    assert_eq!(stats["by_status"]["completed"], 10);
    assert_eq!(stats["by_status"]["released"], 2);
    let scopes = stats["scopes"].as_array().cloned().unwrap_or_default();
    assert_eq!(scopes.len(), 2);
    assert_eq!(scopes[0]["scope"], "billing.charge");
    assert_eq!(scopes[0]["completed"], 10);
    assert_eq!(scopes[1]["released"], 2);
    assert_eq!(stats["oldest_in_progress"], Value::Null);
    let table = on(store, &["stats"]).expect(0).stdout;
    assert!(
        table.contains("billing.charge") && table.contains("(all scopes)"),
        "{table}"
    );

    // forget: asks first; without a terminal, refuses unless --yes.
    let refused = on(store, &["forget", "billing.charge", "evt_1"]).expect(1);
    assert!(refused.stderr.contains("--yes"), "{}", refused.stderr);
    on(store, &["show", "billing.charge", "evt_1"]).expect(0);
    let gone = on(
        store,
        &["forget", "billing.charge", "evt_1", "--yes", "--json"],
    )
    .expect(0)
    .json();
    assert_eq!(gone["forgotten"], true);
    assert_eq!(gone["was"]["status"], "completed");
    let missing = on(store, &["show", "billing.charge", "evt_1"]).expect(1);
    assert!(missing.stderr.contains("no record"), "{}", missing.stderr);
    on(store, &["forget", "billing.charge", "evt_1", "--yes"]).expect(1);

    // recover and purge.
    let planned = on(store, &["recover", "--dry-run", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        (planned["dry_run"].clone(), planned["released"].clone()),
        (Value::Bool(true), Value::from(0))
    );
    let recovered = on(store, &["recover"]).expect(0).stdout;
    assert!(recovered.contains("released"), "{recovered}");
    let s = store.open();
    Call::new("short.lived", "k")
        .ttl(Duration::from_secs(1))
        .run(&*s, || Ok::<_, Error>(1))
        .expect("a short-lived record");
    std::thread::sleep(Duration::from_millis(1300));
    let purged = on(store, &["purge", "--json"]).expect(0).json();
    let want = if name == "redis" { 0 } else { 1 };
    assert_eq!(
        purged["purged"], want,
        "{name}: Redis expires records by itself"
    );
    on(store, &["show", "short.lived", "k"]).expect(1);

    // completions
    let bash = on(store, &["completions", "bash"]).expect(0).stdout;
    assert!(bash.contains("rerunctl") && bash.contains("forget"));
}

#[test]
fn every_command_on_sqlite() {
    every_command_on(&Backend::sqlite());
}

#[test]
fn every_command_on_postgres() {
    if let Some(store) = Backend::postgres() {
        every_command_on(&store);
    }
}

#[test]
fn every_command_on_redis() {
    if let Some(store) = Backend::redis() {
        every_command_on(&store);
    }
}

/// Not a test of its own: the body of the holder processes the tests below start and kill.
#[test]
fn holder_process() {
    common::holder_body();
}

/// A claim left by a SIGKILLed holder is found by `ls --status in-progress` and released by
/// `recover`; an at-most-once claim is marked unknown, and `forget --yes` resolves it.
fn killed_holders_on(store: &Backend) {
    let name = store.name();
    seed(store);

    // A replayable claim, held by a live process: listed as live, not forgotten without --force.
    let holder = spawn_holder("holder_process", store, "jobs.resize", "img_7", false);
    let ls = on(store, &["ls", "--status", "in-progress", "--json"])
        .expect(0)
        .json();
    assert_eq!(ls["count"], 1, "{name}: {ls:#}");
    let r = &ls["records"][0];
    assert_eq!(
        (r["scope"].as_str(), r["key"].as_str()),
        (Some("jobs.resize"), Some("img_7"))
    );
    assert_eq!(
        (r["holder_alive"].as_str(), r["live"].as_bool()),
        (Some("alive"), Some(true))
    );
    let refused = on(store, &["forget", "jobs.resize", "img_7", "--yes"]).expect(1);
    assert!(
        refused.stderr.contains("live claim") && refused.stderr.contains("--force"),
        "{}",
        refused.stderr
    );
    let left = on(store, &["recover", "--json"]).expect(0).json();
    assert_eq!(
        (left["live"].clone(), left["released"].clone()),
        (Value::from(1), Value::from(0))
    );

    kill(holder);
    let ls = on(store, &["ls", "--status", "in-progress", "--json"])
        .expect(0)
        .json();
    assert_eq!(ls["count"], 1, "{name}");
    assert_eq!(ls["records"][0]["holder_alive"], "dead", "{name}");
    assert_eq!(ls["records"][0]["live"], false);
    let human = on(store, &["ls", "--status", "in-progress"])
        .expect(0)
        .stdout;
    assert!(human.contains("img_7") && human.contains("dead"), "{human}");
    let planned = on(store, &["recover", "--dry-run", "--json"])
        .expect(0)
        .json();
    assert_eq!(planned["released"], 1, "{name}");
    let done = on(store, &["recover", "--json"]).expect(0).json();
    assert_eq!(
        (done["released"].clone(), done["live"].clone()),
        (Value::from(1), Value::from(0)),
        "{name}"
    );
    let shown = on(store, &["show", "jobs.resize", "img_7", "--json"])
        .expect(0)
        .json();
    assert_eq!(shown["status"], "released");
    on(store, &["ls", "--status", "in-progress", "--json"]).expect(0);
    let again = on(store, &["recover", "--json"]).expect(0).json();
    assert_eq!(again["released"], 0);

    // An at-most-once claim: killed mid-body, its outcome is unknown until an operator decides.
    let holder = spawn_holder("holder_process", store, "billing.refund", "rf_9", true);
    kill(holder);
    let done = on(store, &["recover", "--json"]).expect(0).json();
    assert_eq!(done["marked_unknown"], 1, "{name}: {done:#}");
    let unknown = on(store, &["ls", "--status", "unknown", "--json"])
        .expect(0)
        .json();
    assert_eq!(unknown["count"], 1);
    assert_eq!(unknown["records"][0]["key"], "rf_9");
    assert_eq!(unknown["records"][0]["once"], true);
    let stats = on(store, &["stats", "--json"]).expect(0).json();
    assert_eq!(stats["by_status"]["unknown"], 1);
    assert_eq!(stats["oldest_unknown"]["key"], "rf_9");
    let call = Call::new("billing.refund", "rf_9").once();
    let err = call.run(&*store.open(), || Ok::<_, Error>(1)).err();
    assert_eq!(err.map(|e| e.kind_name()), Some("outcome_unknown"));
    on(store, &["forget", "billing.refund", "rf_9"]).expect(1);
    on(store, &["forget", "billing.refund", "rf_9", "--yes"]).expect(0);
    on(store, &["show", "billing.refund", "rf_9"]).expect(1);
    let ran = Call::new("billing.refund", "rf_9")
        .once()
        .run(&*store.open(), || Ok::<_, Error>(2))
        .expect("a forgotten key runs afresh");
    assert_eq!((ran.value, ran.replayed), (2, false));
}

#[test]
fn killed_holders_on_sqlite() {
    killed_holders_on(&Backend::sqlite());
}

#[test]
fn killed_holders_on_postgres() {
    if let Some(store) = Backend::postgres() {
        killed_holders_on(&store);
    }
}

#[test]
fn killed_holders_on_redis() {
    if let Some(store) = Backend::redis() {
        killed_holders_on(&store);
    }
}

/// A result rewritten with garbage shows as corrupt (exit 2, a store error, not "not found")
/// and is cleared by `forget`; a result of a newer codec version is reported as such, with
/// other advice.
fn corrupt_records_on(store: &Backend) {
    let name = store.name();
    let s = store.open();
    let key = Key::new("billing.charge", "evt_bad");
    Call::with_key(key.clone())
        .run(&*s, || Ok::<_, Error>(receipt("ch_bad")))
        .expect("a record");
    let good = s
        .inspect(&key)
        .ok()
        .flatten()
        .and_then(|r| r.result)
        .expect("its result");

    store.set_result(&key, b"\x00garbage that is no envelope");
    let shown = on(store, &["show", "billing.charge", "evt_bad", "--json"]).expect(2);
    let doc = shown.json();
    assert_eq!(doc["status"], "completed", "{name}: the record is shown");
    assert_eq!(doc["result"]["rendered"], Value::Null);
    assert!(doc["result"]["corrupt"]["kind"].is_string(), "{doc:#}");
    assert!(doc.get("error").is_none(), "one document only");
    assert!(
        shown.stderr.contains("corrupt")
            && shown
                .stderr
                .contains("rerunctl forget billing.charge evt_bad --yes"),
        "{}",
        shown.stderr
    );
    let human = on(store, &["show", "billing.charge", "evt_bad"]).expect(2);
    assert!(human.stdout.contains("<corrupt:"), "{}", human.stdout);
    // Listing does not read results: the record is listed; with --results, marked.
    on(store, &["ls", "--json"]).expect(0);
    let with = on(store, &["ls", "--results"]).expect(0).stdout;
    assert!(with.contains("<corrupt:"), "{with}");

    let mut newer = good.clone();
    newer[1] = 99;
    store.set_result(&key, &newer);
    let shown = on(store, &["show", "billing.charge", "evt_bad", "--json"]).expect(2);
    assert_eq!(
        shown.json()["result"]["corrupt"]["kind"],
        "unknown_version",
        "{name}"
    );
    assert!(shown.stderr.contains("newer rerun"), "{}", shown.stderr);

    on(store, &["forget", "billing.charge", "evt_bad", "--yes"]).expect(0);
    on(store, &["show", "billing.charge", "evt_bad"]).expect(1);
}

#[test]
fn corrupt_records_on_sqlite() {
    corrupt_records_on(&Backend::sqlite());
}

/// A record whose row itself is malformed cannot be shown (exit 2, a store error, naming the
/// key and how to clear it); `ls` and `stats` read past it (the other records are listed and
/// counted, and the listing exits 2 naming it), and `forget` clears it.
#[test]
fn a_malformed_row_on_sqlite() {
    let store = Backend::sqlite();
    let key = Key::new("billing.charge", "evt_odd");
    Call::with_key(key.clone())
        .run(&*store.open(), || Ok::<_, Error>(1))
        .expect("a record");
    for good in ["evt_a", "evt_z"] {
        Call::new("billing.charge", good)
            .run(&*store.open(), || Ok::<_, Error>(2))
            .expect("a record");
    }
    let Backend::Sqlite { path, .. } = &store else {
        return;
    };
    let db = rusqlite::Connection::open(path).expect("raw SQLite");
    db.execute(
        "UPDATE rerun_records SET status = 'exploded' WHERE id = ?1",
        [key.id()],
    )
    .expect("update");
    let ls = on(&store, &["ls"]).expect(2);
    assert!(
        ls.stderr.contains("evt_odd") && ls.stderr.contains("forget billing.charge evt_odd --yes"),
        "{}",
        ls.stderr
    );
    assert!(
        ls.stdout.contains("evt_a")
            && ls.stdout.contains("evt_z")
            && !ls.stdout.contains("evt_odd"),
        "{}",
        ls.stdout
    );
    let doc = on(&store, &["ls", "--json"]).expect(2).json();
    assert_eq!(doc["count"], 2, "{doc:#}");
    assert_eq!(doc["unreadable"][0]["key"], "evt_odd", "{doc:#}");
    assert!(
        doc["unreadable"][0]["problem"]
            .as_str()
            .is_some_and(|p| p.contains("exploded")),
        "{doc:#}"
    );
    assert!(doc.get("error").is_none(), "one document only: {doc:#}");
    let stats = on(&store, &["stats", "--json"]).expect(0).json();
    assert_eq!(
        (stats["total"].as_u64(), stats["unreadable"].as_u64()),
        (Some(2), Some(1)),
        "{stats:#}"
    );
    let run = on(&store, &["show", "billing.charge", "evt_odd", "--json"]).expect(2);
    assert_eq!(run.json()["error"]["kind"], "corrupt");
    assert_eq!(run.json()["error"]["exit_code"], 2);
    // No --yes and no terminal: a safety check refuses (1).
    on(&store, &["forget", "billing.charge", "evt_odd"]).expect(1);
    let run = on(&store, &["forget", "billing.charge", "evt_odd", "--yes"]).expect(0);
    assert!(run.stderr.contains("cannot be read"), "{}", run.stderr);
    on(&store, &["ls", "--json"]).expect(0);
}

/// A claim in progress that cannot be read is left by `recover`, which says so and exits 2 (a
/// store error, as `ls` does), after its summary or its one JSON document.
#[test]
fn recover_exits_2_when_a_claim_cannot_be_read_on_sqlite() {
    let store = Backend::sqlite();
    let key = Key::new("jobs.resize", "img_odd");
    Call::with_key(key.clone())
        .run(&*store.open(), || Ok::<_, Error>(1))
        .expect("a record");
    let Backend::Sqlite { path, .. } = &store else {
        return;
    };
    let db = rusqlite::Connection::open(path).expect("raw SQLite");
    db.execute(
        "UPDATE rerun_records SET status = 'in_progress', lease_until = -5 WHERE id = ?1",
        [key.id()],
    )
    .expect("update");
    let run = on(&store, &["recover"]).expect(2);
    assert!(
        run.stdout.contains("unreadable records left as they are")
            && run.stderr.contains("cannot be read"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    let doc = on(&store, &["recover", "--json"]).expect(2).json();
    assert_eq!(doc["unreadable"], 1, "{doc:#}");
    assert!(doc.get("error").is_none(), "one document only: {doc:#}");
    on(&store, &["recover", "--dry-run"]).expect(2);
}

#[test]
fn corrupt_records_on_postgres() {
    if let Some(store) = Backend::postgres() {
        corrupt_records_on(&store);
    }
}

#[test]
fn corrupt_records_on_redis() {
    if let Some(store) = Backend::redis() {
        corrupt_records_on(&store);
    }
}

/// A Redis record written by a newer rerun (its record version, not its result's) cannot be
/// read at all: `show` says so (exit 2, a store error); `forget` refuses it (exit 1, a safety
/// check: it may be a live claim this build cannot see) unless `--force`, which clears it.
#[test]
fn a_record_of_a_newer_rerun_on_redis() {
    let Some(store) = Backend::redis() else {
        return;
    };
    let key = Key::new("billing.charge", "evt_new");
    Call::with_key(key.clone())
        .run(&*store.open(), || Ok::<_, Error>(1))
        .expect("a record");
    // The first byte of a record is its layout's format: one this build does not know.
    store.redis_edit(&key, |raw| raw[0] = b'9');
    let shown = on(&store, &["show", "billing.charge", "evt_new", "--json"]).expect(2);
    assert!(shown.stderr.contains("newer rerun"), "{}", shown.stderr);
    assert_eq!(shown.json()["error"]["kind"], "corrupt");
    assert_eq!(shown.json()["error"]["exit_code"], 2);
    let refused = on(&store, &["forget", "billing.charge", "evt_new", "--yes"]).expect(1);
    assert!(
        refused.stderr.contains("newer rerun") && refused.stderr.contains("--force"),
        "{}",
        refused.stderr
    );
    on(&store, &["show", "billing.charge", "evt_new"]).expect(2);
    on(
        &store,
        &["forget", "billing.charge", "evt_new", "--yes", "--force"],
    )
    .expect(0);
    on(&store, &["show", "billing.charge", "evt_new"]).expect(1);
}

/// `ls --limit 5` on 10,000 records reads a page, not the store; `stats` counts them all.
fn big_store_on(store: &Backend) {
    let name = store.name();
    let s = store.open();
    let template = Key::new("bulk.load", "k0");
    Call::with_key(template.clone())
        .run(&*s, || Ok::<_, Error>(receipt("ch_0")))
        .expect("a record");
    store.clone_record(&template, 9_999);
    // One stuck claim among them.
    let mut dead = rerun_core::Holder::current();
    dead.start_time += 2;
    let stuck = Key::new("bulk.load", "stuck");
    s.claim(&rerun_core::record::ClaimRequest {
        key: &stuck,
        fingerprint: &rerun_core::Fingerprint::EMPTY,
        holder: &dead,
        lease: Duration::from_secs(300),
        once: false,
        steal: None,
    })
    .expect("a claim");

    let started = Instant::now();
    let ls = on(store, &["ls", "--limit", "5", "--json"])
        .expect(0)
        .json();
    let took = started.elapsed();
    assert_eq!(
        (ls["count"].clone(), ls["more"].clone()),
        (Value::from(5), Value::Bool(true)),
        "{name}"
    );
    assert!(
        ls["scanned"].as_u64().is_some_and(|n| n < 1000),
        "{name}: {}",
        ls["scanned"]
    );
    assert!(
        took < Duration::from_secs(5),
        "{name}: ls --limit 5 took {took:?}"
    );
    println!("{name}: ls --limit 5 of 10,001 records in {took:?}");

    let human = on(store, &["ls", "--limit", "5"]).expect(0);
    assert_eq!(human.stdout.lines().count(), 6, "{}", human.stdout);
    assert!(human.stderr.contains("more may match"));

    let in_progress = on(
        store,
        &["ls", "--status", "in-progress", "--limit", "5", "--json"],
    )
    .expect(0)
    .json();
    assert_eq!(in_progress["count"], 1, "{name}");
    assert_eq!(in_progress["records"][0]["key"], "stuck");
    assert_eq!(in_progress["records"][0]["holder_alive"], "dead");

    let started = Instant::now();
    let stats = on(store, &["stats", "--json"]).expect(0).json();
    println!("{name}: stats of 10,001 records in {:?}", started.elapsed());
    assert_eq!(stats["total"], 10_001, "{name}");
    assert_eq!(stats["by_status"]["completed"], 10_000);
    assert_eq!(stats["by_status"]["in_progress"], 1);
    assert_eq!(stats["oldest_in_progress"]["key"], "stuck");

    let all = on(store, &["ls", "--limit", "0", "--json"])
        .expect(0)
        .json();
    assert_eq!(all["count"], 10_001, "{name}: each record listed once");
}

#[test]
fn big_store_on_sqlite() {
    big_store_on(&Backend::sqlite());
}

#[test]
fn big_store_on_postgres() {
    if let Some(store) = Backend::postgres() {
        big_store_on(&store);
    }
}

#[test]
fn big_store_on_redis() {
    if let Some(store) = Backend::redis() {
        big_store_on(&store);
    }
}

/// `--store` and `--json` before or after the subcommand, `RERUN_STORE`, and the default
/// store under the current directory.
#[test]
fn the_store_is_found_as_documented() {
    let store = Backend::sqlite();
    let key = Key::new("billing.charge", "evt_1");
    Call::with_key(key)
        .run(&*store.open(), || Ok::<_, Error>(1))
        .expect("a record");
    let count = |run: common::Run| run.expect(0).json()["count"].clone();

    assert_eq!(
        count(ctl(["--store", store.url(), "--json", "ls"]).run()),
        1
    );
    assert_eq!(
        count(ctl(["ls", "--store", store.url(), "--json"]).run()),
        1
    );
    assert_eq!(
        count(ctl(["--json", "ls", &format!("--store={}", store.url())]).run()),
        1
    );
    assert_eq!(
        count(ctl(["ls", "--json"]).env("RERUN_STORE", store.url()).run()),
        1
    );
    // --store wins over RERUN_STORE.
    let other = Backend::sqlite();
    assert_eq!(
        count(
            ctl(["ls", "--json", "--store", other.url()])
                .env("RERUN_STORE", store.url())
                .run()
        ),
        0
    );

    // The default store: .rerun/rerun.sqlite3 under the current directory.
    let dir = tempfile::tempdir().expect("a temp dir");
    let default = dir.path().join(".rerun/rerun.sqlite3");
    Call::new("jobs.nightly", "2024-05-01")
        .run(
            &rerun_core::SqliteStore::open(&default).expect("the default store"),
            || Ok::<_, Error>(1),
        )
        .expect("a record");
    let ls = ctl(["ls", "--json"]).dir(dir.path()).run().expect(0).json();
    assert_eq!(ls["records"][0]["scope"], "jobs.nightly");
    assert!(ls["store"]
        .as_str()
        .is_some_and(|s| s.ends_with(".rerun/rerun.sqlite3")));
    ctl(["show", "jobs.nightly", "\"2024-05-01\""])
        .dir(dir.path())
        .run()
        .expect(0);

    // No store here: an empty listing with a warning, and none is created.
    let empty = tempfile::tempdir().expect("a temp dir");
    let run = ctl(["ls"]).dir(empty.path()).run().expect(0);
    assert!(
        run.stderr.contains("nothing exists at") && run.stderr.contains("--store"),
        "{}",
        run.stderr
    );
    assert!(!empty.path().join(".rerun").exists());
    let run = ctl(["ls", "--json"]).dir(empty.path()).run().expect(0);
    assert_eq!(run.json()["count"], 0);
    assert!(!empty.path().join(".rerun").exists());
}

/// Bad input and faults: each a clear message and the documented exit status.
#[test]
fn bad_input_and_faults() {
    let store = Backend::sqlite();
    Call::new("billing.charge", "42")
        .run(&*store.open(), || Ok::<_, Error>(1))
        .expect("a record");

    // Usage errors, clap's own too: 2.
    ctl(["ls", "--bogus"]).run().expect(2);
    let run = ctl(["ls", "--status", "done", "--json"]).run().expect(2);
    assert_eq!(run.json()["error"]["kind"], "usage", "{run:?}");
    assert!(run.stderr.contains("done"), "{}", run.stderr);
    ctl(["ls", "--older-than", "soon"]).run().expect(2);
    ctl(["show", "only.scope"]).run().expect(2);
    ctl(["frobnicate"]).run().expect(2);
    ctl(["--help"]).run().expect(0);
    let help = ctl(["--help"]).run().stdout;
    assert!(
        help.contains("Exit status") && help.contains("2  bad usage"),
        "{help}"
    );
    ctl(["--version"]).run().expect(0);

    // A bad URL, an unreachable server: 2, never a password. A missing file: an empty store.
    let run = ctl(["ls", "--store", "mongodb://app:hunter22@db/x"])
        .run()
        .expect(2);
    assert!(
        run.stderr.contains("not a store URL") && !run.stderr.contains("hunter22"),
        "{}",
        run.stderr
    );
    let run = ctl(["ls", "--store", "sqlite:/nonexistent/rerun.sqlite3"])
        .run()
        .expect(0);
    assert!(run.stderr.contains("does not exist"), "{}", run.stderr);
    let run = ctl(["ls", "--json"])
        .env("RERUN_STORE", "postgres://app:hunter22@127.0.0.1:1/x")
        .run()
        .expect(2);
    assert!(
        !run.stderr.contains("hunter22") && !run.stdout.contains("hunter22"),
        "{run:?}"
    );
    assert_eq!(run.json()["error"]["kind"], "store");
    let run = ctl(["stats", "--store", "redis://:hunter22@127.0.0.1:1"])
        .run()
        .expect(2);
    assert!(
        !run.stderr.contains("hunter22") && run.stderr.contains("help:"),
        "{}",
        run.stderr
    );

    // A key that reads as no key form is its text key: not found (1), with how to type a key.
    let run = on(&store, &["show", "billing.charge", "(unclosed"]).expect(1);
    assert!(
        run.stderr.contains("reads as no key form") && run.stderr.contains("rerunctl ls"),
        "{}",
        run.stderr
    );
    // Keys that are not UTF-8: 2, with how to type a key.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt as _;
        let bad = std::ffi::OsStr::from_bytes(b"caf\xe9");
        let run = ctl([
            std::ffi::OsStr::new("--store"),
            std::ffi::OsStr::new(store.url()),
            std::ffi::OsStr::new("show"),
            std::ffi::OsStr::new("billing.charge"),
            bad,
        ])
        .run()
        .expect(2);
        assert!(run.stderr.contains("not valid UTF-8"), "{}", run.stderr);
    }
    on(&store, &["show", "billing\ncharge", "k"]).expect(2);

    // Not found: 1, with a hint.
    let run = on(&store, &["show", "nosuch.scope", "k"]).expect(1);
    assert!(run.stderr.contains("no record of scope"), "{}", run.stderr);
    // The text key "42" typed as itself is found.
    let run = on(&store, &["show", "billing.charge", "42", "--json"]).expect(0);
    assert_eq!(run.json()["key"], r#""42""#);
    let run = on(&store, &["show", "billing.charge", "43", "--json"]).expect(1);
    assert_eq!(run.json()["error"]["kind"], "not_found");
    assert!(
        run.stderr.contains(r#"nor of the text key "43""#),
        "{}",
        run.stderr
    );

    // The memory store opens (empty, in this process only).
    let run = ctl(["ls", "--store", "memory:", "--json"]).run().expect(0);
    assert_eq!(run.json()["count"], 0);
}

/// `ls --results` cuts long results with a marker; `show` prints them whole.
#[test]
fn long_results_are_cut_in_tables_only() {
    let store = Backend::sqlite();
    let long = "x".repeat(5_000);
    Call::new("reports.render", "r1")
        .run(&*store.open(), || Ok::<_, Error>(long.clone()))
        .expect("a record");
    let table = on(&store, &["ls", "--results"]).expect(0).stdout;
    let line = table.lines().nth(1).unwrap_or_default();
    assert!(line.ends_with('…') && line.len() < 400, "{line}");
    let json = on(&store, &["ls", "--results", "--json"]).expect(0).json();
    assert_eq!(json["records"][0]["result"]["cut"], true);
    let shown = on(&store, &["show", "reports.render", "r1", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        shown["result"]["rendered"].as_str().map(str::len),
        Some(5_002)
    );
    assert_eq!(shown["result"]["cut"], false);
    let text = on(&store, &["show", "reports.render", "r1"])
        .expect(0)
        .stdout;
    assert!(text.contains(&long));
}

/// Claims `key` in `store` for `holder`, with a lease of five minutes.
fn claim(store: &Backend, key: &Key, holder: &rerun_core::Holder) {
    store
        .open()
        .claim(&rerun_core::record::ClaimRequest {
            key,
            fingerprint: &rerun_core::Fingerprint::EMPTY,
            holder,
            lease: Duration::from_secs(300),
            once: false,
            steal: None,
        })
        .expect("a claim");
}

/// Statuses print as `--status` takes them (`in-progress`), in tables, JSON `status` fields and
/// the keys of `stats`; `--status` takes both spellings.
fn statuses_are_spelled_as_the_flag_takes_them_on(store: &Backend) {
    let name = store.name();
    let mut dead = rerun_core::Holder::current();
    dead.start_time += 2;
    claim(store, &Key::new("jobs.resize", "img_1"), &dead);
    Call::new("jobs.resize", "img_2")
        .run(&*store.open(), || Ok::<_, Error>(1))
        .expect("a record");

    let human = on(store, &["ls", "--status", "in-progress"])
        .expect(0)
        .stdout;
    let line = human
        .lines()
        .find(|l| l.contains("img_1"))
        .unwrap_or_default();
    assert!(line.contains(" in-progress "), "{name}: {human}");
    assert!(!human.contains("in_progress"), "{name}: {human}");
    for spelling in ["in-progress", "in_progress"] {
        let ls = on(store, &["ls", "--status", spelling, "--json"])
            .expect(0)
            .json();
        assert_eq!(ls["count"], 1, "{name} {spelling}: {ls:#}");
        assert_eq!(ls["records"][0]["status"], "in-progress", "{name}: {ls:#}");
    }

    let shown = on(store, &["show", "jobs.resize", "img_1", "--json"])
        .expect(0)
        .json();
    assert_eq!(shown["status"], "in-progress", "{name}");
    let text = on(store, &["show", "jobs.resize", "img_1"])
        .expect(0)
        .stdout;
    assert!(
        text.lines()
            .any(|l| l.starts_with("status") && l.contains(" in-progress (")),
        "{name}: {text}"
    );

    let stats = on(store, &["stats", "--json"]).expect(0).json();
    assert_eq!(stats["by_status"]["in_progress"], 1, "{name}: {stats:#}");
    assert_eq!(stats["scopes"][0]["in_progress"], 1, "{stats:#}");
    assert_eq!(stats["scopes"][0]["completed"], 1, "{stats:#}");
    assert_eq!(stats["oldest_in_progress"]["status"], "in-progress");
    let table = on(store, &["stats"]).expect(0).stdout;
    assert!(
        table.contains("IN-PROGRESS") && !table.contains("in_progress"),
        "{table}"
    );

    let gone = on(store, &["forget", "jobs.resize", "img_1", "--yes"])
        .expect(0)
        .stdout;
    assert!(gone.contains("(was in-progress, fence"), "{name}: {gone}");
}

#[test]
fn statuses_are_spelled_as_the_flag_takes_them_on_sqlite() {
    statuses_are_spelled_as_the_flag_takes_them_on(&Backend::sqlite());
}

#[test]
fn statuses_are_spelled_as_the_flag_takes_them_on_postgres() {
    if let Some(store) = Backend::postgres() {
        statuses_are_spelled_as_the_flag_takes_them_on(&store);
    }
}

#[test]
fn statuses_are_spelled_as_the_flag_takes_them_on_redis() {
    if let Some(store) = Backend::redis() {
        statuses_are_spelled_as_the_flag_takes_them_on(&store);
    }
}

/// A plain string key is typed as itself (`1001`, a UUID), as `show` and `forget` read it: the
/// key the text reads as comes first, then the string key of the same text. `forget` forgets
/// only a record it found, and keeps its safety checks.
fn plain_string_keys_are_typed_as_themselves_on(store: &Backend) {
    let name = store.name();
    let s = store.open();
    let uuid = "550e8400-e29b-41d4-a716-446655440000";
    for key in ["1001", uuid, "7", "(unclosed"] {
        Call::new("billing.charge", key)
            .run(&*s, || Ok::<_, Error>(receipt(key)))
            .expect("a record");
    }
    Call::new("billing.charge", &7i64)
        .run(&*s, || Ok::<_, Error>(receipt("seven")))
        .expect("a record");

    // Typed as themselves: found.
    for (typed, printed) in [
        ("1001", r#""1001""#.to_owned()),
        (uuid, format!("\"{uuid}\"")),
        ("(unclosed", r#""(unclosed""#.to_owned()),
    ] {
        let shown = on(store, &["show", "billing.charge", typed, "--json"])
            .expect(0)
            .json();
        assert_eq!(shown["key"].as_str(), Some(printed.as_str()), "{name}");
        assert_eq!(
            shown["result"]["rendered"],
            format!(r#"Receipt {{ id: "{typed}", cents: 500 }}"#),
            "{name}"
        );
    }
    // The key the text reads as wins: `7` is the number, `"7"` the text.
    let seven = on(store, &["show", "billing.charge", "7", "--json"])
        .expect(0)
        .json();
    assert_eq!(seven["key"], "7", "{name}");
    let text_seven = on(store, &["show", "billing.charge", r#""7""#, "--json"])
        .expect(0)
        .json();
    assert_eq!(text_seven["key"], r#""7""#, "{name}");

    // forget: only the key the text reads as. Once the number is gone, `7` does not reach
    // the text key in its place (the same command run twice would forget two records): it
    // says how to type it.
    let gone = on(store, &["forget", "billing.charge", "7", "--yes", "--json"])
        .expect(0)
        .json();
    assert_eq!(gone["key"], "7", "{name}");
    let text_seven = Key::new("billing.charge", "7");
    assert!(s.inspect(&text_seven).expect("inspect").is_some());
    let again = on(store, &["forget", "billing.charge", "7", "--yes"]).expect(1);
    assert!(
        again.stderr.contains(r#"'"7"'"#),
        "{name}: {}",
        again.stderr
    );
    assert!(s.inspect(&text_seven).expect("inspect").is_some());
    let gone = on(
        store,
        &["forget", "billing.charge", r#""7""#, "--yes", "--json"],
    )
    .expect(0)
    .json();
    assert_eq!(gone["key"], r#""7""#, "{name}");
    // A text that reads as a number is not forgotten typed bare; one that reads as no key is.
    on(store, &["forget", "billing.charge", "1001", "--yes"]).expect(1);
    assert!(s
        .inspect(&Key::new("billing.charge", "1001"))
        .expect("inspect")
        .is_some());
    for (key, typed) in [("1001", r#""1001""#), (uuid, uuid)] {
        let gone = on(
            store,
            &["forget", "billing.charge", typed, "--yes", "--json"],
        )
        .expect(0)
        .json();
        assert_eq!(gone["forgotten"], true, "{name}");
        assert!(s
            .inspect(&Key::new("billing.charge", key))
            .expect("inspect")
            .is_none());
        let run = on(store, &["forget", "billing.charge", key, "--yes"]).expect(1);
        assert!(run.stderr.contains("no record"), "{name}: {}", run.stderr);
        on(store, &["show", "billing.charge", key]).expect(1);
    }

    // The safety checks hold for a string key typed so: a live claim is refused.
    claim(
        store,
        &Key::new("billing.charge", "1002"),
        &rerun_core::Holder::current(),
    );
    let refused = on(store, &["forget", "billing.charge", r#""1002""#, "--yes"]).expect(1);
    assert!(
        refused.stderr.contains("live claim") && refused.stderr.contains(r#"'"1002"'"#),
        "{name}: {}",
        refused.stderr
    );
    assert!(s
        .inspect(&Key::new("billing.charge", "1002"))
        .expect("inspect")
        .is_some());
}

#[test]
fn plain_string_keys_are_typed_as_themselves_on_sqlite() {
    plain_string_keys_are_typed_as_themselves_on(&Backend::sqlite());
}

#[test]
fn plain_string_keys_are_typed_as_themselves_on_postgres() {
    if let Some(store) = Backend::postgres() {
        plain_string_keys_are_typed_as_themselves_on(&store);
    }
}

#[test]
fn plain_string_keys_are_typed_as_themselves_on_redis() {
    if let Some(store) = Backend::redis() {
        plain_string_keys_are_typed_as_themselves_on(&store);
    }
}
