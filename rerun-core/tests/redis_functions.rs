//! `RedisStore`'s transitions as Redis functions (Redis 7 and later), against a real Redis
//! (`RERUN_TEST_REDIS_URL`): the store calls them where the server has them, with the same round
//! trips as the scripts; it loads its library again when the library vanished; two libraries
//! of different code live side by side. The scripts' path is the conformance suite's, forced
//! (`conformance_redis.rs`).
#![cfg(feature = "redis")]

mod redis_util;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rerun_core::store::redis::{RedisOptions, RedisStore};
use rerun_core::testing::proxy::Proxy;
use rerun_core::{Call, Error, Key, Store};

use redis_util::{cleanup, raw, unique, upstream, url, via};

/// A TCP proxy that records the name of every command a client sends (parsed from the RESP
/// arrays on the wire), so a test counts the round trips of a call as the server receives them.
struct Counting {
    addr: std::net::SocketAddr,
    commands: Arc<Mutex<Vec<String>>>,
}

impl Counting {
    fn start(upstream: &str) -> Counting {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
        let addr = listener.local_addr().expect("the proxy's address");
        let commands = Arc::new(Mutex::new(Vec::new()));
        let seen = commands.clone();
        let upstream = upstream.to_owned();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(mut client) = client else { return };
                let Ok(mut server) = TcpStream::connect(&upstream) else {
                    return;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut pending = Vec::new();
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        // Counted before it is forwarded: once the reply is back, the command
                        // is in the list.
                        pending.extend_from_slice(&buf[..n]);
                        while let Some((name, used)) = command(&pending) {
                            seen.lock().unwrap().push(name);
                            pending.drain(..used);
                        }
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(std::net::Shutdown::Both);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut server, &mut client);
                    let _ = client.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Counting { addr, commands }
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The commands sent since the last call.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.commands.lock().unwrap())
    }
}

/// The first command in `buf` (a RESP array of bulk strings): its name, upper-cased, and its
/// length in bytes; `None` while it is incomplete.
fn command(buf: &[u8]) -> Option<(String, usize)> {
    fn line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
        let end = buf.get(at..)?.windows(2).position(|w| w == b"\r\n")? + at;
        let n = std::str::from_utf8(buf.get(at + 1..end)?)
            .ok()?
            .parse()
            .ok()?;
        Some((n, end + 2))
    }
    if buf.is_empty() {
        return None;
    }
    assert_eq!(buf[0], b'*', "a RESP array");
    let (items, mut at) = line(buf, 0)?;
    let mut name = String::new();
    for i in 0..items {
        let (len, start) = line(buf, at)?;
        let item = buf.get(start..start + len)?;
        if i == 0 {
            name = String::from_utf8_lossy(item).to_uppercase();
        }
        at = start + len + 2;
        if buf.len() < at {
            return None;
        }
    }
    Some((name, at))
}

fn options(name: &str) -> RedisOptions {
    RedisOptions::new()
        .prefix(format!("{name}:"))
        .client_name(name)
        .upgrade_sweep(false)
}

/// The libraries on the server named `name` (`FUNCTION LIST LIBRARYNAME` matches a pattern).
fn libraries(url: &str, name: &str) -> Vec<String> {
    let list: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(name)
        .query(&mut raw(url))
        .expect("FUNCTION LIST");
    let redis::Value::Array(libraries) = list else {
        panic!("FUNCTION LIST answered {list:?}")
    };
    libraries
        .iter()
        .filter_map(|library| {
            let fields: Vec<String> = match library {
                redis::Value::Array(fields) => fields
                    .iter()
                    .filter_map(|f| redis::from_redis_value::<String>(f.clone()).ok())
                    .collect(),
                redis::Value::Map(fields) => fields
                    .iter()
                    .flat_map(|(k, v)| [k, v])
                    .filter_map(|f| redis::from_redis_value::<String>(f.clone()).ok())
                    .collect(),
                _ => Vec::new(),
            };
            let at = fields.iter().position(|f| f == "library_name")?;
            fields.get(at + 1).cloned()
        })
        .filter(|found| found == name)
        .collect()
}

fn delete_library(url: &str, name: &str) {
    let _: redis::RedisResult<()> = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg(name)
        .query(&mut raw(url));
}

/// A library of this test's own (another variant of the code, so another name), deleted when
/// the test ends: deleting it mid-test touches no other test's library.
struct OwnLibrary {
    url: String,
    name: String,
    prefix: String,
}

impl Drop for OwnLibrary {
    fn drop(&mut self) {
        delete_library(&self.url, &self.name);
        cleanup(&self.url, &self.prefix);
    }
}

fn own_store(url: &str, store_url: &str, test: &str) -> (RedisStore, OwnLibrary) {
    own_store_with(url, store_url, test, |options| options)
}

fn own_store_with(
    url: &str,
    store_url: &str,
    test: &str,
    more: impl FnOnce(RedisOptions) -> RedisOptions,
) -> (RedisStore, OwnLibrary) {
    let name = unique(test);
    let store = RedisStore::connect_with(store_url, more(options(&name).library_variant(&name)))
        .expect("connecting to the test Redis");
    let library = store
        .library_name()
        .expect("Redis 7 has functions: the store calls them")
        .to_owned();
    let own = OwnLibrary {
        url: url.to_owned(),
        name: library,
        prefix: format!("{name}:"),
    };
    (store, own)
}

fn run(store: &RedisStore, i: u64) -> Result<String, Error> {
    Call::new("fn", &i)
        .run(store, || Ok::<_, Error>(format!("done {i}")))
        .map(|out| out.value)
}

async fn run_async(store: &RedisStore, i: u64) -> Result<String, Error> {
    Call::new("fn", &i)
        .run_async(store, async move { Ok::<_, Error>(format!("done {i}")) })
        .await
        .map(|out| out.value)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

#[test]
fn functions_are_used_with_the_round_trips_of_the_scripts() {
    let Some(url) = url() else { return };
    let proxy = Counting::start(&upstream(&url));
    let (store, own) = own_store(&url, &proxy.url(), "fn-trips");
    assert_eq!(libraries(&url, &own.name), vec![own.name.clone()]);
    let scripts_name = unique("fn-trips-scripts");
    let scripts = RedisStore::connect_with(&proxy.url(), options(&scripts_name).scripts_only(true))
        .expect("connecting to the test Redis");
    assert_eq!(scripts.library_name(), None);
    let rt = runtime();
    for (store, call) in [(&store, "FCALL"), (&scripts, "EVALSHA")] {
        // Connections opened (and named) before counting.
        run(store, 0).expect("a call");
        rt.block_on(run_async(store, 1)).expect("an async call");
        proxy.take();
        assert_eq!(run(store, 2).expect("a fresh call"), "done 2");
        assert_eq!(proxy.take(), vec![call, call], "a fresh sync call");
        assert_eq!(run(store, 2).expect("a repeated call"), "done 2");
        assert_eq!(proxy.take(), vec![call], "a repeated sync call");
        assert_eq!(
            rt.block_on(run_async(store, 3)).expect("a fresh call"),
            "done 3"
        );
        assert_eq!(proxy.take(), vec![call, call], "a fresh async call");
        assert_eq!(
            rt.block_on(run_async(store, 3)).expect("a repeat"),
            "done 3"
        );
        assert_eq!(proxy.take(), vec![call], "a repeated async call");
    }
    cleanup(&url, &format!("{scripts_name}:"));
}

#[test]
fn a_vanished_library_is_loaded_again_sync_and_async() {
    let Some(url) = url() else { return };
    let (store, own) = own_store(&url, &url, "fn-vanish");
    let rt = runtime();
    assert_eq!(run(&store, 1).expect("a call"), "done 1");
    rt.block_on(run_async(&store, 2)).expect("an async call");
    for round in 0..2u64 {
        // A fresh call (claim, complete) and a repeat, each right after the library is gone.
        delete_library(&url, &own.name);
        assert!(libraries(&url, &own.name).is_empty());
        let i = 10 + round * 10;
        assert_eq!(
            run(&store, i).expect("a fresh call after FUNCTION DELETE"),
            format!("done {i}")
        );
        assert_eq!(libraries(&url, &own.name), vec![own.name.clone()]);
        delete_library(&url, &own.name);
        assert_eq!(
            run(&store, 1).expect("a repeat after FUNCTION DELETE"),
            "done 1"
        );
        delete_library(&url, &own.name);
        let fresh = rt.block_on(run_async(&store, i + 1));
        assert_eq!(
            fresh.expect("an async call after FUNCTION DELETE"),
            format!("done {}", i + 1)
        );
        delete_library(&url, &own.name);
        let repeat = rt.block_on(run_async(&store, 2));
        assert_eq!(
            repeat.expect("an async repeat after FUNCTION DELETE"),
            "done 2"
        );
        assert_eq!(libraries(&url, &own.name), vec![own.name.clone()]);
        // Inspect and scan too.
        delete_library(&url, &own.name);
        let page =
            rerun_core::Store::scan(&store, None, 100).expect("a scan after FUNCTION DELETE");
        assert!(!page.records.is_empty());
    }
}

/// A sync call that needs several round trips (its function gone: the call, the library loaded
/// again, the call again) ends by its time limit, however each round trip is answered within
/// the socket's timeout: a slow server does not stretch it to a multiple of its limit.
#[test]
fn a_call_of_several_round_trips_ends_by_its_deadline() {
    let Some(url) = url() else { return };
    let proxy = Proxy::start(&upstream(&url)).expect("a proxy");
    let limit = Duration::from_secs(1);
    let (store, own) = own_store_with(&url, &via(proxy.addr(), &url), "fn-deadline", |options| {
        options.response_timeout(limit)
    });
    let key = Key::new("fn", "deadline");
    assert!(Store::inspect(&store, &key).expect("a read").is_none());
    delete_library(&url, &own.name);
    // Each reply just within the socket's timeout, three round trips: 2.1 s before the fix.
    proxy.delay_replies(limit * 7 / 10);
    let started = Instant::now();
    let read = Store::inspect(&store, &key);
    let took = started.elapsed();
    proxy.delay_replies(Duration::ZERO);
    let e = read.expect_err("the call ran out of time");
    assert!(e.to_string().contains("no answer within"), "{e}");
    assert!(
        took < limit * 17 / 10,
        "a call of a 1 s limit took {took:?}"
    );
    // The next call loads the library and answers.
    assert!(Store::inspect(&store, &key).expect("a read").is_none());
    assert_eq!(libraries(&url, &own.name), vec![own.name.clone()]);
}

#[test]
fn two_libraries_of_different_code_live_side_by_side() {
    let Some(url) = url() else { return };
    let (a, own_a) = own_store(&url, &url, "fn-a");
    let (b, own_b) = own_store(&url, &url, "fn-b");
    assert_ne!(own_a.name, own_b.name);
    assert_ne!(a.function_name("claim"), b.function_name("claim"));
    // Connecting again to a library that is there already is not an error, and loads nothing new.
    let again_name = unique("fn-a2");
    let variant_a = own_a.prefix.trim_end_matches(':').to_owned();
    let again = RedisStore::connect_with(&url, options(&again_name).library_variant(variant_a))
        .expect("connecting with the library already loaded");
    assert_eq!(again.library_name(), Some(own_a.name.as_str()));
    for store in [&a, &b, &again] {
        assert_eq!(run(store, 7).expect("a fresh call"), "done 7");
        assert_eq!(run(store, 7).expect("a repeat"), "done 7");
    }
    assert_eq!(libraries(&url, &own_a.name), vec![own_a.name.clone()]);
    assert_eq!(libraries(&url, &own_b.name), vec![own_b.name.clone()]);
    // Deleting one leaves the other's calls alone.
    delete_library(&url, &own_a.name);
    assert_eq!(libraries(&url, &own_b.name), vec![own_b.name.clone()]);
    assert_eq!(run(&b, 8).expect("a call of the other library"), "done 8");
    assert!(libraries(&url, &own_a.name).is_empty());
    cleanup(&url, &format!("{again_name}:"));
}
