//! A `#[derive(Idempotent)]` type's own `#[rerun(once, reconcile = …)]` decides a message
//! whose earlier delivery died mid-body, when it is consumed through `handler::typed`
//! (contract 14: `OutcomeUnknown` "reconciles if the type has `reconcile`, else
//! dead-letters"). No broker: the handler is called as an adapter calls it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rerun_core::{Error, Idempotent, MemoryStore, Reconciled, Store};
use rerun_queue::{handler, FailureKind, Handled, Handler, Message};
use serde::{Deserialize, Serialize};

/// A refund the provider reports as sent when its id ends in "sent".
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[rerun(scope = "queue.refund", once, reconcile = refund_sent, settle = "0s")]
struct Refund {
    #[rerun(key)]
    id: String,
}

fn refund_sent(refund: &Refund) -> Result<Reconciled<String>, Error> {
    Ok(match refund.id.ends_with("sent") {
        true => Reconciled::Done(format!("found {}", refund.id)),
        false => Reconciled::NotDone,
    })
}

/// The same without `reconcile`.
#[derive(Debug, Clone, Serialize, Deserialize, Idempotent)]
#[rerun(scope = "queue.payout", once)]
struct Payout {
    #[rerun(key)]
    id: String,
}

/// Leaves `payload`'s key as a delivery that died mid-body leaves it: outcome unknown.
fn died_mid_body<T: Idempotent>(store: &MemoryStore, payload: &T) {
    let fingerprint = payload
        .fingerprint()
        .unwrap_or_else(|e| panic!("fingerprint: {e}"));
    rerun_core::testing::leave_unknown(store, &payload.idempotency_key(), &fingerprint)
        .unwrap_or_else(|e| panic!("unknown: {e}"));
}

fn message<T: Serialize>(payload: &T) -> Message {
    let body = serde_json::to_vec(payload).unwrap_or_else(|e| panic!("json: {e}"));
    Message::new("refunds", body)
}

#[tokio::test]
async fn the_types_own_reconcile_decides_an_unknown_outcome() {
    let store = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let refunds = handler::typed(store.clone(), move |refund: Refund| {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Error>(format!("refunded {}", refund.id))
        }
    });

    // Reconciled as done: recorded and acked, the work never runs.
    let sent = Refund {
        id: "r-1-sent".into(),
    };
    died_mid_body(&store, &sent);
    assert!(matches!(
        refunds.handle(&message(&sent)).await,
        Handled::Done { .. }
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let view = store
        .inspect(&sent.idempotency_key())
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no record"));
    assert_eq!(view.status, rerun_core::record::Status::Completed);

    // Reconciled as not done: the work runs, once.
    let lost = Refund { id: "r-2".into() };
    died_mid_body(&store, &lost);
    assert!(matches!(
        refunds.handle(&message(&lost)).await,
        Handled::Done { replayed: false }
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(matches!(
        refunds.handle(&message(&lost)).await,
        Handled::Done { replayed: true }
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // A type without `reconcile`: outcome unknown, for the dead-letter path.
    let payouts = handler::typed(store.clone(), |_: Payout| async {
        Ok::<_, Error>("paid".to_owned())
    });
    let payout = Payout { id: "p-1".into() };
    died_mid_body(&store, &payout);
    match payouts.handle(&message(&payout)).await {
        Handled::Failed(failure) => assert_eq!(failure.kind, FailureKind::OutcomeUnknown),
        other => panic!("{other:?}"),
    }
}
