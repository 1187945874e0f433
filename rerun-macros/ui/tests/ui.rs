//! Compile-time behaviour: what compiles (`ui/pass`) and every diagnostic, with its message
//! checked in (`ui/fail/*.stderr`). Regenerate the messages with `TRYBUILD=overwrite`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
