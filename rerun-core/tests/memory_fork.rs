//! A forked child's copy of a `MemoryStore` still names the parent as the holder of the
//! parent's claims, and names itself as the holder of its own: the store keeps a holder of this
//! process as its attempt and a reference to the identity of the process generation that made
//! it, not as "this process".

use std::time::Duration;

use rerun_core::record::{ClaimRequest, ClaimResponse};
use rerun_core::{Fingerprint, Holder, Key, MemoryStore, Store};

/// Claims `key` for `holder` directly on the store (no lease keeper: the child must not need a
/// thread the fork did not copy).
fn claim(store: &MemoryStore, key: &Key, holder: &Holder) -> bool {
    let req = ClaimRequest {
        key,
        fingerprint: &Fingerprint::EMPTY,
        holder,
        lease: Duration::from_secs(600),
        once: false,
        steal: None,
    };
    matches!(store.claim(&req), Ok(ClaimResponse::Claimed(_)))
}

/// The holder the store reports for `key`.
fn holder_of(store: &MemoryStore, key: &Key) -> Option<Holder> {
    store.inspect(key).ok().flatten().and_then(|r| r.holder)
}

/// What the child checks; the exit status names the first check that failed.
fn in_child(store: &MemoryStore, parents: &Holder) -> i32 {
    let parents_key = Key::new("fork.memory", "parent");
    if holder_of(store, &parents_key).as_ref() != Some(parents) {
        return 10;
    }
    let child = Holder::current();
    if child.pid == parents.pid || child.pid != std::process::id() {
        return 11;
    }
    let own = Key::new("fork.memory", "child");
    if !claim(store, &own, &child) {
        return 12;
    }
    if holder_of(store, &own).as_ref() != Some(&child) {
        return 13;
    }
    // The parent's claim is still the parent's: a busy key, not this process's own.
    if claim(store, &parents_key, &child) {
        return 14;
    }
    0
}

#[test]
#[allow(unsafe_code)]
fn a_forked_copy_names_each_claims_own_process() {
    let store = MemoryStore::new();
    let parent = Holder::current();
    assert!(claim(&store, &Key::new("fork.memory", "parent"), &parent));
    // SAFETY: the child runs only on the thread that forked; it uses the store's own lock (which
    // no other thread holds: this test is the binary's only one) and rerun's fork-aware process
    // identity, then leaves with `_exit`, never returning into the test harness.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let status = in_child(&store, &parent);
            // SAFETY: ends the child without running the parent's exit handlers or destructors.
            unsafe { libc::_exit(status) }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            let status = nix::sys::wait::waitpid(child, None);
            assert!(
                matches!(status, Ok(nix::sys::wait::WaitStatus::Exited(_, 0))),
                "the forked child reported {status:?}"
            );
        }
        Err(e) => panic!("fork failed: {e}"),
    }
    // The parent's own view is unchanged.
    assert_eq!(
        holder_of(&store, &Key::new("fork.memory", "parent")),
        Some(parent)
    );
}
