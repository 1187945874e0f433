//! The time limit of a call on a sync connection, kept by one timer per connection.
//!
//! `tokio::time::timeout` makes a timer per call: it is inserted in the runtime's timer wheel
//! under the driver's lock on the first poll and taken out again on drop, a few hundred
//! nanoseconds of a call that otherwise costs a round trip. A connection instead keeps one
//! timer for its life and moves its deadline before each call. Moving a deadline later, the
//! usual case (each call's deadline is later than the last one's), only stores the new time in
//! the armed timer: when the wheel reaches the old time, the runtime finds the later one and
//! files the timer again, without waking anyone. So a connection in steady use touches the
//! wheel about once per time limit instead of twice per call, and a call that outlives its
//! limit is still cut off by the same runtime clock as before.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::{sleep_until, Instant, Sleep};

/// One connection's timer, made on its first call (inside the connection's runtime, whose
/// clock drives it).
#[derive(Default)]
pub(crate) struct Deadline {
    timer: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    /// Runs `fut` for at most `limit`; `None` when the time ran out first. `fut` is pinned
    /// where the caller made it: a statement's future is over a kilobyte, and taken by value
    /// it would be copied into this one's state.
    ///
    /// Must be polled by the runtime the first call ran on: the timer belongs to its clock.
    pub(crate) async fn within<F: Future>(
        &mut self,
        limit: Duration,
        mut fut: Pin<&mut F>,
    ) -> Option<F::Output> {
        // A limit past the clock's range (`Duration::MAX`) never runs out.
        let Some(until) = Instant::now().checked_add(limit) else {
            return Some(fut.await);
        };
        let timer = match &mut self.timer {
            Some(timer) => {
                timer.as_mut().reset(until);
                timer
            }
            None => self.timer.insert(Box::pin(sleep_until(until))),
        };
        poll_fn(|cx| {
            if let Poll::Ready(out) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            timer.as_mut().poll(cx).map(|()| None)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// A sleep made when first polled, inside the runtime.
    async fn nap(d: Duration) {
        tokio::time::sleep(d).await
    }

    /// `Deadline::within` on `rt`, with `fut` pinned here.
    fn run<F: Future>(
        rt: &tokio::runtime::Runtime,
        deadline: &mut Deadline,
        limit: Duration,
        fut: F,
    ) -> Option<F::Output> {
        rt.block_on(deadline.within(limit, pin!(fut)))
    }

    #[test]
    fn a_call_that_outlives_its_limit_is_cut_off_every_time() {
        let rt = runtime();
        let mut deadline = Deadline::default();
        for _ in 0..3 {
            let started = std::time::Instant::now();
            let out = run(
                &rt,
                &mut deadline,
                Duration::from_millis(20),
                std::future::pending::<()>(),
            );
            assert_eq!(out, None);
            assert!(started.elapsed() >= Duration::from_millis(20));
            assert!(started.elapsed() < Duration::from_secs(5));
        }
    }

    #[test]
    fn a_later_call_gets_its_whole_limit_after_many_quick_ones() {
        let rt = runtime();
        let mut deadline = Deadline::default();
        // Quick calls push the armed deadline forward in place ...
        for i in 0..1000u32 {
            let out = run(&rt, &mut deadline, Duration::from_millis(30), async { i });
            assert_eq!(out, Some(i));
        }
        // ... across the time the first one was armed for: a later call is not cut off by it.
        std::thread::sleep(Duration::from_millis(40));
        let out = run(
            &rt,
            &mut deadline,
            Duration::from_millis(200),
            nap(Duration::from_millis(60)),
        );
        assert_eq!(out, Some(()));
        // A shorter limit than the armed one moves the deadline earlier.
        let out = run(
            &rt,
            &mut deadline,
            Duration::from_millis(10),
            nap(Duration::from_secs(60)),
        );
        assert_eq!(out, None);
    }

    #[test]
    fn a_call_whose_deadline_passed_while_idle_still_gets_its_limit() {
        let rt = runtime();
        let mut deadline = Deadline::default();
        assert_eq!(
            run(&rt, &mut deadline, Duration::from_millis(5), async { 1 }),
            Some(1)
        );
        // The armed time passes while nothing runs the runtime.
        std::thread::sleep(Duration::from_millis(30));
        let out = run(
            &rt,
            &mut deadline,
            Duration::from_millis(300),
            nap(Duration::from_millis(50)),
        );
        assert_eq!(out, Some(()));
    }

    #[test]
    fn a_limit_beyond_the_clock_never_runs_out() {
        let rt = runtime();
        let mut deadline = Deadline::default();
        let out = run(&rt, &mut deadline, Duration::MAX, async { 7 });
        assert_eq!(out, Some(7));
        let out = run(
            &rt,
            &mut deadline,
            Duration::from_millis(10),
            std::future::pending::<()>(),
        );
        assert_eq!(out, None);
    }
}
