//! An order-events consumer: every `OrderCreated` event is written to PostgreSQL and a receipt
//! is sent once per order, however often the broker delivers the event. [`nats`] and [`amqp`]
//! run it on NATS JetStream and on RabbitMQ.
//!
//! The demo publishes four orders and publishes one of them a second time under another broker
//! message id (a producer that retried), consumes until every message is handled, prints the
//! orders and receipts, and deletes the stream or queue and the tables it created.

pub mod amqp;
pub mod db;
pub mod nats;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rerun_core::{Call, DynStore, Idempotent, PostgresStore, Reconciled, SqliteStore};
use rerun_queue::{handler, Handled, Handler, Message, Report, Settings};
use serde::{Deserialize, Serialize};

use crate::AppError;
use db::Db;

/// How long the demo waits for every message to be handled before it gives up.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// An order was created: the event the shop publishes.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[rerun(scope = "orders.order_created")]
pub struct OrderCreated {
    /// The order, and the dedupe key: one effect per order, whatever the broker message id.
    #[rerun(key)]
    pub order_id: String,
    /// Who ordered.
    pub customer: String,
    /// The amount, in cents.
    pub cents: i64,
}

/// The demo's messages: a body and a broker message id each; `o-2` is published twice.
pub fn events() -> Result<Vec<(Vec<u8>, String)>, AppError> {
    let orders = [
        ("o-1", "ada", 1250),
        ("o-2", "grace", 990),
        ("o-3", "alan", 4200),
        ("o-4", "edsger", 300),
        ("o-2", "grace", 990),
    ];
    orders
        .iter()
        .enumerate()
        .map(|(i, (order_id, customer, cents))| {
            let event = OrderCreated {
                order_id: (*order_id).to_owned(),
                customer: (*customer).to_owned(),
                cents: *cents,
            };
            let body = serde_json::to_vec(&event)
                .map_err(|e| AppError::Service(format!("encoding an event: {e}")))?;
            Ok((body, format!("msg-{}", i + 1)))
        })
        .collect()
}

/// Where the demo runs: the PostgreSQL URL, the names it creates, and rerun's store.
pub struct Setup {
    /// The orders database.
    pub db: Db,
    /// rerun's store: SQLite in the temporary directory, or PostgreSQL when
    /// `RERUN_EXAMPLE_STORE=postgres` (in the demo's schema).
    pub store: Arc<dyn DynStore>,
    /// The stream, queue and schema name, unique to this run.
    pub name: String,
}

/// The value of `var`, or `default`.
pub fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// A name no other run uses, for the stream or queue and the schema.
pub fn unique_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000)
        .unwrap_or(0);
    format!("rq_orders_{}_{nanos}", std::process::id())
}

/// Connects to PostgreSQL, creates the demo's schema and tables, and opens rerun's store.
pub async fn setup(dir: &Path) -> Result<Setup, AppError> {
    let name = unique_name();
    let url = env_or(
        "RERUN_EXAMPLE_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/test",
    );
    let db = Db::create(&url, &name).await?;
    let store: Arc<dyn DynStore> = if env_or("RERUN_EXAMPLE_STORE", "sqlite") == "postgres" {
        let (url, schema) = (url.clone(), name.clone());
        let opened = tokio::task::spawn_blocking(move || {
            PostgresStore::builder(&url).schema(schema).connect()
        })
        .await
        .map_err(|e| AppError::Service(format!("opening the store: {e}")));
        match opened {
            Ok(Ok(store)) => Arc::new(store),
            Ok(Err(e)) => {
                db.drop_schema().await;
                return Err(AppError::Rerun(e));
            }
            Err(e) => {
                db.drop_schema().await;
                return Err(e);
            }
        }
    } else {
        match SqliteStore::open(dir.join("rerun.db")) {
            Ok(store) => Arc::new(store),
            Err(e) => {
                db.drop_schema().await;
                return Err(AppError::Rerun(e));
            }
        }
    };
    Ok(Setup { db, store, name })
}

/// The consumer's handler: writes the order (converges: one row per order whatever the number
/// of runs) and sends the receipt once, reconciled from the receipts already sent if a crash
/// left it unknown.
pub fn order_handler(store: Arc<dyn DynStore>, db: Db) -> impl Handler {
    let receipts = store.clone();
    handler::typed(store, move |order: OrderCreated| {
        let db = db.clone();
        let store = receipts.clone();
        async move {
            db.insert_order(&order).await?;
            let sent = async {
                Ok::<_, rerun_core::Error>(if db.receipts_for(&order.order_id).await? > 0 {
                    Reconciled::Done(())
                } else {
                    Reconciled::NotDone
                })
            };
            Call::new("orders.send_receipt", &order.order_id)
                .once()
                .run_async_reconciled(&*store, sent, db.send_receipt(&order))
                .await?;
            Ok::<_, rerun_core::Error>(order.cents)
        }
    })
}

/// A handler that counts the messages its inner handler settled as done (ran or replayed), so
/// the demo knows when to stop.
pub struct Counting<H> {
    inner: H,
    done: Arc<AtomicU64>,
}

impl<H: Handler> Counting<H> {
    /// Wraps `inner`; `done` counts its settled messages.
    pub fn new(inner: H, done: Arc<AtomicU64>) -> Counting<H> {
        Counting { inner, done }
    }
}

impl<H: Handler> Handler for Counting<H> {
    fn handle<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            let handled = self.inner.handle(message).await;
            if matches!(handled, Handled::Done { .. }) {
                self.done.fetch_add(1, Ordering::SeqCst);
            }
            handled
        })
    }
}

/// Resolves once `done` reaches `expected`.
pub async fn all_done(done: Arc<AtomicU64>, expected: u64) {
    while done.load(Ordering::SeqCst) < expected {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The consumer's settings in the demo.
pub fn settings() -> Settings {
    Settings::new().max_in_flight(4)
}

/// Prints what the consumer did and what is in the database.
pub async fn print_summary(
    out: &mut dyn Write,
    broker: &str,
    published: usize,
    report: &Report,
    db: &Db,
) -> Result<(), AppError> {
    writeln!(
        out,
        "published {published} messages to {broker} (order o-2 twice, under two message ids)"
    )?;
    writeln!(
        out,
        "consumer: {} handled, {} replayed (duplicates acked without running again)",
        report.ran, report.replayed
    )?;
    writeln!(out, "orders in PostgreSQL:")?;
    for (order_id, customer, cents, receipts) in db.orders_with_receipts().await? {
        writeln!(
            out,
            "  {order_id} {customer} {cents} cents: {receipts} receipt(s)"
        )?;
    }
    Ok(())
}

/// Runs `demo` on a fresh setup, then deletes the schema whatever happened.
pub async fn with_setup<F, Fut>(dir: &Path, demo: F) -> Result<(), AppError>
where
    F: FnOnce(Setup) -> Fut,
    Fut: std::future::Future<Output = Result<(), AppError>>,
{
    let setup = setup(dir).await?;
    let db = setup.db.clone();
    let result = demo(setup).await;
    db.drop_schema().await;
    result
}

/// Runs an async demo on a runtime of its own, for a `main`.
pub fn block_on<F: std::future::Future<Output = Result<(), AppError>>>(
    demo: F,
) -> Result<(), AppError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(AppError::from)?
        .block_on(demo)
}
