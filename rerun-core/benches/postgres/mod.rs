//! What the PostgreSQL benchmark programs share: the result every call records, the arguments
//! rerun's statements take, the floor's table, the server to use and how to clean up.

#![allow(dead_code)]

use serde::{Deserialize, Serialize};

/// A small result, as a typical idempotent function returns.
#[derive(Serialize, Deserialize)]
pub struct Receipt {
    pub id: u64,
    pub amount_cents: u64,
    pub status: String,
}

pub fn receipt() -> Receipt {
    Receipt {
        id: 1,
        amount_cents: 500,
        status: "paid".to_owned(),
    }
}

/// The lease and the ttl a raw client passes to rerun's statements, in microseconds.
pub const LEASE_US: f64 = 30e6;
pub const TTL_US: f64 = 86_400e6;

/// The server: `RERUN_BENCH_POSTGRES_URL`, else `RERUN_TEST_POSTGRES_URL`; `None` (with a
/// notice) when neither is set.
pub fn url() -> Option<String> {
    let url = ["RERUN_BENCH_POSTGRES_URL", "RERUN_TEST_POSTGRES_URL"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .filter(|u| !u.trim().is_empty());
    if url.is_none() {
        eprintln!("set RERUN_BENCH_POSTGRES_URL (e.g. postgres://postgres@127.0.0.1:5432/test) to run this benchmark");
    }
    url
}

/// The floor's table beside rerun's `table`: the key and the result, nothing else.
pub fn floor_table(table: &str) -> String {
    format!("{table}_floor")
}

/// Creates the floor's table (run once, before any caller connects: concurrent `CREATE TABLE
/// IF NOT EXISTS` statements race on the catalog).
pub fn create_floor_sql(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS \"{}\" (scope text COLLATE \"C\" NOT NULL, id text COLLATE \"C\" NOT NULL, result bytea, PRIMARY KEY (scope, id))",
        floor_table(table)
    )
}

/// The floor's table with what rerun's `recover` and purging read instead of every record: a
/// `status` and an expiry, with the two partial indexes rerun's table has on them (the index
/// of open records, which a claim enters and its completion leaves, and the index of expiring
/// completed records, which the completion enters).
pub fn floor_indexed_table(table: &str) -> String {
    format!("{}_indexed", floor_table(table))
}

/// Creates [`floor_indexed_table`], as [`create_floor_sql`] does the floor's.
pub fn create_floor_indexed_sql(table: &str) -> String {
    let t = floor_indexed_table(table);
    format!(
        "CREATE TABLE IF NOT EXISTS \"{t}\" (scope text COLLATE \"C\" NOT NULL, id text COLLATE \"C\" NOT NULL, \
         status text NOT NULL, expires_at timestamptz, result bytea, PRIMARY KEY (scope, id));
         CREATE INDEX IF NOT EXISTS \"{t}_expires\" ON \"{t}\" (expires_at) WHERE status = 'completed';
         CREATE INDEX IF NOT EXISTS \"{t}_open\" ON \"{t}\" (scope, id) WHERE status IN ('in_progress', 'unknown');"
    )
}

/// Drops what a run created: rerun's table with its companions, and the floors'.
pub fn drop_sql(table: &str) -> String {
    format!(
        "DROP TABLE IF EXISTS \"{table}\"; DROP TABLE IF EXISTS \"{table}_meta\"; DROP SEQUENCE IF EXISTS \"{table}_fence\"; DROP FUNCTION IF EXISTS \"{table}_claim\"; DROP TABLE IF EXISTS \"{}\"; DROP TABLE IF EXISTS \"{}\";",
        floor_table(table),
        floor_indexed_table(table)
    )
}

/// rerun's claim-or-fetch and completion statements, prepared on a raw client, with the
/// arguments rerun would pass: what rerun does on the wire, and nothing more.
pub struct Statements {
    claim: tokio_postgres::Statement,
    complete: tokio_postgres::Statement,
    fingerprint: Vec<u8>,
    holder: String,
    result: Vec<u8>,
}

impl Statements {
    pub async fn prepare(
        client: &tokio_postgres::Client,
        store: &rerun_core::store::postgres::PostgresStore,
    ) -> Statements {
        let text = |name| store.statement_text(name).expect("rerun's statement");
        Statements {
            claim: client.prepare(text("claim")).await.expect("prepare"),
            complete: client.prepare(text("complete")).await.expect("prepare"),
            fingerprint: rerun_core::Fingerprint::EMPTY.0.to_vec(),
            holder: rerun_core::Holder::current().encode(),
            result: rerun_core::codec::encode(&receipt()).expect("encode"),
        }
    }

    /// One call: claim-or-fetch, then, when the key was claimed, complete it. Returns the
    /// claim statement's row (column 8 is a completed record's result).
    pub async fn call(
        &self,
        client: &tokio_postgres::Client,
        key: &rerun_core::Key,
    ) -> tokio_postgres::Row {
        // Text, as the store binds them (its escaping leaves these ASCII keys as they are).
        let (scope, id) = (key.scope(), key.id());
        let row = client
            .query_one(
                &self.claim,
                &[
                    &scope,
                    &id,
                    &self.fingerprint,
                    &self.holder,
                    &false,
                    &LEASE_US,
                    &None::<i64>,
                ],
            )
            .await
            .expect("raw claim");
        if let Some(fence) = row.get::<_, Option<i64>>(0) {
            let n = client
                .execute(
                    &self.complete,
                    &[&scope, &id, &fence, &self.result, &TTL_US],
                )
                .await
                .expect("raw complete");
            assert_eq!(n, 1);
        }
        row
    }
}
