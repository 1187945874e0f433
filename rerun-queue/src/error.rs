//! [`Error`]: what can stop a consumer.

/// Why a consumer could not start or had to stop. A message's own failures never end up
/// here: they are settled by the ack policy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The broker refused or failed an operation (connecting, consuming, declaring).
    #[error("{what}: {message}; check that the broker is up and the names are right")]
    #[non_exhaustive]
    Broker {
        /// What was being done.
        what: String,
        /// The client's message.
        message: String,
    },
    /// The consumer is configured wrongly.
    #[error("configuration error: {0}")]
    Config(String),
}

impl Error {
    pub(crate) fn broker(what: impl Into<String>, e: impl std::fmt::Display) -> Error {
        Error::Broker {
            what: what.into(),
            message: e.to_string(),
        }
    }
}
