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
//!         .run(&store, || { emails_sent += 1; Ok::<_, rerun_core::Error>("sent".to_owned()) })?;
//!     assert_eq!(out.value, "sent");
//! }
//! assert_eq!(emails_sent, 1);
//! # Ok::<(), rerun_core::Error>(())
//! ```
//!
//! With the `macros` feature (default), `#[idempotent(key = …)]` writes that call for you.
//!
//! ## Features
//! `macros` (default), `sqlite` (default, the embedded store), `postgres`, `redis`, `tokio`
//! (`Call::run_detached`: a call that a dropped future cannot cut short), `testing` (the
//! conformance suite and the safe-to-rerun harness), `uuid` (uuid keys), `metrics` (counters
//! and histograms through the `metrics` facade), `http` (rerun's errors as RFC 9457 problem
//! responses: `Error::problem`), `axum` (`IntoResponse` for `Error`). docs.rs builds every
//! feature; locally, `cargo doc -p rerun-core --all-features --open` does the same.
//!
//! ## Guides
//! The repository's `docs/` folder: the safe-to-rerun harness, running rerun in production
//! (choosing a store, durability, sizing ttl and lease, `rerunctl`, alerting), HTTP services
//! and queue consumers.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
// One audited `unsafe` block registers the fork handler (`process`); nothing else may use it.
#![deny(unsafe_code)]

pub mod checkpoint;
pub mod clock;
pub mod codec;
mod error;
pub mod fingerprint;
mod fork_lock;
mod global;
mod handler;
mod hex;
pub mod holder;
pub mod key;
pub mod lock;
pub mod printable;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod problem;
mod process;
pub mod record;
mod recover;
pub mod runtime;
pub mod scope;
pub mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use error::{AfterBody, CorruptKind, Error};
pub use fingerprint::Fingerprint;
pub use global::{
    global, init, init_from_env, open_url, open_url_existing, redact, url_secrets,
    DEFAULT_SQLITE_PATH,
};
pub use handler::{AsyncHandle, Handle, Idempotent};
pub use holder::Holder;
pub use key::{IntoKey, Key};
pub use record::{Fence, RecordView, Status};
pub use recover::{recover, Recover, Recovery};
pub use runtime::observe::{observe, observe_async, Observed};
pub use runtime::telemetry;
pub use runtime::{Call, Options, Outcome, Reconciled, DEFAULT_SETTLE, MAX_DURATION, MIN_LEASE};
pub use store::memory::MemoryStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::postgres::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use store::redis::RedisStore;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use store::sqlite::SqliteStore;
pub use store::{AsyncStore, DynStore, Store};

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
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
    pub use crate::handler::{reconcile_fits, type_reconcile, AsyncHandle, Handle, Idempotent};
    pub use crate::key::{IntoKey, Key};
    pub use crate::runtime::{Call, Options, Reconciled};
    pub use crate::scope::DefaultScope;
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
        ttl_ms: Option<u64>,
        lease_ms: Option<u64>,
        wait_ms: Option<u64>,
        once: bool,
        settle_ms: Option<u64>,
    ) -> Options {
        let mut o = Options::new();
        if let Some(t) = ttl_ms {
            o = o.ttl(Duration::from_millis(t));
        }
        if let Some(l) = lease_ms {
            o = o.lease(Duration::from_millis(l));
        }
        if let Some(w) = wait_ms {
            o = o.wait(Duration::from_millis(w));
        }
        if once {
            o = o.once();
        }
        if let Some(s) = settle_ms {
            o = o.settle(Duration::from_millis(s));
        }
        o
    }

    /// Checks at compile time that a payload argument is serializable, with our message.
    #[diagnostic::on_unimplemented(
        message = "this value is part of the payload fingerprint, but its type `{Self}` does not implement `serde::Serialize`",
        label = "not `Serialize`: derive it, or leave it out of the fingerprint",
        note = "every argument of an #[idempotent] function but the receiver and those in `skip(...)`, and every field of a #[derive(Idempotent)] type but those marked `#[rerun(skip)]`, is fingerprinted: derive `serde::Serialize` for `{Self}`, or leave it out with `#[idempotent(key = …, skip(name))]` (an argument) or `#[rerun(skip)]` (a field)"
    )]
    pub trait PayloadArg: Serialize {}
    impl<T: Serialize + ?Sized> PayloadArg for T {}
    /// Spanned on the argument by the macro so the error points there.
    pub fn assert_payload_arg<T: PayloadArg + ?Sized>(_: &T) {}

    /// Checks that an error type can carry rerun's errors.
    #[diagnostic::on_unimplemented(
        message = "the error type `{Self}` of an #[idempotent] function must implement `From<rerun_core::Error>`",
        label = "`{Self}` has no `From<rerun_core::Error>`",
        note = "add a variant such as `#[error(transparent)] Rerun(#[from] rerun_core::Error)`, or use `rerun_core::Error` as the error type"
    )]
    pub trait FromRerunError: From<Error> {}
    impl<E: From<Error>> FromRerunError for E {}

    /// Checks that a result type can be recorded and replayed.
    #[diagnostic::on_unimplemented(
        message = "the result type `{Self}` of an #[idempotent] function must implement `Serialize` and `Deserialize`",
        label = "`{Self}` is recorded and replayed, so it must be `Serialize + DeserializeOwned`",
        note = "it is recorded and replayed: derive `serde::Serialize` and `serde::Deserialize` for it"
    )]
    pub trait Recordable: Serialize + DeserializeOwned {}
    #[diagnostic::do_not_recommend]
    impl<T: Serialize + DeserializeOwned> Recordable for T {}

    /// The payload fingerprint of an annotated function, built one argument at a time.
    ///
    /// Each argument is checked on its own (`arg` is spanned on it by the macro), so an argument
    /// that is not `Serialize` gives one error naming that argument, not a second one about a
    /// tuple of all of them. The bytes are those of the tuple of references `(&a, &b, …)`, so
    /// the fingerprint equals `Call::payload(&(&a, &b, …))`, the hand-written equivalent.
    pub struct Payload {
        tuple: crate::fingerprint::TupleFingerprint,
        failed: Option<String>,
    }

    impl Payload {
        /// An empty payload (the opening of a tuple).
        #[inline]
        #[allow(clippy::new_without_default)]
        pub fn new() -> Payload {
            Payload {
                tuple: crate::fingerprint::TupleFingerprint::new(),
                failed: None,
            }
        }

        /// Adds one argument, streamed into the hasher.
        #[inline]
        pub fn arg<T: PayloadArg + ?Sized>(mut self, value: &T) -> Payload {
            if self.failed.is_none() {
                if let Err(e) = self.tuple.element(value) {
                    self.failed = Some(e.0);
                }
            }
            self
        }

        /// The fingerprint, or the `Codec` error of an argument whose `Serialize` failed.
        pub fn finish(self, key: impl FnOnce() -> Key) -> Result<Fingerprint, Error> {
            match self.failed {
                None => Ok(self.tuple.finish()),
                Some(message) => Err(Error::Codec {
                    key: key(),
                    what: "the payload",
                    message,
                }),
            }
        }
    }

    /// A payload whose `Serialize` always fails with the recorded message; hands an argument's
    /// serialization failure to [`Call::payload`], which turns it into `Error::Codec`.
    struct FailedPayload(String);

    impl Serialize for FailedPayload {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom(&self.0))
        }
    }

    /// The call of an annotated function whose payload was built with [`Payload`]; `None`
    /// for a function without payload arguments (the empty fingerprint, as `Call::new`).
    #[inline]
    pub fn call_with<K: IntoKey + ?Sized>(
        scope: &'static str,
        key: &K,
        payload: Option<Payload>,
        options: Options,
    ) -> Call {
        let call = Call::new(scope, key).options(options);
        let Some(payload) = payload else {
            return call;
        };
        // The key is cloned only for the error of a failing `Serialize`.
        let fingerprint = payload.finish(|| call.key().clone());
        match fingerprint {
            Ok(fingerprint) => call.fingerprint(fingerprint),
            Err(Error::Codec { message, .. }) => call.payload(&FailedPayload(message)),
            Err(other) => call.payload(&FailedPayload(other.to_string())),
        }
    }

    /// The store argument of an annotated function: given (`store = …`) or the global one.
    #[inline]
    pub fn given_store<S: ?Sized>(store: &S) -> Result<&S, Error> {
        Ok(store)
    }

    /// Runs a sync annotated function on `store` (given, or the global store's result).
    #[inline]
    pub fn drive_sync<S, T, E, F>(store: Result<&S, Error>, call: Call, body: F) -> Result<T, E>
    where
        S: Store + ?Sized,
        T: Recordable,
        E: FromRerunError,
        F: FnOnce() -> Result<T, E>,
    {
        match store {
            Ok(store) => call.run(store, body).map(|o| o.value),
            Err(e) => Err(E::from(crate::checkpoint::refused(e))),
        }
    }

    /// [`drive_sync`] for a `once` function with a reconcile function.
    #[inline]
    pub fn drive_sync_reconciled<S, T, E, R, F>(
        store: Result<&S, Error>,
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
        match store {
            Ok(store) => call.run_reconciled(store, reconcile, body).map(|o| o.value),
            Err(e) => Err(E::from(crate::checkpoint::refused(e))),
        }
    }

    /// Runs an async annotated function on `store` (given, or the global store's result).
    #[inline]
    pub async fn drive_async<S, T, E, F>(
        store: Result<&S, Error>,
        call: Call,
        body: F,
    ) -> Result<T, E>
    where
        S: AsyncStore + ?Sized,
        T: Recordable,
        E: FromRerunError,
        F: Future<Output = Result<T, E>>,
    {
        match store {
            Ok(store) => call.run_async(store, body).await.map(|o| o.value),
            Err(e) => Err(E::from(crate::checkpoint::refused(e))),
        }
    }

    /// [`drive_async`] for a `once` function with a reconcile future.
    #[inline]
    pub async fn drive_async_reconciled<S, T, E, R, F>(
        store: Result<&S, Error>,
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
        match store {
            Ok(store) => call
                .run_async_reconciled(store, reconcile, body)
                .await
                .map(|o| o.value),
            Err(e) => Err(E::from(crate::checkpoint::refused(e))),
        }
    }

    /// The arguments of a `once` function with `reconcile`, shared by the reconcile function
    /// (which borrows them) and the body (which takes them): only one of the two closures can
    /// hold an argument such as `db: &mut Db` at a time, so they take turns through this slot.
    pub struct Args<A>(std::sync::Mutex<Option<A>>);

    impl<A> Args<A> {
        /// Holds the arguments.
        #[inline]
        pub fn new(args: A) -> Args<A> {
            Args(std::sync::Mutex::new(Some(args)))
        }
        /// Takes the arguments out (the reconcile function gives them back with `put`).
        #[inline]
        pub fn take(&self) -> Result<A, Error> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .ok_or_else(|| {
                    Error::config(
                        "the arguments of this call were not given back by its reconcile function (it was interrupted); call the function again",
                    )
                })
        }
        /// Gives the arguments back.
        #[inline]
        pub fn put(&self, args: A) {
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(args);
        }
    }

    /// The key of a handler struct, for the derive.
    #[inline]
    pub fn key<K: IntoKey + ?Sized>(scope: &'static str, key: &K) -> Key {
        Key::new(scope, key)
    }

    /// The boxed result of a handler struct's `reconcile = path` function, for the derive.
    #[inline]
    pub fn boxed_reconcile<T: 'static>(result: T) -> Option<std::boxed::Box<dyn std::any::Any>> {
        Some(std::boxed::Box::new(result))
    }

    /// The type a handler struct's `reconcile = path` function returns, without calling it,
    /// for the derive.
    #[inline]
    pub fn reconcile_type<S: ?Sized, R: 'static>(
        _reconcile: fn(&S) -> R,
    ) -> (std::any::TypeId, &'static str) {
        (std::any::TypeId::of::<R>(), std::any::type_name::<R>())
    }

    /// The global store (see `rerun_core::global`), for functions without `store = …`.
    #[inline]
    pub fn global() -> Result<&'static dyn DynStore, Error> {
        crate::global()
    }
}
