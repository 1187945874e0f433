use rerun_core::{Call, Error, MemoryStore, SqliteStore};

#[test]
fn memory_and_sqlite_replay() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("x.db")).unwrap();
    let mem = MemoryStore::new();
    for store in [&mem as &dyn rerun_core::DynStore, &sqlite] {
        let mut runs = 0;
        for _ in 0..3 {
            let out = Call::new("s", "k")
                .payload(&1)
                .run(store, || {
                    runs += 1;
                    Ok::<_, Error>(runs)
                })
                .unwrap();
            assert_eq!(out.value, 1);
        }
        let err = Call::new("s", "k").payload(&2).run(store, || Ok::<_, Error>(0)).unwrap_err();
        assert_eq!(err.kind_name(), "payload_mismatch");
    }
}
