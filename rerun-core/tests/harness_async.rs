//! The harness over an async operation (driven by a current-thread tokio runtime), in both
//! modes: a crash unwinds out of the future, and its claim is given back in the background.

use std::path::PathBuf;

use rerun_core::testing::{SafeToRerun, WorldDir};
use rerun_core::{Call, Error, SqliteStore};

struct Mailbox {
    store: SqliteStore,
    sent: PathBuf,
    rt: tokio::runtime::Runtime,
}

fn mailbox(dir: &WorldDir) -> Result<Mailbox, Error> {
    Ok(Mailbox {
        store: dir.sqlite_store()?,
        sent: dir.join("sent"),
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::store(None, "starting a runtime", e))?,
    })
}

/// Writes the message file (converges: same name, same content) in an async body.
fn send(m: &Mailbox) -> Result<String, Error> {
    m.rt.block_on(async {
        Call::new("mail.send", "msg_1")
            .run_async(&m.store, async {
                tokio::task::yield_now().await;
                std::fs::write(&m.sent, "hello").map_err(|e| Error::store(None, "sending", e))?;
                rerun_core::checkpoint!("written");
                tokio::task::yield_now().await;
                Ok::<_, Error>("queued".to_owned())
            })
            .await
            .map(|o| o.value)
    })
}

#[test]
fn async_operation_converges_in_both_modes() {
    let report = SafeToRerun::new("mail.send", mailbox, send, |m: &Mailbox| {
        std::fs::read_to_string(&m.sent).ok()
    })
    .check();
    println!("{report}");
    report.assert_passed();
    assert_eq!(report.points().len(), 5);
}
