//! An event's state: derived from its deliveries, and kept out of the row
//! that holds its body.
//!
//! An event is `pending` while any of its deliveries is, else `dead` if
//! any is, else `delivered` if any is, else `skipped`; `stored` with none.
//! Ingest writes the first state into `events.state` (`pending` or
//! `stored`); every later one goes to a row of `event_outcomes` (version
//! 21), written only when it changes ([`derive_state`]). Rewriting the event's
//! own row instead put its page (the body shares it) through the WAL and
//! the checkpoint once more for every delivery that settled.
//!
//! So an event's state is its outcome row's, where it has one, else its
//! own: readers join the outcome ([`JOIN`]) and read [`STATE`] and
//! [`DELIVERED_AT`] instead of the columns of `events`.

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension as _, params};

use super::models::State;

/// Joins the outcome of `events AS e` as `o`, for [`STATE`] and
/// [`DELIVERED_AT`]: one lookup by primary key per event.
pub const JOIN: &str = "LEFT JOIN event_outcomes AS o ON o.event_id = e.id";

/// The state of `events AS e`, over [`JOIN`].
pub const STATE: &str = "coalesce(o.state, e.state)";

/// When `events AS e` was delivered, over [`JOIN`]; NULL unless it is (an
/// outcome row of another state leaves the older columns of `events`
/// behind it unread).
pub const DELIVERED_AT: &str = "CASE WHEN coalesce(o.state, e.state) = 'delivered'
     THEN coalesce(o.delivered_at, e.delivered_at) END";

/// [`STATE`] of a row of `events` itself, for a statement that cannot
/// join (a DELETE): a lookup by primary key per use.
pub const EVENTS_STATE: &str = "coalesce((SELECT o.state FROM event_outcomes AS o
                                   WHERE o.event_id = events.id), events.state)";

/// When a row of `events` itself was delivered, read where
/// [`EVENTS_STATE`] is `delivered`.
pub const EVENTS_DELIVERED_AT: &str = "coalesce((SELECT o.delivered_at FROM event_outcomes AS o
                                          WHERE o.event_id = events.id), events.delivered_at)";

/// Sets event `id`'s state from its deliveries, with `now` as when it was
/// delivered if it now is. Writes only when the state changes.
pub fn derive_state(conn: &Connection, id: i64, now: i64) -> anyhow::Result<()> {
    let found: Option<(String, State, State)> = conn
        .prepare_cached(
            "SELECT e.source, coalesce(o.state, e.state), CASE
                 WHEN EXISTS (SELECT 1 FROM deliveries WHERE event_id = ?1 AND state = 'pending')
                   THEN 'pending'
                 WHEN EXISTS (SELECT 1 FROM deliveries WHERE event_id = ?1 AND state = 'dead')
                   THEN 'dead'
                 WHEN EXISTS (SELECT 1 FROM deliveries WHERE event_id = ?1 AND state = 'delivered')
                   THEN 'delivered'
                 WHEN EXISTS (SELECT 1 FROM deliveries WHERE event_id = ?1) THEN 'skipped'
                 ELSE 'stored' END
             FROM events AS e LEFT JOIN event_outcomes AS o ON o.event_id = e.id
             WHERE e.id = ?1",
        )?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .context("deriving an event's state")?;
    let Some((source, was, state)) = found else {
        return Ok(());
    };
    if was == state {
        return Ok(());
    }
    let delivered_at = (state == State::Delivered).then_some(now);
    conn.prepare_cached(
        "INSERT INTO event_outcomes (event_id, source, state, delivered_at)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (event_id) DO UPDATE SET state = excluded.state,
                                              delivered_at = excluded.delivered_at",
    )?
    .execute(params![id, source, state, delivered_at])
    .context("recording an event's state")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::*;
    use crate::store::test_support::db_with_foreign_keys as db;

    fn event(conn: &Connection, state: &str) -> i64 {
        conn.execute(
            "INSERT INTO events (source, delivery_id, received_at, body, state)
             VALUES ('s', hex(randomblob(8)), 1, x'7b7d', ?1)",
            [state],
        )
        .unwrap();
        conn.last_insert_rowid()
    }

    fn delivery(conn: &Connection, event: i64, destination: &str, state: &str) {
        conn.execute(
            "INSERT INTO deliveries (event_id, source, destination, state) VALUES (?1, 's', ?2, ?3)",
            params![event, destination, state],
        )
        .unwrap();
    }

    fn set(conn: &Connection, event: i64, destination: &str, state: &str) {
        conn.execute(
            "UPDATE deliveries SET state = ?3 WHERE event_id = ?1 AND destination = ?2",
            params![event, destination, state],
        )
        .unwrap();
    }

    /// `(state, delivered_at)` as readers see it, and the row of `events`.
    fn read(conn: &Connection, id: i64) -> ((State, Option<i64>), (String, Option<i64>)) {
        conn.query_row(
            &format!(
                "SELECT {STATE}, {DELIVERED_AT}, e.state, e.delivered_at
                 FROM events AS e {JOIN} WHERE e.id = ?1"
            ),
            [id],
            |r| Ok(((r.get(0)?, r.get(1)?), (r.get(2)?, r.get(3)?))),
        )
        .unwrap()
    }

    #[test]
    fn an_event_s_state_follows_its_deliveries_and_its_row_is_never_rewritten() {
        let conn = db();
        let id = event(&conn, "pending");
        delivery(&conn, id, "a", "pending");
        delivery(&conn, id, "b", "pending");
        let untouched = ("pending".to_owned(), None);

        derive_state(&conn, id, 10).unwrap();
        assert_eq!(read(&conn, id), ((State::Pending, None), untouched.clone()));

        set(&conn, id, "a", "delivered");
        derive_state(&conn, id, 20).unwrap();
        assert_eq!(read(&conn, id).0, (State::Pending, None));

        set(&conn, id, "b", "skipped");
        derive_state(&conn, id, 30).unwrap();
        assert_eq!(
            read(&conn, id),
            ((State::Delivered, Some(30)), untouched.clone())
        );

        // Unchanged: the time it was delivered stays.
        derive_state(&conn, id, 40).unwrap();
        assert_eq!(read(&conn, id).0, (State::Delivered, Some(30)));

        set(&conn, id, "b", "dead");
        derive_state(&conn, id, 50).unwrap();
        assert_eq!(read(&conn, id), ((State::Dead, None), untouched.clone()));

        set(&conn, id, "a", "skipped");
        set(&conn, id, "b", "skipped");
        derive_state(&conn, id, 60).unwrap();
        assert_eq!(read(&conn, id).0, (State::Skipped, None));

        conn.execute("DELETE FROM deliveries WHERE event_id = ?1", [id])
            .unwrap();
        derive_state(&conn, id, 70).unwrap();
        assert_eq!(read(&conn, id), ((State::Stored, None), untouched));
    }

    #[test]
    fn a_state_an_older_version_wrote_into_the_row_reads_until_one_is_derived() {
        let conn = db();
        let id = event(&conn, "delivered");
        conn.execute("UPDATE events SET delivered_at = 5 WHERE id = ?1", [id])
            .unwrap();
        delivery(&conn, id, "a", "delivered");
        assert_eq!(read(&conn, id).0, (State::Delivered, Some(5)));
        // Replayed: pending, and no longer delivered at 5.
        set(&conn, id, "a", "pending");
        derive_state(&conn, id, 9).unwrap();
        assert_eq!(read(&conn, id).0, (State::Pending, None));
        assert_eq!(read(&conn, id).1, ("delivered".to_owned(), Some(5)));
    }

    #[test]
    fn an_event_s_outcome_goes_with_it() {
        let conn = db();
        let id = event(&conn, "pending");
        delivery(&conn, id, "a", "dead");
        derive_state(&conn, id, 1).unwrap();
        conn.execute("DELETE FROM events WHERE id = ?1", [id])
            .unwrap();
        let left: i64 = conn
            .query_row("SELECT count(*) FROM event_outcomes", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 0);
    }
}
