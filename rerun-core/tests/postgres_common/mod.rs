//! Helpers shared by the PostgreSQL tests: the server URL, unique tables, a raw client.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rerun_core::record::{Claim, ClaimRequest, ClaimResponse};
use rerun_core::store::postgres::PostgresStore;
use rerun_core::{Error, Fingerprint, Holder, Key};

/// The test server's URL, or `None` (the test is skipped) when `RERUN_TEST_POSTGRES_URL` is unset.
pub fn url() -> Option<String> {
    rerun_core::testing::service_url("RERUN_TEST_POSTGRES_URL")
}

/// A table name no other test (or process) uses.
pub fn unique_table(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "t_{tag}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A store on a fresh table, and a guard that drops the table afterwards.
pub fn fresh(url: &str, tag: &str) -> (PostgresStore, Table) {
    let table = unique_table(tag);
    let store = PostgresStore::builder(url)
        .table(&table)
        .connect()
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    (
        store,
        Table {
            url: url.to_owned(),
            name: table,
        },
    )
}

/// Drops a test table (with its meta table and sequence) when dropped.
pub struct Table {
    pub url: String,
    pub name: String,
}

impl Drop for Table {
    fn drop(&mut self) {
        let name = &self.name;
        let _ = psql(
            &self.url,
            &format!(
                "DROP TABLE IF EXISTS \"{name}\"; DROP TABLE IF EXISTS \"{name}_meta\"; DROP SEQUENCE IF EXISTS \"{name}_fence\"; DROP FUNCTION IF EXISTS \"{name}_claim\";"
            ),
        );
    }
}

/// Runs SQL through a plain blocking client on its own thread (usable anywhere).
pub fn psql(url: &str, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let url = url.to_owned();
    let sql = sql.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            let msgs = client.simple_query(&sql).await.map_err(|e| e.to_string())?;
            let mut rows = Vec::new();
            for m in msgs {
                if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                    rows.push((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect());
                }
            }
            Ok(rows)
        })
    })
    .join()
    .map_err(|_| "psql thread panicked".to_owned())?
}

/// A claim request for tests.
pub fn request<'a>(
    key: &'a Key,
    fp: &'a Fingerprint,
    holder: &'a Holder,
    lease: Duration,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        fingerprint: fp,
        holder,
        lease,
        once: false,
        steal: None,
    }
}

/// Unwraps a granted claim.
pub fn claimed(r: Result<ClaimResponse, Error>) -> Claim {
    match r {
        Ok(ClaimResponse::Claimed(c)) => c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// A plain connection kept open across statements (to hold a transaction's locks).
pub struct Side {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Side {
    pub fn connect(url: &str) -> Side {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let client = rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("a side connection");
            tokio::spawn(conn);
            client
        });
        Side { rt, client }
    }

    /// Runs SQL (simple protocol) and returns its rows as text.
    pub fn exec(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        let msgs = self
            .rt
            .block_on(self.client.simple_query(sql))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        msgs.into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                }
                _ => None,
            })
            .collect()
    }
}

/// Waits until a backend of `application_name` waits on a lock, and terminates it.
pub fn terminate_waiting(url: &str, application_name: &str) {
    on_waiting(url, application_name, "pg_terminate_backend(pid)");
}

/// Waits until a backend of `application_name` waits on a lock.
pub fn wait_until_waiting(url: &str, application_name: &str) {
    on_waiting(url, application_name, "pid");
}

/// Selects `what` of the backends of `application_name` that wait on a lock, until there are
/// some. Each poll is a new autocommit connection: inside a transaction, `pg_stat_activity` is
/// a snapshot that would never show the waiter.
fn on_waiting(url: &str, application_name: &str, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let rows = psql(
            url,
            &format!(
                "SELECT {what} FROM pg_stat_activity \
                 WHERE application_name = '{application_name}' AND wait_event_type = 'Lock'"
            ),
        )
        .unwrap_or_default();
        if !rows.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no backend of {application_name} ever waited on the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `url` with an extra query parameter.
pub fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// Re-runs this test binary as a child running only `test`, with `env` set.
pub fn child(test: &str, env: &[(&str, String)]) -> std::process::Command {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = std::process::Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::piped());
    cmd.stderr(std::process::Stdio::inherit());
    cmd
}
