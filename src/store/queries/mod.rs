//! Read-only queries for the admin API and `/metrics`, run on the read pool
//! through [`super::Store::read`], and for `hookbox events` (`crate::cli`)
//! on its own read-only connection.
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
//! pages through it, whatever arrives in the meantime. (With a destination
//! filter, a replay that gives an old event a delivery there is the one
//! exception: the event shows up on the page it belongs to.)

use anyhow::Context;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, params_from_iter};
use serde::Serialize;

use super::models::State;
use super::outcomes;
use super::search::SearchQuery;

mod stats;
mod trial;

pub use stats::{
    CatchupRun, DestinationStats, Known, LaneCount, MetricsSnapshot, SourceStats, catchup_runs,
    lane_counts, last_catchup_runs, metrics_snapshot, oldest_pending, pending_per_lane,
    source_stats,
};
pub use trial::{MAX_TRIED, StoredEvent, Which, events_to_try};

/// Which events to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub source: Option<String>,
    /// Only events with a delivery at this destination; `state` is then
    /// that delivery's state.
    pub destination: Option<String>,
    /// Never [`State::Stored`] with a destination: the edge refuses it.
    pub state: Option<State>,
    pub event_type: Option<String>,
    /// `received_at >= since`.
    pub since: Option<i64>,
    /// `received_at < until`.
    pub until: Option<i64>,
    /// Only ids below this: the cursor from the previous page.
    pub before: Option<i64>,
    /// Only events whose body has these words (see [`super::search`]).
    pub q: Option<SearchQuery>,
    pub limit: usize,
}

/// One event in a listing: everything but headers and body.
///
/// `attempts`, `next_attempt_at` and `last_error` sum up the event's
/// deliveries (the columns of the same names in `events` are no longer
/// written since routes, and hold stale values in upgraded databases).
#[derive(Debug, Clone, Serialize)]
pub struct EventSummary {
    pub id: i64,
    pub source: String,
    pub delivery_id: String,
    pub event_type: Option<String>,
    pub origin: String,
    pub received_at: i64,
    /// Derived from the deliveries: `pending` while any is, else `dead` if
    /// any is, else `delivered`; `stored` with none.
    pub state: State,
    /// Finished attempts over every destination.
    pub attempts: i64,
    /// The earliest scheduled attempt of a pending delivery.
    pub next_attempt_at: Option<i64>,
    /// The error of the delivery that failed most recently, while it has one.
    pub last_error: Option<String>,
    pub delivered_at: Option<i64>,
    /// `None` once retention has dropped the body.
    pub body_size: Option<i64>,
    /// With a destination filter: the event's delivery there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryRow>,
}

/// A page of events and the cursor for the next one (`None` on the last).
#[derive(Debug, Clone, Serialize)]
pub struct EventPage {
    pub events: Vec<EventSummary>,
    pub next_before: Option<i64>,
    /// With `q`: how far the search index had got (it lags the events:
    /// those past it were not searched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<super::search::Coverage>,
}

/// An event's finished attempts over every destination, over `events AS e`.
/// This and the two below sum up an event's deliveries, each a lookup in
/// the `UNIQUE (event_id, destination)` index, so a page of events costs a
/// page of them.
const EVENT_ATTEMPTS: &str =
    "coalesce((SELECT sum(x.attempts) FROM deliveries AS x WHERE x.event_id = e.id), 0)";

/// The earliest scheduled attempt of the event's pending deliveries.
const EVENT_NEXT_ATTEMPT: &str = "(SELECT min(x.next_attempt_at) FROM deliveries AS x
     WHERE x.event_id = e.id AND x.state = 'pending')";

/// The last error of the delivery whose latest attempt is the most recent,
/// among those that have one (a delivery that succeeded or was replayed
/// has none; one migrated without attempts comes last).
const EVENT_LAST_ERROR: &str = "(SELECT x.last_error FROM deliveries AS x
     WHERE x.event_id = e.id AND x.last_error IS NOT NULL
     ORDER BY (SELECT max(a.id) FROM attempts AS a
               WHERE a.event_id = x.event_id AND a.destination = x.destination) DESC NULLS LAST,
              x.id DESC
     LIMIT 1)";

/// An event's summary columns over `events AS e` and its outcome
/// ([`outcomes::JOIN`]), as [`summary`] reads them.
fn summary_columns() -> String {
    format!(
        "e.id, e.source, e.delivery_id, e.event_type, e.origin, e.received_at, {},
         {EVENT_ATTEMPTS}, {EVENT_NEXT_ATTEMPT}, {EVENT_LAST_ERROR}, {}, length(e.body)",
        outcomes::STATE,
        outcomes::DELIVERED_AT
    )
}

/// A delivery's columns over `deliveries AS d`, as [`delivery_row`] reads them.
const DELIVERY_COLUMNS: &str =
    "d.destination, d.state, d.attempts, d.next_attempt_at, d.last_error, d.delivered_at";

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
        delivery: None,
    })
}

/// [`DELIVERY_COLUMNS`] starting at column `at`.
fn delivery_row(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<DeliveryRow> {
    Ok(DeliveryRow {
        destination: r.get(at)?,
        state: r.get(at + 1)?,
        attempts: r.get(at + 2)?,
        next_attempt_at: r.get(at + 3)?,
        last_error: r.get(at + 4)?,
        delivered_at: r.get(at + 5)?,
    })
}

/// The SQL and arguments of [`list_events`]. Only the clauses in use are in
/// the SQL. Without a destination, a source filter walks `events_source`
/// and the rest walk the primary key backwards; either stops after a page.
///
/// With a destination, the walk is over the deliveries there:
/// `UNIQUE (event_id, destination)` backwards, which stops after a page
/// too, or, for a pending or dead state with the source given, the lane's
/// partial index (`deliveries_due`, `deliveries_dead`), whose rows are
/// sorted by event. So that such a sort orders ids alone, the page is
/// picked first and only its rows get their summary columns.
///
/// With `q`, the walk starts from the search index instead (below).
fn list_sql(filter: &EventFilter) -> (String, Vec<SqlValue>) {
    let mut args: Vec<SqlValue> = Vec::new();
    let columns = summary_columns();
    // A search walks the index instead, newest match first (FTS5 hands
    // rowids out in either order, and takes `before` as a bound on them),
    // joining each match to its row: a page of a common word stops after
    // a page, one of a rare word costs its matches.
    // The index may still hold the words of an event retention deleted or
    // stripped (until the indexer sweeps): only rows with a body count.
    let (from, matches) = match (&filter.q, &filter.destination) {
        (Some(q), None) => {
            args.push(SqlValue::Text(q.expression().to_owned()));
            (
                "search.events_fts AS f JOIN",
                "f.events_fts MATCH ? AND e.body IS NOT NULL",
            )
        }
        (Some(q), Some(_)) => {
            args.push(SqlValue::Text(q.expression().to_owned()));
            (
                "search.events_fts AS f JOIN",
                "f.events_fts MATCH ? AND (SELECT body IS NOT NULL FROM events WHERE id = f.rowid)",
            )
        }
        (None, _) => ("", "1 = 1"),
    };
    let on_match = |id: &str| match filter.q {
        Some(_) => format!(" ON {id} = f.rowid"),
        None => String::new(),
    };
    let mut sql = match &filter.destination {
        None => format!(
            "SELECT {columns} FROM {from} events AS e{} {} WHERE {matches}",
            on_match("e.id"),
            outcomes::JOIN
        ),
        Some(destination) => {
            args.push(SqlValue::Text(destination.clone()));
            // The events table only when a clause reads it.
            let join = if filter.event_type.is_some()
                || filter.since.is_some()
                || filter.until.is_some()
            {
                "JOIN events AS e ON e.id = d.event_id"
            } else {
                ""
            };
            format!(
                "SELECT d.id FROM {from} deliveries AS d{} {join}
                 WHERE {matches} AND d.destination = ?",
                on_match("d.event_id")
            )
        }
    };
    // Through `d` where there is one: the lane indexes are on its columns.
    // Without one, a final state is only ever in an event's outcome row
    // (ingest stores `pending` or `stored`, and version 21 moved the older
    // ones), so such a filter reads the outcomes: a source's dead letters
    // through `event_outcomes_dead`, not a walk of all its events.
    let settled = matches!(
        filter.state,
        Some(State::Delivered | State::Dead | State::Skipped)
    );
    let at = match (&filter.destination, settled) {
        (Some(_), _) => "d",
        (None, true) => "o",
        (None, false) => "e",
    };
    let id = match (&filter.q, at) {
        (Some(_), _) => "f.rowid",
        (None, "d") => "d.event_id",
        (None, "o") => "o.event_id",
        (None, _) => "e.id",
    };
    let text_clauses = [
        (format!("{at}.source"), filter.source.as_deref()),
        (
            match at {
                "e" => outcomes::STATE.to_owned(),
                _ => format!("{at}.state"),
            },
            filter.state.map(State::as_str),
        ),
        ("e.event_type".to_owned(), filter.event_type.as_deref()),
    ];
    for (column, value) in text_clauses {
        if let Some(v) = value {
            sql.push_str(&format!(" AND {column} = ?"));
            args.push(SqlValue::Text(v.to_owned()));
        }
    }
    let int_clauses = [
        ("e.received_at >=".to_owned(), filter.since),
        ("e.received_at <".to_owned(), filter.until),
        (format!("{id} <"), filter.before),
    ];
    for (test, value) in int_clauses {
        if let Some(v) = value {
            sql.push_str(&format!(" AND {test} ?"));
            args.push(SqlValue::Integer(v));
        }
    }
    // One more than asked: whether it exists says if there is a next page.
    sql.push_str(&format!(" ORDER BY {id} DESC LIMIT ?"));
    args.push(SqlValue::Integer(filter.limit as i64 + 1));
    if filter.destination.is_some() {
        sql = format!(
            "SELECT {columns}, {DELIVERY_COLUMNS}
             FROM ({sql}) AS page
             JOIN deliveries AS d ON d.id = page.id JOIN events AS e ON e.id = d.event_id
             {}
             ORDER BY d.event_id DESC",
            outcomes::JOIN
        );
    }
    (sql, args)
}

/// One page of events matching `filter`, newest first (see [`list_sql`]).
pub fn list_events(conn: &Connection, filter: &EventFilter) -> anyhow::Result<EventPage> {
    let (sql, args) = list_sql(filter);
    let with_delivery = filter.destination.is_some();
    let mut events = conn
        .prepare_cached(&sql)?
        .query_map(params_from_iter(args), |r| {
            let mut e = summary(r)?;
            if with_delivery {
                e.delivery = Some(delivery_row(r, 12)?);
            }
            Ok(e)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("listing events")?;
    let next_before = if events.len() > filter.limit {
        events.truncate(filter.limit);
        events.last().map(|e| e.id)
    } else {
        None
    };
    let search = match filter.q {
        Some(_) => Some(super::search::coverage(conn)?),
        None => None,
    };
    Ok(EventPage {
        events,
        next_before,
        search,
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
    /// The earliest lease of a delivery of the event in flight.
    pub lease_until: Option<i64>,
    /// By destination name.
    pub deliveries: Vec<DeliveryRow>,
    pub attempts: Vec<AttemptRow>,
}

/// One delivery: the event on its way to one destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryRow {
    pub destination: String,
    /// `pending`, `delivered` or `dead`.
    pub state: State,
    /// Finished attempts; replay resets them.
    pub attempts: i64,
    /// `None` once settled, and while held behind an older pending
    /// delivery of its order key.
    pub next_attempt_at: Option<i64>,
    pub last_error: Option<String>,
    pub delivered_at: Option<i64>,
}

/// One dispatch attempt, as the `attempts` table keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRow {
    pub destination: String,
    pub attempt: i64,
    pub started_at: i64,
    pub duration_ms: i64,
    pub outcome: String,
    pub status_code: Option<i64>,
    pub error: Option<String>,
}

/// The body of event `id`: `None` if there is no such event, `Some(None)`
/// once retention dropped it.
pub fn event_body(conn: &Connection, id: i64) -> anyhow::Result<Option<Option<Vec<u8>>>> {
    conn.prepare_cached("SELECT body FROM events WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()
        .context("reading an event's body")
}

/// The event `id` with its deliveries and attempts (oldest first); `None`
/// if there is none. All of one commit ([`one_snapshot`]).
pub fn event_detail(conn: &Connection, id: i64) -> anyhow::Result<Option<EventDetail>> {
    one_snapshot(conn, |conn| event_detail_now(conn, id))
}

/// Runs `read`'s queries in one read transaction, so that they all see
/// the same commit. Each on its own, a delivery settled between two of
/// them showed an event still `pending` beside deliveries already `dead`
/// and `delivered` (a test of the admin API caught it, now and then).
fn one_snapshot<T>(
    conn: &Connection,
    read: impl FnOnce(&Connection) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let snapshot = conn
        .unchecked_transaction()
        .context("starting a read transaction")?;
    let found = read(&snapshot)?;
    snapshot.commit().context("ending a read transaction")?;
    Ok(found)
}

fn event_detail_now(conn: &Connection, id: i64) -> anyhow::Result<Option<EventDetail>> {
    let sql = format!(
        "SELECT {}, e.order_key, e.content_type, e.headers, e.body,
                (SELECT min(l.lease_until) FROM leases AS l JOIN deliveries AS x ON x.id = l.delivery
                 WHERE x.event_id = e.id)
         FROM events AS e {} WHERE e.id = ?1",
        summary_columns(),
        outcomes::JOIN
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
                deliveries: Vec::new(),
                attempts: Vec::new(),
            })
        })
        .optional()
        .context("reading an event")?;
    let Some(mut detail) = found else {
        return Ok(None);
    };
    detail.deliveries = deliveries(conn, id)?;
    detail.attempts = conn
        .prepare_cached(
            "SELECT destination, attempt, started_at, duration_ms, outcome, status_code, error
             FROM attempts WHERE event_id = ?1 ORDER BY id",
        )?
        .query_map([id], |r| {
            Ok(AttemptRow {
                destination: r.get(0)?,
                attempt: r.get(1)?,
                started_at: r.get(2)?,
                duration_ms: r.get(3)?,
                outcome: r.get(4)?,
                status_code: r.get(5)?,
                error: r.get(6)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("reading an event's attempts")?;
    Ok(Some(detail))
}

/// Event `id`'s deliveries, by destination name.
fn deliveries(conn: &Connection, id: i64) -> anyhow::Result<Vec<DeliveryRow>> {
    conn.prepare_cached(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM deliveries AS d WHERE d.event_id = ?1 ORDER BY d.destination"
    ))?
    .query_map([id], |r| delivery_row(r, 0))?
    .collect::<rusqlite::Result<Vec<_>>>()
    .context("reading an event's deliveries")
}

/// What decides whether an event can be replayed.
#[derive(Debug, Clone)]
pub struct EventState {
    pub source: String,
    /// The derived state (see [`EventSummary::state`]).
    pub state: State,
    /// False once retention dropped the body.
    pub has_body: bool,
    /// `(destination, state)` of each delivery, by destination name.
    pub deliveries: Vec<(String, State)>,
}

impl EventState {
    /// The state of the event's delivery at `destination`, if it has one.
    pub fn delivery(&self, destination: &str) -> Option<State> {
        self.deliveries
            .iter()
            .find(|(d, _)| d == destination)
            .map(|(_, s)| *s)
    }
}

/// An event's source, state and deliveries' states, for deciding whether
/// and where it can be replayed; all of one commit.
pub fn event_state(conn: &Connection, id: i64) -> anyhow::Result<Option<EventState>> {
    one_snapshot(conn, |conn| event_state_now(conn, id))
}

fn event_state_now(conn: &Connection, id: i64) -> anyhow::Result<Option<EventState>> {
    let found = conn
        .prepare_cached(&format!(
            "SELECT e.source, {}, e.body IS NOT NULL FROM events AS e {} WHERE e.id = ?1",
            outcomes::STATE,
            outcomes::JOIN
        ))?
        .query_row([id], |r| {
            Ok(EventState {
                source: r.get(0)?,
                state: r.get(1)?,
                has_body: r.get(2)?,
                deliveries: Vec::new(),
            })
        })
        .optional()
        .context("reading an event's state")?;
    let Some(mut event) = found else {
        return Ok(None);
    };
    event.deliveries = conn
        .prepare_cached(
            "SELECT destination, state FROM deliveries WHERE event_id = ?1 ORDER BY destination",
        )?
        .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("reading an event's deliveries")?;
    Ok(Some(event))
}

#[cfg(test)]
pub(super) mod tests {
    use rusqlite::params;

    use super::*;

    pub(super) use crate::store::test_support::db;

    #[test]
    fn reads_in_one_snapshot_do_not_see_a_commit_made_between_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
            .unwrap();
        writer
            .execute_batch("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1);")
            .unwrap();
        let reader = Connection::open(&path).unwrap();
        let v =
            |c: &Connection| -> i64 { c.query_row("SELECT v FROM t", [], |r| r.get(0)).unwrap() };
        let seen = one_snapshot(&reader, |c| {
            let first = v(c);
            writer.execute("UPDATE t SET v = 2", []).unwrap();
            Ok((first, v(c)))
        })
        .unwrap();
        assert_eq!(seen, (1, 1));
        assert_eq!(v(&reader), 2);
    }

    /// An event in `state`, as hookbox leaves it: a state ingest does not
    /// give is in the event's outcome row.
    pub(super) fn add(conn: &Connection, source: &str, state: &str, received_at: i64) -> i64 {
        let ingested = if state == "stored" {
            "stored"
        } else {
            "pending"
        };
        conn.execute(
            "INSERT INTO events (source, delivery_id, received_at, body, state)
             VALUES (?1, ?2, ?3, x'00ff', ?4)",
            params![source, format!("d{received_at}"), received_at, ingested],
        )
        .unwrap();
        let id = conn.last_insert_rowid();
        if state != ingested {
            conn.execute(
                "INSERT INTO event_outcomes (event_id, source, state) VALUES (?1, ?2, ?3)",
                params![id, source, state],
            )
            .unwrap();
        }
        id
    }

    /// Gives event `id` (of `source`) a delivery at `destination`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one argument per column, in the order of the table"
    )]
    pub(super) fn deliver(
        conn: &Connection,
        id: i64,
        source: &str,
        destination: &str,
        state: &str,
        attempts: i64,
        next_attempt_at: Option<i64>,
        last_error: Option<&str>,
    ) {
        conn.execute(
            "INSERT INTO deliveries (event_id, source, destination, state, attempts,
                                     next_attempt_at, last_error)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                id,
                source,
                destination,
                state,
                attempts,
                next_attempt_at,
                last_error
            ],
        )
        .unwrap();
    }

    /// Records a failed attempt of event `id` at `destination`.
    fn failed_attempt(conn: &Connection, id: i64, destination: &str, error: &str) {
        conn.execute(
            "INSERT INTO attempts (event_id, destination, attempt, started_at, duration_ms,
                                   outcome, error)
             VALUES (?1, ?2, 1, 0, 1, 'retry', ?3)",
            params![id, destination, error],
        )
        .unwrap();
    }

    /// The query plan of `sql`, one step a line.
    pub(super) fn plan(conn: &Connection, sql: &str, args: Vec<SqlValue>) -> String {
        conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(params_from_iter(args), |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn summaries_sum_up_the_deliveries_not_the_stale_event_columns() {
        let conn = db();
        let id = add(&conn, "s", "pending", 10);
        // What a version-8 database left in the event's own columns.
        conn.execute(
            "UPDATE events SET attempts = 99, next_attempt_at = 1, last_error = 'stale' WHERE id = ?1",
            [id],
        )
        .unwrap();
        deliver(&conn, id, "s", "chat", "dead", 3, None, Some("HTTP 410"));
        deliver(
            &conn,
            id,
            "s",
            "ci",
            "pending",
            2,
            Some(500),
            Some("HTTP 503"),
        );
        deliver(&conn, id, "s", "log", "pending", 0, Some(400), None);
        failed_attempt(&conn, id, "chat", "HTTP 410");
        failed_attempt(&conn, id, "ci", "HTTP 503");
        let d = event_detail(&conn, id).unwrap().unwrap();
        let e = &d.summary;
        assert_eq!((e.attempts, e.next_attempt_at), (5, Some(400)));
        // ci failed last.
        assert_eq!(e.last_error.as_deref(), Some("HTTP 503"));
        assert_eq!(
            d.deliveries
                .iter()
                .map(|x| x.destination.as_str())
                .collect::<Vec<_>>(),
            ["chat", "ci", "log"]
        );
        assert_eq!(d.deliveries[0].state, State::Dead);
        // An event without deliveries shows none of the stale values.
        let stored = add(&conn, "s", "stored", 20);
        conn.execute(
            "UPDATE events SET attempts = 4, last_error = 'stale' WHERE id = ?1",
            [stored],
        )
        .unwrap();
        let e = event_detail(&conn, stored).unwrap().unwrap().summary;
        assert_eq!(
            (e.attempts, e.next_attempt_at, e.last_error),
            (0, None, None)
        );
        let page = list_events(
            &conn,
            &EventFilter {
                limit: 10,
                ..EventFilter::default()
            },
        )
        .unwrap();
        assert_eq!(page.events[1].attempts, 5);
        assert_eq!(page.events[1].last_error.as_deref(), Some("HTTP 503"));
        assert!(page.events[1].delivery.is_none());
    }

    #[test]
    fn a_destination_filter_lists_its_deliveries_and_their_state() {
        let conn = db();
        let a = add(&conn, "s", "pending", 10);
        deliver(&conn, a, "s", "ci", "dead", 1, None, Some("gone"));
        deliver(&conn, a, "s", "chat", "pending", 0, Some(10), None);
        let b = add(&conn, "s", "delivered", 20);
        deliver(&conn, b, "s", "chat", "delivered", 1, None, None);
        let c = add(&conn, "t", "dead", 30);
        deliver(&conn, c, "t", "ci", "dead", 1, None, None);
        let ids = |filter: EventFilter| -> Vec<i64> {
            list_events(&conn, &filter)
                .unwrap()
                .events
                .iter()
                .map(|e| e.id)
                .collect()
        };
        let at = |d: &str| EventFilter {
            destination: Some(d.into()),
            limit: 10,
            ..EventFilter::default()
        };
        assert_eq!(ids(at("ci")), [c, a]);
        assert_eq!(ids(at("chat")), [b, a]);
        assert_eq!(ids(at("nowhere")), Vec::<i64>::new());
        let dead_ci_of_s = EventFilter {
            source: Some("s".into()),
            state: Some(State::Dead),
            ..at("ci")
        };
        // `a` is pending as an event, dead at ci.
        assert_eq!(ids(dead_ci_of_s.clone()), [a]);
        let page = list_events(&conn, &dead_ci_of_s).unwrap();
        let shown = page.events[0].delivery.as_ref().unwrap();
        assert_eq!(
            (shown.destination.as_str(), shown.state.as_str()),
            ("ci", "dead")
        );
        assert_eq!(page.events[0].state, State::Pending);
        let pending_chat = EventFilter {
            state: Some(State::Pending),
            ..at("chat")
        };
        assert_eq!(ids(pending_chat), [a]);
        // Paging, one a page.
        let first = list_events(
            &conn,
            &EventFilter {
                limit: 1,
                ..at("chat")
            },
        )
        .unwrap();
        assert_eq!(first.next_before, Some(b));
        let second = EventFilter {
            limit: 1,
            before: first.next_before,
            ..at("chat")
        };
        assert_eq!(ids(second), [a]);
    }

    #[test]
    fn a_destination_filter_walks_an_index_never_the_tables() {
        let conn = db();
        let cases = [
            (None, None),
            (Some("s"), None),
            (Some("s"), Some(State::Pending)),
            (Some("s"), Some(State::Dead)),
            (Some("s"), Some(State::Delivered)),
            (None, Some(State::Dead)),
        ];
        for (source, state) in cases {
            for before in [None, Some(100)] {
                let filter = EventFilter {
                    source: source.map(Into::into),
                    destination: Some("ci".into()),
                    state,
                    before,
                    limit: 10,
                    ..EventFilter::default()
                };
                let (sql, args) = list_sql(&filter);
                let plan = plan(&conn, &sql, args);
                let lines: Vec<&str> = plan.lines().collect();
                // The page is picked from an index of `deliveries`...
                assert_eq!(lines[0], "CO-ROUTINE page", "{plan}");
                assert!(
                    lines[1].starts_with("SEARCH d USING") || lines[1].starts_with("SCAN d USING"),
                    "{source:?} {state:?}:\n{plan}"
                );
                // ...and nothing reads a whole table.
                assert!(
                    !lines.iter().any(|l| l.starts_with("SCAN")
                        && !l.contains(" USING ")
                        && *l != "SCAN page"),
                    "{source:?} {state:?}:\n{plan}"
                );
            }
        }
    }

    #[test]
    fn a_source_s_dead_letters_are_read_through_their_index() {
        let conn = db();
        for before in [None, Some(100)] {
            let filter = EventFilter {
                source: Some("s".into()),
                state: Some(State::Dead),
                before,
                limit: 10,
                ..EventFilter::default()
            };
            let (sql, args) = list_sql(&filter);
            // The outer query's steps (parent 0), not its subqueries'.
            let outer: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(params_from_iter(args), |r| {
                    Ok((r.get::<_, i64>(1)?, r.get::<_, String>(3)?))
                })
                .unwrap()
                .map(Result::unwrap)
                .filter(|(parent, _)| *parent == 0)
                .map(|(_, detail)| detail)
                .collect();
            assert!(
                outer[0].starts_with("SEARCH o USING INDEX event_outcomes_dead"),
                "{outer:?}"
            );
            assert!(
                !outer.iter().any(|l| l.contains("TEMP B-TREE")),
                "{outer:?}"
            );
        }
    }

    #[test]
    fn a_state_filter_finds_each_state_wherever_it_is_kept() {
        let conn = db();
        let dead = add(&conn, "s", "dead", 1);
        let delivered = add(&conn, "s", "delivered", 2);
        let skipped = add(&conn, "s", "skipped", 3);
        let pending = add(&conn, "s", "pending", 4);
        let stored = add(&conn, "s", "stored", 5);
        // Replayed: its outcome says pending again.
        let replayed = add(&conn, "s", "delivered", 6);
        conn.execute(
            "UPDATE event_outcomes SET state = 'pending', delivered_at = NULL WHERE event_id = ?1",
            [replayed],
        )
        .unwrap();
        let cases = [
            (State::Dead, vec![dead]),
            (State::Delivered, vec![delivered]),
            (State::Skipped, vec![skipped]),
            (State::Pending, vec![replayed, pending]),
            (State::Stored, vec![stored]),
        ];
        for (state, want) in cases {
            for source in [None, Some("s".to_owned())] {
                let page = list_events(
                    &conn,
                    &EventFilter {
                        source,
                        state: Some(state),
                        limit: 10,
                        ..EventFilter::default()
                    },
                )
                .unwrap();
                let got: Vec<(i64, State)> = page.events.iter().map(|e| (e.id, e.state)).collect();
                let want: Vec<(i64, State)> = want.iter().map(|&id| (id, state)).collect();
                assert_eq!(got, want, "{state:?}");
            }
        }
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
            state: Some(State::Dead),
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
