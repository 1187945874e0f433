//! Contract section 3 for every supported function shape, on `MemoryStore` and `SqliteStore`.

mod common;

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use rerun_core::{idempotent, Call, DynStore, Error, Reconciled};
use serde::{Deserialize, Serialize};

use common::stores;

#[derive(Debug, PartialEq)]
enum PayError {
    Declined(String),
    Rerun(&'static str),
}

impl From<Error> for PayError {
    fn from(e: Error) -> Self {
        PayError::Rerun(e.kind_name())
    }
}

#[derive(Serialize, Clone)]
struct Order {
    id: String,
    cents: u64,
}

fn order(id: &str, cents: u64) -> Order {
    Order {
        id: id.into(),
        cents,
    }
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Receipt {
    order: String,
    cents: u64,
    run: u32,
}

/// What the bodies did: a stand-in for the world they change.
#[derive(Default)]
struct Ledger {
    charges: Mutex<Vec<String>>,
    runs: AtomicU32,
}

impl Ledger {
    fn charge(&self, order: &Order) -> Result<Receipt, PayError> {
        let run = self.runs.fetch_add(1, SeqCst) + 1;
        if order.cents == 0 {
            return Err(PayError::Declined(order.id.clone()));
        }
        self.charges.lock().unwrap().push(order.id.clone());
        Ok(Receipt {
            order: order.id.clone(),
            cents: order.cents,
            run,
        })
    }
    fn runs(&self) -> u32 {
        self.runs.load(SeqCst)
    }
}

// ---- free functions ----

#[idempotent(key = order.id, scope = "t.sync_free", store = store, skip(ledger))]
fn sync_free(store: &dyn DynStore, order: &Order, ledger: &Ledger) -> Result<Receipt, PayError> {
    let receipt = ledger.charge(order)?;
    Ok(receipt)
}

#[idempotent(key = order.id, scope = "t.async_free", store = store, skip(ledger))]
async fn async_free(
    store: &dyn DynStore,
    order: &Order,
    ledger: &Ledger,
) -> Result<Receipt, PayError> {
    tokio::task::yield_now().await;
    let receipt = ledger.charge(order)?;
    Ok(receipt)
}

/// The checks every shape must pass, given one way of calling it.
fn check_shape(
    name: &str,
    ledger: &Ledger,
    mut call: impl FnMut(&Order) -> Result<Receipt, PayError>,
) {
    let first = call(&order(&format!("{name}-1"), 500)).unwrap();
    assert!(!first.order.is_empty());
    let runs = ledger.runs();
    // Redelivered: the recorded result, the body does not run.
    assert_eq!(
        call(&order(&format!("{name}-1"), 500)).unwrap(),
        first,
        "{name}"
    );
    assert_eq!(ledger.runs(), runs, "{name}: replay ran the body");
    // Same key, other payload: refused, the record untouched.
    assert_eq!(
        call(&order(&format!("{name}-1"), 999)),
        Err(PayError::Rerun("payload_mismatch")),
        "{name}"
    );
    assert_eq!(
        call(&order(&format!("{name}-1"), 500)).unwrap(),
        first,
        "{name}"
    );
    // An `Err` is not recorded: the next call runs the body afresh.
    assert_eq!(
        call(&order(&format!("{name}-2"), 0)),
        Err(PayError::Declined(format!("{name}-2")))
    );
    assert_eq!(
        call(&order(&format!("{name}-2"), 0)),
        Err(PayError::Declined(format!("{name}-2")))
    );
    assert_eq!(
        ledger.runs(),
        runs + 2,
        "{name}: a failed call was recorded"
    );
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn free_functions() {
    for s in stores() {
        let ledger = Ledger::default();
        check_shape(&format!("{}-sync", s.name), &ledger, |o| {
            sync_free(s.get(), o, &ledger)
        });
        let ledger = Ledger::default();
        check_shape(&format!("{}-async", s.name), &ledger, |o| {
            block_on(async_free(s.get(), o, &ledger))
        });
    }
}

// ---- inherent methods ----

struct Billing {
    store: Arc<dyn DynStore>,
    ledger: Ledger,
    served: u32,
}

impl Billing {
    #[idempotent(key = order.id, scope = "t.method", store = &*self.store)]
    fn charge(&self, order: &Order) -> Result<Receipt, PayError> {
        self.ledger.charge(order)
    }

    #[idempotent(key = order.id, scope = "t.async_method", store = &*self.store)]
    async fn charge_async(&self, order: &Order) -> Result<Receipt, PayError> {
        tokio::task::yield_now().await;
        self.ledger.charge(order)
    }

    // `&mut self` with the store in a field: the body borrows other fields mutably.
    #[idempotent(key = order.id, scope = "t.mut_method", store = &*self.store)]
    fn charge_mut(&mut self, order: &Order) -> Result<Receipt, PayError> {
        self.served += 1;
        self.ledger.charge(order)
    }

    // Async `&mut self`: the store is cloned out of `self` for the length of the call.
    #[idempotent(key = order.id, scope = "t.async_mut_method", store = &self.store.clone())]
    async fn charge_mut_async(&mut self, order: &Order) -> Result<Receipt, PayError> {
        self.served += 1;
        self.ledger.charge(order)
    }
}

fn billing(store: &Arc<dyn DynStore>) -> Billing {
    Billing {
        store: store.clone(),
        ledger: Ledger::default(),
        served: 0,
    }
}

#[test]
fn inherent_methods() {
    for s in stores() {
        let b = billing(&s.store);
        check_shape(&format!("{}-m", s.name), &b.ledger, |o| b.charge(o));
        let b = billing(&s.store);
        check_shape(&format!("{}-am", s.name), &b.ledger, |o| {
            block_on(b.charge_async(o))
        });

        let mut b = billing(&s.store);
        let first = b.charge_mut(&order("mut", 5)).unwrap();
        assert_eq!(b.charge_mut(&order("mut", 5)).unwrap(), first);
        assert_eq!(b.served, 1);
        let mut b = billing(&s.store);
        let first = block_on(b.charge_mut_async(&order("amut", 5))).unwrap();
        assert_eq!(
            block_on(b.charge_mut_async(&order("amut", 5))).unwrap(),
            first
        );
        assert_eq!(b.served, 1);
    }
}

// ---- trait-impl methods: plain, native async, #[async_trait] ----

trait Charge {
    fn charge(&self, order: &Order) -> Result<Receipt, PayError>;
    async fn charge_native(&self, order: &Order) -> Result<Receipt, PayError>;
}

impl Charge for Billing {
    #[idempotent(key = order.id, scope = "t.trait", store = &*self.store)]
    fn charge(&self, order: &Order) -> Result<Receipt, PayError> {
        self.ledger.charge(order)
    }
    #[idempotent(key = order.id, scope = "t.trait_native_async", store = &*self.store)]
    async fn charge_native(&self, order: &Order) -> Result<Receipt, PayError> {
        tokio::task::yield_now().await;
        self.ledger.charge(order)
    }
}

// `?Send`: `Billing` keeps its store as `Arc<dyn DynStore>`, and the compiler cannot prove a
// future holding a trait-object store `Send` (see `concurrency.rs` for `Send` futures on the
// concrete stores and on the global store).
#[async_trait::async_trait(?Send)]
trait ChargeBoxed {
    async fn charge_boxed(&self, order: &Order, note: String) -> Result<Receipt, PayError>;
}

#[async_trait::async_trait(?Send)]
impl ChargeBoxed for Billing {
    #[idempotent(key = order.id, scope = "t.async_trait", store = &*self.store, skip(note))]
    async fn charge_boxed(&self, order: &Order, note: String) -> Result<Receipt, PayError> {
        tokio::task::yield_now().await;
        let _ = note;
        self.ledger.charge(order)
    }
}

#[test]
fn trait_methods() {
    for s in stores() {
        let b = billing(&s.store);
        check_shape(&format!("{}-t", s.name), &b.ledger, |o| {
            Charge::charge(&b, o)
        });
        let b = billing(&s.store);
        check_shape(&format!("{}-tn", s.name), &b.ledger, |o| {
            block_on(b.charge_native(o))
        });
        let b = billing(&s.store);
        check_shape(&format!("{}-tb", s.name), &b.ledger, |o| {
            block_on(b.charge_boxed(o, "n".into()))
        });
    }
}

// ---- `#[async_trait]` arguments written as patterns ----

/// Not `Serialize`: a context that no fingerprint may take in.
struct Ctx;

#[async_trait::async_trait(?Send)]
trait Patterns {
    async fn wildcard(&self, id: u64, _: Ctx, _: u32) -> Result<u64, PayError>;
    async fn destructured(&self, (a, b): (u32, u32), n: u32) -> Result<u32, PayError>;
}

// `#[async_trait]` renames such arguments `__argN` before `#[idempotent]` sees them; they must
// still mean what they mean in a native `async fn`.
#[async_trait::async_trait(?Send)]
impl Patterns for Billing {
    #[idempotent(key = id, scope = "t.async_trait_wildcard", store = &*self.store)]
    async fn wildcard(&self, id: u64, _: Ctx, _: u32) -> Result<u64, PayError> {
        self.ledger.runs.fetch_add(1, SeqCst);
        Ok(id)
    }
    #[idempotent(key = (a, b), scope = "t.async_trait_pattern", store = &*self.store)]
    async fn destructured(&self, (mut a, b): (u32, u32), n: u32) -> Result<u32, PayError> {
        self.ledger.runs.fetch_add(1, SeqCst);
        a += b;
        Ok(a + n)
    }
}

#[test]
fn async_trait_pattern_arguments() {
    for s in stores() {
        // `_` is not part of the fingerprint: another value is the same call.
        let b = billing(&s.store);
        assert_eq!(block_on(b.wildcard(1, Ctx, 5)), Ok(1));
        assert_eq!(block_on(b.wildcard(1, Ctx, 6)), Ok(1), "{}", s.name);
        assert_eq!(b.ledger.runs(), 1, "{}: `_` was fingerprinted", s.name);

        // A pattern's bindings are arguments: the key names them, the fingerprint covers them.
        let b = billing(&s.store);
        assert_eq!(block_on(b.destructured((1, 2), 3)), Ok(6));
        assert_eq!(block_on(b.destructured((1, 2), 3)), Ok(6));
        assert_eq!(
            block_on(b.destructured((1, 2), 4)),
            Err(PayError::Rerun("payload_mismatch"))
        );
        assert_eq!(block_on(b.destructured((2, 1), 3)), Ok(6));
        assert_eq!(b.ledger.runs(), 2, "{}", s.name);
        // The record a native `async fn` would write: key `(a, b)`, payload `a, b, n`.
        let by_hand = Call::new("t.async_trait_pattern", &(1u32, 2u32))
            .payload(&(&1u32, &2u32, &3u32))
            .run(s.get(), || Ok::<u32, Error>(0))
            .unwrap();
        assert!(by_hand.replayed, "{}", s.name);
        assert_eq!(by_hand.value, 6);
    }
}

// ---- generics and `impl Trait` results ----

#[idempotent(key = (key.as_ref(), n.into()), scope = "t.generic", store = store, skip(ledger))]
fn generic<K: AsRef<str> + Serialize, N: Into<u64> + Serialize + Copy>(
    store: &dyn DynStore,
    key: K,
    n: N,
    ledger: &Ledger,
) -> Result<impl Serialize + serde::de::DeserializeOwned + Into<Receipt>, PayError> {
    ledger.charge(&order(key.as_ref(), n.into()))
}

#[idempotent(key = key, scope = "t.generic_async", store = store)]
async fn generic_async<T>(store: &dyn DynStore, key: u32, value: T) -> Result<Vec<T>, Error>
where
    T: Serialize + serde::de::DeserializeOwned + Clone + Send,
{
    Ok(vec![value.clone(), value])
}

#[idempotent(key = key, scope = "t.impl_trait_async", store = store)]
async fn impl_trait_async(
    store: &dyn DynStore,
    key: u32,
) -> Result<impl Serialize + serde::de::DeserializeOwned + std::fmt::Debug + PartialEq<u32>, Error>
{
    if key == 0 {
        return Err(Error::config("zero"));
    }
    Ok(key * 3)
}

#[test]
fn generic_functions() {
    for s in stores() {
        assert_eq!(block_on(impl_trait_async(s.get(), 2)).unwrap(), 6);
        assert_eq!(block_on(impl_trait_async(s.get(), 2)).unwrap(), 6);
    }
    for s in stores() {
        let ledger = Ledger::default();
        let a: Receipt = generic(s.get(), "g", 3u8, &ledger).unwrap().into();
        let b: Receipt = generic(s.get(), String::from("g"), 3u8, &ledger)
            .unwrap()
            .into();
        assert_eq!(a, b);
        assert_eq!(ledger.runs(), 1);
        assert_eq!(
            block_on(generic_async(s.get(), 1, "x".to_owned())).unwrap(),
            ["x", "x"]
        );
        assert_eq!(
            block_on(generic_async(s.get(), 1, "x".to_owned())).unwrap(),
            ["x", "x"]
        );
    }
}

// ---- early return and `?` ----

#[idempotent(key = input, scope = "t.early", store = store)]
fn early(store: &dyn DynStore, input: &str) -> Result<u32, PayError> {
    if input.is_empty() {
        return Ok(0);
    }
    let n: u32 = input
        .parse()
        .map_err(|_| PayError::Declined(input.into()))?;
    Ok(n * 2)
}

#[test]
fn early_return_and_question_mark() {
    for s in stores() {
        assert_eq!(early(s.get(), ""), Ok(0));
        assert_eq!(early(s.get(), "21"), Ok(42));
        assert_eq!(early(s.get(), "x"), Err(PayError::Declined("x".into())));
    }
}

// ---- the macro's fingerprint is the hand-written one ----

#[idempotent(key = order.id, scope = "t.equiv", store = store)]
fn equiv(store: &dyn DynStore, order: &Order, note: &str) -> Result<u64, Error> {
    Ok(order.cents + note.len() as u64)
}

#[test]
fn same_record_as_the_hand_written_call() {
    for s in stores() {
        let o = order("eq", 7);
        assert_eq!(equiv(s.get(), &o, "ab").unwrap(), 9);
        let by_hand = Call::new("t.equiv", &o.id)
            .payload(&(&o, &"ab"))
            .run(s.get(), || Ok::<u64, Error>(0))
            .unwrap();
        assert!(by_hand.replayed, "{}", s.name);
        assert_eq!(by_hand.value, 9);
    }
}

// ---- `once` and `reconcile` ----

struct Provider {
    store: Arc<dyn DynStore>,
    /// The provider's own record of what it charged: what `reconcile` asks.
    ledger: Mutex<Vec<String>>,
    crash_after_charge: std::sync::atomic::AtomicBool,
    reconciled: AtomicU32,
    bodies: AtomicU32,
}

impl Provider {
    fn new(store: &Arc<dyn DynStore>) -> Provider {
        Provider {
            store: store.clone(),
            ledger: Mutex::new(Vec::new()),
            crash_after_charge: Default::default(),
            reconciled: AtomicU32::new(0),
            bodies: AtomicU32::new(0),
        }
    }

    fn lookup(&self, order: &Order, _attempt: &u32) -> Result<Reconciled<Receipt>, PayError> {
        self.reconciled.fetch_add(1, SeqCst);
        let charged = self.ledger.lock().unwrap().contains(&order.id);
        Ok(if charged {
            Reconciled::Done(Receipt {
                order: order.id.clone(),
                cents: order.cents,
                run: 0,
            })
        } else {
            Reconciled::NotDone
        })
    }

    async fn lookup_async(
        &self,
        order: &Order,
        attempt: &u32,
    ) -> Result<Reconciled<Receipt>, PayError> {
        tokio::task::yield_now().await;
        self.lookup(order, attempt)
    }

    fn effect(&self, order: &Order) -> Receipt {
        self.bodies.fetch_add(1, SeqCst);
        self.ledger.lock().unwrap().push(order.id.clone());
        if self.crash_after_charge.swap(false, SeqCst) {
            panic!("the process died right after the provider charged");
        }
        Receipt {
            order: order.id.clone(),
            cents: order.cents,
            run: 1,
        }
    }

    #[idempotent(key = order.id, scope = "t.once", store = &*self.store, once, skip(attempt))]
    fn pay_once(&self, order: &Order, attempt: u32) -> Result<Receipt, PayError> {
        let _ = attempt;
        Ok(self.effect(order))
    }

    #[idempotent(key = order.id, scope = "t.reconcile", store = &*self.store, once, reconcile = Self::lookup, skip(attempt))]
    fn pay(&self, order: &Order, attempt: u32) -> Result<Receipt, PayError> {
        let _ = attempt;
        Ok(self.effect(order))
    }

    #[idempotent(key = order.id, scope = "t.reconcile_async", store = &*self.store, once, reconcile = Self::lookup_async, skip(attempt))]
    async fn pay_async(&self, order: &Order, attempt: u32) -> Result<Receipt, PayError> {
        let _ = attempt;
        tokio::task::yield_now().await;
        Ok(self.effect(order))
    }
}

fn crashes(f: impl FnOnce()) {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    assert!(caught.is_err(), "expected the body to crash");
}

#[test]
fn once_without_reconcile_reports_outcome_unknown() {
    for s in stores() {
        let p = Provider::new(&s.store);
        let o = order("once-1", 10);
        p.crash_after_charge.store(true, SeqCst);
        crashes(|| {
            let _ = p.pay_once(&o, 1);
        });
        assert_eq!(
            p.pay_once(&o, 2),
            Err(PayError::Rerun("outcome_unknown")),
            "{}",
            s.name
        );
        assert_eq!(p.bodies.load(SeqCst), 1, "a once body started twice");
    }
}

#[test]
fn once_with_reconcile_asks_the_world() {
    for s in stores() {
        let p = Provider::new(&s.store);
        // Crashed after the effect: reconcile finds it, records it, the body does not run again.
        let o = order("rec-1", 10);
        p.crash_after_charge.store(true, SeqCst);
        crashes(|| {
            let _ = p.pay(&o, 1);
        });
        let r = p.pay(&o, 2).unwrap();
        assert_eq!(r.run, 0, "{}: the reconciled result is returned", s.name);
        assert_eq!(p.bodies.load(SeqCst), 1);
        assert_eq!(p.pay(&o, 3).unwrap(), r, "then it is the recorded result");
        assert_eq!(p.reconciled.load(SeqCst), 1);

        // Crashed before the effect: reconcile says not done, the body runs.
        let o2 = order("rec-2", 10);
        p.ledger.lock().unwrap().clear();
        let store = &*p.store;
        let claim_then_crash = || -> Result<Receipt, PayError> {
            Call::new("t.reconcile", &o2.id)
                .payload(&(&o2,))
                .once()
                .run(store, || -> Result<Receipt, PayError> {
                    panic!("died before charging")
                })
                .map(|o| o.value)
        };
        crashes(|| {
            let _ = claim_then_crash();
        });
        assert_eq!(p.pay(&o2, 1).unwrap().run, 1);
        assert_eq!(p.reconciled.load(SeqCst), 2);

        // The async twin.
        let o3 = order("rec-3", 10);
        p.crash_after_charge.store(true, SeqCst);
        crashes(|| {
            let _ = block_on(p.pay_async(&o3, 1));
        });
        // An async claim is given back by rerun's background thread: wait for it.
        let mut result = block_on(p.pay_async(&o3, 2));
        for _ in 0..200 {
            if result != Err(PayError::Rerun("in_progress")) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            result = block_on(p.pay_async(&o3, 2));
        }
        assert_eq!(result.unwrap().run, 0);
    }
}

// ---- a renamed dependency: `crate = path` ----

mod renamed {
    use rerun_core as rr;

    #[rr::idempotent(key = n, scope = "t.renamed", store = store, crate = rr)]
    pub fn double(store: &dyn rr::DynStore, n: u32) -> Result<u32, rr::Error> {
        Ok(n * 2)
    }
}

#[test]
fn crate_argument() {
    for s in stores() {
        assert_eq!(renamed::double(s.get(), 4).unwrap(), 8);
    }
}

// ---- options reach the runtime ----

#[idempotent(key = k, scope = "t.wait", store = store, skip(runs), wait = "5s", lease = "2s", ttl = "1h 30m")]
fn slow(store: &dyn DynStore, k: u32, runs: &AtomicU32) -> Result<u32, Error> {
    runs.fetch_add(1, SeqCst);
    std::thread::sleep(std::time::Duration::from_millis(50));
    Ok(k)
}

#[idempotent(key = k, scope = "t.nowait", store = store)]
fn slow_nowait(store: &dyn DynStore, k: u32) -> Result<u32, Error> {
    std::thread::sleep(std::time::Duration::from_millis(300));
    Ok(k)
}

#[test]
fn wait_and_in_progress() {
    for s in stores() {
        let runs = AtomicU32::new(0);
        std::thread::scope(|scope| {
            let a = scope.spawn(|| slow(s.get(), 1, &runs));
            let b = scope.spawn(|| slow(s.get(), 1, &runs));
            assert_eq!(a.join().unwrap().unwrap(), 1);
            assert_eq!(b.join().unwrap().unwrap(), 1);
        });
        assert_eq!(runs.load(SeqCst), 1);
        std::thread::scope(|scope| {
            let a = scope.spawn(|| slow_nowait(s.get(), 2));
            std::thread::sleep(std::time::Duration::from_millis(100));
            let b = slow_nowait(s.get(), 2);
            assert_eq!(b.unwrap_err().kind_name(), "in_progress");
            assert_eq!(a.join().unwrap().unwrap(), 2);
        });
    }
}

#[async_trait::async_trait(?Send)]
trait PayBoxed {
    async fn pay_boxed(&self, order: &Order, attempt: u32) -> Result<Receipt, PayError>;
}

#[async_trait::async_trait(?Send)]
impl PayBoxed for Provider {
    #[idempotent(key = order.id, scope = "t.reconcile_async_trait", store = &*self.store, once, reconcile = Self::lookup_async, skip(attempt))]
    async fn pay_boxed(&self, order: &Order, attempt: u32) -> Result<Receipt, PayError> {
        let _ = attempt;
        tokio::task::yield_now().await;
        Ok(self.effect(order))
    }
}

#[test]
fn async_trait_once_with_reconcile() {
    for s in stores() {
        let p = Provider::new(&s.store);
        let o = order("boxed-1", 10);
        p.crash_after_charge.store(true, SeqCst);
        crashes(|| {
            let _ = block_on(p.pay_boxed(&o, 1));
        });
        let mut result = block_on(p.pay_boxed(&o, 2));
        for _ in 0..200 {
            if result != Err(PayError::Rerun("in_progress")) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            result = block_on(p.pay_boxed(&o, 2));
        }
        assert_eq!(
            result.unwrap().run,
            0,
            "{}: reconciled, not run again",
            s.name
        );
        assert_eq!(p.bodies.load(SeqCst), 1);
    }
}
