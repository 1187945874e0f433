//! The storm, and graceful shutdown, with real consumer processes and real signals.
//!
//! The storm: 2,000 order events, 20% of them published twice under different broker message
//! ids (a producer that retried); 3 consumer processes; a random one SIGKILLed every few
//! hundred milliseconds and replaced, until every event is handled. Then every order is
//! written once, every receipt (an at-most-once effect, reconciled after a crash) was sent
//! exactly once, nothing is left unacked and nothing was dead-lettered. On both brokers, with
//! the PostgreSQL and the Redis store.
//!
//! The consumers are this test binary run again as `storm_child` with `RQ_CHILD=1`.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually, unique, Broker, Leftovers, Rig};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rerun_core::store::redis::RedisOptions;
use rerun_core::{Call, DynStore, Error, Idempotent, PostgresStore, Reconciled, RedisStore};
use rerun_queue::{handler, shutdown, Policy, Settings};
use serde::{Deserialize, Serialize};

const EVENTS: usize = 2_000;

#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[rerun(scope = "storm.order_created")]
struct OrderCreated {
    #[rerun(key)]
    event_id: String,
    cents: i64,
}

/// Storms and shutdowns run one at a time: each one loads both cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn pg(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connecting to PostgreSQL");
    tokio::spawn(conn);
    client
}

fn pg_error(e: tokio_postgres::Error) -> Error {
    Error::store_msg(None, format!("the orders database: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The consumer process.

/// A consumer process: runs until SIGTERM, then prints its report and exits 0.
#[test]
fn storm_child() {
    if std::env::var("RQ_CHILD").is_err() {
        return;
    }
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let rt = runtime();
    let code = rt.block_on(async move {
        // Listening from the start: a SIGTERM during start-up is not lost.
        let stop = shutdown::terminated();
        let broker = Broker::parse(&env("RQ_BROKER"));
        let schema = env("RQ_SCHEMA");
        let pg_url = env("RQ_PG_URL");
        let slow = Duration::from_millis(env("RQ_SLOW_MS").parse().unwrap_or(0));
        let store: Arc<dyn DynStore> = match env("RQ_STORE").as_str() {
            "redis" => {
                let url = env("RQ_REDIS_URL");
                let prefix = env("RQ_REDIS_PREFIX");
                Arc::new(
                    tokio::task::spawn_blocking(move || {
                        RedisStore::connect_with(&url, RedisOptions::new().prefix(prefix))
                    })
                    .await
                    .expect("join")
                    .expect("redis store"),
                )
            }
            _ => {
                let (url, schema) = (pg_url.clone(), schema.clone());
                Arc::new(
                    tokio::task::spawn_blocking(move || {
                        PostgresStore::builder(&url).schema(schema).connect()
                    })
                    .await
                    .expect("join")
                    .expect("postgres store"),
                )
            }
        };
        let db = Arc::new(pg(&pg_url).await);
        let receipts_store = store.clone();
        let work = move |e: OrderCreated| {
            let db = db.clone();
            let store = receipts_store.clone();
            let schema = schema.clone();
            async move {
                db.execute(
                    &format!("INSERT INTO {schema}.attempts (event_id) VALUES ($1)"),
                    &[&e.event_id],
                )
                .await
                .map_err(pg_error)?;
                if !slow.is_zero() {
                    tokio::time::sleep(slow).await;
                }
                // Converges: written once whatever the number of runs.
                db.execute(
                    &format!("INSERT INTO {schema}.orders (event_id, cents) VALUES ($1, $2) ON CONFLICT DO NOTHING"),
                    &[&e.event_id, &e.cents],
                )
                .await
                .map_err(pg_error)?;
                // The receipt is at most once: a crash mid-send is reconciled from the sent log.
                let reconcile = async {
                    let row = db
                        .query_one(
                            &format!("SELECT count(*) FROM {schema}.receipts WHERE event_id = $1"),
                            &[&e.event_id],
                        )
                        .await
                        .map_err(pg_error)?;
                    let sent: i64 = row.get(0);
                    Ok::<_, Error>(if sent > 0 {
                        Reconciled::Done(())
                    } else {
                        Reconciled::NotDone
                    })
                };
                let send = async {
                    db.execute(
                        &format!("INSERT INTO {schema}.receipts (event_id) VALUES ($1)"),
                        &[&e.event_id],
                    )
                    .await
                    .map_err(pg_error)?;
                    Ok::<_, Error>(())
                };
                // A statement a killed consumer left in its socket reaches this local database
                // within milliseconds; the default wait of a second would rarely end here, where
                // a consumer is SIGKILLed every few hundred milliseconds.
                Call::new("storm.send_receipt", &e.event_id)
                    .once()
                    .settle(Duration::from_millis(250))
                    .run_async_reconciled(&*store, reconcile, send)
                    .await?;
                Ok::<_, Error>(e.cents)
            }
        };
        let url = env("RQ_BROKER_URL");
        let rig = Rig::open(broker, &url, &env("RQ_NAME")).await;
        let settings = Settings::new()
            .max_in_flight(16)
            .grace(Duration::from_secs(10))
            .policy(
                Policy::new()
                    .in_progress_delay(Duration::from_millis(300))
                    .backoff(Duration::from_millis(200), Duration::from_secs(2))
                    .max_deliveries(None),
            );
        println!("ready");
        let report = rig
            .consume(handler::typed(store, work), settings, stop)
            .await;
        println!(
            "report ran={} replayed={} redelivered={} dead={} released={}",
            report.ran, report.replayed, report.redelivered, report.dead_lettered, report.released
        );
        0
    });
    std::process::exit(code);
}

// ---------------------------------------------------------------------------------------------
// The parent.

/// Consumer processes, SIGKILLed when dropped.
struct Consumers {
    env: Vec<(String, String)>,
    kids: Vec<Child>,
}

impl Consumers {
    fn spawn(&mut self) {
        let exe = std::env::current_exe().expect("test binary");
        let mut cmd = Command::new(exe);
        cmd.args([
            "storm_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("RQ_CHILD", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.kids.push(cmd.spawn().expect("spawning a consumer"));
    }

    fn sigkill(&mut self, index: usize) {
        let mut kid = self.kids.swap_remove(index);
        let _ = kid.kill();
        let _ = kid.wait();
    }

    /// SIGTERMs every consumer; returns how each exited and what it printed last.
    fn sigterm_all(&mut self) -> Vec<(bool, String, Duration)> {
        let mut out = Vec::new();
        // A process younger than this may not have reached its signal handler yet.
        std::thread::sleep(Duration::from_millis(500));
        for kid in &self.kids {
            let _ = kill(Pid::from_raw(kid.id() as i32), Signal::SIGTERM);
        }
        for kid in self.kids.drain(..) {
            let t0 = Instant::now();
            let output = kid.wait_with_output().expect("wait");
            let text = String::from_utf8_lossy(&output.stdout).to_string();
            let last = text
                .lines()
                .rfind(|l| l.starts_with("report"))
                .unwrap_or("")
                .to_owned();
            out.push((output.status.success(), last, t0.elapsed()));
        }
        out
    }
}

impl Drop for Consumers {
    fn drop(&mut self) {
        for kid in &mut self.kids {
            let _ = kid.kill();
            let _ = kid.wait();
        }
    }
}

/// One storm's world: the broker rig, a PostgreSQL schema (the store's table, its meta table
/// and fence sequence, and the application's tables), a Redis prefix; all removed at the end.
struct World {
    rig: Rig,
    db: tokio_postgres::Client,
    schema: String,
    env: Vec<(String, String)>,
    /// Drops the schema and the Redis keys when the world is dropped, panicking or not.
    _leftovers: Leftovers,
}

impl World {
    async fn create(broker: Broker, store: &str, tag: &str) -> Option<World> {
        let broker_url = broker.url()?;
        let pg_url = rerun_core::testing::service_url("RERUN_TEST_POSTGRES_URL")?;
        let redis = match store {
            "redis" => Some(rerun_core::testing::service_url("RERUN_TEST_REDIS_URL")?),
            _ => None,
        };
        let name = unique(tag);
        let prefix = format!("{name}:");
        let leftovers = Leftovers {
            schema: Some((pg_url.clone(), name.clone())),
            redis: redis.clone().map(|u| (u, prefix.clone())),
        };
        let rig = Rig::create(broker, &broker_url, &name).await;
        let db = pg(&pg_url).await;
        db.batch_execute(&format!(
            "CREATE SCHEMA {name};
             CREATE TABLE {name}.orders (event_id text PRIMARY KEY, cents bigint NOT NULL);
             CREATE TABLE {name}.receipts (event_id text NOT NULL);
             CREATE TABLE {name}.attempts (event_id text NOT NULL);"
        ))
        .await
        .expect("creating the schema");
        let mut env = vec![
            ("RQ_BROKER".to_owned(), broker.name().to_owned()),
            ("RQ_BROKER_URL".to_owned(), broker_url),
            ("RQ_NAME".to_owned(), name.clone()),
            ("RQ_STORE".to_owned(), store.to_owned()),
            ("RQ_PG_URL".to_owned(), pg_url),
            ("RQ_SCHEMA".to_owned(), name.clone()),
        ];
        if let Some(url) = &redis {
            env.push(("RQ_REDIS_URL".to_owned(), url.clone()));
            env.push(("RQ_REDIS_PREFIX".to_owned(), prefix.clone()));
        }
        Some(World {
            rig,
            db,
            schema: name,
            env,
            _leftovers: leftovers,
        })
    }

    async fn count(&self, sql: &str) -> i64 {
        let sql = sql.replace("{s}", &self.schema);
        self.db.query_one(&sql, &[]).await.expect(&sql).get(0)
    }

    /// Deletes the broker's stream or queues now; the schema and Redis keys go when the world
    /// is dropped.
    async fn cleanup(&self) {
        self.rig.cleanup().await;
    }
}

/// A pseudo-random number from the clock (good enough to pick a victim).
fn roll(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    u64::from(nanos / 1000) % n.max(1)
}

fn storm(broker: Broker, store: &'static str) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    runtime().block_on(async move {
        let Some(world) = World::create(broker, store, &format!("storm_{store}")).await else {
            return;
        };
        let started = Instant::now();
        let mut items = Vec::new();
        for i in 0..EVENTS {
            let event = OrderCreated {
                event_id: format!("evt-{i}"),
                cents: 100 + i as i64,
            };
            let body = serde_json::to_vec(&event).expect("json");
            items.push((body.clone(), Some(format!("msg-{i}"))));
            if i % 5 == 0 {
                // The producer retried: the same event under a new message id.
                items.push((body, Some(format!("msg-{i}-retry"))));
            }
        }
        world.rig.publish_all(&items).await;
        let published = started.elapsed();

        let mut consumers = Consumers {
            env: world.env.clone(),
            kids: Vec::new(),
        };
        for _ in 0..3 {
            consumers.spawn();
        }
        let mut kills = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            tokio::time::sleep(Duration::from_millis(200 + roll(300))).await;
            let orders = world.count("SELECT count(*) FROM {s}.orders").await;
            let receipts = world.count("SELECT count(DISTINCT event_id) FROM {s}.receipts").await;
            if orders == EVENTS as i64 && receipts == EVENTS as i64 {
                break;
            }
            assert!(Instant::now() < deadline, "storm did not finish: {orders} orders, {receipts} receipts");
            let victim = roll(consumers.kids.len() as u64) as usize;
            consumers.sigkill(victim);
            consumers.spawn();
            kills += 1;
        }
        let handled = started.elapsed();
        // The survivors ack what the killed ones left (JetStream redelivers after ack_wait).
        let drained = eventually(Duration::from_secs(20), || async {
            world.rig.outstanding().await == 0
        })
        .await;
        let exits = consumers.sigterm_all();
        for (ok, report, _) in &exits {
            assert!(*ok, "a consumer did not exit cleanly on SIGTERM ({report})");
        }
        // RabbitMQ counts only ready messages: a delivery held for a delayed requeue (a
        // duplicate found in progress) is requeued by the shutdown. One more consumer replays
        // those, with no contention left, until the queue stays empty.
        for _ in 0..3 {
            if world.rig.outstanding().await == 0 {
                break;
            }
            consumers.spawn();
            eventually(Duration::from_secs(10), || async {
                world.rig.outstanding().await == 0
            })
            .await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            for (ok, report, _) in consumers.sigterm_all() {
                assert!(ok, "a consumer did not exit cleanly on SIGTERM ({report})");
            }
        }
        assert!(
            drained || broker == Broker::Amqp,
            "messages left unacked: {}",
            world.rig.outstanding().await
        );
        assert_eq!(world.rig.outstanding().await, 0, "messages left unacked");
        assert_eq!(world.rig.dead_letters().await, 0, "nothing is dead-lettered");

        let orders = world.count("SELECT count(*) FROM {s}.orders").await;
        let receipts = world.count("SELECT count(*) FROM {s}.receipts").await;
        let twice = world
            .count("SELECT count(*) FROM (SELECT event_id FROM {s}.receipts GROUP BY event_id HAVING count(*) > 1) t")
            .await;
        let attempts = world.count("SELECT count(*) FROM {s}.attempts").await;
        let rerun = world
            .count("SELECT count(*) FROM (SELECT event_id FROM {s}.attempts GROUP BY event_id HAVING count(*) > 1) t")
            .await;
        eprintln!(
            "storm {}/{store}: {} messages ({EVENTS} events) published in {:.1}s, handled in {:.1}s with {kills} SIGKILLs; \
             {attempts} handler runs ({rerun} events ran again after a kill); {orders} orders, {receipts} receipts",
            broker.name(),
            items.len(),
            published.as_secs_f64(),
            handled.as_secs_f64(),
        );
        assert_eq!(orders, EVENTS as i64, "every order written");
        assert_eq!(receipts, EVENTS as i64, "every receipt sent once");
        assert_eq!(twice, 0, "no receipt sent twice");
        world.cleanup().await;
    });
}

#[test]
fn storm_nats_postgres() {
    storm(Broker::Nats, "postgres");
}

#[test]
fn storm_nats_redis() {
    storm(Broker::Nats, "redis");
}

#[test]
fn storm_amqp_postgres() {
    storm(Broker::Amqp, "postgres");
}

#[test]
fn storm_amqp_redis() {
    storm(Broker::Amqp, "redis");
}

/// SIGTERM: the consumer stops fetching, finishes what is in flight, and exits 0; what it did
/// not fetch is handled by the next consumer, every effect once.
fn sigterm(broker: Broker) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    runtime().block_on(async move {
        let Some(world) = World::create(broker, "postgres", "sigterm").await else {
            return;
        };
        let n = 40;
        let items: Vec<_> = (0..n)
            .map(|i| {
                let e = OrderCreated {
                    event_id: format!("evt-{i}"),
                    cents: i,
                };
                (serde_json::to_vec(&e).expect("json"), Some(format!("msg-{i}")))
            })
            .collect();
        world.rig.publish_all(&items).await;
        let mut slow = Consumers {
            env: world.env.clone(),
            kids: Vec::new(),
        };
        slow.env.push(("RQ_SLOW_MS".to_owned(), "1500".to_owned()));
        slow.spawn();
        let started = eventually(Duration::from_secs(20), || async {
            world.count("SELECT count(*) FROM {s}.attempts").await > 0
        })
        .await;
        assert!(started, "the consumer started no handler");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let in_flight = world.count("SELECT count(*) FROM {s}.attempts").await;
        let exits = slow.sigterm_all();
        let (ok, report, took) = &exits[0];
        assert!(*ok, "exit status after SIGTERM ({report})");
        assert!(*took < Duration::from_secs(8), "shutdown took {took:?}");
        assert!(report.contains("released=0"), "in-flight handlers finished: {report}");
        let done_first = world.count("SELECT count(*) FROM {s}.orders").await;
        assert!(done_first >= in_flight, "{done_first} orders after {in_flight} started");
        assert!(done_first < n, "it stopped fetching: {done_first} of {n}");

        let mut next = Consumers {
            env: world.env.clone(),
            kids: Vec::new(),
        };
        next.spawn();
        let finished = eventually(Duration::from_secs(30), || async {
            world.count("SELECT count(*) FROM {s}.orders").await == n
        })
        .await;
        let drained = eventually(Duration::from_secs(10), || async {
            world.rig.outstanding().await == 0
        })
        .await;
        let exits = next.sigterm_all();
        assert!(exits.iter().all(|e| e.0), "{exits:?}");
        assert!(finished && drained, "finished {finished}, drained {drained}");
        assert_eq!(world.rig.outstanding().await, 0);
        assert_eq!(
            world
                .count("SELECT count(*) FROM (SELECT event_id FROM {s}.receipts GROUP BY event_id HAVING count(*) <> 1) t")
                .await,
            0
        );
        assert_eq!(world.count("SELECT count(*) FROM {s}.receipts").await, n);
        world.cleanup().await;
    });
}

#[test]
fn sigterm_nats() {
    sigterm(Broker::Nats);
}

#[test]
fn sigterm_amqp() {
    sigterm(Broker::Amqp);
}
