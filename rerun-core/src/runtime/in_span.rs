//! Polling a call's future inside its tracing span without moving it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tracing::Span;

/// A future polled inside `span`, and dropped inside it, that stays where it was pinned.
///
/// `tracing`'s `Instrumented` owns the future it wraps, so making one moves the whole future
/// into the wrapper, and a call's future holds its body's state: over a kilobyte, copied on
/// every call. `InSpan` borrows a pinned slot instead and keeps what `Instrumented` promises:
/// when it is dropped (the call finished, its task was cancelled, or a panic unwinds through
/// it), it empties the slot inside the span, so what the future's destructors do (giving a
/// claim back, and logging it) still belongs to the call.
pub(crate) struct InSpan<'a, F> {
    span: &'a Span,
    fut: Pin<&'a mut Option<F>>,
}

impl<'a, F> InSpan<'a, F> {
    /// Polls the future in `fut` inside `span` from now on.
    pub(crate) fn new(span: &'a Span, fut: Pin<&'a mut Option<F>>) -> InSpan<'a, F> {
        InSpan { span, fut }
    }
}

impl<F: Future> Future for InSpan<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let _entered = this.span.enter();
        match this.fut.as_mut().as_pin_mut() {
            Some(fut) => fut.poll(cx),
            // The slot is emptied only by `drop`, after which nothing can poll.
            None => Poll::Pending,
        }
    }
}

impl<F> Drop for InSpan<'_, F> {
    fn drop(&mut self) {
        let _entered = self.span.enter();
        self.fut.set(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::sync::{Arc, Mutex};
    use std::task::Waker;

    /// Writes the name of the span it is dropped in.
    struct Witness(Arc<Mutex<Option<String>>>);

    impl Drop for Witness {
        fn drop(&mut self) {
            let name = Span::current().metadata().map(|m| m.name().to_owned());
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) = name;
        }
    }

    fn subscriber() -> impl tracing::Subscriber {
        tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .finish()
    }

    #[test]
    fn a_future_dropped_midway_is_dropped_inside_the_span() {
        let seen = Arc::new(Mutex::new(None));
        tracing::subscriber::with_default(subscriber(), || {
            let span = tracing::info_span!("rerun.call");
            let witness = Witness(seen.clone());
            let slot = pin!(Some(async move {
                let _held = witness;
                std::future::pending::<()>().await;
            }));
            let mut call = InSpan::new(&span, slot);
            let polled = Pin::new(&mut call).poll(&mut Context::from_waker(Waker::noop()));
            assert!(polled.is_pending());
            drop(call);
        });
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(seen.as_deref(), Some("rerun.call"));
    }

    #[test]
    fn a_future_is_polled_inside_the_span() {
        tracing::subscriber::with_default(subscriber(), || {
            let span = tracing::info_span!("rerun.call");
            let slot = pin!(Some(async {
                Span::current().metadata().map(|m| m.name().to_owned())
            }));
            let mut call = InSpan::new(&span, slot);
            let polled = Pin::new(&mut call).poll(&mut Context::from_waker(Waker::noop()));
            assert_eq!(polled, Poll::Ready(Some("rerun.call".to_owned())));
        });
    }
}
