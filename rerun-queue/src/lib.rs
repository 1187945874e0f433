//! # rerun-queue: effectively-once message consumers
//!
//! At-least-once brokers redeliver: a consumer dies after its side effect and before its ack,
//! an ack is lost, a producer that retried publishes one event twice. rerun-queue runs an async
//! handler per message through rerun's runtime, so every message's effect happens once per
//! dedupe key, and acks only what rerun recorded.
//!
//! - Adapters: NATS JetStream pull consumers ([`nats`], feature `nats`, on `async-nats`) and
//!   RabbitMQ ([`amqp`], feature `amqp`, on `lapin`).
//! - The key: the `#[rerun(key)]` fields of a `#[derive(Idempotent)]` payload type decoded with
//!   serde ([`handler::typed`], [`handler::handle`]; JSON by default, any [`codec::Codec`]), or
//!   the broker's message id ([`handler::by_message_id`]).
//! - The ack policy ([`Policy`]): ack once recorded or replayed; redeliver later on
//!   `InProgress`; back off retryable errors; terminate or dead-letter mismatched, corrupt,
//!   undecodable and non-retryable messages, and unknown outcomes that nothing reconciled.
//! - While a handler runs, the broker's redelivery timer is extended (JetStream `AckProgress`)
//!   as rerun renews its lease, so a slow handler is not redelivered to another consumer.
//! - At most [`Settings::max_in_flight`] handlers at once per consumer; on shutdown
//!   ([`shutdown::terminated`]: SIGTERM or Ctrl-C) it stops fetching, lets handlers in flight
//!   finish within a grace period, hands the rest back, and returns.
//!
//! ```
//! use std::sync::Arc;
//! use rerun_core::{Idempotent, MemoryStore};
//! use rerun_queue::{handler, Action, Handler, Message, Policy};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Idempotent)]
//! #[rerun(scope = "shop.order_paid")]
//! struct OrderPaid { #[rerun(key)] order_id: String, cents: u64 }
//!
//! let store = Arc::new(MemoryStore::new());
//! let h = handler::typed(store, |paid: OrderPaid| async move {
//!     Ok::<_, rerun_core::Error>(paid.cents) // write to the database, send the receipt, …
//! });
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let body = br#"{"order_id":"o-1","cents":990}"#;
//! // The same event delivered twice (under two broker message ids): recorded once, acked twice.
//! for id in ["m-1", "m-2"] {
//!     let handled = h.handle(&Message::new("orders", &body[..]).with_id(id)).await;
//!     assert_eq!(Policy::new().decide(&handled, 1), Action::Ack);
//! }
//! // A body that is not an `OrderPaid` is dead-lettered, never retried.
//! let poison = h.handle(&Message::new("orders", &b"{oops"[..])).await;
//! assert_eq!(Policy::new().decide(&poison, 1), Action::DeadLetter);
//! # });
//! ```
//!
//! The guide `docs/queues.md` in the repository walks through a consumer for each broker.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod codec;
mod error;
mod failure;
pub mod handler;
mod message;
mod policy;
mod runner;
mod settings;
pub mod shutdown;

#[cfg(feature = "amqp")]
#[cfg_attr(docsrs, doc(cfg(feature = "amqp")))]
pub mod amqp;
#[cfg(feature = "nats")]
#[cfg_attr(docsrs, doc(cfg(feature = "nats")))]
pub mod nats;

pub use error::Error;
pub use failure::{Failure, FailureKind, Handled, HandlerError};
pub use handler::Handler;
pub use message::Message;
pub use policy::{Action, Policy};
pub use settings::{Report, Settings};
