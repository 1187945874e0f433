//! [`Call::run_detached`]: an async call that a dropped caller cannot cut short.
//!
//! A future that is dropped mid-body stops where it is: its claim is given back (released, or
//! marked unknown for a `once` call), and the effect it was half-way through may be half done.
//! Servers drop futures all the time: axum drops a handler's future when the client hangs up,
//! `tokio::time::timeout` and `select!` drop the branch that lost. For a `once` call that means
//! an outcome left unknown for good. Running the call on a task of its own ends that: the body
//! runs to completion and its result is recorded whether or not anyone still waits for it, so
//! the retry replays it.

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;
use crate::runtime::{Call, Outcome};
use crate::store::AsyncStore;

impl Call {
    /// [`Call::run_async`] on a tokio task of its own (feature `tokio`): the body runs to
    /// completion, and its result is recorded, even if the returned future is dropped.
    ///
    /// The store is moved into the task: pass an `Arc` of it (`Arc<S>` is a store too). A
    /// panic in the body releases the claim (a `once` call's is marked unknown) and resumes
    /// in the caller when it awaits. Must be called within a tokio runtime.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use rerun_core::{Call, Error, MemoryStore};
    ///
    /// # let rt = tokio::runtime::Builder::new_multi_thread().enable_time().build().unwrap();
    /// # rt.block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let send = |store: Arc<MemoryStore>| {
    ///     Call::new("mail.welcome", "user-7").once().run_detached(store, async {
    ///         tokio::time::sleep(Duration::from_millis(50)).await; // the mail server is slow
    ///         Ok::<_, Error>("sent".to_owned())
    ///     })
    /// };
    /// // The caller gives up after 10 ms; the send goes on and is recorded.
    /// let gave_up = tokio::time::timeout(Duration::from_millis(10), send(store.clone())).await;
    /// assert!(gave_up.is_err());
    /// tokio::time::sleep(Duration::from_millis(100)).await;
    /// let again = send(store).await?;
    /// assert_eq!((again.value.as_str(), again.replayed), ("sent", true));
    /// # Ok::<(), Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn run_detached<S, T, E, F>(self, store: S, body: F) -> Result<Outcome<T>, E>
    where
        S: AsyncStore + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
        E: From<Error> + Send + 'static,
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        let key = self.key().clone();
        let task = tokio::spawn(async move { self.run_async(&store, body).await });
        match task.await {
            Ok(out) => out,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only a runtime shutting down cancels the task (it is never aborted): the claim
            // is given back by the runtime's keeper or healed by its lease.
            Err(_) => Err(E::from(Error::store_msg(
                Some(&key),
                "the tokio runtime shut down before the detached call finished; its claim is given back or ends with its lease",
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use crate::{Call, Error, MemoryStore};

    fn runtime() -> tokio::runtime::Runtime {
        match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => panic!("a runtime: {e}"),
        }
    }

    #[test]
    fn a_dropped_caller_does_not_stop_the_body() {
        runtime().block_on(async {
            let store = Arc::new(MemoryStore::new());
            let runs = Arc::new(AtomicU32::new(0));
            let call = |store: Arc<MemoryStore>, runs: Arc<AtomicU32>| {
                Call::new("detached", "k")
                    .once()
                    .run_detached(store, async move {
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, Error>(7u32)
                    })
            };
            let first =
                tokio::time::timeout(Duration::from_millis(5), call(store.clone(), runs.clone()))
                    .await;
            assert!(first.is_err(), "the caller gave up");
            tokio::time::sleep(Duration::from_millis(150)).await;
            assert_eq!(runs.load(Ordering::SeqCst), 1);
            match call(store, runs.clone()).await {
                Ok(o) => assert_eq!((o.value, o.replayed), (7, true)),
                Err(e) => panic!("{e}"),
            }
            assert_eq!(runs.load(Ordering::SeqCst), 1);
        });
    }

    #[test]
    fn a_panic_reaches_the_caller_and_releases_the_claim() {
        runtime().block_on(async {
            let store = Arc::new(MemoryStore::new());
            let panicked = tokio::spawn(Call::new("detached", "p").run_detached(
                store.clone(),
                async {
                    if true {
                        panic!("the body failed");
                    }
                    Ok::<_, Error>(1u8)
                },
            ))
            .await;
            assert!(panicked.is_err_and(|e| e.is_panic()));
            // The release goes through the keeper thread: give it a moment.
            let mut again = None;
            for _ in 0..100 {
                match Call::new("detached", "p")
                    .run_detached(store.clone(), async { Ok::<_, Error>(2u8) })
                    .await
                {
                    Err(Error::InProgress { .. }) => {
                        tokio::time::sleep(Duration::from_millis(10)).await
                    }
                    other => {
                        again = Some(other);
                        break;
                    }
                }
            }
            match again {
                Some(Ok(o)) => assert_eq!((o.value, o.replayed), (2, false)),
                other => panic!("{other:?}"),
            }
        });
    }
}
