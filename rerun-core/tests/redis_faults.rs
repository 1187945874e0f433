//! Store faults on `RedisStore` (reliability 16): the connection killed mid-call with
//! `CLIENT KILL` gives a typed, retryable `Error::Store` naming the key, and the state converges
//! when the call is retried; a completion that failed at once on a dead connection is sent again
//! on a new one, and the call reports its result.
//!
//! A call is caught "mid-call" by pausing the server's writes (`CLIENT PAUSE … WRITE`): the
//! script is sent and queued, the connection is killed under it, then the pause is lifted. The
//! other half of a cut, a script that ran but whose reply never arrived, goes through a proxy
//! that swallows the reply and cuts the connection.
#![cfg(feature = "redis")]

mod redis_util;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rerun_core::record::{ClaimRequest, ClaimResponse};
use rerun_core::store::redis::RedisStore;
use rerun_core::{codec, Call, Error, Fingerprint, Holder, Key, Status, Store};

use redis_util::{cleanup, kill_clients, raw, store, unique, url};

/// Runs `call` while the server's writes are paused, kills the store's connections under it,
/// lifts the pause, and returns what the call returned.
fn killed_mid_call<T: Send>(url: &str, name: &str, call: impl FnOnce() -> T + Send) -> T {
    let mut admin = raw(url);
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(5000)
        .arg("WRITE")
        .query(&mut admin)
        .unwrap();
    let out = std::thread::scope(|s| {
        let handle = s.spawn(call);
        // Let the script reach the server and queue behind the pause.
        std::thread::sleep(Duration::from_millis(150));
        let killed = kill_clients(&mut admin, name);
        let _: () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query(&mut admin)
            .unwrap();
        assert!(killed >= 1, "no connection named {name} to kill");
        handle.join().expect("the call panicked")
    });
    out
}

fn expect_store_error<T: std::fmt::Debug>(r: Result<T, Error>, key: &Key) {
    match &r {
        Err(e @ Error::Store { key: Some(k), .. }) => {
            assert!(e.is_retryable());
            assert_eq!(k, key);
        }
        other => panic!("expected a retryable Error::Store naming {key}, got {other:?}"),
    }
}

fn request<'a>(key: &'a Key, holder: &'a Holder) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        fingerprint: &Fingerprint::EMPTY,
        holder,
        lease: Duration::from_secs(30),
        once: false,
        steal: None,
    }
}

#[test]
fn killed_mid_claim_then_the_retry_claims() {
    let Some(url) = url() else { return };
    let name = unique("kill-claim");
    let store = store(&url, &name);
    let key = Key::new("s", "k");
    let holder = Holder::current();
    let r = killed_mid_call(&url, &name, || store.claim(&request(&key, &holder)));
    expect_store_error(r, &key);
    // The queued script never ran: nothing was written.
    assert!(store.inspect(&key).unwrap().is_none());
    let c = match store.claim(&request(&key, &holder)).unwrap() {
        ClaimResponse::Claimed(c) => c,
        other => panic!("the retry did not claim: {other:?}"),
    };
    store
        .complete(&c, &codec::encode(&1).unwrap(), Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        Call::new("s", "k")
            .run(&store, || Ok::<_, Error>(2))
            .unwrap()
            .value,
        1
    );
    cleanup(&url, &name);
}

#[test]
fn killed_mid_complete_then_the_retry_records() {
    let Some(url) = url() else { return };
    let name = unique("kill-complete");
    let store = store(&url, &name);
    let key = Key::new("s", "k");
    let holder = Holder::current();
    let c = match store.claim(&request(&key, &holder)).unwrap() {
        ClaimResponse::Claimed(c) => c,
        other => panic!("{other:?}"),
    };
    let result = codec::encode("receipt").unwrap();
    let r = killed_mid_call(&url, &name, || {
        store.complete(&c, &result, Duration::from_secs(60))
    });
    expect_store_error(r, &key);
    // Success was not reported, and the record says so: still in progress under the claim.
    let view = store.inspect(&key).unwrap().unwrap();
    assert_eq!((view.status, view.fence), (Status::InProgress, c.fence));
    store
        .complete(&c, &result, Duration::from_secs(60))
        .unwrap();
    assert_eq!(store.inspect(&key).unwrap().unwrap().result, Some(result));
    cleanup(&url, &name);
}

#[test]
fn killed_idle_connections_fail_one_call_and_the_next_converges() {
    let Some(url) = url() else { return };
    let name = unique("kill-idle");
    let store = store(&url, &name);
    let key = Key::new("s", "k");
    let bodies = AtomicU32::new(0);
    let call = |store: &RedisStore| {
        Call::new("s", "k").run(store, || {
            bodies.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>("once".to_owned())
        })
    };
    call(&store).unwrap();
    assert!(kill_clients(&mut raw(&url), &name) >= 1);
    expect_store_error(call(&store), &key);
    let out = call(&store).unwrap();
    assert!(out.replayed && out.value == "once");
    assert_eq!(bodies.load(Ordering::SeqCst), 1);
    cleanup(&url, &name);
}

#[test]
fn killed_mid_body_the_result_is_still_recorded() {
    let Some(url) = url() else { return };
    let name = unique("kill-body");
    let store = store(&url, &name);
    let key = Key::new("s", "k");
    let bodies = AtomicU32::new(0);
    let r = Call::new("s", "k").run(&store, || {
        bodies.fetch_add(1, Ordering::SeqCst);
        // The connection the completion will use dies while the body runs.
        kill_clients(&mut raw(&url), &name);
        Ok::<_, Error>("first".to_owned())
    });
    // The completion failed at once on the dead connection and went through on a new one.
    let out = r.expect("the result was not recorded on a fresh connection");
    assert!(!out.replayed && out.value == "first");
    assert_eq!(
        store.inspect(&key).unwrap().map(|v| v.status),
        Some(Status::Completed)
    );
    let again = Call::new("s", "k").run(&store, || {
        bodies.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Error>("second".to_owned())
    });
    let again = again.unwrap();
    assert!(again.replayed && again.value == "first");
    assert_eq!(bodies.load(Ordering::SeqCst), 1);
    cleanup(&url, &name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_connection_killed_then_reopened() {
    let Some(url) = url() else { return };
    let name = unique("kill-async");
    let store = store(&url, &name);
    let key = Key::new("s", "k");
    let first = Call::new("s", "k")
        .run_async(&store, async { Ok::<_, Error>(1) })
        .await
        .unwrap();
    assert!(!first.replayed);
    let killed = tokio::task::spawn_blocking({
        let (url, name) = (url.clone(), name.clone());
        move || kill_clients(&mut raw(&url), &name)
    })
    .await
    .unwrap();
    assert!(killed >= 1);
    // The multiplexed connection notices the kill on its next request.
    let mut failed = 0;
    let out = loop {
        match Call::new("s", "k")
            .run_async(&store, async { Ok::<_, Error>(2) })
            .await
        {
            Ok(out) => break out,
            Err(e) => {
                expect_store_error::<()>(Err(e), &key);
                failed += 1;
                assert!(failed < 3, "the async half does not reconnect");
            }
        }
    };
    assert_eq!((out.value, out.replayed), (1, true));
    cleanup(&url, &name);
}

/// A TCP proxy in front of the test server that can swallow the next reply: the script runs on
/// the server, and the connection dies before its answer arrives (what a network cut after the
/// write looks like, which `CLIENT KILL` cannot time).
struct Proxy {
    port: u16,
    swallow: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    fn start(url: &str) -> Proxy {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpListener, TcpStream};
        let upstream = match redis::Client::open(url)
            .unwrap()
            .get_connection_info()
            .addr()
        {
            redis::ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
            other => panic!("the proxy test needs a TCP server, not {other:?}"),
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let swallow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let armed = swallow.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n @ 1..) = c_in.read(&mut buf) {
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(Shutdown::Both);
                });
                let armed = armed.clone();
                let (mut s_in, mut c_out) = (server, client);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n @ 1..) = s_in.read(&mut buf) {
                        if armed.swap(false, Ordering::SeqCst) {
                            // The reply is dropped and the connection cut.
                            break;
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(Shutdown::Both);
                    let _ = s_in.shutdown(Shutdown::Both);
                });
            }
        });
        Proxy { port, swallow }
    }

    /// Swallows the next reply the server sends on any connection.
    fn swallow_next_reply(&self) {
        self.swallow.store(true, Ordering::SeqCst);
    }
}

fn behind(proxy: &Proxy, name: &str) -> RedisStore {
    let store = RedisStore::connect_with(
        &format!("redis://127.0.0.1:{}", proxy.port),
        rerun_core::store::redis::RedisOptions::new()
            .prefix(format!("{name}:"))
            // The reply to swallow is a call's, never the after-connect sweep's.
            .upgrade_sweep(false),
    )
    .unwrap();
    store
}

#[test]
fn completion_ran_but_its_reply_was_lost_and_the_record_says_so() {
    let Some(url) = url() else { return };
    let name = unique("lost-complete");
    let proxy = Proxy::start(&url);
    let store = behind(&proxy, &name);
    let key = Key::new("s", "k");
    let bodies = AtomicU32::new(0);
    let r = Call::new("s", "k").run(&store, || {
        bodies.fetch_add(1, Ordering::SeqCst);
        proxy.swallow_next_reply();
        Ok::<_, Error>("recorded".to_owned())
    });
    // The result is recorded on the server, but its answer was lost: the completion sent again
    // is refused (the claim is over), and the record shows it was this claim's result that
    // was recorded. Success is reported only with a record that confirms it.
    let out = r.expect("a recorded result was reported as a failure");
    assert!(!out.replayed && out.value == "recorded");
    assert_eq!(
        store.inspect(&key).unwrap().map(|v| v.status),
        Some(Status::Completed)
    );
    let out = Call::new("s", "k").run(&store, || {
        bodies.fetch_add(1, Ordering::SeqCst);
        Ok::<_, Error>("again".to_owned())
    });
    let out = out.unwrap();
    assert!(out.replayed && out.value == "recorded");
    assert_eq!(bodies.load(Ordering::SeqCst), 1);
    cleanup(&url, &name);
}

#[test]
fn claim_ran_but_its_reply_was_lost_and_the_call_gives_it_back() {
    let Some(url) = url() else { return };
    let name = unique("lost-claim");
    let proxy = Proxy::start(&url);
    let store = behind(&proxy, &name);
    let lease = Duration::from_secs(60);
    for once in [false, true] {
        let key = Key::new("s", if once { "once" } else { "replayable" });
        let call = || {
            let call = Call::with_key(key.clone()).lease(lease);
            if once {
                call.once()
            } else {
                call
            }
        };
        proxy.swallow_next_reply();
        let r = call().run(&store, || Ok::<_, Error>(1));
        expect_store_error(r, &key);
        // The claim exists on the server, but its answer was lost: the call read it back,
        // found it its own, and gave it back at once instead of leaving it to its lease
        // (60 s): released, or for `once` marked unknown, as the lease would have left it.
        let record = store.inspect(&key).unwrap().unwrap();
        let want = if once {
            Status::Unknown
        } else {
            Status::Released
        };
        assert_eq!(record.status, want, "once = {once}");
        if !once {
            // The retry runs at once, with a greater fence.
            let out = call().run(&store, || Ok::<_, Error>(3)).unwrap();
            assert!(!out.replayed && out.value == 3 && out.fence > record.fence);
        }
    }
    cleanup(&url, &name);
}
