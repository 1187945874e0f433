//! `#[derive(Idempotent)]` written inside a `macro_rules!` whose caller names the type, a field
//! and the reconcile function: the generated `self` and locals keep the derive's hygiene, and
//! only the caller's own tokens carry the caller's.
use rerun_core::{Error, Idempotent, Reconciled};

macro_rules! event {
    ($n:ident, $f:ident) => {
        #[derive(serde::Serialize, Idempotent)]
        struct $n {
            #[rerun(key)]
            id: String,
            $f: u64,
        }
    };
    ($n:ident, $f:ident, $check:ident) => {
        #[derive(serde::Serialize, Idempotent)]
        #[rerun(once, reconcile = $check)]
        struct $n {
            #[rerun(key)]
            id: String,
            $f: u64,
        }
    };
}

event!(Paid, cents);
event!(Sent, attempt, already_sent);

fn already_sent(_sent: &Sent) -> Result<Reconciled<u64>, Error> {
    Ok(Reconciled::NotDone)
}

fn main() {
    let paid = |cents| Paid {
        id: "evt-1".into(),
        cents,
    };
    assert_eq!(paid(5).idempotency_key(), paid(6).idempotency_key());
    // The caller's field is fingerprinted.
    assert!(paid(5).fingerprint().unwrap() != paid(6).fingerprint().unwrap());
    let sent = Sent {
        id: "evt-2".into(),
        attempt: 1,
    };
    assert!(sent.options().is_once());
}
