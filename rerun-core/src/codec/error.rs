//! The codec's two error types: why a value could not be encoded, and why a body could not
//! be decoded (which becomes a [`CorruptKind`]).

use std::fmt;

use crate::error::CorruptKind;

/// Why a value could not be encoded (or would not replay as itself).
///
/// Its message says what could not be encoded and why; the runtime reports it as
/// `Error::Codec`, and nothing is recorded.
#[derive(Clone, PartialEq, Eq)]
pub struct CodecError {
    message: String,
}

impl CodecError {
    pub(super) fn new(message: impl Into<String>) -> CodecError {
        CodecError {
            message: message.into(),
        }
    }

    /// The message, without any prefix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CodecError").field(&self.message).finish()
    }
}

impl std::error::Error for CodecError {}

impl serde::ser::Error for CodecError {
    fn custom<T: fmt::Display>(msg: T) -> CodecError {
        CodecError::new(msg.to_string())
    }
}

/// Why a version-2 body could not be decoded.
///
/// `Malformed` is a body that breaks the format itself (an unknown tag, a length past the end,
/// invalid UTF-8, nesting too deep): [`CorruptKind::Record`]. Everything the result type's
/// `Deserialize` reports (a type that changed since the record was written) is
/// [`CorruptKind::Decode`].
#[derive(Debug)]
pub(super) struct DecodeError {
    malformed: bool,
    message: String,
}

impl DecodeError {
    pub(super) fn malformed(message: String) -> DecodeError {
        DecodeError {
            malformed: true,
            message,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecodeError {}

impl serde::de::Error for DecodeError {
    fn custom<T: fmt::Display>(msg: T) -> DecodeError {
        DecodeError {
            malformed: false,
            message: msg.to_string(),
        }
    }
}

impl From<DecodeError> for CorruptKind {
    fn from(e: DecodeError) -> CorruptKind {
        if e.malformed {
            CorruptKind::Record(e.message)
        } else {
            CorruptKind::Decode(e.message)
        }
    }
}
