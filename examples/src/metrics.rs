//! rerun's metrics, exposed for Prometheus: a job worker whose calls are counted and timed,
//! and a `/metrics` endpoint (`metrics-exporter-prometheus`) scraped over HTTP.
//!
//! ```text
//! cargo run -p rerun-examples --features metrics --bin metrics            # runs, scrapes itself, prints the series
//! cargo run -p rerun-examples --features metrics --bin metrics -- --serve # and keeps serving 127.0.0.1:9464/metrics
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use rerun_core::{idempotent, Error, SqliteStore};

use crate::AppError;

/// One image to resize, as a queue would deliver it (twice, sometimes).
#[derive(serde::Serialize)]
pub struct Resize {
    /// The image's id: the dedupe key.
    pub image: String,
    /// The width to resize to.
    pub width: u32,
}

/// Resizes an image, once per image and width.
#[idempotent(key = job.image, scope = "jobs.resize", store = store)]
pub fn resize(store: &SqliteStore, job: &Resize) -> Result<String, Error> {
    Ok(format!("{}@{}w.png", job.image, job.width))
}

/// Starts the exporter on `addr` (port 0 picks a free one) and returns its address.
pub fn install(addr: SocketAddr) -> Result<SocketAddr, AppError> {
    // The exporter binds the address it is given; a free port is found first.
    let addr = if addr.port() == 0 {
        let probe = std::net::TcpListener::bind(addr)?;
        probe.local_addr()?
    } else {
        addr
    };
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| AppError::Refused(format!("installing the Prometheus exporter: {e}")))?;
    Ok(addr)
}

/// `GET /metrics` over plain HTTP/1.1, as Prometheus scrapes it.
pub fn scrape(addr: SocketAddr) -> Result<String, AppError> {
    let mut last = None;
    // The exporter's listener starts on its own thread: give it a moment.
    for _ in 0..50 {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(mut conn) => {
                conn.set_read_timeout(Some(Duration::from_secs(5)))?;
                write!(
                    conn,
                    "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
                )?;
                let mut response = String::new();
                conn.read_to_string(&mut response)?;
                let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
                if !head.starts_with("HTTP/1.1 200") {
                    return Err(AppError::Refused(format!("the exporter answered {head}")));
                }
                return Ok(body.to_owned());
            }
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(AppError::Refused(format!(
        "the exporter at {addr} did not answer: {last:?}"
    )))
}

/// Runs a few jobs (some delivered twice, one retried with another payload), then scrapes
/// the endpoint and prints rerun's series.
pub fn run(dir: &Path, out: &mut dyn Write, addr: SocketAddr) -> Result<String, AppError> {
    let addr = install(addr)?;
    let store = SqliteStore::open(dir.join("rerun.sqlite3"))?;
    for (image, width) in [
        ("img_1", 640),
        ("img_2", 640),
        ("img_1", 640),
        ("img_3", 320),
    ] {
        let job = Resize {
            image: image.into(),
            width,
        };
        writeln!(out, "resize {image}: {}", resize(&store, &job)?)?;
    }
    let retried = Resize {
        image: "img_2".into(),
        width: 1024,
    };
    if let Err(e) = resize(&store, &retried) {
        writeln!(
            out,
            "resize img_2 at another width: refused ({})",
            e.kind_name()
        )?;
    }
    let body = scrape(addr)?;
    writeln!(out, "\nGET http://{addr}/metrics (rerun's series):")?;
    for line in body.lines().filter(|l| l.starts_with("rerun_calls_total")) {
        writeln!(out, "  {line}")?;
    }
    Ok(body)
}
