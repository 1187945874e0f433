//! [`Message`]: what a handler sees of a delivery, whatever the broker.

use bytes::Bytes;

use rerun_core::printable::escaped;

/// One delivery of a message, as the broker handed it over.
///
/// The adapters build it from a JetStream message or an AMQP delivery; a handler keyed by the
/// broker's message id reads [`Message::id`], a typed handler decodes [`Message::body`].
///
/// ```
/// use rerun_queue::Message;
/// let m = Message::new("orders.created", &b"{\"id\":1}"[..]).with_id("evt-1").with_attempt(2);
/// assert_eq!(m.id(), Some("evt-1"));
/// assert_eq!(m.attempt(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    subject: String,
    id: Option<String>,
    body: Bytes,
    attempt: u32,
}

impl Message {
    /// A first delivery of `body` on `subject` (a JetStream subject, an AMQP routing key),
    /// without a message id.
    pub fn new(subject: impl Into<String>, body: impl Into<Bytes>) -> Message {
        Message {
            subject: subject.into(),
            id: None,
            body: body.into(),
            attempt: 1,
        }
    }

    /// The broker's message id: JetStream's `Nats-Msg-Id` header, AMQP's `message_id` property.
    pub fn with_id(mut self, id: impl Into<String>) -> Message {
        self.id = Some(id.into());
        self
    }

    /// Which delivery this is, counting from 1 (where the broker says).
    pub fn with_attempt(mut self, attempt: u32) -> Message {
        self.attempt = attempt.max(1);
        self
    }

    /// The subject (JetStream) or routing key (AMQP) the message was published to.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The broker's message id, if the publisher set one.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The payload.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Which delivery of this message this is: 1 for the first. JetStream counts every
    /// delivery; AMQP counts them on quorum queues (`x-delivery-count`), and on classic queues
    /// says only 1 or, for a redelivery, 2.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// A short description for logs: subject, id and attempt, on one line. Both came from the
    /// publisher (an AMQP message id may hold any byte), so their line breaks and other control
    /// characters are written as escapes: a log line cannot be ended, and another forged, by
    /// what a message carries.
    ///
    /// ```
    /// use rerun_queue::Message;
    /// let m = Message::new("orders", &b"{}"[..]).with_id("evt-1\r\nWARN forged");
    /// assert_eq!(m.describe(), "orders (id evt-1\\r\\nWARN forged, attempt 1)");
    /// ```
    pub fn describe(&self) -> String {
        let subject = escaped(&self.subject);
        match &self.id {
            Some(id) => format!("{subject} (id {}, attempt {})", escaped(id), self.attempt),
            None => format!("{subject} (no id, attempt {})", self.attempt),
        }
    }
}
