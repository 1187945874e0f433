//! [`Codec`]: how a typed handler decodes a message body into its payload type.

use serde::de::DeserializeOwned;

/// Decodes message bodies into a payload type. [`Json`] is the default; a user with another
/// format (MessagePack, protobuf through serde, a custom envelope) implements this trait.
///
/// ```
/// use rerun_queue::codec::{Codec, Json};
/// #[derive(serde::Deserialize, Debug, PartialEq)]
/// struct Paid { id: u32 }
/// assert_eq!(Json.decode::<Paid>(br#"{"id":7}"#).ok(), Some(Paid { id: 7 }));
/// assert!(Json.decode::<Paid>(b"not json").is_err());
/// ```
pub trait Codec: Send + Sync + 'static {
    /// Decodes `body`; the error text names what is wrong and goes into the dead-letter log.
    fn decode<T: DeserializeOwned>(&self, body: &[u8]) -> Result<T, String>;
}

/// JSON through `serde_json`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl Codec for Json {
    fn decode<T: DeserializeOwned>(&self, body: &[u8]) -> Result<T, String> {
        serde_json::from_slice(body).map_err(|e| format!("the body is not the expected JSON: {e}"))
    }
}
