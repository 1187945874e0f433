//! The conformance suite on `RedisStore`, including the multi-process checks, against the Redis
//! at `RERUN_TEST_REDIS_URL` (skipped when unset, a failure with `RERUN_REQUIRE_SERVICES=1`).
#![cfg(feature = "redis")]

mod redis_util;

use std::sync::Mutex;
use std::time::Duration;

use rerun_core::store::redis::{RedisOptions, RedisStore};
use rerun_core::testing::conformance::{self, Factory, Hang};
use rerun_core::testing::proxy::Proxy;
use rerun_core::Error;

/// The operation timeout of the store behind the freezable proxy.
const HANG_TIMEOUT: Duration = Duration::from_secs(2);

struct Frozen(Proxy);

impl Hang for Frozen {
    fn freeze(&self) {
        self.0.freeze();
    }
    fn thaw(&self) {
        self.0.thaw();
    }
    fn op_timeout(&self) -> Duration {
        HANG_TIMEOUT
    }
}

/// Each fresh store is its own key prefix in one database; the locator is the URL with the
/// prefix as its `prefix` query parameter, which `RedisStore::connect` understands. The keys
/// under every prefix handed out are deleted when the suite ends.
struct Redis {
    url: String,
    prefixes: Mutex<Vec<String>>,
    /// Whether the stores call the scripts (EVALSHA) even where the server has functions.
    scripts_only: bool,
}

impl Redis {
    fn prefix(&self, name: &str) -> String {
        let prefix = format!("{}:", conformance::unique(name));
        self.prefixes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(prefix.clone());
        prefix
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let prefixes = self.prefixes.get_mut().unwrap_or_else(|p| p.into_inner());
        for prefix in prefixes.iter() {
            redis_util::cleanup(&self.url, prefix);
        }
    }
}

impl Factory for Redis {
    type Store = RedisStore;
    fn name(&self) -> &str {
        "redis"
    }
    fn fresh(&self) -> Result<(RedisStore, String), Error> {
        let prefix = self.prefix("rerun-conformance");
        let sep = if self.url.contains('?') { '&' } else { '?' };
        let locator = format!("{}{sep}prefix={prefix}", self.url);
        Ok((self.reopen(&locator)?, locator))
    }
    fn reopen(&self, locator: &str) -> Result<RedisStore, Error> {
        let store =
            RedisStore::connect_with(locator, RedisOptions::new().scripts_only(self.scripts_only))?;
        // Each run covers the form it is meant to: functions on a server that has them.
        assert_eq!(store.library_name().is_none(), self.scripts_only);
        Ok(store)
    }
    fn hanging(&self) -> Option<Result<(RedisStore, Box<dyn Hang>), Error>> {
        let proxy = match Proxy::start(&redis_util::upstream(&self.url)) {
            Ok(proxy) => proxy,
            Err(e) => return Some(Err(Error::store(None, "starting the proxy", e))),
        };
        let prefix = self.prefix("rerun-conformance-hung");
        let store = RedisStore::connect_with(
            &redis_util::via(proxy.addr(), &self.url),
            RedisOptions::new()
                .prefix(prefix)
                .response_timeout(HANG_TIMEOUT)
                .scripts_only(self.scripts_only),
        );
        Some(store.map(|s| (s, Box::new(Frozen(proxy)) as Box<dyn Hang>)))
    }
}

/// With the transitions as Redis functions (FCALL), as the store calls them on Redis 7.
#[test]
fn redis_store_conforms() {
    let Some(url) = rerun_core::testing::service_url("RERUN_TEST_REDIS_URL") else {
        return;
    };
    conformance::run(&Redis {
        url,
        prefixes: Mutex::default(),
        scripts_only: false,
    });
}

/// With the transitions as scripts (EVALSHA), as the store calls them where the server has no
/// functions (Redis 6) or the user may not use them.
#[test]
fn redis_store_conforms_on_scripts() {
    let Some(url) = rerun_core::testing::service_url("RERUN_TEST_REDIS_URL") else {
        return;
    };
    conformance::run(&Redis {
        url,
        prefixes: Mutex::default(),
        scripts_only: true,
    });
}
