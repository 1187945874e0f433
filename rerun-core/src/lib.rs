//! # rerun: state-changing code that is safe to run twice
//!
//! Webhooks are redelivered, jobs restart, users double-click, networks retry, processes die
//! halfway. rerun makes an operation with a dedupe key run its body once per key: a repeated
//! call returns the recorded result, a concurrent duplicate waits or is refused, a dead holder's
//! claim is taken over with a fencing token that shuts the old holder out.
//!
//! ```
//! use rerun_core::{Call, MemoryStore};
//!
//! let store = MemoryStore::new();
//! let mut emails_sent = 0;
//! for _delivery in 0..3 {
//!     // The same webhook, delivered three times.
//!     let out = Call::new("welcome_email", "user-42")
//!         .run(&store, || { emails_sent += 1; Ok::<_, rerun_core::Error>("sent") })?;
//!     assert_eq!(out.value, "sent");
//! }
//! assert_eq!(emails_sent, 1);
//! # Ok::<(), rerun_core::Error>(())
//! ```
//!
//! With the `macros` feature (default), `#[idempotent(key = …)]` writes that call for you.
//!
//! ## Features
//! `macros` (default), `sqlite` (default, the embedded store), `postgres`, `redis`, `tokio`,
//! `testing` (the conformance suite and the safe-to-rerun harness), `uuid` (uuid keys).
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod checkpoint;
pub mod clock;
pub mod codec;
mod error;
pub mod fingerprint;
mod global;
mod handler;
pub mod holder;
pub mod key;
pub mod record;
pub mod runtime;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::{CorruptKind, Error};
pub use fingerprint::Fingerprint;
pub use global::{global, init, open_url, redact, DEFAULT_SQLITE_PATH};
pub use handler::{AsyncHandle, Handle, Idempotent};
pub use holder::Holder;
pub use key::{IntoKey, Key};
pub use record::{Fence, RecordView, Status};
pub use runtime::{Call, Options, Outcome, Reconciled};
pub use store::memory::MemoryStore;
#[cfg(feature = "sqlite")]
pub use store::sqlite::SqliteStore;
pub use store::{AsyncStore, DynStore, Store};

#[cfg(feature = "macros")]
pub use rerun_macros::{converges, idempotent, read_only, state_changing, Idempotent};

/// Forgets a key's record whatever its state: an operator's decision, e.g. after checking by
/// hand what an `OutcomeUnknown` attempt did. Returns whether there was a record.
///
/// ```
/// use rerun_core::{forget, Call, Key, MemoryStore};
/// let store = MemoryStore::new();
/// Call::new("s", "k").run(&store, || Ok::<_, rerun_core::Error>(1))?;
/// assert!(forget(&store, &Key::new("s", "k"))?);
/// assert!(!forget(&store, &Key::new("s", "k"))?);
/// # Ok::<(), rerun_core::Error>(())
/// ```
pub fn forget<S: Store + ?Sized>(store: &S, key: &Key) -> Result<bool, Error> {
    store.forget(key)
}

/// What the macros expand to. Not public API: its items may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::checkpoint::{hit as checkpoint_hit, Point};
    pub use crate::error::Error;
    pub use crate::fingerprint::Fingerprint;
    pub use crate::handler::{AsyncHandle, Handle, Idempotent};
    pub use crate::key::{IntoKey, Key};
    pub use crate::runtime::{Call, Options, Reconciled};
    pub use crate::store::{AsyncStore, DynStore, Store};
    pub use core;
    pub use serde;
    pub use std;

    use std::future::Future;
    use std::time::Duration;

    use serde::de::DeserializeOwned;
    use serde::Serialize;

    /// Builds the options from milliseconds computed at compile time.
    pub const fn options(
        ttl_ms: u64,
        lease_ms: u64,
        wait_ms: Option<u64>,
        once: bool,
    ) -> Options {
        let mut o = Options::new()
            .ttl(Duration::from_millis(ttl_ms))
            .lease(Duration::from_millis(lease_ms));
        if let Some(w) = wait_ms {
            o = o.wait(Duration::from_millis(w));
        }
        if once {
            o = o.once();
        }
        o
    }

    /// The global store, for functions without `store = …`.
    pub fn global_store() -> Result<&'static dyn DynStore, Error> {
        crate::global()
    }

    /// The call of an annotated function: key, payload fingerprint and options.
    pub fn call<K: IntoKey + ?Sized, P: Serialize + ?Sized>(
        scope: &'static str,
        key: &K,
        payload: &P,
        options: Options,
    ) -> Call {
        Call::new(scope, key).payload(payload).options(options)
    }

    /// Checks at compile time that a payload argument is serializable, with our message.
    #[diagnostic::on_unimplemented(
        message = "the argument `{Self}` is part of the payload fingerprint but does not implement `serde::Serialize`",
        note = "derive `Serialize` for it, or leave it out of the fingerprint with `skip(name)`"
    )]
    pub trait PayloadArg {}
    impl<T: Serialize + ?Sized> PayloadArg for T {}
    /// Spanned on the argument by the macro so the error points there.
    pub fn assert_payload_arg<T: PayloadArg + ?Sized>(_: &T) {}

    /// Checks that an error type can carry rerun's errors.
    #[diagnostic::on_unimplemented(
        message = "the error type `{Self}` of an #[idempotent] function must implement `From<rerun_core::Error>`",
        note = "add a variant such as `#[error(transparent)] Rerun(#[from] rerun_core::Error)`, or use `rerun_core::Error` as the error type"
    )]
    pub trait FromRerunError: From<Error> {}
    impl<E: From<Error>> FromRerunError for E {}

    /// Checks that a result type can be recorded and replayed.
    #[diagnostic::on_unimplemented(
        message = "the result type `{Self}` of an #[idempotent] function must implement `Serialize` and `Deserialize`",
        note = "it is recorded and replayed: derive `serde::Serialize` and `serde::Deserialize` for it"
    )]
    pub trait Recordable: Serialize + DeserializeOwned {}
    impl<T: Serialize + DeserializeOwned> Recordable for T {}

    /// Runs a sync annotated function.
    pub fn run_sync<S, T, E, F>(store: &S, call: Call, body: F) -> Result<T, E>
    where
        S: Store + ?Sized,
        T: Recordable,
        E: FromRerunError,
        F: FnOnce() -> Result<T, E>,
    {
        call.run(store, body).map(|o| o.value)
    }

    /// Runs a sync `once` annotated function with its reconcile function.
    pub fn run_sync_reconciled<S, T, E, R, F>(
        store: &S,
        call: Call,
        reconcile: R,
        body: F,
    ) -> Result<T, E>
    where
        S: Store + ?Sized,
        T: Recordable,
        E: FromRerunError,
        R: FnOnce() -> Result<Reconciled<T>, E>,
        F: FnOnce() -> Result<T, E>,
    {
        call.run_reconciled(store, reconcile, body).map(|o| o.value)
    }

    /// Runs an async annotated function.
    pub async fn run_async<S, T, E, F>(store: &S, call: Call, body: F) -> Result<T, E>
    where
        S: AsyncStore + ?Sized,
        T: Recordable,
        E: FromRerunError,
        F: Future<Output = Result<T, E>>,
    {
        call.run_async(store, body).await.map(|o| o.value)
    }

    /// Runs an async `once` annotated function with its reconcile future.
    pub async fn run_async_reconciled<S, T, E, R, F>(
        store: &S,
        call: Call,
        reconcile: R,
        body: F,
    ) -> Result<T, E>
    where
        S: AsyncStore + ?Sized,
        T: Recordable,
        E: FromRerunError,
        R: Future<Output = Result<Reconciled<T>, E>>,
        F: Future<Output = Result<T, E>>,
    {
        call.run_async_reconciled(store, reconcile, body)
            .await
            .map(|o| o.value)
    }
}
