//! Read-only queries for the admin API and `/metrics`, run on the read pool
//! through [`super::Store::read`].
//!
//! Handlers never hold SQL: they parse a request into one of the filters
//! here, call a function, and render what it returns. Every function takes
//! a plain `Connection`, so the unit tests below run them on a temporary
//! database. Times are unix milliseconds, as in the tables. Events are
//! here; the counts behind `/api/stats` and `/metrics` and the catch-up
//! runs are in `stats.rs`.
//!
//! Paging is by id: ids only grow (one writer, `INTEGER PRIMARY KEY`, and
//! retention only deletes old rows), so
//! "the page of rows with `id < before`" never gains a row while a client
//! pages through it, whatever arrives in the meantime.

use anyhow::Context;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params_from_iter};
use serde::Serialize;

mod stats;

pub use stats::{
    CatchupRun, MetricsSnapshot, SourceStats, catchup_runs, last_catchup_runs, metrics_snapshot,
    source_stats,
};

/// The states an event can be in, in the order the API lists them.
pub const STATES: [&str; 4] = ["pending", "delivered", "dead", "stored"];

/// Which events to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub source: Option<String>,
    pub state: Option<String>,
    pub event_type: Option<String>,
    /// `received_at >= since`.
    pub since: Option<i64>,
    /// `received_at < until`.
    pub until: Option<i64>,
    /// Only ids below this: the cursor from the previous page.
    pub before: Option<i64>,
    pub limit: usize,
}

/// One event in a listing: everything but headers and body.
#[derive(Debug, Clone, Serialize)]
pub struct EventSummary {
    pub id: i64,
    pub source: String,
    pub delivery_id: String,
    pub event_type: Option<String>,
    pub origin: String,
    pub received_at: i64,
    pub state: String,
    pub attempts: i64,
    pub next_attempt_at: Option<i64>,
    pub last_error: Option<String>,
    pub delivered_at: Option<i64>,
    /// `None` once retention has dropped the body.
    pub body_size: Option<i64>,
}

/// A page of events and the cursor for the next one (`None` on the last).
#[derive(Debug, Clone, Serialize)]
pub struct EventPage {
    pub events: Vec<EventSummary>,
    pub next_before: Option<i64>,
}

const SUMMARY_COLUMNS: &str = "id, source, delivery_id, event_type, origin, received_at, state,
    attempts, next_attempt_at, last_error, delivered_at, length(body)";

fn summary(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventSummary> {
    Ok(EventSummary {
        id: r.get(0)?,
        source: r.get(1)?,
        delivery_id: r.get(2)?,
        event_type: r.get(3)?,
        origin: r.get(4)?,
        received_at: r.get(5)?,
        state: r.get(6)?,
        attempts: r.get(7)?,
        next_attempt_at: r.get(8)?,
        last_error: r.get(9)?,
        delivered_at: r.get(10)?,
        body_size: r.get(11)?,
    })
}

/// One page of events matching `filter`, newest first. Only the clauses
/// in use are in the SQL, so a source filter walks `events_source` and
/// the rest walk the primary key backwards; either stops after a page.
pub fn list_events(conn: &Connection, filter: &EventFilter) -> anyhow::Result<EventPage> {
    let mut sql = format!("SELECT {SUMMARY_COLUMNS} FROM events WHERE 1 = 1");
    let mut args: Vec<SqlValue> = Vec::new();
    let text_clauses = [
        ("source", &filter.source),
        ("state", &filter.state),
        ("event_type", &filter.event_type),
    ];
    for (column, value) in text_clauses {
        if let Some(v) = value {
            sql.push_str(&format!(" AND {column} = ?"));
            args.push(SqlValue::Text(v.clone()));
        }
    }
    let int_clauses = [
        ("received_at >=", filter.since),
        ("received_at <", filter.until),
        ("id <", filter.before),
    ];
    for (test, value) in int_clauses {
        if let Some(v) = value {
            sql.push_str(&format!(" AND {test} ?"));
            args.push(SqlValue::Integer(v));
        }
    }
    // One more than asked: whether it exists says if there is a next page.
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    args.push(SqlValue::Integer(filter.limit as i64 + 1));
    let mut events = conn
        .prepare_cached(&sql)?
        .query_map(params_from_iter(args), summary)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("listing events")?;
    let next_before = if events.len() > filter.limit {
        events.truncate(filter.limit);
        events.last().map(|e| e.id)
    } else {
        None
    };
    Ok(EventPage {
        events,
        next_before,
    })
}

/// One event with everything stored about it.
#[derive(Debug, Clone)]
pub struct EventDetail {
    pub summary: EventSummary,
    pub order_key: Option<String>,
    pub content_type: Option<String>,
    /// The stored JSON object (a string if it somehow is not JSON).
    pub headers: serde_json::Value,
    pub body: Option<Vec<u8>>,
    pub lease_until: Option<i64>,
    pub attempts: Vec<AttemptRow>,
}

/// One dispatch attempt, as the `attempts` table keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRow {
    pub attempt: i64,
    pub started_at: i64,
    pub duration_ms: i64,
    pub outcome: String,
    pub status_code: Option<i64>,
    pub error: Option<String>,
}

/// The event `id` with its attempts, oldest first; `None` if there is none.
pub fn event_detail(conn: &Connection, id: i64) -> anyhow::Result<Option<EventDetail>> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, order_key, content_type, headers, body,
                (SELECT min(l.lease_until) FROM leases AS l JOIN deliveries AS d ON d.id = l.delivery
                 WHERE d.event_id = events.id)
         FROM events WHERE id = ?1"
    );
    let found = conn
        .prepare_cached(&sql)?
        .query_row([id], |r| {
            let headers: String = r.get(14)?;
            Ok(EventDetail {
                summary: summary(r)?,
                order_key: r.get(12)?,
                content_type: r.get(13)?,
                headers: serde_json::from_str(&headers)
                    .unwrap_or(serde_json::Value::String(headers)),
                body: r.get(15)?,
                lease_until: r.get(16)?,
                attempts: Vec::new(),
            })
        })
        .optional()
        .context("reading an event")?;
    let Some(mut detail) = found else {
        return Ok(None);
    };
    detail.attempts = conn
        .prepare_cached(
            "SELECT attempt, started_at, duration_ms, outcome, status_code, error
             FROM attempts WHERE event_id = ?1 ORDER BY id",
        )?
        .query_map([id], |r| {
            Ok(AttemptRow {
                attempt: r.get(0)?,
                started_at: r.get(1)?,
                duration_ms: r.get(2)?,
                outcome: r.get(3)?,
                status_code: r.get(4)?,
                error: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("reading an event's attempts")?;
    Ok(Some(detail))
}

/// What decides whether an event can be replayed.
#[derive(Debug, Clone)]
pub struct EventState {
    pub source: String,
    pub state: String,
    /// False once retention dropped the body.
    pub has_body: bool,
}

/// An event's source and state, for deciding whether it can be replayed.
pub fn event_state(conn: &Connection, id: i64) -> anyhow::Result<Option<EventState>> {
    conn.prepare_cached("SELECT source, state, body IS NOT NULL FROM events WHERE id = ?1")?
        .query_row([id], |r| {
            Ok(EventState {
                source: r.get(0)?,
                state: r.get(1)?,
                has_body: r.get(2)?,
            })
        })
        .optional()
        .context("reading an event's state")
}

#[cfg(test)]
pub(super) mod tests {
    use rusqlite::params;

    use super::*;

    pub(super) fn db() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::store::schema::apply(&mut conn).unwrap();
        conn
    }

    pub(super) fn add(conn: &Connection, source: &str, state: &str, received_at: i64) -> i64 {
        conn.execute(
            "INSERT INTO events (source, delivery_id, received_at, body, state)
             VALUES (?1, ?2, ?3, x'00ff', ?4)",
            params![source, format!("d{received_at}"), received_at, state],
        )
        .unwrap();
        conn.last_insert_rowid()
    }

    #[test]
    fn pages_cover_every_row_once_newest_first() {
        let conn = db();
        let ids: Vec<i64> = (0..7).map(|i| add(&conn, "s", "stored", i)).collect();
        let mut seen = Vec::new();
        let mut filter = EventFilter {
            limit: 3,
            ..EventFilter::default()
        };
        loop {
            let page = list_events(&conn, &filter).unwrap();
            seen.extend(page.events.iter().map(|e| e.id));
            match page.next_before {
                Some(cursor) => filter.before = Some(cursor),
                None => break,
            }
        }
        assert_eq!(seen, ids.into_iter().rev().collect::<Vec<_>>());
    }

    #[test]
    fn filters_combine_and_a_dropped_body_has_no_size() {
        let conn = db();
        add(&conn, "a", "dead", 10);
        let b = add(&conn, "b", "dead", 20);
        add(&conn, "b", "delivered", 30);
        add(&conn, "b", "dead", 40);
        conn.execute("UPDATE events SET body = NULL WHERE id = ?1", [b])
            .unwrap();
        let filter = EventFilter {
            source: Some("b".into()),
            state: Some("dead".into()),
            since: Some(20),
            until: Some(40),
            limit: 10,
            ..EventFilter::default()
        };
        let page = list_events(&conn, &filter).unwrap();
        assert_eq!(page.events.len(), 1);
        assert_eq!((page.events[0].id, page.events[0].body_size), (b, None));
        assert_eq!(page.next_before, None);
    }
}
