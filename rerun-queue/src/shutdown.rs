//! Shutdown signals: a future that resolves on SIGTERM or Ctrl-C.

/// Resolves when the process gets SIGTERM (or SIGINT, Ctrl-C): pass it to a consumer's `run`
/// to stop fetching, let handlers in flight finish within the grace period, and return.
///
/// ```no_run
/// # async fn f() {
/// rerun_queue::shutdown::terminated().await;
/// println!("stopping");
/// # }
/// ```
///
/// The signals are listened for from the call on (it must be made inside a Tokio runtime), so
/// call it early: a SIGTERM that arrives while the consumer is still connecting is not lost.
pub fn terminated() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(error = %e, "rerun-queue: cannot listen for SIGTERM; waiting for Ctrl-C only");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async move {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
