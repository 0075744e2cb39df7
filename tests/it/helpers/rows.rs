//! Events and their attempts read back from the database, for
//! assertions; a separate connection that waits out the writer's locks.

use std::path::Path;
use std::time::Duration;

use super::PATIENCE;

#[derive(Debug, Clone)]
pub struct EventRow {
    pub state: String,
    /// Finished attempts (and one a crash cut off, after the restart).
    pub attempts: i64,
    /// The claim holding the event: until when, and which attempt it makes.
    pub lease_until: Option<i64>,
    pub leased_attempt: Option<i64>,
    pub next_attempt_at: Option<i64>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    pub attempt: i64,
    pub started_at: i64,
    pub duration_ms: i64,
    pub outcome: String,
    pub status: Option<i64>,
    pub error: Option<String>,
}

pub fn open(db: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn
}

/// An event's state over `events` (unaliased), as hookbox reads it: its
/// outcome row's where it has one, else its own.
pub use hookbox::store::outcomes::EVENTS_STATE as STATE;

/// [`STATE`] over `events AS e`.
pub const E_STATE: &str = "coalesce((SELECT o.state FROM event_outcomes AS o
                                     WHERE o.event_id = e.id), e.state)";

pub fn event_row(db: &Path, id: i64) -> EventRow {
    open(db)
        .query_row(
            &format!(
                "SELECT {E_STATE}, coalesce(d.attempts, 0), l.lease_until, l.attempt,
                        d.next_attempt_at, d.last_error
                 FROM events AS e LEFT JOIN deliveries AS d ON d.event_id = e.id
                 LEFT JOIN leases AS l ON l.delivery = d.id WHERE e.id = ?1"
            ),
            [id],
            |r| {
                Ok(EventRow {
                    state: r.get(0)?,
                    attempts: r.get(1)?,
                    lease_until: r.get(2)?,
                    leased_attempt: r.get(3)?,
                    next_attempt_at: r.get(4)?,
                    last_error: r.get(5)?,
                })
            },
        )
        .unwrap()
}

/// The event's attempts, oldest first.
pub fn attempt_rows(db: &Path, id: i64) -> Vec<AttemptRow> {
    open(db)
        .prepare(
            "SELECT attempt, started_at, duration_ms, outcome, status_code, error
             FROM attempts WHERE event_id = ?1 ORDER BY id",
        )
        .unwrap()
        .query_map([id], |r| {
            Ok(AttemptRow {
                attempt: r.get(0)?,
                started_at: r.get(1)?,
                duration_ms: r.get(2)?,
                outcome: r.get(3)?,
                status: r.get(4)?,
                error: r.get(5)?,
            })
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// `(attempt, outcome, status)` of each attempt, oldest first.
pub fn outcomes(db: &Path, id: i64) -> Vec<(i64, String, Option<i64>)> {
    attempt_rows(db, id)
        .into_iter()
        .map(|a| (a.attempt, a.outcome, a.status))
        .collect()
}

pub async fn wait_for_state(db: &Path, id: i64, state: &str) -> EventRow {
    let mut last = None;
    let found = tokio::time::timeout(PATIENCE + Duration::from_secs(5), async {
        loop {
            let row = event_row(db, id);
            if row.state == state {
                return row;
            }
            last = Some(row);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("event {id} never became {state}; last seen {last:?}"))
}
