//! The stored events `hookbox try` and `POST /api/try` run a destination's
//! filter and transform over: one by id, a source's last N, or those since
//! a time, bodies included, newest first.

use anyhow::Context;
use rusqlite::{Connection, params};

/// Which of a source's events to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// This event (of the source).
    Event(i64),
    /// The newest N.
    Last(usize),
    /// Those received at or after this time (unix ms), newest first, at
    /// most [`MAX_TRIED`].
    Since(i64),
}

/// The most events one try runs over.
pub const MAX_TRIED: usize = 1000;

/// One stored event with what a delivery of it is made from.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub id: i64,
    pub delivery_id: String,
    pub event_type: Option<String>,
    pub received_at: i64,
    pub content_type: Option<String>,
    /// `events.headers`, JSON.
    pub headers: String,
    /// `None` once retention dropped it.
    pub body: Option<Vec<u8>>,
}

/// `source`'s events that `which` picks, newest first.
pub fn events_to_try(
    conn: &Connection,
    source: &str,
    which: Which,
) -> anyhow::Result<Vec<StoredEvent>> {
    const COLUMNS: &str =
        "SELECT id, delivery_id, event_type, received_at, content_type, headers, body FROM events";
    let row = |r: &rusqlite::Row| {
        Ok(StoredEvent {
            id: r.get(0)?,
            delivery_id: r.get(1)?,
            event_type: r.get(2)?,
            received_at: r.get(3)?,
            content_type: r.get(4)?,
            headers: r.get(5)?,
            body: r.get(6)?,
        })
    };
    let (sql, a, b) = match which {
        Which::Event(id) => (
            format!("{COLUMNS} WHERE source = ?1 AND id = ?2 AND ?3 >= 0"),
            id,
            0,
        ),
        Which::Last(n) => (
            format!("{COLUMNS} WHERE source = ?1 AND ?2 >= 0 ORDER BY id DESC LIMIT ?3"),
            0,
            n.min(MAX_TRIED) as i64,
        ),
        Which::Since(at) => (
            format!("{COLUMNS} WHERE source = ?1 AND received_at >= ?2 ORDER BY id DESC LIMIT ?3"),
            at,
            MAX_TRIED as i64,
        ),
    };
    conn.prepare(&sql)?
        .query_map(params![source, a, b], row)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("reading the events to try")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::queries::tests::{add, db};

    #[test]
    fn an_event_the_last_few_or_those_since_a_time_of_one_source() {
        let conn = db();
        for (i, source) in ["s", "s", "other", "s"].iter().enumerate() {
            add(&conn, source, "stored", 1_000 * (i as i64 + 1));
        }
        let ids = |which| {
            events_to_try(&conn, "s", which)
                .unwrap()
                .iter()
                .map(|e| e.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(Which::Last(2)), [4, 2]);
        assert_eq!(ids(Which::Last(10)), [4, 2, 1]);
        assert_eq!(ids(Which::Since(2_000)), [4, 2]);
        assert_eq!(ids(Which::Event(2)), [2]);
        assert_eq!(ids(Which::Event(3)), Vec::<i64>::new(), "another source's");
    }
}
