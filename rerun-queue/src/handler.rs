//! [`Handler`]: what runs for each message, through rerun's runtime.
//!
//! Three ready-made handlers cover the ways a message gets its dedupe key:
//! - [`typed`]: the body decodes (JSON by default) into a `#[derive(Idempotent)]` type whose
//!   `#[rerun(key)]` fields are the key; an async closure does the work.
//! - [`handle`]: the same for a type that implements [`AsyncHandle`] itself.
//! - [`by_message_id`]: the broker's message id is the key (JetStream `Nats-Msg-Id`, AMQP
//!   `message_id`), the body is the payload fingerprint.
//!
//! Each one runs the work with [`rerun_core::Call`], so a redelivered message replays its
//! recorded result instead of running again, and a consumer killed mid-handler leaves a claim
//! the next consumer takes over.

use std::borrow::Cow;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use rerun_core::{AsyncHandle, AsyncStore, Call, Idempotent, Options, Outcome, Reconciled};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{Codec, Json};
use crate::failure::{Failure, FailureKind, Handled, HandlerError};
use crate::message::Message;

/// Runs one delivery and says how it went. The adapters call it once per delivery, with at
/// most the consumer's `max_in_flight` calls at a time.
///
/// Implement it for a handler of your own; it must not report [`Handled::Done`] before the
/// result is recorded, since the adapter acks on it.
pub trait Handler: Send + Sync + 'static {
    /// Handles `message`.
    fn handle<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Handled>;
}

fn settled<T, E: HandlerError>(result: Result<Outcome<T>, E>) -> Handled {
    match result {
        Ok(outcome) => Handled::Done {
            replayed: outcome.replayed,
        },
        Err(e) => Handled::Failed(Failure::of(&e)),
    }
}

/// Marks the types a handler works with, without owning them.
type Types<T, O, E> = PhantomData<fn() -> (T, O, E)>;

type ReconcileFn<T, O, E> =
    Arc<dyn Fn(&T) -> BoxFuture<'static, Result<Reconciled<O>, E>> + Send + Sync>;

/// A handler for payloads of type `T` (see [`typed`]).
pub struct Typed<T, S: ?Sized, F, O, E, C = Json> {
    store: Arc<S>,
    work: F,
    codec: C,
    reconcile: Option<ReconcileFn<T, O, E>>,
    _types: Types<T, O, E>,
}

/// A handler that decodes each body into `T` with JSON and runs `work(payload)` once per key
/// of `T` (its `#[rerun(key)]` fields; its `#[rerun(...)]` options apply: `ttl`, `lease`,
/// `once`, …).
///
/// `work` is called for every delivery to build its future, which rerun polls only when the
/// key is claimed: put the effects inside the `async` block, never before it.
///
/// ```
/// use std::sync::Arc;
/// use rerun_core::{Idempotent, MemoryStore};
/// use rerun_queue::{handler, Handled, Handler, Message};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Idempotent)]
/// #[rerun(scope = "shop.order_paid")]
/// struct OrderPaid { #[rerun(key)] order_id: String, cents: u64 }
///
/// let h = handler::typed(Arc::new(MemoryStore::new()), |paid: OrderPaid| async move {
///     Ok::<_, rerun_core::Error>(format!("shipped {}", paid.order_id))
/// });
/// let msg = Message::new("orders", &br#"{"order_id":"o-1","cents":990}"#[..]);
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// assert_eq!(h.handle(&msg).await, Handled::Done { replayed: false });
/// assert_eq!(h.handle(&msg).await, Handled::Done { replayed: true }); // redelivered
/// # });
/// ```
pub fn typed<T, S, F, Fut, O, E>(store: Arc<S>, work: F) -> Typed<T, S, F, O, E>
where
    T: DeserializeOwned + Idempotent + Send + 'static,
    S: AsyncStore + ?Sized + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
    E: HandlerError,
{
    Typed {
        store,
        work,
        codec: Json,
        reconcile: None,
        _types: PhantomData,
    }
}

impl<T, S: ?Sized, F, O, E, C> Typed<T, S, F, O, E, C> {
    /// Decodes bodies with `codec` instead of JSON.
    pub fn codec<C2: Codec>(self, codec: C2) -> Typed<T, S, F, O, E, C2> {
        Typed {
            store: self.store,
            work: self.work,
            codec,
            reconcile: self.reconcile,
            _types: PhantomData,
        }
    }

    /// For a `once` type: when an earlier delivery died mid-body, `reconcile(payload)` looks
    /// at the world and says whether the effect happened ([`Reconciled::Done`] is recorded
    /// and acked, [`Reconciled::NotDone`] runs the work). It replaces the type's own
    /// `#[rerun(reconcile = …)]`; without either, such a message is dead-lettered as
    /// `OutcomeUnknown`.
    pub fn reconcile<R, RFut>(mut self, reconcile: R) -> Self
    where
        T: Clone + Send + 'static,
        R: Fn(T) -> RFut + Send + Sync + 'static,
        RFut: Future<Output = Result<Reconciled<O>, E>> + Send + 'static,
    {
        self.reconcile = Some(Arc::new(move |t: &T| Box::pin(reconcile(t.clone()))));
        self
    }
}

impl<T, S, F, Fut, O, E, C> Handler for Typed<T, S, F, O, E, C>
where
    T: DeserializeOwned + Idempotent + Send + 'static,
    S: AsyncStore + ?Sized + 'static,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
    E: HandlerError,
    C: Codec,
{
    fn handle<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            let payload: T = match self.codec.decode(message.body()) {
                Ok(payload) => payload,
                Err(why) => return Handled::Failed(Failure::new(FailureKind::Undecodable, why)),
            };
            let call = match payload.call() {
                Ok(call) => call,
                Err(e) => return Handled::Failed(Failure::of(&e)),
            };
            if self.reconcile.is_none() {
                if let Err(e) = rerun_core::__private::reconcile_fits::<T, O, E>(&payload) {
                    return Handled::Failed(Failure::of(&e));
                }
            }
            let result = match &self.reconcile {
                Some(reconcile) => {
                    let check = reconcile(&payload);
                    call.run_async_reconciled(&*self.store, check, (self.work)(payload))
                        .await
                }
                None if !payload.__has_reconcile() => {
                    call.run_async(&*self.store, (self.work)(payload)).await
                }
                // The type's own `#[rerun(reconcile = …)]`, on a copy of the payload decoded
                // again: the work takes the payload, and the check runs only when an earlier
                // delivery died mid-body.
                None => {
                    let key = call.key().clone();
                    let codec = &self.codec;
                    let check = async move {
                        match codec.decode::<T>(message.body()) {
                            Ok(again) => rerun_core::__private::type_reconcile(&again, &key),
                            Err(_) => Err(rerun_core::Error::outcome_unknown(&key).into()),
                        }
                    };
                    call.run_async_reconciled(&*self.store, check, (self.work)(payload))
                        .await
                }
            };
            settled(result)
        })
    }
}

/// A handler for a payload type that implements [`AsyncHandle`] (see [`handle`]).
pub struct Handle<T, S: ?Sized, C = Json> {
    store: Arc<S>,
    codec: C,
    _types: PhantomData<fn() -> T>,
}

/// A handler that decodes each body into `T` with JSON and runs [`AsyncHandle::handle`]
/// through [`AsyncHandle::run_outcome_async`]: the type's own `reconcile` applies.
///
/// ```
/// use std::sync::Arc;
/// use rerun_core::{AsyncHandle, Idempotent, MemoryStore};
/// use rerun_queue::{handler, Handled, Handler, Message};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Idempotent)]
/// struct Ping { #[rerun(key)] id: u32 }
/// impl AsyncHandle for Ping {
///     type Output = u32;
///     type Error = rerun_core::Error;
///     async fn handle(&self) -> Result<u32, rerun_core::Error> { Ok(self.id) }
/// }
///
/// let h = handler::handle::<Ping, _>(Arc::new(MemoryStore::new()));
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// assert_eq!(h.handle(&Message::new("pings", &br#"{"id":1}"#[..])).await, Handled::Done { replayed: false });
/// # });
/// ```
pub fn handle<T, S>(store: Arc<S>) -> Handle<T, S>
where
    T: AsyncHandle + DeserializeOwned + Send + 'static,
    T::Error: HandlerError,
    S: AsyncStore + ?Sized + 'static,
{
    Handle {
        store,
        codec: Json,
        _types: PhantomData,
    }
}

impl<T, S: ?Sized, C> Handle<T, S, C> {
    /// Decodes bodies with `codec` instead of JSON.
    pub fn codec<C2: Codec>(self, codec: C2) -> Handle<T, S, C2> {
        Handle {
            store: self.store,
            codec,
            _types: PhantomData,
        }
    }
}

impl<T, S, C> Handler for Handle<T, S, C>
where
    T: AsyncHandle + DeserializeOwned + Send + 'static,
    T::Error: HandlerError,
    S: AsyncStore + ?Sized + 'static,
    C: Codec,
{
    fn handle<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            let payload: T = match self.codec.decode(message.body()) {
                Ok(payload) => payload,
                Err(why) => return Handled::Failed(Failure::new(FailureKind::Undecodable, why)),
            };
            settled(payload.run_outcome_async(&*self.store).await)
        })
    }
}

/// A handler keyed by the broker's message id (see [`by_message_id`]).
pub struct ByMessageId<S: ?Sized, F, O, E> {
    store: Arc<S>,
    scope: Cow<'static, str>,
    options: Options,
    work: F,
    _types: PhantomData<fn() -> (O, E)>,
}

/// A handler whose dedupe key is the broker's message id (JetStream `Nats-Msg-Id`, AMQP
/// `message_id`) in `scope`, and whose payload fingerprint is the body: the same id with
/// another body is a `PayloadMismatch` and is dead-lettered. A message without an id, or with
/// an empty or all-whitespace one, is dead-lettered too.
///
/// Use it when producers set a stable id per logical message (and retry with the same id);
/// when a retrying producer may publish one event under new ids, key by the payload with
/// [`typed`] instead.
///
/// ```
/// use std::sync::Arc;
/// use rerun_core::MemoryStore;
/// use rerun_queue::{handler, Handled, Handler, Message};
///
/// let h = handler::by_message_id(Arc::new(MemoryStore::new()), "mail.send", |m: Message| async move {
///     Ok::<_, rerun_core::Error>(m.body().len())
/// });
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let msg = Message::new("mail", &b"hello"[..]).with_id("m-1");
/// assert_eq!(h.handle(&msg).await, Handled::Done { replayed: false });
/// assert_eq!(h.handle(&msg).await, Handled::Done { replayed: true });
/// # });
/// ```
pub fn by_message_id<S, F, Fut, O, E>(
    store: Arc<S>,
    scope: impl Into<Cow<'static, str>>,
    work: F,
) -> ByMessageId<S, F, O, E>
where
    S: AsyncStore + ?Sized + 'static,
    F: Fn(Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
    E: HandlerError,
{
    ByMessageId {
        store,
        scope: scope.into(),
        options: Options::new(),
        work,
        _types: PhantomData,
    }
}

impl<S: ?Sized, F, O, E> ByMessageId<S, F, O, E> {
    /// The options of every call (ttl, lease, `once`, …; default [`Options::new`]).
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }
}

/// The body as a fingerprint payload: bytes, serialized as one byte string.
struct Body<'a>(&'a [u8]);

impl Serialize for Body<'_> {
    fn serialize<Ser: serde::Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
        s.serialize_bytes(self.0)
    }
}

impl<S, F, Fut, O, E> Handler for ByMessageId<S, F, O, E>
where
    S: AsyncStore + ?Sized + 'static,
    F: Fn(Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
    O: Serialize + DeserializeOwned + Send + 'static,
    E: HandlerError,
{
    fn handle<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            // An empty id is no id: as a key it would be one shared by every such message.
            let Some(id) = message.id().filter(|id| !id.trim().is_empty()) else {
                return Handled::Failed(Failure::new(
                    FailureKind::NoMessageId,
                    "the message has no id, or an empty one (JetStream `Nats-Msg-Id` header, AMQP `message_id` property), and this handler is keyed by it",
                ));
            };
            let call = Call::new(self.scope.clone(), id)
                .payload(&Body(message.body()))
                .options(self.options);
            settled(
                call.run_async(&*self.store, (self.work)(message.clone()))
                    .await,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rerun_core::MemoryStore;

    use super::*;

    #[tokio::test]
    async fn an_empty_message_id_is_no_id() {
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let h = by_message_id(
            Arc::new(MemoryStore::new()),
            "t.by_id",
            move |m: Message| {
                let r = r.clone();
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, rerun_core::Error>(m.body().len())
                }
            },
        );
        for id in ["", " ", "\t \r\n"] {
            let handled = h.handle(&Message::new("s", &b"a"[..]).with_id(id)).await;
            assert!(
                matches!(&handled, Handled::Failed(f) if f.kind == FailureKind::NoMessageId),
                "{id:?}: {handled:?}"
            );
        }
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        let msg = Message::new("s", &b"a"[..]).with_id(" m-1 ");
        assert_eq!(h.handle(&msg).await, Handled::Done { replayed: false });
    }
}
