//! The runtime: running a closure or a future idempotently, without macros.
//!
//! `#[idempotent]` and `#[derive(Idempotent)]` expand to a call of this API; anything they do
//! can be written by hand with [`Call`].

mod call;
#[cfg(feature = "tokio")]
mod detached;
mod in_span;
pub(crate) mod keeper;
pub mod observe;
mod options;
mod steps;
pub mod telemetry;

pub use call::{Call, Outcome, Reconciled};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use detached::{detach, Detached};
pub use options::{Options, DEFAULT_SETTLE, MAX_DURATION, MIN_LEASE};
