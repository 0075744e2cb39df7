//! Row types shared by the writer and the readers.

use bytes::Bytes;

/// Where an event stands. Stored as lowercase text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for (another) dispatch attempt.
    Pending,
    Delivered,
    /// Parked after a permanent failure or too many attempts.
    Dead,
    /// Kept for reading through the API: no destination took it.
    Stored,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Delivered => "delivered",
            State::Dead => "dead",
            State::Stored => "stored",
        }
    }
}

/// How an event reached the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The provider POSTed it and its signature verified.
    Push,
    /// A catch-up job fetched it over the provider's authenticated API.
    Fetched,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Push => "push",
            Origin::Fetched => "fetched",
        }
    }
}

/// An event on its way into the inbox.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub source: String,
    pub delivery_id: String,
    pub event_type: Option<String>,
    pub order_key: Option<String>,
    /// Unix milliseconds.
    pub received_at: i64,
    pub origin: Origin,
    pub content_type: Option<String>,
    /// JSON object of the provider headers worth keeping.
    pub headers: String,
    pub body: Bytes,
    /// The destinations that take it, one delivery each; none: `stored`.
    pub destinations: Vec<std::sync::Arc<str>>,
}

impl NewEvent {
    /// The state the event is stored in.
    pub fn state(&self) -> State {
        if self.destinations.is_empty() {
            State::Stored
        } else {
            State::Pending
        }
    }
}

/// What storing an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// A new row, committed.
    New(i64),
    /// The `(source, delivery_id)` was already stored under this row id.
    Duplicate(i64),
}
