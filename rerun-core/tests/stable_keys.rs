//! Stable keys (reliability 20): the same values, including `HashMap` fields, give the same key
//! and fingerprint in two processes (each process seeds its `HashMap`s differently).

use std::collections::HashMap;
use std::process::Command;

use rerun_core::{Fingerprint, Key};
use serde::Serialize;

#[derive(Serialize)]
struct Event {
    id: String,
    amounts: HashMap<String, u64>,
    tags: HashMap<u32, Vec<String>>,
}

fn event() -> Event {
    Event {
        id: "evt_1".into(),
        amounts: (0..50).map(|i| (format!("line{i}"), i * 10)).collect(),
        tags: (0..20)
            .map(|i| (i, vec![format!("t{i}"), "x".into()]))
            .collect(),
    }
}

fn digest() -> String {
    let key = Key::new("stripe.charge", &("evt_1", 42u64));
    let fp = Fingerprint::of(&event()).expect("serializable");
    format!("{key}|{}", fp.to_hex())
}

#[test]
fn two_processes_agree() {
    if std::env::var_os("RERUN_STABLE_KEYS_CHILD").is_some() {
        println!("DIGEST {}", digest());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "two_processes_agree",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RERUN_STABLE_KEYS_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let theirs = stdout
        .lines()
        .find_map(|l| l.find("DIGEST ").map(|i| l[i + 7..].to_owned()))
        .expect("the child printed its digest");
    assert_eq!(theirs, digest());
    // Pinned: a change of encoding would silently orphan every stored record.
    assert_eq!(
        digest(),
        "key stripe.charge/(s5:evt_1i42)|ff8cd3f3c7e7bf167abc1e293dbd691afef4c6adf160c6a6e73ca63ebb31e04d"
    );
}
