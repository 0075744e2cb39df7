//! `hookbox events`: the inbox listed on a read-only connection, so it
//! works whether or not a server runs and never takes the write lock.
//! The query is the admin API's (`queries::list_events`, one page); turning
//! its rows into a table or JSON lines is this module's, as rendering
//! belongs to the CLI rather than the store.

use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context as _;
use rusqlite::Connection;
use serde::Serialize;

use super::EventsArgs;
use crate::config::Config;
use crate::store::models::State;
use crate::store::queries::{self, EventFilter, EventSummary};
use crate::store::search::{self, SearchError, SearchQuery};

/// Exit 2 for flags that cannot go together, 1 when the database cannot
/// be read.
pub fn run(config: &Config, args: EventsArgs) -> ExitCode {
    let EventsArgs {
        source,
        destination,
        state,
        event_type,
        q,
        limit,
        json,
    } = args;
    if destination.is_some() && state == Some(State::Stored) {
        eprintln!(
            "hookbox events: a delivery is never stored (that is an event without any); \
             leave out --destination to list stored events"
        );
        return ExitCode::from(2);
    }
    let q = match q.map(|q| search_query(config, &q)).transpose() {
        Ok(q) => q,
        Err(reason) => {
            eprintln!("hookbox events: --{reason}");
            return ExitCode::from(2);
        }
    };
    let filter = EventFilter {
        source,
        destination,
        state,
        event_type,
        q,
        limit,
        ..EventFilter::default()
    };
    super::report("events", events(config, &filter, json))
}

/// `--q` as the listing takes it, or why not.
fn search_query(config: &Config, q: &str) -> Result<SearchQuery, String> {
    if !config.search.enabled {
        return Err("q: search is off in this config ([search] enabled = false)".to_owned());
    }
    SearchQuery::parse(q).map_err(|e| e.to_string())
}

fn events(config: &Config, filter: &EventFilter, json: bool) -> anyhow::Result<()> {
    let conn = crate::store::open_read_only(&config.server.database)?;
    // A search is stopped at the server's deadline here too: a read held
    // open keeps the server's checkpoints from emptying the WAL.
    let rows = match filter.q {
        None => list(&conn, filter)?,
        Some(_) => search::file::attach(&conn, &config.server.database)
            .map_err(SearchError::Failed)
            .and_then(|()| search::with_deadline(&conn, config.search.timeout, |c| list(c, filter)))
            .map_err(|e| match e {
                SearchError::Failed(e) => e,
                other => anyhow::anyhow!("{other}"),
            })?,
    };
    if json {
        print!("{}", render_json_lines(&rows)?);
    } else {
        print!("{}", render_table(&rows));
    }
    Ok(())
}

/// One line of the listing; its fields, in this order, are what `--json`
/// prints.
#[derive(Debug, Clone, Serialize)]
struct Row {
    id: i64,
    /// RFC 3339, UTC, milliseconds.
    received_at: String,
    source: String,
    /// With a destination filter, this and the two after are the
    /// delivery's; otherwise the event's, over all its deliveries.
    state: State,
    attempts: i64,
    event_type: Option<String>,
    delivery_id: String,
    last_error: Option<String>,
    /// The destination filtered on, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    destination: Option<String>,
}

impl From<EventSummary> for Row {
    fn from(e: EventSummary) -> Row {
        let (state, attempts, last_error, destination) = match e.delivery {
            Some(d) => (d.state, d.attempts, d.last_error, Some(d.destination)),
            None => (e.state, e.attempts, e.last_error, None),
        };
        Row {
            id: e.id,
            received_at: rfc3339_ms(e.received_at),
            source: e.source,
            state,
            attempts,
            event_type: e.event_type,
            delivery_id: e.delivery_id,
            last_error,
            destination,
        }
    }
}

/// The newest `filter.limit` events matching `filter`: the first page of
/// the API's listing.
fn list(conn: &Connection, filter: &EventFilter) -> anyhow::Result<Vec<Row>> {
    let page = queries::list_events(conn, filter).context("listing events")?;
    Ok(page.events.into_iter().map(Row::from).collect())
}

fn rfc3339_ms(unix_ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(unix_ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// One JSON object per line.
fn render_json_lines(rows: &[Row]) -> anyhow::Result<String> {
    let mut out = String::new();
    for row in rows {
        out.push_str(&serde_json::to_string(row).context("rendering an event as JSON")?);
        out.push('\n');
    }
    Ok(out)
}

/// Widest a provider-supplied column may get in the table.
const MAX_TEXT: usize = 40;
/// Widest the error excerpt gets (the last column, so it may be long).
const MAX_ERROR: usize = 60;

/// An aligned table with a header line. Provider-supplied text is cut to
/// length and stripped of control characters, so a crafted delivery id
/// cannot move the cursor or recolour the terminal.
fn render_table(rows: &[Row]) -> String {
    let header = [
        "ID",
        "RECEIVED",
        "SOURCE",
        "STATE",
        "ATTEMPTS",
        "EVENT TYPE",
        "DELIVERY ID",
        "LAST ERROR",
    ];
    let lines: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.id.to_string(),
                r.received_at.clone(),
                clean(&r.source, MAX_TEXT),
                r.state.to_string(),
                r.attempts.to_string(),
                clean(r.event_type.as_deref().unwrap_or("-"), MAX_TEXT),
                clean(&r.delivery_id, MAX_TEXT),
                clean(r.last_error.as_deref().unwrap_or(""), MAX_ERROR),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = header.map(str::to_owned);
    for line in std::iter::once(&header).chain(&lines) {
        let cells: Vec<String> = line
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `text` on one line, without control characters, cut to `max` chars.
fn clean(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    crate::support::excerpt::chars(flat.trim(), max)
}

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::*;

    fn db() -> Connection {
        let conn = crate::store::test_support::db();
        for (i, (source, state, kind)) in [
            ("github", "delivered", "push"),
            ("github", "dead", "issues"),
            ("stripe", "dead", "charge.succeeded"),
            ("github", "dead", "push"),
        ]
        .into_iter()
        .enumerate()
        {
            // The event's own dispatch columns hold what a version-8
            // database left there: the listing must not show them.
            conn.execute(
                "INSERT INTO events (source, delivery_id, event_type, received_at, state, attempts, last_error)
                 VALUES (?1, ?2, ?3, ?4, ?5, 99, 'stale')",
                params![source, format!("d{i}"), kind, 1_700_000_000_000i64 + i as i64, state],
            )
            .unwrap();
            let id = conn.last_insert_rowid();
            conn.execute(
                "INSERT INTO deliveries (event_id, source, destination, state, attempts, last_error)
                 VALUES (?3, ?1, 'default', ?2, 2,
                         CASE ?2 WHEN 'dead' THEN 'HTTP 410' || char(10) || 'gone' END)",
                params![source, state, id],
            )
            .unwrap();
            // Where version 21 keeps the state it derived.
            conn.execute(
                "INSERT INTO event_outcomes (event_id, source, state) VALUES (?1, ?2, ?3)",
                params![id, source, state],
            )
            .unwrap();
        }
        conn
    }

    fn ids(rows: &[Row]) -> Vec<i64> {
        rows.iter().map(|r| r.id).collect()
    }

    #[test]
    fn filters_combine_and_the_newest_come_first() {
        let conn = db();
        let all = EventFilter {
            limit: 10,
            ..EventFilter::default()
        };
        assert_eq!(ids(&list(&conn, &all).unwrap()), [4, 3, 2, 1]);
        let dead_github = EventFilter {
            source: Some("github".into()),
            state: Some(State::Dead),
            ..all.clone()
        };
        assert_eq!(ids(&list(&conn, &dead_github).unwrap()), [4, 2]);
        let pushes = EventFilter {
            event_type: Some("push".into()),
            limit: 1,
            ..all
        };
        let rows = list(&conn, &pushes).unwrap();
        assert_eq!(ids(&rows), [4]);
        assert_eq!(rows[0].received_at, "2023-11-14T22:13:20.003Z");
    }

    #[test]
    fn a_destination_lists_its_deliveries_with_their_state() {
        let conn = db();
        // Event 1 (delivered at default) also went to ci and died there.
        conn.execute(
            "INSERT INTO deliveries (event_id, source, destination, state, attempts, last_error)
             VALUES (1, 'github', 'ci', 'dead', 5, 'HTTP 500')",
            [],
        )
        .unwrap();
        let at_ci = EventFilter {
            destination: Some("ci".into()),
            limit: 10,
            ..EventFilter::default()
        };
        let rows = list(&conn, &at_ci).unwrap();
        assert_eq!(ids(&rows), [1]);
        assert_eq!(
            (
                rows[0].state,
                rows[0].attempts,
                rows[0].last_error.as_deref()
            ),
            (State::Dead, 5, Some("HTTP 500"))
        );
        assert_eq!(rows[0].destination.as_deref(), Some("ci"));
        let delivered_at_ci = EventFilter {
            state: Some(State::Delivered),
            ..at_ci.clone()
        };
        assert!(list(&conn, &delivered_at_ci).unwrap().is_empty());
        // Without a destination: the event, over all its deliveries.
        let all = list(
            &conn,
            &EventFilter {
                limit: 10,
                ..EventFilter::default()
            },
        )
        .unwrap();
        let one = all.iter().find(|r| r.id == 1).unwrap();
        assert_eq!((one.state, one.attempts), (State::Delivered, 7));
        assert_eq!(one.last_error.as_deref(), Some("HTTP 500"));
        assert_eq!(one.destination, None);
        let json = render_json_lines(&rows).unwrap();
        assert!(json.contains(r#""destination":"ci""#), "{json}");
        assert!(!render_json_lines(&all).unwrap().contains("destination"));
    }

    #[test]
    fn the_table_is_aligned_and_keeps_control_characters_out() {
        let conn = db();
        conn.execute(
            "UPDATE events SET delivery_id = 'evil' || char(27) || '[31m' WHERE id = 1",
            [],
        )
        .unwrap();
        let rows = list(
            &conn,
            &EventFilter {
                limit: 10,
                ..EventFilter::default()
            },
        )
        .unwrap();
        let table = render_table(&rows);
        assert!(!table.contains('\u{1b}'), "{table:?}");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[0].starts_with("ID  RECEIVED"), "{table}");
        let state_at = lines[0].find("STATE").unwrap();
        assert_eq!(&lines[1][state_at..state_at + 4], "dead");
        assert!(lines[1].ends_with("HTTP 410 gone"), "{table}");
        let json = render_json_lines(&rows).unwrap();
        let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
        assert_eq!(first["id"], 4);
        assert_eq!(first["last_error"], "HTTP 410\ngone");
    }
}
