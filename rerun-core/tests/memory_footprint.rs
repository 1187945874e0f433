//! The memory a `MemoryStore` takes per record: under 200 bytes beside the key and the result,
//! counted by an allocator that keeps the bytes every allocation asked for (the map's buckets,
//! at their emptiest just after the map grew, the record, the result's box).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use rerun_core::{codec, Call, Error, Key, MemoryStore};

/// The system allocator, counting the bytes that are live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

fn add(bytes: usize) {
    LIVE.fetch_add(
        isize::try_from(bytes).unwrap_or(isize::MAX),
        Ordering::Relaxed,
    );
}

fn sub(bytes: usize) {
    LIVE.fetch_sub(
        isize::try_from(bytes).unwrap_or(isize::MAX),
        Ordering::Relaxed,
    );
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counting
// beside it touches nothing the allocation does.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size());
        // SAFETY: the caller upholds `alloc`'s contract, which is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        sub(layout.size());
        // SAFETY: `ptr` was allocated by `System` with `layout`, as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        sub(layout.size());
        add(new_size);
        // SAFETY: the caller upholds `realloc`'s contract, which is `System.realloc`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(serde::Serialize, serde::Deserialize)]
struct Receipt {
    id: u64,
    cents: u64,
    note: String,
}

fn receipt(id: u64) -> Receipt {
    Receipt {
        id,
        cents: 4200,
        note: "charged".into(),
    }
}

/// Live bytes per record of a store filled with `n` completed records, less the key and the
/// encoded result.
fn overhead(n: u64) -> f64 {
    let before = LIVE.load(Ordering::Relaxed);
    let store = MemoryStore::new();
    for id in 0..n {
        let out = Call::new("footprint.charge", &id)
            .payload(&(id, "cus_123"))
            .run(&store, || Ok::<_, Error>(receipt(id)));
        assert!(matches!(out, Ok(o) if !o.replayed));
    }
    assert_eq!(store.len() as u64, n);
    let bytes = (LIVE.load(Ordering::Relaxed) - before) as f64 / n as f64;
    let result = codec::encode(&receipt(0)).map(|r| r.len()).unwrap_or(0);
    let key = std::mem::size_of::<Key>();
    drop(store);
    bytes - (key + result) as f64
}

#[test]
fn a_record_takes_under_200_bytes_beside_its_key_and_result() {
    // The first call starts the lease keeper and fills this thread's caches: not a record's.
    let warm = MemoryStore::new();
    let _ = Call::new("footprint.warm", "k").run(&warm, || Ok::<_, Error>(1));
    // A map of 2^16 buckets holds up to 57,344 records: at that count it is at its fullest, and
    // one record more doubles it, to its emptiest.
    for n in [57_344, 57_345] {
        let per_record = overhead(n);
        println!("{n} records: {per_record:.1} bytes each beside the key and the result");
        assert!(
            per_record < 200.0,
            "{n} records took {per_record:.1} bytes each beside the key and the result"
        );
    }
}
