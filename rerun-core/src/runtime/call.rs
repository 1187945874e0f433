//! [`Call`]: the public, macro-free way to run an operation idempotently.

use std::borrow::Cow;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;
use crate::fingerprint::Fingerprint;
use crate::key::{IntoKey, Key};
use crate::record::Fence;
use crate::runtime::steps::{drive, AsyncBackend, SyncBackend};
use crate::runtime::Options;
use crate::store::{AsyncStore, Store};

/// What a call returned, and whether it was replayed from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<T> {
    /// The result: fresh from the body, or decoded from the record.
    pub value: T,
    /// `true` when the body did not run and the recorded result was returned.
    pub replayed: bool,
    /// The fence of the claim that recorded the result.
    pub fence: Fence,
}

impl<T> Outcome<T> {
    /// The result.
    pub fn into_value(self) -> T {
        self.value
    }
}

/// What a `reconcile` function found when an earlier `once` attempt died mid-body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled<T> {
    /// The effect happened, with this result: it is recorded and returned.
    Done(T),
    /// The effect did not happen: the body may run now.
    NotDone,
}

/// One idempotent operation: a scope, a key, a payload and options, ready to run on a store.
///
/// This is the runtime that `#[idempotent]` expands to. The annotated
///
/// ```ignore
/// #[idempotent(key = order.id, scope = "billing.charge", store = &self.store)]
/// fn charge(&self, order: &Order) -> Result<Receipt, PayError> { body }
/// ```
///
/// is, written by hand:
///
/// ```
/// # use serde::{Serialize, Deserialize};
/// # #[derive(Serialize)] struct Order { id: String, cents: u64 }
/// # #[derive(Serialize, Deserialize, PartialEq, Debug)] struct Receipt(u64);
/// use rerun_core::{Call, MemoryStore};
/// let store = MemoryStore::new();
/// let order = Order { id: "ord_1".into(), cents: 500 };
/// let charge = || {
///     Call::new("billing.charge", &order.id)
///         .payload(&(&order,))
///         .run(&store, || Ok::<_, rerun_core::Error>(Receipt(order.cents)))
/// };
/// assert!(!charge()?.replayed);
/// assert_eq!(charge()?.value, Receipt(500)); // redelivered: replayed, the body did not run
/// # Ok::<(), rerun_core::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "a Call does nothing until it is run"]
pub struct Call {
    key: Key,
    fingerprint: Result<Fingerprint, Error>,
    options: Options,
}

impl Call {
    /// A call of the operation `scope` with the dedupe key `key`, no payload and default options.
    pub fn new<K: IntoKey + ?Sized>(scope: impl Into<Cow<'static, str>>, key: &K) -> Call {
        Call::with_key(Key::new(scope, key))
    }

    /// A call with an already built key.
    pub fn with_key(key: Key) -> Call {
        Call {
            key,
            fingerprint: Ok(Fingerprint::EMPTY),
            options: Options::new(),
        }
    }

    /// The payload: a second call with the same key and another payload fails with
    /// [`Error::PayloadMismatch`]. A payload whose `Serialize` fails, or that nests deeper than
    /// 256 levels, makes the run fail with [`Error::Codec`] before anything is written.
    pub fn payload<P: Serialize + ?Sized>(mut self, payload: &P) -> Call {
        self.fingerprint = Fingerprint::of(payload).map_err(|e| Error::Codec {
            key: self.key.clone(),
            what: "the payload",
            message: e.0,
        });
        self
    }

    /// An already computed payload fingerprint.
    pub fn fingerprint(mut self, fingerprint: Fingerprint) -> Call {
        self.fingerprint = Ok(fingerprint);
        self
    }

    /// All options at once.
    pub fn options(mut self, options: Options) -> Call {
        self.options = options;
        self
    }
    /// How long the completed record is kept and replayed (default 24 h).
    pub fn ttl(mut self, ttl: Duration) -> Call {
        self.options = self.options.ttl(ttl);
        self
    }
    /// How long a claim holds without renewal (default 30 s); renewed while the body runs.
    pub fn lease(mut self, lease: Duration) -> Call {
        self.options = self.options.lease(lease);
        self
    }
    /// Wait up to `wait` for a live holder's result instead of failing with `InProgress`.
    pub fn wait(mut self, wait: Duration) -> Call {
        self.options = self.options.wait(wait);
        self
    }
    /// At-most-once: the body never starts twice for this key (see [`Call::run_reconciled`]).
    /// An `Err` the body returns says its effect did not happen: the claim is released and the
    /// next call runs the body again, as without `once`.
    pub fn once(mut self) -> Call {
        self.options = self.options.once();
        self
    }

    /// With `once`: how long a reconcile waits for an earlier attempt's effects to land
    /// (default 1 s; see [`Options::settle`]).
    pub fn settle(mut self, settle: Duration) -> Call {
        self.options = self.options.settle(settle);
        self
    }

    /// The key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The parts of a call that may run: a valid scope, a payload that encoded, options within
    /// their limits.
    fn checked(self) -> Result<(Key, Fingerprint, Options), Error> {
        let refused = |e| Err(crate::checkpoint::refused(e));
        let fingerprint = match self.fingerprint {
            Ok(fingerprint) => fingerprint,
            Err(e) => return refused(e),
        };
        if let Err(message) = crate::scope::validate_scope(self.key.scope()) {
            return refused(Error::config(format!("{}: {message}", self.key)));
        }
        if let Err(message) = self.options.check() {
            return refused(Error::config(format!("{}: {message}", self.key)));
        }
        Ok((self.key, fingerprint, self.options))
    }

    /// Runs `body` unless the key's result is recorded: see contract section 3 for every case.
    pub fn run<S, T, E, F>(self, store: &S, body: F) -> Result<Outcome<T>, E>
    where
        S: Store + ?Sized,
        T: Serialize + DeserializeOwned,
        E: From<Error>,
        F: FnOnce() -> Result<T, E>,
    {
        self.run_sync_inner(store, None::<fn() -> Result<Reconciled<T>, E>>, body)
    }

    /// [`Call::run`] for a `once` call with a reconcile function: when an earlier attempt died
    /// mid-body, `reconcile` looks at the world and says whether the effect happened.
    pub fn run_reconciled<S, T, E, R, F>(
        self,
        store: &S,
        reconcile: R,
        body: F,
    ) -> Result<Outcome<T>, E>
    where
        S: Store + ?Sized,
        T: Serialize + DeserializeOwned,
        E: From<Error>,
        R: FnOnce() -> Result<Reconciled<T>, E>,
        F: FnOnce() -> Result<T, E>,
    {
        self.run_sync_inner(store, Some(reconcile), body)
    }

    /// The sync run; without a reconcile function a dead `once` attempt is `OutcomeUnknown`.
    fn run_sync_inner<S, T, E, R, F>(
        self,
        store: &S,
        reconcile: Option<R>,
        body: F,
    ) -> Result<Outcome<T>, E>
    where
        S: Store + ?Sized,
        T: Serialize + DeserializeOwned,
        E: From<Error>,
        R: FnOnce() -> Result<Reconciled<T>, E>,
        F: FnOnce() -> Result<T, E>,
    {
        let (key, fingerprint, options) = self.checked()?;
        block_on(drive(
            &SyncBackend(store),
            &key,
            fingerprint,
            options,
            reconcile.map(|r| move || std::future::ready(r())),
            move || std::future::ready(body()),
        ))
    }

    /// Runs `body`, a future that starts only if this call claims the key.
    pub async fn run_async<S, T, E, F>(self, store: &S, body: F) -> Result<Outcome<T>, E>
    where
        S: AsyncStore + ?Sized,
        T: Serialize + DeserializeOwned,
        E: From<Error>,
        F: Future<Output = Result<T, E>>,
    {
        let (key, fingerprint, options) = self.checked()?;
        drive(
            &AsyncBackend(store),
            &key,
            fingerprint,
            options,
            None::<fn() -> std::future::Ready<Result<Reconciled<T>, E>>>,
            move || body,
        )
        .await
    }

    /// [`Call::run_async`] with a reconcile future for a `once` call.
    pub async fn run_async_reconciled<S, T, E, R, F>(
        self,
        store: &S,
        reconcile: R,
        body: F,
    ) -> Result<Outcome<T>, E>
    where
        S: AsyncStore + ?Sized,
        T: Serialize + DeserializeOwned,
        E: From<Error>,
        R: Future<Output = Result<Reconciled<T>, E>>,
        F: Future<Output = Result<T, E>>,
    {
        let (key, fingerprint, options) = self.checked()?;
        drive(
            &AsyncBackend(store),
            &key,
            fingerprint,
            options,
            Some(move || reconcile),
            move || body,
        )
        .await
    }
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls a future that is ready on its first poll (the sync backend's always is) without
/// allocating; parks the thread otherwise.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    if let Poll::Ready(out) = fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        return out;
    }
    let waker = Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
