//! A small payments API behind `rerun_http::IdempotencyLayer`, on the embedded SQLite store:
//! `POST /payments` charges a card once per `Idempotency-Key`, whatever the client retries.
//!
//! By default the program tests itself: it starts the server on a free loopback port, sends a
//! payment, retries it (replayed: the card is not charged again), sends a duplicate while the
//! first is still at the card network (409), tampers with a retry (422) and forgets the key
//! (400), then exits. With `--serve` it keeps serving on 127.0.0.1:3000 (or `PORT`) for the
//! README's curl commands.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rerun_core::SqliteStore;
use rerun_http::IdempotencyLayer;
use serde::{Deserialize, Serialize};

use crate::AppError;

/// What a client asks for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewPayment {
    /// The amount, in cents.
    pub amount_cents: u64,
    /// The card to charge (a token, as a card vault gives them).
    pub card: String,
}

/// What the API answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Payment {
    /// The payment's id.
    pub id: String,
    /// The amount charged, in cents.
    pub amount_cents: u64,
    /// `"captured"`.
    pub status: String,
}

/// The card network: it counts the charges it made, which must never be more than the
/// payments the clients meant.
#[derive(Debug, Default)]
pub struct Bank {
    started: AtomicU64,
    charges: AtomicU64,
}

impl Bank {
    /// How many charges the bank made.
    pub fn charges(&self) -> u64 {
        self.charges.load(Ordering::SeqCst)
    }

    /// How many charges the bank began.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    async fn charge(&self, _card: &str, _amount_cents: u64) -> u64 {
        self.started.fetch_add(1, Ordering::SeqCst);
        // The card network takes its time: long enough for a double click to arrive meanwhile.
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.charges.fetch_add(1, Ordering::SeqCst) + 1
    }
}

async fn create_payment(
    State(bank): State<Arc<Bank>>,
    Json(new): Json<NewPayment>,
) -> (StatusCode, Json<Payment>) {
    let n = bank.charge(&new.card, new.amount_cents).await;
    let payment = Payment {
        id: format!("pay_{n}"),
        amount_cents: new.amount_cents,
        status: "captured".into(),
    };
    (StatusCode::CREATED, Json(payment))
}

async fn charges(State(bank): State<Arc<Bank>>) -> String {
    format!("{}\n", bank.charges())
}

/// The account a request was authenticated as, which the authentication layer puts in the
/// request's extensions.
#[derive(Debug, Clone)]
pub struct Account(pub String);

/// The API keys this service knows, and their accounts (a real service looks them up in its
/// own store, or verifies a signed token).
const API_KEYS: &[(&str, &str)] = &[("sk_test_ada", "acct_ada"), ("sk_test_grace", "acct_grace")];

/// Authentication: a request whose bearer token is a known API key goes on with its
/// [`Account`]; any other is refused with `401` before it reaches the idempotency layer.
async fn authenticate(mut req: axum::extract::Request, next: Next) -> Response {
    let account = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|token| API_KEYS.iter().find(|(key, _)| *key == token))
        .map(|(_, account)| Account((*account).to_owned()));
    match account {
        Some(account) => {
            req.extensions_mut().insert(account);
            next.run(req).await
        }
        None => (StatusCode::UNAUTHORIZED, "an API key is required\n").into_response(),
    }
}

/// The API: `POST /payments` (authenticated; a key required, scoped by the caller's account)
/// and `GET /charges` (how many charges the bank made).
pub fn app(store: SqliteStore, bank: Arc<Bank>) -> Router {
    let idempotency = IdempotencyLayer::new(store)
        .required(true)
        .principal(|req: &http::request::Parts| {
            // The account authentication found, never a credential or anything else the
            // client chose: one account's keys can never reach another's responses, and keys
            // are stored and listed (`rerunctl ls`), so no secret goes in them.
            req.extensions.get::<Account>().map(|a| a.0.clone())
        })
        .ttl(Duration::from_secs(24 * 3600));
    Router::new()
        .route(
            "/payments",
            // The last layer runs first: authentication, then the idempotency layer.
            post(create_payment)
                .layer(idempotency)
                .layer(middleware::from_fn(authenticate)),
        )
        .route("/charges", get(charges))
        .with_state(bank)
}

/// Serves the API on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, store: SqliteStore) -> std::io::Result<()> {
    axum::serve(listener, app(store, Arc::new(Bank::default()))).await
}

/// One request of the self-test, and what came back.
struct Exchange {
    status: u16,
    replayed: bool,
    body: String,
}

async fn post_payment(
    http: &reqwest::Client,
    addr: SocketAddr,
    key: Option<&str>,
    body: &str,
) -> Result<Exchange, AppError> {
    let mut req = http
        .post(format!("http://{addr}/payments"))
        .header("authorization", "Bearer sk_test_ada")
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        req = req.header("idempotency-key", format!("\"{key}\""));
    }
    let response = req
        .send()
        .await
        .map_err(|e| AppError::Refused(e.to_string()))?;
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let body = response
        .text()
        .await
        .map_err(|e| AppError::Refused(e.to_string()))?;
    Ok(Exchange {
        status,
        replayed,
        body,
    })
}

/// The problem's `detail`, or the body.
fn detail(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["detail"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.to_owned())
}

/// The self-test: a payment, its retry, a concurrent duplicate, a tampered retry, a request
/// without a key. Returns the bank's charge count (2: the payment and the duplicate's own).
pub async fn self_test(
    addr: SocketAddr,
    bank: &Bank,
    out: &mut dyn Write,
) -> Result<u64, AppError> {
    let http = reqwest::Client::new();
    let order = r#"{"amount_cents":4200,"card":"tok_visa"}"#;

    let first = post_payment(&http, addr, Some("order-1001"), order).await?;
    writeln!(
        out,
        "POST /payments (key order-1001)        -> {} {}",
        first.status, first.body
    )?;
    let retry = post_payment(&http, addr, Some("order-1001"), order).await?;
    writeln!(
        out,
        "the same request again (a retry)       -> {} {} (Idempotent-Replayed: {})",
        retry.status, retry.body, retry.replayed
    )?;

    // A double click: the second request arrives while the first is at the card network.
    let slow = {
        let http = http.clone();
        tokio::spawn(async move { post_payment(&http, addr, Some("order-1002"), order).await })
    };
    for _ in 0..2000 {
        if bank.started() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let double = post_payment(&http, addr, Some("order-1002"), order).await?;
    writeln!(
        out,
        "a double click while the first runs    -> {}: {}",
        double.status,
        detail(&double.body)
    )?;
    let slow = slow.await.map_err(|e| AppError::Refused(e.to_string()))??;
    writeln!(
        out,
        "the first of the two                   -> {} {}",
        slow.status, slow.body
    )?;

    let tampered = post_payment(
        &http,
        addr,
        Some("order-1001"),
        r#"{"amount_cents":990000,"card":"tok_visa"}"#,
    )
    .await?;
    writeln!(
        out,
        "order-1001's key with another amount   -> {}: {}",
        tampered.status,
        detail(&tampered.body)
    )?;
    let keyless = post_payment(&http, addr, None, order).await?;
    writeln!(
        out,
        "no Idempotency-Key                     -> {}: {}",
        keyless.status,
        detail(&keyless.body)
    )?;

    let charged = bank.charges();
    writeln!(
        out,
        "charges the bank made: {charged} (two orders, five more requests)"
    )?;
    let expected = [
        (first.status, false, 201),
        (retry.status, !retry.replayed, 201),
        (double.status, false, 409),
        (slow.status, false, 201),
        (tampered.status, false, 422),
        (keyless.status, false, 400),
    ];
    if expected
        .iter()
        .any(|&(got, wrong, want)| got != want || wrong)
        || charged != 2
        || retry.body != first.body
    {
        return Err(AppError::Refused(
            "the API did not behave as documented".into(),
        ));
    }
    Ok(charged)
}

/// The program: the self-test in `dir` (a fresh SQLite store there).
pub fn run(dir: &Path, out: &mut dyn Write) -> Result<(), AppError> {
    let store = SqliteStore::open(dir.join("rerun.sqlite3"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let bank = Arc::new(Bank::default());
        let router = app(store, bank.clone());
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let result = self_test(addr, &bank, out).await;
        server.abort();
        result.map(|_| ())
    })
}

/// `--serve`: the API on 127.0.0.1:3000 (or `PORT`), its store in `.rerun/` here.
pub fn serve_forever() -> Result<(), AppError> {
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3000);
    std::fs::create_dir_all(".rerun")?;
    let store = SqliteStore::open(".rerun/http-example.sqlite3")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        println!("serving the payments API on http://127.0.0.1:{port} (Ctrl-C stops it)");
        serve(listener, store).await?;
        Ok(())
    })
}
