//! Row types shared by the writer and the readers.

use bytes::Bytes;
use rusqlite::ToSql;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use serde::Serialize;

/// Where an event or a delivery stands. Stored as lowercase text, and
/// serialised the same way, so the API shows the column's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting for (another) dispatch attempt.
    Pending,
    Delivered,
    /// Parked after a permanent failure or too many attempts.
    Dead,
    /// Kept for reading through the API: no destination took it.
    Stored,
    /// Final, nothing sent: the destination's transform gave no output.
    /// An event is `skipped` when every delivery of it is.
    Skipped,
}

impl State {
    /// Every state, in the order the API and the dashboard list them.
    pub const ALL: [State; 5] = [
        State::Pending,
        State::Delivered,
        State::Dead,
        State::Skipped,
        State::Stored,
    ];

    /// The states a delivery can be in: an event without any is `stored`.
    pub const DELIVERY: [State; 4] = [
        State::Pending,
        State::Delivered,
        State::Dead,
        State::Skipped,
    ];

    /// The state `text` names (as [`State::as_str`] writes it), if any.
    pub fn parse(text: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Delivered => "delivered",
            State::Dead => "dead",
            State::Stored => "stored",
            State::Skipped => "skipped",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ToSql for State {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

/// A `state` column holding anything else is a corrupt row: an error, not
/// a guess.
impl FromSql for State {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let text = value.as_str()?;
        State::parse(text)
            .ok_or_else(|| FromSqlError::Other(format!("unknown state {text:?}").into()))
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

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;

    #[test]
    fn a_state_reads_back_as_written_and_an_unknown_one_is_an_error() {
        let conn = Connection::open_in_memory().unwrap();
        for state in State::ALL {
            let back: State = conn.query_row("SELECT ?1", [state], |r| r.get(0)).unwrap();
            assert_eq!(back, state);
            assert_eq!(State::parse(state.as_str()), Some(state));
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.as_str())
            );
        }
        assert_eq!(State::parse("Dead"), None);
        let odd = conn.query_row("SELECT 'gone'", [], |r| r.get::<_, State>(0));
        assert!(odd.is_err());
    }
}
