//! A TCP proxy for fault tests: it forwards between clients and a server until told to
//! **freeze** (hold every byte in both directions, as a hung peer or a partitioned network
//! does: the sockets stay open and silent), to **swallow** the next reply (the server acted,
//! the client never hears of it), to **delay** every reply (a slow server or a long path), or
//! to **cut** every connection.
//!
//! ```no_run
//! use rerun_core::testing::proxy::Proxy;
//! let proxy = Proxy::start("127.0.0.1:6379")?;
//! let url = format!("redis://{}", proxy.addr());
//! // … connect a store to `url` …
//! proxy.freeze();   // calls through the proxy now hang until their deadlines
//! proxy.thaw();     // held bytes flow again
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A running proxy; it stops accepting when dropped (open connections end with their peers).
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    frozen: Mutex<bool>,
    thawed: Condvar,
    swallow: AtomicBool,
    /// How long each chunk of a reply is held before it is forwarded, in microseconds.
    delay_micros: AtomicU64,
    /// Bumped by `cut`: pumps of older generations end.
    generation: AtomicU64,
    stopped: AtomicBool,
}

impl Shared {
    /// Blocks while frozen; returns whether the connection of `generation` may go on.
    fn pass(&self, generation: u64) -> bool {
        let mut frozen = self.frozen.lock().unwrap_or_else(|p| p.into_inner());
        while *frozen && !self.stopped.load(Ordering::SeqCst) {
            frozen = self
                .thawed
                .wait_timeout(frozen, Duration::from_millis(50))
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        self.generation.load(Ordering::SeqCst) == generation
    }
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`
    /// (`host:port`).
    pub fn start(upstream: &str) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let upstream = upstream.to_owned();
        let accept = shared.clone();
        std::thread::Builder::new()
            .name("rerun-test-proxy".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if accept.stopped.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    let Ok(server) = TcpStream::connect(&upstream) else {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    };
                    let generation = accept.generation.load(Ordering::SeqCst);
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                        continue;
                    };
                    spawn_pump(client, s2, accept.clone(), generation, false);
                    spawn_pump(server, c2, accept.clone(), generation, true);
                }
            })?;
        Ok(Proxy { addr, shared })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Holds every byte in both directions until [`Proxy::thaw`]; connections stay open.
    pub fn freeze(&self) {
        *self.shared.frozen.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    /// Lets held bytes flow again.
    pub fn thaw(&self) {
        *self.shared.frozen.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.shared.thawed.notify_all();
    }

    /// Drops the next chunk the server sends (on any connection) and cuts that connection:
    /// the server acted on the request, the client never hears the answer.
    pub fn swallow_next_reply(&self) {
        self.shared.swallow.store(true, Ordering::SeqCst);
    }

    /// Holds each chunk the server sends for `delay` before forwarding it (zero: no delay), on
    /// every connection, open or new.
    pub fn delay_replies(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_micros.store(micros, Ordering::SeqCst);
    }

    /// Cuts every open connection; new ones are forwarded as before.
    pub fn cut(&self) {
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        self.thaw();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        self.thaw();
        // Wakes the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(self.addr);
    }
}

fn spawn_pump(
    mut from: TcpStream,
    mut to: TcpStream,
    shared: Arc<Shared>,
    generation: u64,
    replies: bool,
) {
    let _ = std::thread::Builder::new()
        .name("rerun-test-proxy-pump".into())
        .spawn(move || {
            // A read timeout lets a pump notice a cut while its peer is silent.
            let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                if shared.generation.load(Ordering::SeqCst) != generation {
                    break;
                }
                let n = match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        continue
                    }
                    Err(_) => break,
                };
                if !shared.pass(generation) {
                    break;
                }
                if replies && shared.swallow.swap(false, Ordering::SeqCst) {
                    break;
                }
                let delay = shared.delay_micros.load(Ordering::SeqCst);
                if replies && delay > 0 {
                    std::thread::sleep(Duration::from_micros(delay));
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        });
}
