//! `hookbox events`: the inbox as the CLI lists it, newest first.
//!
//! [`list`] is plain SQL over any connection; the CLI gives it a
//! read-only one ([`super::open_read_only`]), so listing works whether or
//! not the server runs and never takes the write lock. [`render_table`]
//! and [`render_json_lines`] turn the rows into what the command prints.
//! (The admin API has its own queries with cursor paging; this stays small.)

use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use rusqlite::{Connection, params};
use serde::Serialize;

use super::queries::{EVENT_ATTEMPTS, EVENT_LAST_ERROR};
use super::search::{self, SearchQuery};

/// Which events to list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub source: Option<String>,
    /// Only events with a delivery there; the listing then shows that
    /// delivery's state, attempts and last error.
    pub destination: Option<String>,
    /// `pending`, `delivered`, `dead` or `stored` (the delivery's state,
    /// never `stored`, with a destination).
    pub state: Option<String>,
    pub event_type: Option<String>,
    /// Only events whose body has these words.
    pub q: Option<SearchQuery>,
    pub limit: usize,
}

/// One line of the listing.
#[derive(Debug, Clone, Serialize)]
pub struct EventSummary {
    pub id: i64,
    /// RFC 3339, UTC, milliseconds.
    pub received_at: String,
    pub source: String,
    /// With a destination filter, this and the two after are the
    /// delivery's; otherwise the event's, over all its deliveries.
    pub state: String,
    pub attempts: i64,
    pub event_type: Option<String>,
    pub delivery_id: String,
    pub last_error: Option<String>,
    /// The destination filtered on, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
}

/// The newest `filter.limit` events matching `filter`. The event's
/// attempts and last error come from its deliveries (see
/// [`super::queries`]); with a destination, from its delivery there,
/// walking `UNIQUE (event_id, destination)` backwards.
pub fn list(conn: &Connection, filter: &ListFilter) -> anyhow::Result<Vec<EventSummary>> {
    // ?6 is bound either way, as ?5 is below.
    let searched = match filter.q {
        Some(_) => search::matching("e.id", "?6"),
        None => "?6 IS NULL".to_owned(),
    };
    let sql = match filter.destination {
        None => format!(
            "SELECT e.id, e.received_at, e.source, e.state, {EVENT_ATTEMPTS}, e.event_type,
                    e.delivery_id, {EVENT_LAST_ERROR}
             FROM events AS e
             WHERE (?1 IS NULL OR e.source = ?1)
               AND (?2 IS NULL OR e.state = ?2)
               AND (?3 IS NULL OR e.event_type = ?3)
               AND ?5 IS NULL -- binds the same parameters as the other form
               AND {searched}
             ORDER BY e.id DESC LIMIT ?4"
        ),
        Some(_) => format!(
            "SELECT e.id, e.received_at, e.source, d.state, d.attempts, e.event_type,
                    e.delivery_id, d.last_error
             FROM deliveries AS d JOIN events AS e ON e.id = d.event_id
             WHERE d.destination = ?5
               AND (?1 IS NULL OR d.source = ?1)
               AND (?2 IS NULL OR d.state = ?2)
               AND (?3 IS NULL OR e.event_type = ?3)
               AND {searched}
             ORDER BY d.event_id DESC LIMIT ?4"
        ),
    };
    conn.prepare_cached(&sql)?
        .query_map(
            params![
                filter.source,
                filter.state,
                filter.event_type,
                filter.limit as i64,
                filter.destination,
                filter.q.as_ref().map(SearchQuery::expression),
            ],
            |r| {
                Ok(EventSummary {
                    id: r.get(0)?,
                    received_at: rfc3339_ms(r.get(1)?),
                    source: r.get(2)?,
                    state: r.get(3)?,
                    attempts: r.get(4)?,
                    event_type: r.get(5)?,
                    delivery_id: r.get(6)?,
                    last_error: r.get(7)?,
                    destination: filter.destination.clone(),
                })
            },
        )?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("listing events")
}

fn rfc3339_ms(unix_ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(unix_ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// One JSON object per line.
pub fn render_json_lines(rows: &[EventSummary]) -> anyhow::Result<String> {
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
pub fn render_table(rows: &[EventSummary]) -> String {
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
                r.state.clone(),
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
    let flat = flat.trim();
    if flat.chars().count() <= max {
        flat.to_owned()
    } else {
        let mut cut: String = flat.chars().take(max - 1).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
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
            conn.execute(
                "INSERT INTO deliveries (event_id, source, destination, state, attempts, last_error)
                 VALUES (last_insert_rowid(), ?1, 'default', ?2, 2,
                         CASE ?2 WHEN 'dead' THEN 'HTTP 410' || char(10) || 'gone' END)",
                params![source, state],
            )
            .unwrap();
        }
        conn
    }

    fn ids(rows: &[EventSummary]) -> Vec<i64> {
        rows.iter().map(|r| r.id).collect()
    }

    #[test]
    fn filters_combine_and_the_newest_come_first() {
        let conn = db();
        let all = ListFilter {
            limit: 10,
            ..ListFilter::default()
        };
        assert_eq!(ids(&list(&conn, &all).unwrap()), [4, 3, 2, 1]);
        let dead_github = ListFilter {
            source: Some("github".into()),
            state: Some("dead".into()),
            ..all.clone()
        };
        assert_eq!(ids(&list(&conn, &dead_github).unwrap()), [4, 2]);
        let pushes = ListFilter {
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
        let at_ci = ListFilter {
            destination: Some("ci".into()),
            limit: 10,
            ..ListFilter::default()
        };
        let rows = list(&conn, &at_ci).unwrap();
        assert_eq!(ids(&rows), [1]);
        assert_eq!(
            (
                rows[0].state.as_str(),
                rows[0].attempts,
                rows[0].last_error.as_deref()
            ),
            ("dead", 5, Some("HTTP 500"))
        );
        assert_eq!(rows[0].destination.as_deref(), Some("ci"));
        let delivered_at_ci = ListFilter {
            state: Some("delivered".into()),
            ..at_ci.clone()
        };
        assert!(list(&conn, &delivered_at_ci).unwrap().is_empty());
        // Without a destination: the event, over all its deliveries.
        let all = list(
            &conn,
            &ListFilter {
                limit: 10,
                ..ListFilter::default()
            },
        )
        .unwrap();
        let one = all.iter().find(|r| r.id == 1).unwrap();
        assert_eq!((one.state.as_str(), one.attempts), ("delivered", 7));
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
            &ListFilter {
                limit: 10,
                ..ListFilter::default()
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
