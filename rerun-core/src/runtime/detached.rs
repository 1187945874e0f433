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
use std::pin::Pin;
use std::task::{Context, Poll};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;
use crate::runtime::{Call, Outcome};
use crate::store::AsyncStore;

/// A future that goes on to completion when it is dropped unfinished (feature `tokio`).
///
/// While its caller waits, it is polled in place, on the caller's task: no task is spawned and
/// no thread is woken for it. Dropped before it completed (a client hung up, a `timeout` or a
/// `select!` gave up on it), it is handed to the tokio runtime that first polled it and
/// finishes on a task of its own; its output is then discarded. A future dropped before its
/// first poll never started and is dropped; one whose poll panicked is dropped too.
///
/// On a current-thread runtime that task runs only while the runtime is driven (inside its
/// `block_on`): a runtime kept but not driven again holds the call's claim, renewed, until it
/// is driven or dropped (dropping it drops the task, and the claim is given back). Keep such a
/// runtime driven, or use a multi-thread one.
///
/// [`Call::run_detached`] is this around [`Call::run_async`]; wrap a future of your own in it
/// with [`detach`].
///
/// # Panics
///
/// Polling it again after it completed panics, as polling a finished `async` block does.
#[must_use = "a future does nothing until it is awaited"]
pub struct Detached<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    future: Option<Pin<Box<F>>>,
    runtime: Option<tokio::runtime::Handle>,
    /// Set while the inner future is polled: still set in the destructor, the poll panicked.
    polling: bool,
}

/// Wraps `future` so that it runs to completion even if it is dropped: see [`Detached`].
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// # let rt = tokio::runtime::Builder::new_multi_thread().enable_time().build().unwrap();
/// # rt.block_on(async {
/// let sent = Arc::new(AtomicBool::new(false));
/// let send = rerun_core::runtime::detach({
///     let sent = sent.clone();
///     async move {
///         tokio::time::sleep(Duration::from_millis(20)).await;
///         sent.store(true, Ordering::SeqCst);
///     }
/// });
/// // The caller gives up after 5 ms; the send goes on.
/// assert!(tokio::time::timeout(Duration::from_millis(5), send).await.is_err());
/// tokio::time::sleep(Duration::from_millis(100)).await;
/// assert!(sent.load(Ordering::SeqCst));
/// # });
/// ```
pub fn detach<F>(future: F) -> Detached<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Detached {
        future: Some(Box::pin(future)),
        runtime: None,
        polling: false,
    }
}

impl<F> Future for Detached<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let Some(future) = this.future.as_mut() else {
            panic!("a rerun_core::runtime::Detached future was polled after it completed");
        };
        if this.runtime.is_none() {
            this.runtime = tokio::runtime::Handle::try_current().ok();
        }
        this.polling = true;
        let out = future.as_mut().poll(cx);
        this.polling = false;
        if out.is_ready() {
            this.future = None;
        }
        out
    }
}

impl<F> Drop for Detached<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some(future) = self.future.take() else {
            return;
        };
        if self.polling {
            // Its poll panicked: there is nothing sound left to finish.
            return;
        }
        // Never polled (no runtime seen), it never started; otherwise it goes on alone. A
        // runtime that is shutting down drops it, and its claim is given back by the keeper
        // or ends with its lease.
        if let Some(runtime) = &self.runtime {
            drop(runtime.spawn(future));
        }
    }
}

impl<F> std::fmt::Debug for Detached<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detached")
            .field("finished", &self.future.is_none())
            .finish_non_exhaustive()
    }
}

impl Call {
    /// [`Call::run_async`] that a dropped future cannot cut short (feature `tokio`): the body
    /// runs to completion, and its result is recorded, even if the returned future is dropped.
    ///
    /// It runs on the caller's task while the caller waits, and moves to a task of its own on
    /// the tokio runtime only if it is dropped unfinished (see [`Detached`]). The store goes
    /// with it: pass an `Arc` of it (`Arc<S>` is a store too). A panic in the body releases
    /// the claim (a `once` call's is marked unknown) and goes on in the caller.
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
        detach(async move { self.run_async(&store, body).await }).await
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
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
    fn a_future_dropped_before_its_first_poll_never_runs() {
        runtime().block_on(async {
            let ran = Arc::new(AtomicU32::new(0));
            let detached = super::detach({
                let ran = ran.clone();
                async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                }
            });
            drop(detached);
            tokio::time::sleep(Duration::from_millis(30)).await;
            assert_eq!(ran.load(Ordering::SeqCst), 0);
        });
    }

    #[test]
    fn a_future_whose_poll_panicked_is_not_finished_elsewhere() {
        runtime().block_on(async {
            let after = Arc::new(AtomicU32::new(0));
            let mut detached = Box::pin(super::detach({
                let after = after.clone();
                async move {
                    tokio::task::yield_now().await;
                    if after.load(Ordering::SeqCst) == 0 {
                        panic!("the body failed");
                    }
                    after.fetch_add(1, Ordering::SeqCst);
                }
            }));
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            assert!(detached.as_mut().poll(&mut cx).is_pending());
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                detached.as_mut().poll(&mut cx)
            }));
            assert!(panicked.is_err());
            drop(detached);
            tokio::time::sleep(Duration::from_millis(30)).await;
            assert_eq!(after.load(Ordering::SeqCst), 0);
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
