//! The compile-time behaviour of rerun's macros, checked by `tests/ui.rs`: the programs under
//! `tests/ui/pass` compile and run, and every program under `tests/ui/fail` is refused with the
//! diagnostic checked in beside it. This library itself holds nothing.
