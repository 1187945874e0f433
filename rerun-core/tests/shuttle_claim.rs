//! Schedule exploration (reliability 22): shuttle runs concurrent claims of one key on
//! `MemoryStore` under thousands of interleavings; in every one exactly one claims, the others
//! see it busy or replay its result, and fences never repeat.
//!
//! Runs only in a build with `RUSTFLAGS="--cfg rerun_shuttle"`, which puts MemoryStore on
//! shuttle's primitives: `RUSTFLAGS="--cfg rerun_shuttle" cargo test -p rerun-core --test shuttle_claim`.
#![cfg(rerun_shuttle)]

use std::time::Duration;

use rerun_core::record::{ClaimRequest, ClaimResponse};
use rerun_core::{Fingerprint, Holder, Key, MemoryStore, Store};

fn contend(threads: usize) {
    let store = MemoryStore::new();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let store = store.clone();
            shuttle::thread::spawn(move || {
                let key = Key::new("shuttle", "k");
                let holder = Holder::current();
                let req = ClaimRequest {
                    key: &key,
                    fingerprint: &Fingerprint::EMPTY,
                    holder: &holder,
                    lease: Duration::from_secs(30),
                    once: false,
                    steal: None,
                };
                match store.claim(&req).expect("the memory store does not fail") {
                    ClaimResponse::Claimed(claim) => {
                        store
                            .complete(&claim, b"result", Duration::from_secs(60))
                            .expect("the holder completes");
                        Some(claim.fence)
                    }
                    ClaimResponse::Busy(_) | ClaimResponse::Replay(_) => None,
                    ClaimResponse::Mismatch => panic!("same payload reported as a mismatch"),
                }
            })
        })
        .collect();
    let winners: Vec<u64> = handles
        .into_iter()
        .filter_map(|h| h.join().expect("no thread panics"))
        .collect();
    assert_eq!(winners.len(), 1, "claims won: {winners:?}");
}

#[test]
fn one_winner_in_every_random_schedule() {
    shuttle::check_random(|| contend(3), 5_000);
}

#[test]
fn one_winner_in_every_pct_schedule() {
    shuttle::check_pct(|| contend(4), 5_000, 3);
}
