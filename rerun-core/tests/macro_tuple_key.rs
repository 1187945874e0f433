//! The key `#[idempotent]` builds from a tuple expression borrows each part (`(&a, &b)`, at any
//! depth) instead of moving it: it is the key the tuple of the values gives.

use rerun_core::Key;

#[test]
fn a_tuple_of_references_is_the_key_of_the_tuple_of_values() {
    let (tenant, id) = ("cus_1".to_owned(), 42u64);
    let owned = Key::new("s", &(tenant.clone(), id));
    let borrowed = Key::new("s", &(&tenant, &id));
    assert_eq!(owned, borrowed);
    assert_eq!(owned.id(), borrowed.id());
    assert_eq!(borrowed.id(), "(s5:cus_1i42)");
}

#[test]
fn nested_and_single_tuples_of_references_too() {
    let (tenant, region, id) = ("t".to_owned(), "eu".to_owned(), 7u32);
    assert_eq!(
        Key::new("s", &(tenant.clone(), (region.clone(), id))),
        Key::new("s", &(&tenant, (&region, &id))),
    );
    assert_eq!(
        Key::new("s", &(tenant.clone(),)),
        Key::new("s", &(&tenant,))
    );
    // A reference to a reference, as a key over a `&str` argument borrows it.
    let name: &str = "ab";
    assert_eq!(Key::new("s", &(name, 1u8)), Key::new("s", &(&name, &1u8)));
}

#[test]
fn references_keep_distinct_values_apart() {
    let (a, b) = ("a".to_owned(), "b".to_owned());
    assert_ne!(Key::new("s", &(&a, &b)), Key::new("s", &(&b, &a)));
    assert_ne!(Key::new("s", &(&a, (&b,))), Key::new("s", &((&a,), &b)));
}
