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
    // The stored form of the key (what a store writes), not its readable display.
    format!("key {}/{}|{}", key.scope(), key.id(), fp.to_hex())
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
        "key stripe.charge/(s5:evt_1i42)|eb37fd650f0177ea9c6e9ebb140081dc1a5b594a687424390e83e03c1c65e87b"
    );
}

/// Pinned: the encodings of every kind of key part, and fingerprints of every kind of value.
/// A change here orphans stored records; it must be deliberate.
#[test]
fn encodings_are_pinned() {
    let key = Key::new(
        "s",
        &(
            "ord_1",
            -7i32,
            u128::MAX,
            true,
            'x',
            &[0xabu8, 0xb1][..],
            (false,),
        ),
    );
    assert_eq!(
        key.id(),
        "(s5:ord_1i-7i340282366920938463463374607431768211455b1c1:xx2:abb1(b0))"
    );
    let fingerprints = [
        Fingerprint::of(&0u8),
        Fingerprint::of(&-1i64),
        Fingerprint::of(&"text"),
        Fingerprint::of(&(1.5f64, None::<u8>, Some(()))),
        Fingerprint::of(&vec![0xa5u8; 1000]),
        Fingerprint::of(&event()),
    ]
    .map(|f| f.expect("serializable").to_hex());
    assert_eq!(fingerprints, PINNED);
}

const PINNED: [&str; 6] = [
    "76be8b528d0075f7aae98d6fa57a6d3c83ae480a8469e668d7b0af968995ac71",
    "c19a797fa1fd590cd2e5b42d1cf5f246e29b91684e2f87404b81dc345c7a56a0",
    "03a5dbb197b1a5de9b278797b8333cf9201d3dad181b15b18d02b9b4bdec61aa",
    "28e0a38d3c73b2bc59c9857199a097b0851c2736113d33f1f3f7fad849126088",
    "eea8feed95bfdd1a3b56e74cd9296f862372d50c536ddb64c9747c411422d6f6",
    "eb37fd650f0177ea9c6e9ebb140081dc1a5b594a687424390e83e03c1c65e87b",
];
