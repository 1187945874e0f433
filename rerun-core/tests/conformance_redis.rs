//! The conformance suite on `RedisStore`, including the multi-process checks, against the Redis
//! at `RERUN_TEST_REDIS_URL` (skipped when unset, a failure with `RERUN_REQUIRE_SERVICES=1`).
#![cfg(feature = "redis")]

use rerun_core::store::redis::RedisStore;
use rerun_core::testing::conformance::{self, Factory};
use rerun_core::Error;

/// Each fresh store is its own key prefix in one database; the locator is the URL with the
/// prefix as its `prefix` query parameter, which `RedisStore::connect` understands.
struct Redis {
    url: String,
}

impl Factory for Redis {
    type Store = RedisStore;
    fn name(&self) -> &str {
        "redis"
    }
    fn fresh(&self) -> Result<(RedisStore, String), Error> {
        let prefix = format!("{}:", conformance::unique("rerun-conformance"));
        let sep = if self.url.contains('?') { '&' } else { '?' };
        let locator = format!("{}{sep}prefix={prefix}", self.url);
        Ok((RedisStore::connect(&locator)?, locator))
    }
    fn reopen(&self, locator: &str) -> Result<RedisStore, Error> {
        RedisStore::connect(locator)
    }
}

#[test]
fn redis_store_conforms() {
    let Some(url) = rerun_core::testing::service_url("RERUN_TEST_REDIS_URL") else {
        return;
    };
    conformance::run(&Redis { url });
}
