//! Procedural macros of [rerun-core](https://docs.rs/rerun-core): `#[idempotent]`,
//! `#[derive(Idempotent)]`, and the compile-time lint `#[state_changing]` with `#[converges]`
//! and `#[read_only]`.
//!
//! Use them through `rerun-core`, which re-exports them (`use rerun_core::idempotent;`). The
//! macros generate little: the body of an annotated function becomes one call of rerun-core's
//! runtime with the key, the payload fingerprint and the options; claims, leases, fencing and
//! storage are ordinary Rust in rerun-core, usable without the macros ([`Call`]).
//!
//! Layout: `idempotent/` (grammar, the borrowed function, the rules, the generated code),
//! `derive/` (`#[derive(Idempotent)]`), `lint/` (`#[state_changing]` and friends), and
//! `common.rs` (the one path to the runtime, errors, durations).
//!
//! [`Call`]: https://docs.rs/rerun-core/latest/rerun_core/struct.Call.html
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod common;
mod derive;
mod idempotent;
mod lint;

use proc_macro::TokenStream;

/// Makes a function safe to run twice: its body runs once per dedupe key, and a repeated call
/// returns the recorded result.
///
/// ```
/// use rerun_core::{idempotent, Error, MemoryStore};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize)] struct Order { id: String, cents: u64 }
/// # #[derive(Serialize, Deserialize, Debug, PartialEq)] struct Receipt { cents: u64 }
/// # struct Db { charged: Vec<u64> }
///
/// struct Billing {
///     store: MemoryStore,
/// }
///
/// impl Billing {
///     #[idempotent(key = order.id, scope = "billing.charge", store = &self.store, skip(db))]
///     fn charge(&self, order: &Order, db: &mut Db) -> Result<Receipt, Error> {
///         db.charged.push(order.cents);
///         Ok(Receipt { cents: order.cents })
///     }
/// }
///
/// let billing = Billing { store: MemoryStore::new() };
/// let mut db = Db { charged: vec![] };
/// let order = Order { id: "ord_1".into(), cents: 500 };
/// let first = billing.charge(&order, &mut db)?;
/// let again = billing.charge(&order, &mut db)?; // a retry: replayed, the body does not run
/// assert_eq!(first, again);
/// assert_eq!(db.charged, [500]);
/// # Ok::<(), Error>(())
/// ```
///
/// # Arguments
///
/// | argument | meaning | default |
/// |---|---|---|
/// | `key = EXPR` | the dedupe key: an expression over the arguments (or `self`) whose type implements `rerun_core::IntoKey` (strings, integers, bool, char, bytes, uuids, references and tuples of these: `key = (order.customer, order.seq)`, whose parts are borrowed, not moved); a literal (`key = "migrate-v3"`) makes a one-time step | required |
/// | `scope = "name"` | the namespace of the key, 1 to 512 bytes without control characters; keeps records valid when the function is renamed or moved, and across compiler upgrades | the function's path: its module path and name (`billing::charge`); for a method, its `impl`'s self type and trait as well (`billing::Ledger::post`, `<billing::SendReceipt as billing::Handler>::handle`) |
/// | `store = EXPR` | the store: `&impl Store` (sync) or `&impl AsyncStore` (async); a temporary lives for the whole call (`store = &self.pool.get()`) | the global store (`rerun_core::init`, `RERUN_STORE`, or SQLite at `.rerun/rerun.sqlite3`) |
/// | `skip(a, b)` | arguments left out of the payload fingerprint (connections, clocks, loggers) | none |
/// | `ttl = "24h"` | how long a completed record is kept and replayed (humantime syntax, parsed at compile time); greater than zero | `24h` |
/// | `lease = "30s"` | how long a claim holds without renewal; renewed while the body runs; at least `100ms` (short leases are for tests) | `30s` |
/// | `wait = "10s"` | on finding the key in progress, wait up to this long for its result instead of returning `Error::InProgress`; may be `0s` | no waiting |
/// | `once` | at most once: the body never starts twice for one key; an attempt that died mid-body makes the next call `Error::OutcomeUnknown` | off (replayable) |
/// | `reconcile = path` | with `once`: called instead when an earlier attempt died mid-body, returns `Result<Reconciled<T>, E>` (`Done(t)` records `t`; `NotDone` runs the body) | none |
/// | `settle = "1s"` | with `reconcile`: how long the call that takes over a dead attempt waits, holding the key, before calling `reconcile`, so that an effect the dead process left on the way (a request in a socket, a statement not yet run) lands first; `0s` calls it at once | `1s` (`rerun_core::DEFAULT_SETTLE`) |
/// | `crate = path` | the path of `rerun_core` when it is renamed | `::rerun_core` |
///
/// The payload fingerprint covers every argument except the receiver, those in `skip(...)`,
/// and an argument that is the store itself (`store = store`); each must implement
/// `serde::Serialize`. An argument written as a pattern counts as its bindings
/// (`(a, b): (u32, u32)` as `a` and `b`, which the key may name) and `_` as none, under
/// `#[async_trait]` too. A second call with the same key and a different payload is
/// `Error::PayloadMismatch`. The function returns `Result<T, E>`, or an alias of it
/// (`anyhow::Result<T>`, `std::io::Result<T>`, a `type Fallible<T>` of your own), with
/// `T: Serialize + DeserializeOwned` (the recorded result) and `E: From<rerun_core::Error>`. An
/// `Err` is not recorded: the next call runs the body afresh.
///
/// `reconcile` is called with `self` (for `&self` methods) and every other argument by shared
/// reference: for `fn charge(&self, order: &Order, attempt: u32)`, write
/// `fn check(&self, order: &Order, attempt: &u32) -> Result<Reconciled<Receipt>, E>`
/// (`&&Order` coerces to `&Order`). It runs before the body, which then takes the arguments, so
/// arguments such as `db: &mut Db` work with both. For an `async fn` it is an `async fn` too
/// (the call awaits it).
///
/// Every duration is at most 100 years of 365 days (`"36500d"`; humantime's `"100y"` counts
/// years of 365.25 days and is longer), the same limits the runtime enforces on `Options`.
///
/// The default scope is the function's path as the compiler names it: for a free function,
/// `module_path!()` and its name; for a method, the `impl`'s self type and, in a trait impl,
/// the trait, so `SendReceipt::handle` and `UpdateLedger::handle` of one module (or one type's
/// `handle` of two traits) never share records. All instantiations of a generic impl share one
/// scope (`billing::Queue<_>::push`). Since the path changes when the function or its type is
/// renamed or moved, and its format belongs to the compiler, write `scope = "…"` for records
/// that must stay valid across renames, moves and compiler upgrades.
///
/// # Async
///
/// `async fn`s are supported as they are, with native `async fn` in traits and methods under
/// `#[async_trait]` (put `#[idempotent]` on the method inside the `#[async_trait]` impl). The
/// body becomes a future that starts only if the call claims the key; `?` and `return` behave
/// as written, and the future is `Send` when the body's is and the store is a concrete type or
/// the global store. An async `&mut self` method cannot name a field of `self` as its store
/// (`store = &self.store` would borrow `self` while the body holds it mutably): pass the store
/// as an argument, or keep it behind a shared handle (`store = &*self.store.clone()` for an
/// `Arc`).
///
/// ```
/// use rerun_core::{idempotent, Error, MemoryStore};
///
/// #[idempotent(key = user_id, scope = "mail.welcome", store = store)]
/// async fn send_welcome(store: &MemoryStore, user_id: u64) -> Result<String, Error> {
///     let id = deliver(user_id).await?;
///     Ok(id)
/// }
/// # async fn deliver(user: u64) -> Result<String, Error> { Ok(format!("msg-{user}")) }
/// # let store = MemoryStore::new();
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// assert_eq!(rt.block_on(send_welcome(&store, 7))?, "msg-7");
/// # Ok::<(), Error>(())
/// ```
///
/// # Examples
///
/// An at-most-once charge that asks the provider after a crash:
///
/// ```
/// use rerun_core::{idempotent, Error, MemoryStore, Reconciled};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize)] struct Order { id: String, cents: u64 }
/// # #[derive(Serialize, Deserialize, Debug, PartialEq, Clone)] struct Receipt { charge: String }
/// # struct Provider;
/// # impl Provider {
/// #     fn find(&self, _reference: &str) -> Option<Receipt> { None }
/// #     fn charge(&self, reference: &str, _cents: u64) -> Receipt { Receipt { charge: format!("ch_{reference}") } }
/// # }
///
/// struct Payments {
///     store: MemoryStore,
///     provider: Provider,
/// }
///
/// impl Payments {
///     fn already_charged(&self, order: &Order) -> Result<Reconciled<Receipt>, Error> {
///         Ok(match self.provider.find(&order.id) {
///             Some(receipt) => Reconciled::Done(receipt),
///             None => Reconciled::NotDone,
///         })
///     }
///
///     #[idempotent(key = order.id, store = &self.store, once, reconcile = Self::already_charged)]
///     fn charge(&self, order: &Order) -> Result<Receipt, Error> {
///         Ok(self.provider.charge(&order.id, order.cents))
///     }
/// }
/// # let p = Payments { store: MemoryStore::new(), provider: Provider };
/// # let o = Order { id: "o1".into(), cents: 5 };
/// # assert_eq!(p.charge(&o)?, p.charge(&o)?);
/// # Ok::<(), Error>(())
/// ```
///
/// A one-time step, on the global store:
///
/// ```no_run
/// use rerun_core::{idempotent, Error};
///
/// #[idempotent(key = "migrate-v3", wait = "1m")]
/// fn migrate_v3(db: &str) -> Result<u32, Error> {
///     Ok(3)
/// }
/// ```
///
/// # Equivalent code without the macro
///
/// The first example above expands to (in spirit; the real expansion goes through a hidden
/// module and builds the fingerprint argument by argument, to the same bytes):
///
/// ```
/// # use rerun_core::{Call, Error, MemoryStore, Options};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize)] struct Order { id: String, cents: u64 }
/// # #[derive(Serialize, Deserialize, Debug, PartialEq)] struct Receipt { cents: u64 }
/// # struct Db { charged: Vec<u64> }
/// # struct Billing { store: MemoryStore }
/// impl Billing {
///     fn charge(&self, order: &Order, db: &mut Db) -> Result<Receipt, Error> {
///         Call::new("billing.charge", &order.id)
///             .payload(&(&order,)) // every argument but the receiver and `skip(db)`
///             .options(Options::new()) // ttl, lease, wait, once
///             .run(&self.store, || {
///                 db.charged.push(order.cents);
///                 Ok(Receipt { cents: order.cents })
///             })
///             .map(|outcome| outcome.value)
///     }
/// }
/// # let b = Billing { store: MemoryStore::new() };
/// # let mut db = Db { charged: vec![] };
/// # let o = Order { id: "x".into(), cents: 1 };
/// # assert_eq!(b.charge(&o, &mut db)?, b.charge(&o, &mut db)?);
/// # Ok::<(), Error>(())
/// ```
///
/// # Compile errors
///
/// Each is one sentence at the offending tokens, saying how to fix it; all errors of one
/// function are reported together, and the function is still emitted so the rest of the crate
/// type-checks. For example:
///
/// - no key: ``#[idempotent]` on `charge` needs a dedupe key: write `#[idempotent(key = …)]`
///   with an expression over its arguments, such as `#[idempotent(key = order.id)]` ``
/// - a key over no argument: ``the key `TENANT` uses none of the function's arguments, so every
///   call would share one record; build it from an argument, as in `key = order.id`, or use a
///   literal such as `key = "migrate-v3"` for a one-time step``
/// - an unknown argument: ``tll` is not an argument of `#[idempotent]`; did you mean `ttl = "24h"`?``
/// - a repeated argument: ``ttl` is given twice; keep one `ttl = "24h"` and remove this one``
/// - a bad duration: ``ttl = "3 fortnights"` is not a duration (unknown time unit …); write it
///   like `ttl = "30s"`, `"24h"` or `"7d"` ``
/// - a duration out of range: ``lease = "50ms"` is below the minimum lease of 100ms: a lease must
///   outlast a store round trip and a scheduling stall; write `lease = "100ms"` or more``
/// - a scope that is empty, longer than 512 bytes or holds a control character: ``a scope cannot
///   contain control characters and this one has `\n` at byte 7; remove it, as in
///   `scope = "billing.charge"` ``
/// - a `const fn`: ``#[idempotent]` cannot go on a `const fn`, because its body runs through the
///   store at run time; remove `const` from `const fn charge` ``
/// - not a `Result`: ``an #[idempotent] function returns `Result<T, E>` so that its `Ok` can be
///   recorded and an `Err` retried, but `charge` returns `u64`; write
///   `-> Result<u64, rerun_core::Error>` or use your own error type``
/// - `skip` of no argument, `reconcile` without `once`, `settle` without `reconcile`,
///   `reconcile` on a `&mut self` method, a flag with a value (`once = true`).
///
/// Trait bounds read the same way, at the user's tokens: an argument that is not `Serialize`
/// (``this argument is part of the payload fingerprint, but its type `&mut Db` does not
/// implement `serde::Serialize` `` with ``leave this argument out of the fingerprint with
/// `skip(…)` ``), a result type that cannot be recorded, an error type without
/// `From<rerun_core::Error>`, a key type that is not `IntoKey`.
///
/// ```compile_fail
/// use rerun_core::{idempotent, Error};
/// #[idempotent(scope = "billing.charge")] // no key
/// fn charge(order_id: &str) -> Result<u64, Error> { Ok(1) }
/// ```
#[proc_macro_attribute]
pub fn idempotent(attr: TokenStream, item: TokenStream) -> TokenStream {
    idempotent::idempotent(attr.into(), item.into()).into()
}

/// Derives `rerun_core::Idempotent` for a handler struct or enum: its key, fingerprint and
/// options, from `#[rerun(...)]` attributes. Implement `Handle` (or `AsyncHandle`) for what to
/// do, and call `event.run(&store)` (or `.run_async(&store).await`).
///
/// ```
/// use rerun_core::{Handle, Idempotent, MemoryStore};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Idempotent)]
/// #[rerun(scope = "stripe.charge_succeeded", ttl = "7d")]
/// struct ChargeSucceeded {
///     #[rerun(key)]
///     event_id: String,
///     customer: String,
///     amount_cents: u64,
///     #[rerun(skip)]
///     received_at: u64,
/// }
///
/// impl Handle for ChargeSucceeded {
///     type Output = u64;
///     type Error = rerun_core::Error;
///     fn handle(&self) -> Result<u64, rerun_core::Error> {
///         Ok(self.amount_cents)
///     }
/// }
///
/// let store = MemoryStore::new();
/// let event = ChargeSucceeded { event_id: "evt_1".into(), customer: "cus_1".into(), amount_cents: 500, received_at: 1 };
/// assert_eq!(event.run(&store)?, 500);
/// let redelivered = ChargeSucceeded { received_at: 2, ..event };
/// assert_eq!(redelivered.run(&store)?, 500); // replayed: `received_at` is skipped
/// # Ok::<(), rerun_core::Error>(())
/// ```
///
/// # Arguments
///
/// On the type: `scope = "name"` (default: module path and type name), `ttl`, `lease`, `wait`
/// (with the same limits),
/// `once`, `reconcile = path`, `settle` (with `reconcile`) and `crate = path`, as for
/// [`macro@idempotent`]. The `reconcile`
/// function takes `&Self` and returns `Result<Reconciled<Output>, Error>` of the handler. Its
/// shape is checked at compile time; its types, which the derive cannot see the handler's of,
/// on every call, before anything is claimed: a function of other types makes the first call
/// an `Error::Config`, never a surprise on the rerun after a crash.
///
/// On fields: `key` (several `key` fields make a composite key, in field order) and `skip`
/// (left out of the fingerprint). Each other field is fingerprinted by its type's own
/// `Serialize`, whatever `#[serde(with = …)]` or `serialize_with` says for the event's own
/// encoding: a field whose type is not `Serialize` (a `[u8; 64]` behind `serde_big_array`) is
/// marked `skip`, or given a type that is. Works on structs with named fields, tuple structs
/// (`struct Entry(#[rerun(key)] String, u64)`) and enums whose every variant has a key field;
/// a variant's name is part of its key, so `Paid { id: 1 }` and `Refunded { id: 1 }` are two
/// events.
///
/// # Async, and the global store
///
/// Implement `AsyncHandle` (`async fn handle(&self)`) and call `run_async(&store).await`.
/// Without a store of your own, run on the process-wide one (set by `rerun_core::init`, or
/// chosen from `RERUN_STORE`; `rerun_core::init_from_env()` at start-up makes a bad URL an
/// error there):
///
/// ```no_run
/// # use rerun_core::{AsyncHandle, Idempotent};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize, Idempotent)]
/// # struct OrderPaid { #[rerun(key)] order_id: String }
/// # impl AsyncHandle for OrderPaid {
/// #     type Output = ();
/// #     type Error = rerun_core::Error;
/// #     async fn handle(&self) -> Result<(), rerun_core::Error> { Ok(()) }
/// # }
/// # async fn on_message(event: OrderPaid) -> Result<(), rerun_core::Error> {
/// event.run_async(rerun_core::global()?).await?;
/// // or, to know whether it replayed: event.run_outcome_async(rerun_core::global()?).await?.replayed
/// # Ok(())
/// # }
/// ```
///
/// # Equivalent code without the macro
///
/// ```
/// # use rerun_core::{Error, Fingerprint, Idempotent, Key, Options};
/// # use serde::Serialize;
/// # #[derive(Serialize)] struct ChargeSucceeded { event_id: String, customer: String, amount_cents: u64, received_at: u64 }
/// impl Idempotent for ChargeSucceeded {
///     fn idempotency_key(&self) -> Key {
///         Key::new("stripe.charge_succeeded", &self.event_id)
///     }
///     fn fingerprint(&self) -> Result<Fingerprint, Error> {
///         Fingerprint::of(&(&self.event_id, &self.customer, &self.amount_cents))
///             .map_err(|e| Error::config(e.to_string()))
///     }
///     fn options(&self) -> Options {
///         Options::new().ttl(std::time::Duration::from_secs(7 * 86_400))
///     }
/// }
/// ```
///
/// # Compile errors
///
/// - no key field: ``#[derive(Idempotent)]` needs a dedupe key: mark the field that identifies a
///   `ChargeSucceeded` with `#[rerun(key)]`, as in `#[rerun(key)] event_id: String` ``
/// - a variant without a key field: ``variant `Refunded` has no key field; mark the field that
///   identifies it with `#[rerun(key)]`, as in `Refunded { #[rerun(key)] id: String, … }` ``
/// - a field argument on the type (or the reverse): ``key` goes on a field, not on the type:
///   `#[rerun(key)] event_id: String` ``
/// - unknown and repeated arguments, bad durations, `reconcile` without `once`, `settle` without
///   `reconcile`, unions.
///
/// ```compile_fail
/// use rerun_core::Idempotent;
/// #[derive(serde::Serialize, Idempotent)]
/// struct ChargeSucceeded { event_id: String } // no #[rerun(key)]
/// ```
#[proc_macro_derive(Idempotent, attributes(rerun))]
pub fn derive_idempotent(item: TokenStream) -> TokenStream {
    derive::derive(item.into()).into()
}

/// The compile-time lint: a function (or every method of an `impl` block) that changes state
/// must say why running it twice is safe: a dedupe key (`#[idempotent(key = …)]`) or a reason it
/// converges (`#[converges("…")]`); methods of an `impl` may also be `#[read_only]`. Attribute
/// order does not matter.
///
/// ```
/// use rerun_core::{converges, idempotent, read_only, state_changing, Error, MemoryStore};
/// # #[derive(serde::Serialize)] struct User { id: u64 }
///
/// #[state_changing]
/// #[idempotent(key = user.id, once, store = &MemoryStore::new())]
/// fn send_welcome_email(user: &User) -> Result<(), Error> {
///     Ok(())
/// }
///
/// #[state_changing]
/// #[converges("sets the flag; setting it twice is harmless")]
/// fn mark_verified(user: &User) -> Result<(), Error> {
///     Ok(())
/// }
///
/// struct Accounts;
///
/// #[state_changing]
/// impl Accounts {
///     #[converges("an upsert by id")]
///     fn rename(&self, user: &User) -> Result<(), Error> {
///         Ok(())
///     }
///     #[read_only]
///     fn count(&self) -> usize {
///         0
///     }
/// }
/// ```
///
/// # Compile errors
///
/// - on a function: ``send_welcome_email` changes state but has no dedupe key; add
///   `#[idempotent(key = …)]` with a key over its arguments, or
///   `#[converges("why running it twice is safe")]` if running it twice is harmless``
/// - on each offending method of an `impl` (all in one build): ``send_invoice` is in a
///   `#[state_changing]` impl but has no dedupe key; add `#[idempotent(key = …)]`, or
///   `#[converges("why running it twice is safe")]`, or mark it `#[read_only]` ``
///
/// ```compile_fail
/// use rerun_core::state_changing;
/// #[state_changing]
/// fn send_welcome_email(user: u64) -> Result<(), ()> { Ok(()) }
/// ```
#[proc_macro_attribute]
pub fn state_changing(attr: TokenStream, item: TokenStream) -> TokenStream {
    lint::state_changing(attr.into(), item.into()).into()
}

/// Marks a state-changing function as naturally idempotent, with the reason:
/// `#[converges("sets the flag; setting it twice is harmless")]`. Satisfies
/// [`macro@state_changing`]; the function is otherwise unchanged.
///
/// # Compile errors
///
/// Without a reason: ``#[converges]` needs the reason running the function twice is safe:
/// `#[converges("sets the flag; setting it twice is harmless")]` ``; an empty reason or a
/// non-string is refused the same way.
///
/// ```compile_fail
/// use rerun_core::converges;
/// #[converges]
/// fn mark_verified(user: u64) -> Result<(), ()> { Ok(()) }
/// ```
#[proc_macro_attribute]
pub fn converges(attr: TokenStream, item: TokenStream) -> TokenStream {
    lint::converges(attr.into(), item.into()).into()
}

/// Marks a method of a `#[state_changing]` `impl` block as changing nothing; the method is
/// otherwise unchanged. A function cannot be both `#[read_only]` and `#[state_changing]`.
#[proc_macro_attribute]
pub fn read_only(attr: TokenStream, item: TokenStream) -> TokenStream {
    lint::read_only(attr.into(), item.into()).into()
}
