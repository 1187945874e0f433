//! Whether a call of an `#[idempotent]` function ran its body or replayed a recorded result.
//!
//! An annotated function returns only its own `Result<T, E>`; [`observe`] (and
//! [`observe_async`]) run it and also say what the runtime did, for logs, metrics, or an HTTP
//! header such as `Idempotent-Replayed: true`. (Hand-written calls get the same from
//! [`crate::Call`]'s [`crate::Outcome`]; `#[derive(Idempotent)]` types from
//! [`crate::Handle::run_outcome`].)
//!
//! ```
//! use rerun_core::{idempotent, observe, Error, MemoryStore};
//!
//! #[idempotent(key = id, store = store)]
//! fn charge(store: &MemoryStore, id: u64) -> Result<u64, Error> {
//!     Ok(id * 100)
//! }
//!
//! let store = MemoryStore::new();
//! let (first, seen) = observe(|| charge(&store, 7));
//! assert_eq!((first?, seen.map(|s| s.replayed)), (700, Some(false)));
//! let (again, seen) = observe(|| charge(&store, 7));
//! assert_eq!((again?, seen.map(|s| s.replayed)), (700, Some(true)));
//! # Ok::<(), Error>(())
//! ```
//!
//! The last call to finish inside the observed closure is the one reported: the annotated
//! function's own, since calls made inside its body finish before it does.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::record::Fence;

/// What a call did, as [`observe`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Observed {
    /// `true` when the body did not run and the recorded result was returned.
    pub replayed: bool,
    /// The fence of the claim that recorded the result.
    pub fence: Fence,
}

thread_local! {
    /// One slot per `observe` in progress on this thread, innermost last: `None` while no
    /// call finished, then what the last one did (`Some(None)`: it failed).
    static FRAMES: RefCell<Vec<Option<Option<Observed>>>> = const { RefCell::new(Vec::new()) };
}

/// Notes what a call did (`None`: it failed), for the innermost [`observe`] in progress on this
/// thread, if any. A call that failed notes it too: what a call made inside it did is not what
/// it did.
#[inline]
pub(crate) fn note(observed: Option<Observed>) {
    let _ = FRAMES.try_with(|frames| {
        if let Ok(mut frames) = frames.try_borrow_mut() {
            if let Some(top) = frames.last_mut() {
                *top = Some(observed);
            }
        }
    });
}

/// Removes the frame it pushed even when the closure panics.
struct Frame;

impl Frame {
    fn push() -> Frame {
        FRAMES.with(|f| f.borrow_mut().push(None));
        Frame
    }
    /// What the last call that finished while the frame was pushed did, if one finished.
    fn pop(self) -> Option<Option<Observed>> {
        let seen = FRAMES.with(|f| f.borrow_mut().pop()).flatten();
        std::mem::forget(self);
        seen
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        let _ = FRAMES.try_with(|f| f.borrow_mut().pop());
    }
}

/// Runs `f` and says what the last idempotent call that finished inside it did (`None` when
/// no call finished with a result: it failed, or there was none).
pub fn observe<R>(f: impl FnOnce() -> R) -> (R, Option<Observed>) {
    let frame = Frame::push();
    let out = f();
    (out, frame.pop().flatten())
}

/// The async twin of [`observe`]: runs `fut` and says what the last idempotent call that
/// finished inside it did. The future may move between threads between polls.
///
/// ```
/// use rerun_core::{idempotent, observe_async, Error, MemoryStore};
///
/// #[idempotent(key = id, store = store)]
/// async fn ship(store: &MemoryStore, id: u64) -> Result<String, Error> {
///     Ok(format!("parcel {id}"))
/// }
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// let store = MemoryStore::new();
/// ship(&store, 1).await?;
/// let (again, seen) = observe_async(ship(&store, 1)).await;
/// assert_eq!((again?, seen.map(|s| s.replayed)), ("parcel 1".to_owned(), Some(true)));
/// # Ok::<(), Error>(())
/// # })
/// # .unwrap();
/// ```
pub fn observe_async<F: Future>(fut: F) -> ObserveFuture<F> {
    ObserveFuture {
        fut: Box::pin(fut),
        seen: None,
    }
}

/// The future of [`observe_async`].
pub struct ObserveFuture<F> {
    fut: Pin<Box<F>>,
    seen: Option<Observed>,
}

impl<F: Future> Future for ObserveFuture<F> {
    type Output = (F::Output, Option<Observed>);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let frame = Frame::push();
        let polled = self.fut.as_mut().poll(cx);
        // A call that finished in this poll, failed or not, stands for whatever finished
        // in an earlier one: a call made inside a body finishes before the body's own.
        if let Some(noted) = frame.pop() {
            self.seen = noted;
        }
        match polled {
            Poll::Ready(out) => Poll::Ready((out, self.seen)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Call, Error, MemoryStore};

    #[test]
    fn the_outermost_call_is_reported_and_frames_nest() {
        let store = MemoryStore::new();
        let run = || {
            Call::new("outer", "k").run(&store, || {
                Call::new("inner", "k").run(&store, || Ok::<_, Error>(1))?;
                Ok::<_, Error>(2)
            })
        };
        let (_, seen) = observe(run);
        assert_eq!(seen.map(|s| s.replayed), Some(false));
        let ((_, inner), outer) = observe(|| observe(run));
        assert_eq!(inner.map(|s| s.replayed), Some(true));
        assert_eq!(outer, None, "the inner observe took it");
        let (r, seen) =
            observe(|| Call::new("failing", "k").run(&store, || Err::<u8, _>(Error::config("no"))));
        assert!(r.is_err() && seen.is_none());
        assert_eq!(observe(|| 5), (5, None));
    }

    #[test]
    fn a_panic_inside_leaves_no_frame_behind() {
        let caught = std::panic::catch_unwind(|| observe(|| panic!("boom")));
        assert!(caught.is_err());
        FRAMES.with(|f| assert!(f.borrow().is_empty()));
    }
}
