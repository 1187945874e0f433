//! `#[derive(Idempotent)]` with `Handle` and `AsyncHandle`, on both stores: named structs,
//! tuple structs, enums, composite keys, skipped fields, options and `reconcile`.

mod common;

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use rerun_core::{AsyncHandle, Error, Handle, Idempotent, Key, Reconciled};
use serde::{Deserialize, Serialize};

use common::stores;

static CHARGES: AtomicU32 = AtomicU32::new(0);

#[derive(Serialize, Deserialize, Idempotent, Clone)]
#[rerun(scope = "stripe.charge_succeeded", ttl = "7d")]
struct ChargeSucceeded {
    #[rerun(key)]
    event_id: String,
    customer: String,
    amount_cents: u64,
    #[rerun(skip)]
    received_at: u64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Receipt(String, u64);

impl Handle for ChargeSucceeded {
    type Output = Receipt;
    type Error = Error;
    fn handle(&self) -> Result<Receipt, Error> {
        CHARGES.fetch_add(1, SeqCst);
        Ok(Receipt(self.customer.clone(), self.amount_cents))
    }
}

fn event(id: &str, amount: u64, at: u64) -> ChargeSucceeded {
    ChargeSucceeded {
        event_id: id.into(),
        customer: "cus_1".into(),
        amount_cents: amount,
        received_at: at,
    }
}

#[test]
fn named_struct() {
    for s in stores() {
        let before = CHARGES.load(SeqCst);
        let e = event(&format!("evt-{}", s.name), 500, 1);
        assert_eq!(
            e.idempotency_key(),
            Key::new("stripe.charge_succeeded", &e.event_id)
        );
        assert_eq!(
            e.options().ttl_duration(),
            std::time::Duration::from_secs(7 * 86400)
        );
        assert_eq!(e.run(s.get()).unwrap(), Receipt("cus_1".into(), 500));
        // Redelivered later: `received_at` is skipped, so it is the same event.
        assert_eq!(
            event(&e.event_id, 500, 99).run(s.get()).unwrap(),
            Receipt("cus_1".into(), 500)
        );
        assert_eq!(CHARGES.load(SeqCst), before + 1);
        // A forged redelivery: same id, other body.
        let forged = event(&e.event_id, 1, 1).run(s.get()).unwrap_err();
        assert_eq!(forged.kind_name(), "payload_mismatch");
    }
}

/// A tuple struct with a composite key (tenant, sequence number) and a generic payload.
#[derive(Serialize, Idempotent)]
#[rerun(scope = "ledger.entry")]
struct Entry<T: Serialize>(#[rerun(key)] String, #[rerun(key)] u64, T);

impl<T: Serialize> Handle for Entry<T> {
    type Output = u64;
    type Error = Error;
    fn handle(&self) -> Result<u64, Error> {
        Ok(self.1 * 10)
    }
}

#[test]
fn tuple_struct_composite_key() {
    for s in stores() {
        let e = Entry("tenant".to_owned(), 4, vec![1, 2]);
        assert_eq!(
            e.idempotency_key(),
            Key::new("ledger.entry", &("tenant", 4u64))
        );
        assert_eq!(e.run(s.get()).unwrap(), 40);
        assert_eq!(
            Entry("tenant".to_owned(), 4, vec![1, 2])
                .run(s.get())
                .unwrap(),
            40
        );
        assert!(Entry("tenant".to_owned(), 4, vec![3]).run(s.get()).is_err());
    }
}

/// An enum: every variant has a key field; the variant's name is part of the key.
#[derive(Serialize, Deserialize, Idempotent)]
#[rerun(scope = "shop.events")]
enum ShopEvent {
    Paid {
        #[rerun(key)]
        order: String,
        cents: u64,
    },
    Refunded(#[rerun(key)] String, #[rerun(skip)] u64),
}

static SHOP: AtomicU32 = AtomicU32::new(0);

impl Handle for ShopEvent {
    type Output = String;
    type Error = Error;
    fn handle(&self) -> Result<String, Error> {
        SHOP.fetch_add(1, SeqCst);
        Ok(match self {
            ShopEvent::Paid { order, cents } => format!("paid {order} {cents}"),
            ShopEvent::Refunded(order, _) => format!("refunded {order}"),
        })
    }
}

#[test]
fn enum_variants() {
    for s in stores() {
        let before = SHOP.load(SeqCst);
        let paid = ShopEvent::Paid {
            order: "o1".into(),
            cents: 5,
        };
        let refunded = ShopEvent::Refunded("o1".into(), 1);
        assert_ne!(paid.idempotency_key(), refunded.idempotency_key());
        assert_eq!(paid.run(s.get()).unwrap(), "paid o1 5");
        assert_eq!(refunded.run(s.get()).unwrap(), "refunded o1");
        assert_eq!(paid.run(s.get()).unwrap(), "paid o1 5");
        assert_eq!(
            ShopEvent::Refunded("o1".into(), 2).run(s.get()).unwrap(),
            "refunded o1"
        );
        assert_eq!(SHOP.load(SeqCst), before + 2);
    }
}

/// `once` with `reconcile`, and the async twin.
#[derive(Serialize, Idempotent)]
#[rerun(scope = "mail.welcome", once, reconcile = already_sent, lease = "5s", wait = "1s")]
struct Welcome {
    #[rerun(key)]
    user: u64,
    #[rerun(skip)]
    crash: bool,
}

static SENT: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

fn already_sent(w: &Welcome) -> Result<Reconciled<String>, Error> {
    Ok(if SENT.lock().unwrap().contains(&w.user) {
        Reconciled::Done(format!("sent to {} (reconciled)", w.user))
    } else {
        Reconciled::NotDone
    })
}

impl AsyncHandle for Welcome {
    type Output = String;
    type Error = Error;
    async fn handle(&self) -> Result<String, Error> {
        SENT.lock().unwrap().push(self.user);
        if self.crash {
            panic!("died right after sending");
        }
        Ok(format!("sent to {}", self.user))
    }
}

#[test]
fn async_handle_once_with_reconcile() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (i, s) in stores().into_iter().enumerate() {
        let user = 100 + i as u64;
        assert!(Welcome { user, crash: false }.options().is_once());
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(Welcome { user, crash: true }.run_async(s.get()))
        }));
        std::panic::set_hook(hook);
        assert!(crashed.is_err());
        // `wait` covers the moment until the background thread marks the attempt unknown.
        let mut out = rt.block_on(Welcome { user, crash: false }.run_async(s.get()));
        for _ in 0..100 {
            if !matches!(&out, Err(e) if e.kind_name() == "in_progress") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            out = rt.block_on(Welcome { user, crash: false }.run_async(s.get()));
        }
        assert_eq!(out.unwrap(), format!("sent to {user} (reconciled)"));
        assert_eq!(
            SENT.lock().unwrap().iter().filter(|u| **u == user).count(),
            1
        );
    }
}

/// Default scope: module path and type name.
#[derive(Serialize, Idempotent)]
struct Plain {
    #[rerun(key)]
    id: u8,
}

#[test]
fn default_scope() {
    assert_eq!(Plain { id: 1 }.idempotency_key().scope(), "derive::Plain");
}

/// A `reconcile` function whose types do not fit the handler's (here its output) compiles, as
/// the derive cannot see the handler; the first call says so, before it claims or runs
/// anything, instead of the rerun after a crash, when the function is finally called.
#[derive(Serialize, Idempotent)]
#[rerun(scope = "mail.misfit", once, reconcile = misfit_check)]
struct Misfit {
    #[rerun(key)]
    id: u8,
}

fn misfit_check(_: &Misfit) -> Result<Reconciled<String>, Error> {
    Ok(Reconciled::NotDone)
}

static MISFIT_RUNS: AtomicU32 = AtomicU32::new(0);

impl Handle for Misfit {
    type Output = String;
    type Error = Error;
    fn handle(&self) -> Result<String, Error> {
        MISFIT_RUNS.fetch_add(1, SeqCst);
        Ok("sent".into())
    }
}

/// The same function with the handler's own types is accepted.
#[derive(Serialize, Idempotent)]
#[rerun(scope = "mail.misfit_async", once, reconcile = misfit_check_async)]
struct MisfitAsync {
    #[rerun(key)]
    id: u8,
}

fn misfit_check_async(_: &MisfitAsync) -> Result<Reconciled<u32>, Error> {
    Ok(Reconciled::NotDone)
}

impl AsyncHandle for MisfitAsync {
    type Output = String;
    type Error = Error;
    async fn handle(&self) -> Result<String, Error> {
        MISFIT_RUNS.fetch_add(1, SeqCst);
        Ok("sent".into())
    }
}

#[test]
fn a_reconcile_function_of_other_types_is_refused_on_the_first_call() {
    use rerun_core::Store as _;
    let store = rerun_core::MemoryStore::new();
    // Fits: Result<Reconciled<String>, Error> for Output = String, Error = Error.
    assert_eq!(Misfit { id: 1 }.run(&store).unwrap(), "sent");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Does not fit: Reconciled<u32> for Output = String.
    let err = rt
        .block_on(MisfitAsync { id: 1 }.run_async(&store))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, Error::Config { .. })
            && text.contains("Reconciled<u32>")
            && text.contains("Reconciled<alloc::string::String>"),
        "{text}"
    );
    assert_eq!(MISFIT_RUNS.load(SeqCst), 1, "nothing ran for the misfit");
    assert!(store
        .inspect(&MisfitAsync { id: 1 }.idempotency_key())
        .unwrap()
        .is_none());
}

/// Generic types need no bounds of their own: the derive asks, as serde's does, that the
/// fingerprinted fields naming a type parameter be `Serialize` and the key fields keys.
#[derive(Serialize, Deserialize, Idempotent)]
#[rerun(scope = "generic.event")]
struct Event<T, K> {
    #[rerun(key)]
    id: K,
    data: T,
    #[rerun(skip)]
    note: std::marker::PhantomData<fn() -> T>,
}

#[test]
fn generic_types_need_no_bounds_of_their_own() {
    let a = Event {
        id: 7u64,
        data: vec![1u8, 2],
        note: std::marker::PhantomData,
    };
    let b = Event {
        id: 7u64,
        data: vec![1u8, 3],
        note: std::marker::PhantomData,
    };
    assert_eq!(a.idempotency_key(), Key::new("generic.event", &7u64));
    assert_ne!(a.fingerprint().unwrap(), b.fingerprint().unwrap());
    let named = Event {
        id: "evt_1".to_owned(),
        data: "x",
        note: std::marker::PhantomData,
    };
    assert_eq!(named.idempotency_key(), Key::new("generic.event", "evt_1"));
}

/// `once` without `reconcile`: a crashed attempt's key answers `OutcomeUnknown` at once, as a
/// call without a reconcile function does, without holding the key for the settle wait first.
#[derive(Serialize, Idempotent)]
#[rerun(scope = "derive.unreconciled", once)]
struct Unreconciled {
    #[rerun(key)]
    id: u64,
    #[rerun(skip)]
    crash: bool,
}

static UNRECONCILED_RUNS: AtomicU32 = AtomicU32::new(0);

impl Handle for Unreconciled {
    type Output = u64;
    type Error = Error;
    fn handle(&self) -> Result<u64, Error> {
        UNRECONCILED_RUNS.fetch_add(1, SeqCst);
        if self.crash {
            panic!("died mid-body");
        }
        Ok(self.id)
    }
}

#[test]
fn once_without_reconcile_answers_unknown_at_once() {
    let store = rerun_core::MemoryStore::new();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Unreconciled { id: 1, crash: true }.run(&store)
    }));
    std::panic::set_hook(hook);
    assert!(crashed.is_err());
    let started = std::time::Instant::now();
    let out = Unreconciled {
        id: 1,
        crash: false,
    }
    .run(&store);
    assert!(matches!(out, Err(Error::OutcomeUnknown { .. })), "{out:?}");
    assert!(
        started.elapsed() < rerun_core::DEFAULT_SETTLE,
        "the answer waited {:?}, the settle wait of a reconcile",
        started.elapsed()
    );
    assert_eq!(UNRECONCILED_RUNS.load(SeqCst), 1);
}

/// An async handler whose `handle` does work before it returns its future: that work runs
/// only for a call that claimed the key, never for a replay.
#[derive(Serialize, Idempotent)]
#[rerun(scope = "derive.eager")]
struct Eager {
    #[rerun(key)]
    id: u64,
}

static EAGER_CALLS: AtomicU32 = AtomicU32::new(0);

impl AsyncHandle for Eager {
    type Output = u64;
    type Error = Error;
    #[allow(clippy::manual_async_fn)]
    fn handle(&self) -> impl std::future::Future<Output = Result<u64, Error>> + Send {
        EAGER_CALLS.fetch_add(1, SeqCst);
        let id = self.id;
        async move { Ok(id) }
    }
}

#[test]
fn an_async_handle_is_called_only_once_claimed() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = rerun_core::MemoryStore::new();
    for _ in 0..3 {
        assert_eq!(rt.block_on(Eager { id: 7 }.run_async(&store)).unwrap(), 7);
    }
    assert_eq!(EAGER_CALLS.load(SeqCst), 1);
}
