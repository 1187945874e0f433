//! The compile-time behaviour of rerun's macros, checked by `tests/ui.rs`: the programs under
//! `tests/ui/pass` compile and run, and every program under `tests/ui/fail` is refused with the
//! diagnostic checked in beside it. This library holds only what a fixture needs from another
//! crate than its own.

#[doc(hidden)]
pub use rerun_core as __rerun;

/// `#[idempotent(…)]` reaching rerun through this crate (`crate = $crate::__rerun`), as a library
/// that wraps rerun for its users would. The arguments and the function are the caller's.
#[macro_export]
macro_rules! idempotent_via {
    (#[idempotent($($arg:tt)*)] $($item:tt)*) => {
        #[$crate::__rerun::idempotent($($arg)*, crate = $crate::__rerun)]
        $($item)*
    };
}
