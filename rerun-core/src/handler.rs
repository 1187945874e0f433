//! Handler structs: `#[derive(Idempotent)]` plus [`Handle`] or [`AsyncHandle`].

use std::any::{Any, TypeId};
use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::runtime::{Call, Options, Outcome, Reconciled};
use crate::store::{AsyncStore, Store};

/// A value that knows its own dedupe key, payload fingerprint and options.
///
/// Derived with `#[derive(Idempotent)]` and `#[rerun(...)]` attributes; see the derive's docs.
pub trait Idempotent {
    /// The dedupe key (scope and the `#[rerun(key)]` fields).
    fn idempotency_key(&self) -> Key;
    /// The fingerprint of the fields not marked `#[rerun(skip)]`.
    fn fingerprint(&self) -> Result<Fingerprint, Error>;
    /// The options given as container arguments (`ttl`, `lease`, `wait`, `once`).
    fn options(&self) -> Options;
    /// The `reconcile = path` function's result, boxed; `None` without one.
    #[doc(hidden)]
    fn __reconcile(&self) -> Option<Box<dyn Any>> {
        None
    }
    /// Whether the type has a `reconcile = path` function, without calling it.
    #[doc(hidden)]
    fn __has_reconcile(&self) -> bool {
        false
    }
    /// The type the `reconcile = path` function returns, and its name; `None` without one.
    #[doc(hidden)]
    fn __reconcile_type(&self) -> Option<(TypeId, &'static str)> {
        None
    }
    /// The call this value makes.
    fn call(&self) -> Result<Call, Error> {
        Ok(Call::with_key(self.idempotency_key())
            .fingerprint(self.fingerprint()?)
            .options(self.options()))
    }
}

/// What `payload`'s own `reconcile = …` function says (see [`Idempotent`]), as a reconciling
/// call expects it; `OutcomeUnknown` for a type without one. For integrations that run a
/// derived type's call themselves (a queue handler) and must honour its `reconcile`.
#[doc(hidden)]
pub fn type_reconcile<P, T, E>(payload: &P, key: &Key) -> Result<Reconciled<T>, E>
where
    P: Idempotent + ?Sized,
    T: 'static,
    E: From<Error> + 'static,
{
    match payload.__reconcile() {
        Some(boxed) => reconciled(key, boxed),
        None => Err(Error::OutcomeUnknown { key: key.clone() }.into()),
    }
}

/// Whether `payload`'s own `reconcile = …` function returns what a call for `T` and `E`
/// needs, `Result<Reconciled<T>, E>`: checked before the call, so that a function of another
/// type is a `Config` error on the first call (in tests), not only on the rerun after a crash,
/// when the function is finally called. For integrations that run a derived type's call.
#[doc(hidden)]
pub fn reconcile_fits<P, T, E>(payload: &P) -> Result<(), Error>
where
    P: Idempotent + ?Sized,
    T: 'static,
    E: 'static,
{
    match payload.__reconcile_type() {
        Some((found, name)) if found != TypeId::of::<Result<Reconciled<T>, E>>() => {
            Err(Error::config(format!(
                "the `reconcile` function of {} returns {name}, but its calls need Result<Reconciled<{}>, {}>: make it return that",
                std::any::type_name::<P>(),
                std::any::type_name::<T>(),
                std::any::type_name::<E>()
            )))
        }
        _ => Ok(()),
    }
}

fn reconciled<T: 'static, E: From<Error> + 'static>(
    key: &Key,
    boxed: Box<dyn Any>,
) -> Result<Reconciled<T>, E> {
    match boxed.downcast::<Result<Reconciled<T>, E>>() {
        Ok(result) => *result,
        Err(_) => Err(Error::config(format!(
            "{key}: the `reconcile` function must return Result<Reconciled<{}>, {}>",
            std::any::type_name::<T>(),
            std::any::type_name::<E>()
        ))
        .into()),
    }
}

/// A handler: what to do with an idempotent event, run at most once per key.
///
/// ```
/// use rerun_core::{Handle, Idempotent, MemoryStore};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Idempotent)]
/// #[rerun(scope = "shop.order_paid")]
/// struct OrderPaid {
///     #[rerun(key)]
///     order_id: String,
///     cents: u64,
/// }
///
/// impl Handle for OrderPaid {
///     type Output = String;
///     type Error = rerun_core::Error;
///     fn handle(&self) -> Result<String, rerun_core::Error> {
///         Ok(format!("shipped {}", self.order_id))
///     }
/// }
///
/// let store = MemoryStore::new();
/// let event = OrderPaid { order_id: "o-1".into(), cents: 990 };
/// assert_eq!(event.run(&store)?, "shipped o-1");
/// assert_eq!(event.run(&store)?, "shipped o-1"); // redelivered: replayed
/// # Ok::<(), rerun_core::Error>(())
/// ```
pub trait Handle: Idempotent {
    /// The result recorded and replayed.
    type Output: Serialize + DeserializeOwned + 'static;
    /// The handler's error.
    type Error: From<Error> + 'static;
    /// Does the work; runs only when the key was not handled yet.
    fn handle(&self) -> Result<Self::Output, Self::Error>;
    /// Runs [`Handle::handle`] idempotently on `store`.
    fn run<S: Store + ?Sized>(&self, store: &S) -> Result<Self::Output, Self::Error> {
        self.run_outcome(store).map(|o| o.value)
    }
    /// [`Handle::run`], saying also whether the result was replayed (and its fence).
    ///
    /// ```
    /// # use rerun_core::{Handle, Idempotent, MemoryStore};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize, Idempotent)]
    /// # struct Paid { #[rerun(key)] id: u32 }
    /// # impl Handle for Paid {
    /// #     type Output = u32;
    /// #     type Error = rerun_core::Error;
    /// #     fn handle(&self) -> Result<u32, rerun_core::Error> { Ok(self.id) }
    /// # }
    /// let store = MemoryStore::new();
    /// assert!(!Paid { id: 1 }.run_outcome(&store)?.replayed);
    /// assert!(Paid { id: 1 }.run_outcome(&store)?.replayed);
    /// # Ok::<(), rerun_core::Error>(())
    /// ```
    fn run_outcome<S: Store + ?Sized>(
        &self,
        store: &S,
    ) -> Result<Outcome<Self::Output>, Self::Error> {
        let call = self.call()?;
        // Without a reconcile function an unknown outcome is answered at once, as for a call
        // without one (no settle wait holding the key, and the advice to give it one).
        if !self.__has_reconcile() {
            return call.run(store, || self.handle());
        }
        reconcile_fits::<Self, Self::Output, Self::Error>(self)?;
        let key = call.key().clone();
        call.run_reconciled(store, || type_reconcile(self, &key), || self.handle())
    }
}

/// The async twin of [`Handle`].
pub trait AsyncHandle: Idempotent + Sync {
    /// The result recorded and replayed.
    type Output: Serialize + DeserializeOwned + Send + 'static;
    /// The handler's error.
    type Error: From<Error> + Send + 'static;
    /// Does the work; runs only when the key was not handled yet.
    fn handle(&self) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;
    /// Runs [`AsyncHandle::handle`] idempotently on `store`.
    fn run_async<S: AsyncStore + ?Sized>(
        &self,
        store: &S,
    ) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send {
        async move { self.run_outcome_async(store).await.map(|o| o.value) }
    }
    /// [`AsyncHandle::run_async`], saying also whether the result was replayed (and its fence).
    fn run_outcome_async<S: AsyncStore + ?Sized>(
        &self,
        store: &S,
    ) -> impl Future<Output = Result<Outcome<Self::Output>, Self::Error>> + Send {
        async move {
            let call = self.call()?;
            // `handle` is called only once the key is claimed: an implementation that does
            // work before returning its future does it only then, never on a replay.
            let body = async { self.handle().await };
            if !self.__has_reconcile() {
                return call.run_async(store, body).await;
            }
            reconcile_fits::<Self, Self::Output, Self::Error>(self)?;
            let key = call.key().clone();
            let reconcile = async { type_reconcile(self, &key) };
            call.run_async_reconciled(store, reconcile, body).await
        }
    }
}
