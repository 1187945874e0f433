//! The ack policy: what happens to a message after its handler ran (contract section 14).

use std::time::Duration;

use crate::failure::{FailureKind, Handled};

/// What the adapter does with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Acknowledge: the result is recorded.
    Ack,
    /// Hand the message back to the broker, to be delivered again after this long
    /// (JetStream: a nak with this delay; AMQP: a requeue once it has passed).
    Redeliver(Duration),
    /// Give up on the message: JetStream `Term`, AMQP reject to the dead-letter exchange.
    DeadLetter,
}

/// When to redeliver and when to give up.
///
/// | handler / rerun says | action |
/// |---|---|
/// | ran and recorded, or replayed | [`Action::Ack`] |
/// | `InProgress` | [`Action::Redeliver`] after `in_progress_delay` (sooner if the holder's lease ends sooner) |
/// | a retryable error | [`Action::Redeliver`] with exponential backoff; dead-lettered after `max_deliveries` |
/// | `PayloadMismatch`, `Corrupt`, a non-retryable error, an undecodable payload, no message id | [`Action::DeadLetter`] |
/// | `OutcomeUnknown` (nothing reconciled it) | [`Action::DeadLetter`] |
///
/// ```
/// use std::time::Duration;
/// use rerun_queue::{Action, Failure, FailureKind, Handled, Policy};
/// let policy = Policy::new().backoff(Duration::from_millis(100), Duration::from_secs(5));
/// let failed = Handled::Failed(Failure::new(FailureKind::Retryable, "db down"));
/// assert_eq!(policy.decide(&failed, 1), Action::Redeliver(Duration::from_millis(100)));
/// assert_eq!(policy.decide(&failed, 3), Action::Redeliver(Duration::from_millis(400)));
/// assert_eq!(policy.decide(&Handled::Done { replayed: true }, 1), Action::Ack);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    in_progress_delay: Duration,
    backoff_first: Duration,
    backoff_max: Duration,
    max_deliveries: Option<u32>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new()
    }
}

impl Policy {
    /// The defaults: redeliver an in-progress message after 1 s; back off retryable failures
    /// from 1 s doubling up to 60 s; dead-letter a message after 20 failed deliveries.
    pub const fn new() -> Policy {
        Policy {
            in_progress_delay: Duration::from_secs(1),
            backoff_first: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            max_deliveries: Some(20),
        }
    }

    /// How long to wait before a message whose key another consumer holds comes back.
    pub const fn in_progress_delay(mut self, delay: Duration) -> Policy {
        self.in_progress_delay = delay;
        self
    }

    /// The backoff of retryable failures: `first` after the first failed delivery, doubling
    /// each delivery, never more than `max`.
    pub const fn backoff(mut self, first: Duration, max: Duration) -> Policy {
        self.backoff_first = first;
        self.backoff_max = max;
        self
    }

    /// Dead-letter a message whose handler failed retryably on its `n`th delivery (`None`:
    /// retry for ever). In-progress redeliveries do not count as failures but do count as
    /// deliveries on brokers that count them, so keep `n` well above the deliveries a busy key
    /// can take.
    pub const fn max_deliveries(mut self, n: Option<u32>) -> Policy {
        self.max_deliveries = n;
        self
    }

    /// The delivery on which a message whose handler keeps failing retryably is dead-lettered
    /// (`None`: never), as [`Policy::max_deliveries`] set it.
    pub const fn delivery_limit(&self) -> Option<u32> {
        self.max_deliveries
    }

    /// The backoff after the `attempt`th delivery failed (1-based).
    pub fn backoff_after(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.backoff_first
            .saturating_mul(1u32 << doublings)
            .min(self.backoff_max)
    }

    /// What to do with a delivery, the `attempt`th of its message, handled as `handled`.
    pub fn decide(&self, handled: &Handled, attempt: u32) -> Action {
        let failure = match handled {
            Handled::Done { .. } => return Action::Ack,
            Handled::Failed(failure) => failure,
        };
        match failure.kind {
            // Saturating: a handler or store of one's own may say a lease ends in any span,
            // up to `Duration::MAX`.
            FailureKind::InProgress { lease_ends_in } => Action::Redeliver(
                self.in_progress_delay
                    .min(lease_ends_in.saturating_add(Duration::from_millis(50))),
            ),
            FailureKind::Retryable => match self.max_deliveries {
                Some(max) if attempt >= max => Action::DeadLetter,
                _ => Action::Redeliver(self.backoff_after(attempt)),
            },
            FailureKind::PayloadMismatch
            | FailureKind::Corrupt
            | FailureKind::OutcomeUnknown
            | FailureKind::Undecodable
            | FailureKind::NoMessageId
            | FailureKind::Fatal => Action::DeadLetter,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Failure;

    fn failed(kind: FailureKind) -> Handled {
        Handled::Failed(Failure::new(kind, "x"))
    }

    #[test]
    fn every_row_of_the_table() {
        let p = Policy::new();
        assert_eq!(p.decide(&Handled::Done { replayed: false }, 1), Action::Ack);
        assert_eq!(p.decide(&Handled::Done { replayed: true }, 7), Action::Ack);
        assert_eq!(
            p.decide(
                &failed(FailureKind::InProgress {
                    lease_ends_in: Duration::from_secs(30)
                }),
                1
            ),
            Action::Redeliver(Duration::from_secs(1))
        );
        assert_eq!(
            p.decide(
                &failed(FailureKind::InProgress {
                    lease_ends_in: Duration::from_millis(100)
                }),
                1
            ),
            Action::Redeliver(Duration::from_millis(150))
        );
        assert_eq!(
            p.decide(&failed(FailureKind::Retryable), 2),
            Action::Redeliver(Duration::from_secs(2))
        );
        assert_eq!(
            p.decide(&failed(FailureKind::Retryable), 20),
            Action::DeadLetter
        );
        for kind in [
            FailureKind::PayloadMismatch,
            FailureKind::Corrupt,
            FailureKind::OutcomeUnknown,
            FailureKind::Undecodable,
            FailureKind::NoMessageId,
            FailureKind::Fatal,
        ] {
            assert_eq!(
                p.decide(&failed(kind.clone()), 1),
                Action::DeadLetter,
                "{kind:?}"
            );
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let p = Policy::new().backoff(Duration::from_millis(10), Duration::from_millis(50));
        let got: Vec<_> = (1..=5).map(|a| p.backoff_after(a).as_millis()).collect();
        assert_eq!(got, [10, 20, 40, 50, 50]);
        assert_eq!(p.backoff_after(u32::MAX), Duration::from_millis(50));
        let forever = Policy::new().max_deliveries(None);
        assert!(matches!(
            forever.decide(&failed(FailureKind::Retryable), 1_000),
            Action::Redeliver(_)
        ));
    }

    #[test]
    fn extreme_spans_do_not_overflow() {
        let never = failed(FailureKind::InProgress {
            lease_ends_in: Duration::MAX,
        });
        assert_eq!(
            Policy::new().decide(&never, 1),
            Action::Redeliver(Duration::from_secs(1))
        );
        let patient = Policy::new().in_progress_delay(Duration::MAX);
        assert_eq!(patient.decide(&never, 1), Action::Redeliver(Duration::MAX));
        // The backoff saturates too.
        let huge = Policy::new().backoff(Duration::MAX, Duration::MAX);
        assert_eq!(huge.backoff_after(1), Duration::MAX);
        assert_eq!(huge.backoff_after(u32::MAX), Duration::MAX);
    }
}
