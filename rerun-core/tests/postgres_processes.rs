//! 8 processes x 500 calls sharing one PostgreSQL table (reliability 4): per key the body runs
//! once and every caller gets that key's first result.
//!
//! `RERUN_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test cargo test -p rerun-core
//! --features postgres,testing --test postgres_processes`
#![cfg(all(feature = "postgres", feature = "testing"))]

mod postgres_common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use rerun_core::store::postgres::PostgresStore;
use rerun_core::{Call, Error, Options};

const ROLE: &str = "RERUN_PG_STORM_ROLE";
const PROCESSES: usize = 8;
const CALLS: usize = 500;
const KEYS: usize = 100;
const TEST: &str = "eight_processes_share_the_store_body_once_per_key";

fn storm_child() {
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let store = PostgresStore::builder(&env("RERUN_TEST_POSTGRES_URL"))
        .table(env("RERUN_PG_STORM_TABLE"))
        .pool_size(4)
        .connect()
        .unwrap();
    let me: usize = env("RERUN_PG_STORM_CHILD").parse().unwrap_or(0);
    let effects = env("RERUN_PG_STORM_EFFECTS");
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut errors: BTreeMap<&'static str, u64> = BTreeMap::new();
    for i in 0..CALLS {
        // Every process walks the keys in its own order, so first calls of a key collide.
        let key = (i * 31 + me * 17) % KEYS;
        let out = Call::new("storm", &(key as u64))
            .options(Options::new().wait(Duration::from_secs(60)))
            .run(&store, || {
                // One short O_APPEND write per execution: lines never interleave.
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&effects)
                    .and_then(|mut f| f.write_all(format!("{key}\n").as_bytes()))
                    .map_err(|e| Error::store(None, "recording the effect", e))?;
                Ok::<_, Error>(format!("{key}-{}-{i}", std::process::id()))
            });
        match out {
            Ok(o) => {
                seen.entry(key.to_string()).or_default().insert(o.value);
            }
            Err(e) => *errors.entry(e.kind_name()).or_default() += 1,
        }
    }
    let summary = serde_json::json!({ "seen": seen, "errors": errors });
    println!("\nSTORM: {summary}");
}

#[test]
fn eight_processes_share_the_store_body_once_per_key() {
    if std::env::var(ROLE).is_ok() {
        storm_child();
        std::process::exit(0);
    }
    let Some(url) = postgres_common::url() else {
        return;
    };
    let (store, t) = postgres_common::fresh(&url, "storm");
    let effects = std::env::temp_dir().join(format!("{}.effects", t.name));
    let started = Instant::now();
    let mut kids: Vec<_> = (0..PROCESSES)
        .map(|i| {
            postgres_common::child(
                TEST,
                &[
                    (ROLE, "1".into()),
                    ("RERUN_PG_STORM_TABLE", t.name.clone()),
                    ("RERUN_PG_STORM_CHILD", i.to_string()),
                    ("RERUN_PG_STORM_EFFECTS", effects.display().to_string()),
                ],
            )
            .spawn()
            .unwrap()
        })
        .collect();
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut errors = 0u64;
    for kid in &mut kids {
        let mut out = String::new();
        kid.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        assert!(kid.wait().unwrap().success(), "a child failed:\n{out}");
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix("STORM: "))
            .unwrap_or_else(|| panic!("no report in:\n{out}"));
        let summary: serde_json::Value = serde_json::from_str(line).unwrap();
        for (k, vs) in summary["seen"].as_object().unwrap() {
            for v in vs.as_array().unwrap() {
                seen.entry(k.clone())
                    .or_default()
                    .insert(v.as_str().unwrap().to_owned());
            }
        }
        errors += summary["errors"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>();
    }
    let took = started.elapsed();
    let effects_text = std::fs::read_to_string(&effects).unwrap_or_default();
    let _ = std::fs::remove_file(&effects);
    let mut bodies: BTreeMap<&str, u64> = BTreeMap::new();
    for line in effects_text.lines() {
        *bodies.entry(line).or_default() += 1;
    }
    let twice: Vec<_> = bodies.iter().filter(|(_, n)| **n > 1).collect();
    let diverged: Vec<_> = seen
        .iter()
        .filter(|(_, v)| v.len() != 1)
        .map(|(k, _)| k)
        .collect();
    println!(
        "postgres process storm: {} calls in {took:?}, {} body executions over {} keys, {errors} errors, {} violations",
        PROCESSES * CALLS,
        bodies.values().sum::<u64>(),
        seen.len(),
        twice.len() + diverged.len()
    );
    assert_eq!(errors, 0);
    assert!(twice.is_empty(), "bodies ran more than once: {twice:?}");
    assert!(
        diverged.is_empty(),
        "keys with several results: {diverged:?}"
    );
    assert_eq!((seen.len(), bodies.len()), (KEYS, KEYS));
    drop(store);
}
