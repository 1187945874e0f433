//! Return types written through an alias of `Result`, and tuple keys over borrowed and owned
//! arguments, in the shapes the UI fixtures do not reach: `#[async_trait]` methods, `once` with
//! `reconcile`, `impl Trait` results, methods over `self`, and the derive's composite keys.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use rerun_core::{idempotent, Error, Handle, Idempotent, Key, MemoryStore, Reconciled, Store};
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq)]
enum PayError {
    Rerun(&'static str),
}

impl From<Error> for PayError {
    fn from(e: Error) -> Self {
        PayError::Rerun(e.kind_name())
    }
}

type Fallible<T> = Result<T, PayError>;
type Outcome<T, E> = Result<T, E>;
type Answer = Result<String, PayError>;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

#[derive(Serialize)]
struct Order {
    customer: String,
    seq: u64,
}

struct Billing {
    store: MemoryStore,
    runs: AtomicU32,
    prefix: String,
}

impl Billing {
    fn new() -> Billing {
        Billing {
            store: MemoryStore::new(),
            runs: AtomicU32::new(0),
            prefix: "p".to_owned(),
        }
    }

    fn runs(&self) -> u32 {
        self.runs.load(SeqCst)
    }

    /// A tuple key over a field of `self` and fields of a borrowed argument.
    #[idempotent(key = (self.prefix, order.customer, order.seq), scope = "t.tuple_self", store = &self.store)]
    fn charge(&self, order: &Order) -> Fallible<u64> {
        self.runs.fetch_add(1, SeqCst);
        Ok(order.seq)
    }

    fn check(&self, _tenant: &String, id: &u64) -> Fallible<Reconciled<String>> {
        Ok(if *id == 1 {
            Reconciled::Done("reconciled".to_owned())
        } else {
            Reconciled::NotDone
        })
    }

    /// `once` with `reconcile`, an alias without parameters, and a tuple key over owned
    /// arguments the reconcile function and the fingerprint borrow afterwards.
    #[idempotent(key = (tenant, id), scope = "t.alias_once", store = &self.store, once, reconcile = Self::check)]
    fn once(&self, tenant: String, id: u64) -> Answer {
        self.runs.fetch_add(1, SeqCst);
        Ok(format!("{tenant}-{id}"))
    }

    /// An `impl Trait` result inside a two-parameter alias.
    #[idempotent(key = (tenant, id), scope = "t.alias_impl_trait", store = &self.store)]
    fn opaque(
        &self,
        tenant: String,
        id: u64,
    ) -> Outcome<impl Serialize + serde::de::DeserializeOwned + Into<u64>, PayError> {
        self.runs.fetch_add(1, SeqCst);
        Ok(id + tenant.len() as u64)
    }

    /// Generic, async, through an alias.
    #[idempotent(key = (name, n.into()), scope = "t.alias_generic_async", store = &self.store)]
    async fn generic<T: Into<u64> + Serialize + Copy>(&self, name: String, n: T) -> Fallible<u64> {
        self.runs.fetch_add(1, SeqCst);
        Ok(n.into() + name.len() as u64)
    }
}

#[test]
fn tuple_key_over_self_and_a_borrowed_argument() {
    let b = Billing::new();
    let order = Order {
        customer: "cus_1".to_owned(),
        seq: 3,
    };
    assert_eq!(b.charge(&order), Ok(3));
    assert_eq!(b.charge(&order), Ok(3));
    assert_eq!(b.runs(), 1, "the second call replays");
    let key = Key::new("t.tuple_self", &("p".to_owned(), "cus_1".to_owned(), 3u64));
    assert!(
        b.store.inspect(&key).unwrap().is_some(),
        "recorded under {key:?}"
    );
}

#[test]
fn once_with_reconcile_through_an_alias() {
    let b = Billing::new();
    assert_eq!(b.once("t".to_owned(), 2), Ok("t-2".to_owned()));
    assert_eq!(b.once("t".to_owned(), 2), Ok("t-2".to_owned()));
    assert_eq!(b.runs(), 1, "the second call replays");
    let key = Key::new("t.alias_once", &("t".to_owned(), 2u64));
    assert!(
        b.store.inspect(&key).unwrap().is_some(),
        "recorded under {key:?}"
    );
}

#[test]
fn impl_trait_inside_an_alias() {
    let b = Billing::new();
    let first: u64 = b.opaque("ab".to_owned(), 1).map(Into::into).unwrap();
    let again: u64 = b.opaque("ab".to_owned(), 1).map(Into::into).unwrap();
    assert_eq!((first, again), (3, 3));
    assert_eq!(b.runs(), 1, "the second call replays");
}

#[test]
fn generic_async_through_an_alias() {
    let b = Billing::new();
    assert_eq!(block_on(b.generic("ab".to_owned(), 5u32)), Ok(7));
    assert_eq!(block_on(b.generic("ab".to_owned(), 5u32)), Ok(7));
    assert_eq!(b.runs(), 1, "the second call replays");
    let key = Key::new("t.alias_generic_async", &("ab".to_owned(), 5u64));
    assert!(
        b.store.inspect(&key).unwrap().is_some(),
        "recorded under {key:?}"
    );
}

// ---- `#[async_trait]` ----

#[async_trait::async_trait]
trait Mailer {
    async fn send(&self, to: String, seq: u64) -> Fallible<String>;
    async fn send_plain(&self, to: String) -> Answer;
}

struct Outbox {
    store: MemoryStore,
    runs: AtomicU32,
}

#[async_trait::async_trait]
impl Mailer for Outbox {
    #[idempotent(key = (to, seq), scope = "t.alias_async_trait", store = &self.store)]
    async fn send(&self, to: String, seq: u64) -> Fallible<String> {
        self.runs.fetch_add(1, SeqCst);
        Ok(format!("{to}#{seq}"))
    }

    #[idempotent(key = to, scope = "t.alias_async_trait_plain", store = &self.store)]
    async fn send_plain(&self, to: String) -> Answer {
        self.runs.fetch_add(1, SeqCst);
        Ok(to)
    }
}

#[test]
fn async_trait_methods_through_an_alias() {
    let o = Outbox {
        store: MemoryStore::new(),
        runs: AtomicU32::new(0),
    };
    assert_eq!(
        block_on(o.send("a@b".to_owned(), 1)),
        Ok("a@b#1".to_owned())
    );
    assert_eq!(
        block_on(o.send("a@b".to_owned(), 1)),
        Ok("a@b#1".to_owned())
    );
    assert_eq!(
        block_on(o.send_plain("c@d".to_owned())),
        Ok("c@d".to_owned())
    );
    assert_eq!(
        block_on(o.send_plain("c@d".to_owned())),
        Ok("c@d".to_owned())
    );
    assert_eq!(o.runs.load(SeqCst), 2, "the second calls replay");
    let key = Key::new("t.alias_async_trait", &("a@b".to_owned(), 1u64));
    assert!(
        o.store.inspect(&key).unwrap().is_some(),
        "recorded under {key:?}"
    );
}

// ---- the derive: several key fields are borrowed, never moved ----

#[derive(Serialize, Deserialize, Idempotent)]
#[rerun(scope = "t.derive_composite")]
struct Transfer {
    #[rerun(key)]
    tenant: String,
    #[rerun(key)]
    id: String,
    #[rerun(key)]
    seq: u64,
    cents: u64,
}

impl Handle for Transfer {
    type Output = u64;
    type Error = Error;
    fn handle(&self) -> Result<u64, Error> {
        Ok(self.cents)
    }
}

#[test]
fn derive_composite_key_of_owned_fields() {
    let t = Transfer {
        tenant: "t".to_owned(),
        id: "tr_1".to_owned(),
        seq: 2,
        cents: 500,
    };
    assert_eq!(
        t.idempotency_key(),
        Key::new(
            "t.derive_composite",
            &("t".to_owned(), "tr_1".to_owned(), 2u64)
        )
    );
    let store = MemoryStore::new();
    assert_eq!(t.run(&store).unwrap(), 500);
    assert_eq!(t.run(&store).unwrap(), 500);
    // The fields are still there after the runs.
    assert_eq!((t.tenant.as_str(), t.id.as_str()), ("t", "tr_1"));
}
