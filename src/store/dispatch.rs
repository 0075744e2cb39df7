//! The SQL of dispatch: claiming due events under a lease, keeping leases
//! alive, recording what an attempt did, releasing leases, and replay.
//!
//! Claims and outcomes run inside the writer's transactions (see
//! [`super::writer`]); replay also runs from the CLI on its own connection,
//! which is why these are plain functions over a `Connection`.
//!
//! Leases are rows of their own (`leases`), not columns of the event: an
//! `events` row carries the body, and SQLite rewrites a whole row, body
//! and all, when an update changes its size, so leasing by updating the
//! event cost a rewrite of every claimed body. A claim only inserts lease
//! rows, and renewing or dropping one touches only it. The attempt a
//! claim makes is counted in its lease and moved to the event when the
//! attempt settles (or, at the next start, when a crash cut it off); so a
//! retry of an event whose error stays the same changes no column's size
//! and SQLite updates the row in place. A claim hands out an event's
//! metadata, never its body: the attempt reads the body when it starts, on
//! a read-only connection ([`body`]), so the writer never copies a body
//! for dispatch and a queue of claimed events holds none.
//!
//! Claim tokens: each lease row's id is its claim's token, never reused
//! (AUTOINCREMENT). Only that claim's result settles the event
//! ([`record`]), renews its lease ([`renew`]) or gives it back
//! ([`release`]); a result that arrives after the event was claimed again
//! (its lease ran out, or it was released and replayed) changes nothing.
//! The attempt number could not serve: release and replay set it back.
//!
//! Leases are wall-clock times. Every claim of the dispatcher first renews
//! the leases of the events it holds (queued or running), in the same
//! transaction and by the same clock reading: a wall clock stepped forward
//! past a lease never makes an event it is still running claimable.
//!
//! Ordering: an event with an `order_key` is claimable only when no older
//! *pending* event of its source shares the key, and no event of the key
//! is in flight. A retrying event is still pending, so it holds its key's
//! later events back; a dead or delivered one is not, so it does not. A
//! replayed event is older than the events of its key that went on
//! without it, so it waits for the one in flight (if any) and then goes
//! first.
//!
//! So that a claim never walks a key's backlog, an event held behind an
//! older one of its key is not scheduled: its `next_attempt_at` is NULL,
//! which keeps it out of the due-events index the claim scans. It gets a
//! time when it becomes its key's oldest pending event (the one ahead is
//! delivered or dead). Every write that changes which events of a key are
//! pending keeps that so: the insert, [`record`] and [`replay`]. Only an
//! event that never finished an attempt is held: one waiting for a retry
//! keeps its time (Retry-After included), and the claim's own key check
//! keeps it back meanwhile; there is at most one such per key. The claim
//! still checks the key, so a row scheduled by other means is never
//! claimed out of order.

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension as _, params};

/// One claim of an event: its token settles, renews or releases it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    pub event_id: i64,
    pub token: i64,
}

/// A claimed event, with what a destination needs to deliver it but its
/// body, which [`body`] reads when the attempt starts.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: i64,
    /// This claim's token (see [`Lease`]).
    pub token: i64,
    pub source: String,
    pub delivery_id: String,
    pub event_type: Option<String>,
    pub content_type: Option<String>,
    pub headers: String,
    /// This attempt's number, 1-based.
    pub attempt: u32,
}

impl Claimed {
    pub fn lease(&self) -> Lease {
        Lease {
            event_id: self.id,
            token: self.token,
        }
    }
}

/// One source's part of a claim.
#[derive(Debug, Clone)]
pub struct ClaimFrom {
    pub source: String,
    /// How many due events to claim (0: only report when the next is due).
    pub limit: usize,
    /// The longest a retry of this source is ever scheduled ahead
    /// (`backoff_cap`, which also caps Retry-After), in milliseconds.
    pub max_delay_ms: i64,
}

/// Pending events of source `?1` that no lease holds at time `?2` and that
/// no older pending event of their key, nor one of their key in flight (a
/// live lease, so never the event itself), holds back: what may go next,
/// once due.
const HEADS: &str = "
    FROM events AS e
    WHERE e.state = 'pending' AND e.source = ?1
      AND NOT EXISTS (
            SELECT 1 FROM leases AS l WHERE l.event_id = e.id AND l.lease_until > ?2)
      AND (e.order_key IS NULL OR (NOT EXISTS (
            SELECT 1 FROM events AS p
            WHERE p.state = 'pending' AND p.source = e.source
              AND p.order_key = e.order_key AND p.id < e.id)
          AND NOT EXISTS (
            SELECT 1 FROM leases AS f
            WHERE f.source = e.source AND f.order_key = e.order_key
              AND f.lease_until > ?2)))";

/// [`HEADS`] that are due at `?2`.
fn claimable() -> String {
    format!("{HEADS} AND e.next_attempt_at <= ?2")
}

/// Claims up to `limit` due events of `source`, oldest due first, leasing
/// each until `lease_until` under a token of its own.
pub fn claim(
    conn: &Connection,
    source: &str,
    limit: usize,
    now: i64,
    lease_until: i64,
) -> anyhow::Result<Vec<Claimed>> {
    // An event whose lease ran out (its outcome was lost) counts the
    // attempt that lease made: the destination may have seen it.
    let mut select = conn.prepare_cached(&format!(
        "SELECT e.id, e.delivery_id, e.event_type, e.content_type, e.headers,
                max(e.attempts, coalesce(
                    (SELECT x.attempt FROM leases AS x WHERE x.event_id = e.id), 0)),
                e.order_key
         {} ORDER BY e.next_attempt_at, e.id LIMIT ?3",
        claimable()
    ))?;
    // Read in full before any lease is written: the query reads `leases`.
    let found = select
        .query_map(params![source, now, limit as i64], |r| {
            let order_key: Option<String> = r.get(6)?;
            let claimed = Claimed {
                id: r.get(0)?,
                token: 0,
                source: source.to_owned(),
                delivery_id: r.get(1)?,
                event_type: r.get(2)?,
                content_type: r.get(3)?,
                headers: r.get(4)?,
                attempt: r.get::<_, u32>(5)? + 1,
            };
            Ok((claimed, order_key))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("finding due events")?;
    // A lease that ran out (a lost outcome) is replaced: its token is dead.
    let mut lease = conn.prepare_cached(
        "INSERT OR REPLACE INTO leases (event_id, source, order_key, attempt, lease_until)
         VALUES (?1, ?2, ?3, ?4, ?5) RETURNING token",
    )?;
    let mut claimed = Vec::with_capacity(found.len());
    for (mut c, order_key) in found {
        c.token = lease
            .query_row(
                params![c.id, source, order_key, c.attempt, lease_until],
                |l| l.get(0),
            )
            .context("leasing an event")?;
        claimed.push(c);
    }
    Ok(claimed)
}

/// Extends the leases the dispatcher holds, at `now`, to `lease_until`.
/// One with more than half its length left is left alone, as is one whose
/// claim was settled, released or superseded. Returns how many were
/// renewed.
pub fn renew(
    conn: &Connection,
    leases: &[Lease],
    now: i64,
    lease_until: i64,
) -> anyhow::Result<usize> {
    let mut stmt = conn.prepare_cached(
        "UPDATE leases SET lease_until = ?3
         WHERE token = ?1 AND event_id = ?2 AND lease_until < ?4",
    )?;
    let half_left = now + (lease_until - now) / 2;
    let mut renewed = 0;
    for l in leases {
        renewed += stmt
            .execute(params![l.token, l.event_id, lease_until, half_left])
            .context("renewing a lease")?;
    }
    Ok(renewed)
}

/// The stored body of event `id`, for an attempt about to start: `None`
/// when the row is gone. A body retention dropped reads as empty.
pub fn body(conn: &Connection, id: i64) -> anyhow::Result<Option<Vec<u8>>> {
    conn.prepare_cached("SELECT body FROM events WHERE id = ?1")?
        .query_row([id], |r| r.get::<_, Option<Vec<u8>>>(0))
        .optional()
        .map(|row| row.map(Option::unwrap_or_default))
        .context("reading an event's body")
}

/// When the next event of `source` becomes claimable, if any is pending.
pub fn next_due(conn: &Connection, source: &str, now: i64) -> anyhow::Result<Option<i64>> {
    // Leased events are in flight: their outcome will wake the dispatcher.
    // Held events have no time (and NULL would sort first).
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT e.next_attempt_at {HEADS} AND e.next_attempt_at IS NOT NULL
         ORDER BY e.next_attempt_at LIMIT 1"
    ))?;
    let mut rows = stmt.query(params![source, now])?;
    Ok(match rows.next()? {
        Some(row) => row.get(0)?,
        None => None,
    })
}

/// Brings retries scheduled under a wall clock since set back within
/// reach: none is ever scheduled more than `max_delay_ms` ahead, so one
/// due later than `now + max_delay_ms` was scheduled before the clock went
/// backwards, and would otherwise wait out the whole jump. Runs with every
/// claim (the due-events index makes it a short range scan), so a jump
/// while hookbox was stopped is caught too.
pub fn clamp_retries(
    conn: &Connection,
    source: &str,
    now: i64,
    max_delay_ms: i64,
) -> anyhow::Result<usize> {
    let mut stmt = conn.prepare_cached(
        "UPDATE events SET next_attempt_at = ?2 + ?3
         WHERE source = ?1 AND state = 'pending' AND next_attempt_at > ?2 + ?3",
    )?;
    Ok(stmt.execute(params![source, now, max_delay_ms])?)
}

/// After the wall clock went backwards: leases granted under the old
/// clock end no later than one granted now (`lease_until`), rather than
/// holding their events for the length of the jump. Only run when the
/// dispatcher saw the clock go back.
pub fn clamp_leases(conn: &Connection, source: &str, lease_until: i64) -> anyhow::Result<usize> {
    let mut stmt = conn.prepare_cached(
        "UPDATE leases SET lease_until = ?2 WHERE source = ?1 AND lease_until > ?2",
    )?;
    Ok(stmt.execute(params![source, lease_until])?)
}

/// How an attempt left its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Delivered,
    /// Due again at this time (unix ms).
    Retry(i64),
    Dead,
}

/// One attempt's result, as the `attempts` table keeps it.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub event_id: i64,
    /// The token of the claim that ran the attempt: only it may settle.
    pub token: i64,
    pub attempt: u32,
    pub started_at: i64,
    pub duration_ms: i64,
    pub settled: Settled,
    pub status: Option<u16>,
    pub error: Option<String>,
}

/// Records an attempt and, if its claim still holds the event, moves the
/// event on and drops the lease.
pub fn record(conn: &Connection, r: &AttemptRecord, now: i64) -> anyhow::Result<()> {
    let outcome = match r.settled {
        Settled::Delivered => "delivered",
        Settled::Retry(_) => "retry",
        Settled::Dead => "dead",
    };
    conn.prepare_cached(
        "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome, status_code, error)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![r.event_id, r.attempt, r.started_at, r.duration_ms, outcome, r.status, r.error])
    .context("recording an attempt")?;
    // Only the claim that ran the attempt settles the event: once its lease
    // was released, or the event claimed again, the event belongs to others.
    let attempt: Option<i64> = conn
        .prepare_cached("DELETE FROM leases WHERE token = ?1 AND event_id = ?2 RETURNING attempt")?
        .query_row(params![r.token, r.event_id], |row| row.get(0))
        .optional()
        .context("dropping a lease")?;
    let Some(attempt) = attempt else {
        return Ok(());
    };
    let (state, next, delivered_at) = match r.settled {
        Settled::Delivered => ("delivered", None, Some(now)),
        Settled::Retry(at) => ("pending", Some(at), None),
        Settled::Dead => ("dead", None, None),
    };
    // `Some(keyed)` when it settled.
    let settled: Option<bool> = conn
        .prepare_cached(
            "UPDATE events SET state = ?2, attempts = ?3, next_attempt_at = ?4,
                               delivered_at = ?5, last_error = ?6
             WHERE id = ?1 AND state = 'pending'
             RETURNING order_key IS NOT NULL",
        )?
        .query_row(
            params![r.event_id, state, attempt, next, delivered_at, r.error],
            |row| row.get(0),
        )
        .optional()
        .context("settling an event")?;
    if settled == Some(true) && state != "pending" {
        // The next event of its key, if any, is now the oldest. It is due
        // from when it arrived, as if never held, so it does not queue
        // behind everything that came after it.
        conn.prepare_cached(
            "UPDATE events SET next_attempt_at = min(received_at, ?2)
             WHERE next_attempt_at IS NULL AND id = (
                 SELECT o.id FROM events AS e JOIN events AS o
                   ON o.source = e.source AND o.order_key = e.order_key
                 WHERE e.id = ?1 AND o.state = 'pending'
                 ORDER BY o.id LIMIT 1)",
        )?
        .execute(params![r.event_id, now])
        .context("scheduling the next event of a key")?;
    }
    Ok(())
}

/// Whether the `events` row is behind an older pending event of its key.
const HELD: &str = "events.order_key IS NOT NULL AND EXISTS (
         SELECT 1 FROM events AS o
         WHERE o.state = 'pending' AND o.source = events.source
           AND o.order_key = events.order_key AND o.id < events.id)";

/// Gives back leases that will not be used (shutdown). The interrupted
/// attempt was only counted in its lease, so it does not count against
/// `max_attempts`; the event was due when claimed, and still is.
pub fn release(conn: &Connection, leases: &[Lease]) -> anyhow::Result<()> {
    let mut stmt = conn.prepare_cached("DELETE FROM leases WHERE token = ?1 AND event_id = ?2")?;
    for l in leases {
        stmt.execute(params![l.token, l.event_id])
            .context("releasing a lease")?;
    }
    Ok(())
}

/// Clears every lease. Only one hookbox runs on a database, so at start-up
/// any lease left is from a process that died mid-dispatch: its events are
/// due again at once, rather than when their leases would have run out.
/// The attempt it cut off counts, as the destination may have seen it.
pub fn release_all(conn: &Connection) -> anyhow::Result<usize> {
    conn.execute(
        "UPDATE events SET attempts = l.attempt FROM leases AS l
         WHERE l.event_id = events.id AND events.state = 'pending'",
        [],
    )
    .context("counting the attempts the previous run left unfinished")?;
    conn.execute("DELETE FROM leases", [])
        .context("clearing leases left by the previous run")
}

/// What replay should pick up.
#[derive(Debug, Clone, Default)]
pub struct ReplayFilter {
    pub id: Option<i64>,
    pub source: Option<String>,
    /// `dead` or `delivered`; `None` means both.
    pub state: Option<String>,
    /// Only events received at or after this (unix ms).
    pub since: Option<i64>,
    /// Only events received before this (unix ms).
    pub until: Option<i64>,
}

/// Puts matching events back to `pending`, attempts reset, due now. Only
/// `dead` and `delivered` events move: a pending one is already queued and
/// a `stored` one has no destination; and only with their body, since one
/// that retention emptied can no longer be delivered as it was received.
/// Never creates a row. Returns how many events were reset.
pub fn replay(conn: &Connection, filter: &ReplayFilter, now: i64) -> anyhow::Result<usize> {
    let mut update = conn.prepare_cached(
        "UPDATE events SET state = 'pending', attempts = 0, next_attempt_at = ?4,
                           last_error = NULL, delivered_at = NULL
         WHERE state IN ('dead', 'delivered') AND body IS NOT NULL
           AND (?1 IS NULL OR id = ?1)
           AND (?2 IS NULL OR source = ?2)
           AND (?3 IS NULL OR state = ?3)
           AND (?5 IS NULL OR received_at >= ?5)
           AND (?6 IS NULL OR received_at < ?6)
         RETURNING source, order_key IS NOT NULL",
    )?;
    let mut rows = update
        .query(params![
            filter.id,
            filter.source,
            filter.state,
            now,
            filter.since,
            filter.until
        ])
        .context("replaying events")?;
    let mut replayed = 0;
    let mut keyed_sources = std::collections::BTreeSet::new();
    while let Some(row) = rows.next().context("replaying events")? {
        replayed += 1;
        if row.get::<_, bool>(1)? {
            keyed_sources.insert(row.get::<_, String>(0)?);
        }
    }
    drop(rows);
    // A replayed event may now be behind an older one of its key, or ahead
    // of the one that was its key's oldest: hold what is behind. Per source,
    // over scheduled events only (held ones have no time).
    let mut hold = conn.prepare_cached(&format!(
        "UPDATE events SET next_attempt_at = NULL
         WHERE state = 'pending' AND source = ?1 AND next_attempt_at IS NOT NULL
           AND attempts = 0 AND {HELD}"
    ))?;
    for source in &keyed_sources {
        hold.execute([source])
            .context("holding replayed events behind their key")?;
    }
    Ok(replayed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::apply(&mut conn).unwrap();
        conn
    }

    /// The event's lease.
    fn lease_of(conn: &Connection, id: i64) -> Lease {
        let token = conn
            .query_row("SELECT token FROM leases WHERE event_id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap();
        Lease {
            event_id: id,
            token,
        }
    }

    fn add(conn: &Connection, delivery: &str, key: Option<&str>, due: i64) -> i64 {
        conn.execute(
            "INSERT INTO events (source, delivery_id, order_key, received_at, body, state, next_attempt_at)
             VALUES ('s', ?1, ?2, ?3, x'7b7d', 'pending', ?3)",
            params![delivery, key, due],
        )
        .unwrap();
        conn.last_insert_rowid()
    }

    fn ids(claimed: &[Claimed]) -> Vec<i64> {
        claimed.iter().map(|c| c.id).collect()
    }

    #[test]
    fn after_the_clock_went_back_retries_and_leases_come_within_reach() {
        const JUMP: i64 = 3 * 3_600_000;
        let conn = db();
        // Scheduled under a clock 3 h ahead: a retry due 10 min later, and
        // a lease of 1 min.
        let waiting = add(&conn, "w", None, JUMP + 600_000);
        let leased = add(&conn, "l", None, 0);
        assert_eq!(
            ids(&claim(&conn, "s", 1, JUMP, JUMP + 60_000).unwrap()),
            vec![leased]
        );
        // The clock now reads 0.
        assert!(claim(&conn, "s", 10, 600_000, 660_000).unwrap().is_empty());
        assert_eq!(clamp_retries(&conn, "s", 0, 600_000).unwrap(), 1);
        assert_eq!(clamp_leases(&conn, "s", 60_000).unwrap(), 1);
        // Due at the cap, leased no longer than a lease granted now.
        assert_eq!(
            ids(&claim(&conn, "s", 10, 600_000, 660_000).unwrap()),
            vec![leased, waiting]
        );
        // Nothing scheduled within reach is touched.
        assert_eq!(clamp_retries(&conn, "s", 600_000, 600_000).unwrap(), 0);
    }

    #[test]
    fn events_sharing_a_key_go_one_at_a_time_in_arrival_order() {
        let conn = db();
        let a1 = add(&conn, "a1", Some("A"), 10);
        let a2 = add(&conn, "a2", Some("A"), 10);
        let b1 = add(&conn, "b1", Some("B"), 10);
        let free = add(&conn, "n", None, 10);
        assert_eq!(
            ids(&claim(&conn, "s", 10, 100, 1000).unwrap()),
            vec![a1, b1, free]
        );
        // a1 is leased: a2 waits, and nothing else is due.
        assert!(claim(&conn, "s", 10, 100, 1000).unwrap().is_empty());
        // a1 fails and waits for its retry: a2 is still held back.
        let retry = AttemptRecord {
            event_id: a1,
            token: lease_of(&conn, a1).token,
            attempt: 1,
            started_at: 100,
            duration_ms: 1,
            settled: Settled::Retry(500),
            status: Some(503),
            error: None,
        };
        record(&conn, &retry, 100).unwrap();
        assert!(claim(&conn, "s", 10, 200, 1000).unwrap().is_empty());
        assert_eq!(next_due(&conn, "s", 200).unwrap(), Some(500));
        // a1 dies: it no longer holds a2 back.
        assert_eq!(ids(&claim(&conn, "s", 10, 500, 1000).unwrap()), vec![a1]);
        let dead = AttemptRecord {
            token: lease_of(&conn, a1).token,
            attempt: 2,
            settled: Settled::Dead,
            ..retry
        };
        record(&conn, &dead, 500).unwrap();
        assert_eq!(ids(&claim(&conn, "s", 10, 500, 1000).unwrap()), vec![a2]);
    }

    /// Stores an event as ingest does.
    fn ingest(conn: &mut Connection, delivery: &str, key: Option<&str>, at: i64) -> i64 {
        use super::super::models::{Inserted, NewEvent, Origin, State};
        let tx = conn.transaction().unwrap();
        let event = NewEvent {
            source: "s".into(),
            delivery_id: delivery.into(),
            event_type: None,
            order_key: key.map(str::to_owned),
            received_at: at,
            origin: Origin::Push,
            content_type: None,
            headers: "{}".into(),
            body: bytes::Bytes::from_static(b"{}"),
            state: State::Pending,
        };
        let Inserted::New(id) = super::super::ingest::insert(&tx, &event).unwrap() else {
            panic!("{delivery} was a duplicate");
        };
        tx.commit().unwrap();
        id
    }

    /// SQLite's plan for the claim query, one step per line.
    fn claim_plan(conn: &Connection) -> String {
        conn.prepare(&format!(
            "EXPLAIN QUERY PLAN SELECT e.id {} ORDER BY e.next_attempt_at LIMIT 4",
            claimable()
        ))
        .unwrap()
        .query_map(params!["s", 0], |r| r.get::<_, String>(3))
        .unwrap()
        .map(Result::unwrap)
        .collect::<Vec<_>>()
        .join("\n")
    }

    /// The events that have a time, in id order.
    fn scheduled(conn: &Connection) -> Vec<i64> {
        conn.prepare(
            "SELECT id FROM events WHERE state = 'pending' AND next_attempt_at IS NOT NULL ORDER BY id",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    /// Records the outcome of the event's claim.
    fn settle(conn: &Connection, id: i64, attempt: u32, settled: Settled, now: i64) {
        let r = AttemptRecord {
            event_id: id,
            token: lease_of(conn, id).token,
            attempt,
            started_at: now,
            duration_ms: 1,
            settled,
            status: None,
            error: None,
        };
        record(conn, &r, now).unwrap();
    }

    #[test]
    fn only_the_oldest_pending_event_of_a_key_is_scheduled() {
        let mut conn = db();
        let a1 = ingest(&mut conn, "a1", Some("A"), 10);
        let a2 = ingest(&mut conn, "a2", Some("A"), 11);
        let a3 = ingest(&mut conn, "a3", Some("A"), 12);
        let b1 = ingest(&mut conn, "b1", Some("B"), 13);
        let free = ingest(&mut conn, "n", None, 14);
        assert_eq!(scheduled(&conn), vec![a1, b1, free]);
        // A retry keeps a1 ahead; a2 and a3 stay held.
        assert_eq!(
            ids(&claim(&conn, "s", 10, 100, 1000).unwrap()),
            vec![a1, b1, free]
        );
        settle(&conn, a1, 1, Settled::Retry(500), 100);
        assert_eq!(scheduled(&conn), vec![a1, b1, free]);
        // a1 delivered: a2 is due at once, a3 still held.
        assert_eq!(ids(&claim(&conn, "s", 10, 500, 1000).unwrap()), vec![a1]);
        settle(&conn, a1, 2, Settled::Delivered, 600);
        assert_eq!(scheduled(&conn), vec![a2, b1, free]);
        assert_eq!(ids(&claim(&conn, "s", 10, 600, 1000).unwrap()), vec![a2]);
        // Shut down mid-attempt: a2 given back, still the scheduled one.
        release(&conn, &[lease_of(&conn, a2)]).unwrap();
        assert_eq!(scheduled(&conn), vec![a2, b1, free]);
        // a2 dead: a3 next.
        assert_eq!(ids(&claim(&conn, "s", 10, 700, 2000).unwrap()), vec![a2]);
        settle(&conn, a2, 1, Settled::Dead, 800);
        assert_eq!(scheduled(&conn), vec![a3, b1, free]);
        // a2 replayed: older than a3, so a3 is held again behind it.
        let filter = ReplayFilter {
            id: Some(a2),
            ..ReplayFilter::default()
        };
        assert_eq!(replay(&conn, &filter, 900).unwrap(), 1);
        assert_eq!(scheduled(&conn), vec![a2, b1, free]);
        // (b1 and the free event are still leased by the first claim.)
        assert_eq!(ids(&claim(&conn, "s", 10, 900, 3000).unwrap()), vec![a2]);
    }

    #[test]
    fn an_event_let_through_is_due_from_its_arrival_not_behind_later_ones() {
        let mut conn = db();
        let k1 = ingest(&mut conn, "k1", Some("K"), 0);
        let k2 = ingest(&mut conn, "k2", Some("K"), 0);
        for n in 1..=20 {
            ingest(&mut conn, &format!("free{n}"), None, n);
        }
        assert_eq!(ids(&claim(&conn, "s", 1, 100, 200).unwrap()), vec![k1]);
        settle(&conn, k1, 1, Settled::Delivered, 1_000);
        assert_eq!(ids(&claim(&conn, "s", 1, 1_000, 2_000).unwrap()), vec![k2]);
    }

    #[test]
    fn a_replay_ahead_of_a_waiting_retry_keeps_the_retry_s_time() {
        let mut conn = db();
        let a1 = ingest(&mut conn, "a1", Some("A"), 10);
        let a2 = ingest(&mut conn, "a2", Some("A"), 11);
        claim(&conn, "s", 1, 100, 200).unwrap();
        settle(&conn, a1, 1, Settled::Dead, 100);
        assert_eq!(ids(&claim(&conn, "s", 1, 100, 200).unwrap()), vec![a2]);
        // a2 asked for an hour (Retry-After).
        settle(&conn, a2, 1, Settled::Retry(3_600_100), 150);
        let filter = ReplayFilter {
            id: Some(a1),
            ..ReplayFilter::default()
        };
        assert_eq!(replay(&conn, &filter, 200).unwrap(), 1);
        assert_eq!(scheduled(&conn), vec![a1, a2]);
        assert_eq!(ids(&claim(&conn, "s", 10, 200, 300).unwrap()), vec![a1]);
        settle(&conn, a1, 1, Settled::Delivered, 250);
        // a1 is done, yet a2 still waits out its hour.
        assert!(claim(&conn, "s", 10, 300, 400).unwrap().is_empty());
        assert_eq!(next_due(&conn, "s", 300).unwrap(), Some(3_600_100));
    }

    #[test]
    fn a_claim_does_not_walk_a_key_s_backlog() {
        let mut conn = db();
        for n in 0..2_000 {
            ingest(&mut conn, &format!("k{n}"), Some("K"), n);
        }
        let free = ingest(&mut conn, "free", None, 5_000);
        assert_eq!(scheduled(&conn).len(), 2);
        let plan = claim_plan(&conn);
        assert!(plan.contains("next_attempt_at<?"), "{plan}");
        let claimed = claim(&conn, "s", 4, 10_000, 20_000).unwrap();
        assert_eq!(claimed.len(), 2);
        assert_eq!(claimed[1].id, free);
    }

    #[test]
    fn a_replayed_event_waits_for_the_event_of_its_key_in_flight_then_goes_first() {
        let conn = db();
        let a1 = add(&conn, "a1", Some("A"), 10);
        let a2 = add(&conn, "a2", Some("A"), 10);
        let a3 = add(&conn, "a3", Some("A"), 10);
        assert_eq!(ids(&claim(&conn, "s", 10, 100, 1000).unwrap()), vec![a1]);
        settle(&conn, a1, 1, Settled::Dead, 100);
        assert_eq!(ids(&claim(&conn, "s", 10, 100, 1000).unwrap()), vec![a2]);
        // a1 replayed while a2 is in flight: neither it nor a3 may go.
        let filter = ReplayFilter {
            id: Some(a1),
            ..ReplayFilter::default()
        };
        assert_eq!(replay(&conn, &filter, 200).unwrap(), 1);
        assert!(claim(&conn, "s", 10, 200, 1000).unwrap().is_empty());
        // The lease runs out (a crashed dispatcher): a1, being older, goes.
        assert_eq!(ids(&claim(&conn, "s", 10, 1000, 2000).unwrap()), vec![a1]);
        settle(&conn, a1, 1, Settled::Delivered, 1000);
        settle(&conn, a2, 1, Settled::Delivered, 1000);
        assert_eq!(ids(&claim(&conn, "s", 10, 1000, 2000).unwrap()), vec![a3]);
    }

    #[test]
    fn an_event_whose_body_retention_dropped_is_not_replayed() {
        let conn = db();
        let kept = add(&conn, "kept", None, 10);
        let emptied = add(&conn, "emptied", None, 10);
        conn.execute("UPDATE events SET state = 'delivered'", [])
            .unwrap();
        conn.execute("UPDATE events SET body = NULL WHERE id = ?1", [emptied])
            .unwrap();
        let filter = ReplayFilter::default();
        assert_eq!(replay(&conn, &filter, 100).unwrap(), 1);
        assert_eq!(ids(&claim(&conn, "s", 10, 100, 1000).unwrap()), vec![kept]);
    }

    #[test]
    fn an_expired_lease_makes_the_event_due_again_and_replay_resets_it() {
        let conn = db();
        let id = add(&conn, "x", None, 10);
        assert_eq!(claim(&conn, "s", 1, 10, 50).unwrap()[0].attempt, 1);
        assert!(claim(&conn, "s", 1, 49, 100).unwrap().is_empty());
        assert_eq!(claim(&conn, "s", 1, 50, 100).unwrap()[0].attempt, 2);
        let dead = AttemptRecord {
            event_id: id,
            token: lease_of(&conn, id).token,
            attempt: 2,
            started_at: 50,
            duration_ms: 1,
            settled: Settled::Dead,
            status: Some(410),
            error: Some("gone".into()),
        };
        record(&conn, &dead, 60).unwrap();
        let filter = ReplayFilter {
            state: Some("dead".into()),
            ..ReplayFilter::default()
        };
        assert_eq!(replay(&conn, &filter, 70).unwrap(), 1);
        let again = claim(&conn, "s", 1, 70, 100).unwrap();
        assert_eq!((again[0].id, again[0].attempt), (id, 1));
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
    }

    #[test]
    fn replay_by_time_range_moves_only_events_received_in_it() {
        let conn = db();
        let ids: Vec<i64> = (0..4)
            .map(|i| add(&conn, &format!("t{i}"), None, i * 100))
            .collect();
        conn.execute("UPDATE events SET state = 'dead'", [])
            .unwrap();
        let filter = ReplayFilter {
            state: Some("dead".into()),
            since: Some(100),
            until: Some(300),
            ..ReplayFilter::default()
        };
        assert_eq!(replay(&conn, &filter, 1000).unwrap(), 2);
        let pending: Vec<i64> = conn
            .prepare("SELECT id FROM events WHERE state = 'pending' ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(pending, &ids[1..3]);
    }

    #[test]
    fn the_claim_query_uses_the_indexes() {
        let plan = claim_plan(&db());
        assert!(plan.contains("USING INDEX events_due"), "{plan}");
        assert!(
            plan.contains("USING COVERING INDEX events_order")
                || plan.contains("USING INDEX events_order"),
            "{plan}"
        );
        assert!(plan.contains("USING INDEX leases_key"), "{plan}");
        assert!(plan.contains("(event_id=?)"), "{plan}");
        assert!(!plan.contains("USE TEMP B-TREE"), "{plan}");
    }

    fn outcome(lease: Lease, attempt: u32, settled: Settled) -> AttemptRecord {
        AttemptRecord {
            event_id: lease.event_id,
            token: lease.token,
            attempt,
            started_at: 0,
            duration_ms: 1,
            settled,
            status: None,
            error: None,
        }
    }

    /// The event's state, finished attempts and lease.
    fn state_of(conn: &Connection, id: i64) -> (String, i64, Option<i64>) {
        conn.query_row(
            "SELECT state, attempts, (SELECT lease_until FROM leases WHERE event_id = id)
             FROM events WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
    }

    #[test]
    fn a_late_result_of_an_old_claim_cannot_settle_a_newer_claim() {
        let conn = db();
        let id = add(&conn, "x", None, 10);
        // Claimed, then given back (shutdown): the attempt is not counted,
        // so the next claim's attempt is number 1 again.
        let old = claim(&conn, "s", 1, 10, 1_000).unwrap()[0].lease();
        release(&conn, &[old]).unwrap();
        let new = claim(&conn, "s", 1, 20, 1_000).unwrap();
        assert_eq!(
            new[0].attempt, 1,
            "the same attempt number as the old claim"
        );
        assert_ne!(new[0].token, old.token);
        // The old claim's result arrives: it moves nothing, not even the
        // lease of the claim running now.
        record(&conn, &outcome(old, 1, Settled::Delivered), 30).unwrap();
        assert_eq!(state_of(&conn, id), ("pending".into(), 0, Some(1_000)));
        // Nor can the old claim renew or give back the new claim's lease.
        assert_eq!(renew(&conn, &[old], 900, 5_000).unwrap(), 0);
        release(&conn, &[old]).unwrap();
        assert_eq!(state_of(&conn, id), ("pending".into(), 0, Some(1_000)));
        // The running claim's own result settles it.
        record(&conn, &outcome(new[0].lease(), 1, Settled::Retry(50)), 40).unwrap();
        assert_eq!(state_of(&conn, id), ("pending".into(), 1, None));
        // A lease that ran out (a lost outcome) lets the event be claimed
        // again; the first claim's late result then settles nothing.
        let lost = claim(&conn, "s", 1, 50, 100).unwrap()[0].lease();
        let again = &claim(&conn, "s", 1, 100, 1_000).unwrap()[0];
        assert_eq!(again.attempt, 3, "the lost attempt counts");
        let again = again.lease();
        record(&conn, &outcome(lost, 2, Settled::Delivered), 110).unwrap();
        assert_eq!(state_of(&conn, id), ("pending".into(), 1, Some(1_000)));
        record(&conn, &outcome(again, 3, Settled::Dead), 120).unwrap();
        assert_eq!(state_of(&conn, id), ("dead".into(), 3, None));
        // Replay resets the count: a result of a claim from before it is
        // refused as well.
        let filter = ReplayFilter {
            id: Some(id),
            ..ReplayFilter::default()
        };
        assert_eq!(replay(&conn, &filter, 130).unwrap(), 1);
        let replayed = claim(&conn, "s", 1, 130, 1_000).unwrap()[0].lease();
        record(&conn, &outcome(again, 1, Settled::Delivered), 140).unwrap();
        assert_eq!(state_of(&conn, id), ("pending".into(), 0, Some(1_000)));
        record(&conn, &outcome(replayed, 1, Settled::Delivered), 150).unwrap();
        assert_eq!(state_of(&conn, id), ("delivered".into(), 1, None));
    }

    #[test]
    fn a_renewed_lease_outlives_a_forward_clock_step_and_holds_its_key() {
        const STEP: i64 = 3 * 3_600_000;
        let conn = db();
        let a1 = add(&conn, "a1", Some("A"), 10);
        let a2 = add(&conn, "a2", Some("A"), 10);
        let held = claim(&conn, "s", 10, 100, 1_100).unwrap();
        assert_eq!(ids(&held), vec![a1]);
        let lease = held[0].lease();
        // Half the lease left: nothing to renew yet.
        assert_eq!(renew(&conn, &[lease], 600, 1_600).unwrap(), 0);
        // The wall clock steps 3 h forward while a1 runs: renewing first,
        // as every claim of the dispatcher does, keeps a1 held and a2 back.
        let later = STEP + 100;
        assert_eq!(renew(&conn, &[lease], later, later + 1_000).unwrap(), 1);
        assert!(
            claim(&conn, "s", 10, later, later + 1_000)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            state_of(&conn, a1),
            ("pending".into(), 0, Some(later + 1_000))
        );
        // Without the renewal the step would have handed a1 out again.
        conn.execute("UPDATE leases SET lease_until = 1100", [])
            .unwrap();
        assert_eq!(
            ids(&claim(&conn, "s", 10, later, later + 1_000).unwrap()),
            vec![a1]
        );
        // A settled lease is not renewed back to life.
        let again = lease_of(&conn, a1);
        settle(&conn, a1, 2, Settled::Delivered, later);
        assert_eq!(renew(&conn, &[again], later, later + 5_000).unwrap(), 0);
        assert_eq!(state_of(&conn, a1), ("delivered".into(), 2, None));
        assert_eq!(
            ids(&claim(&conn, "s", 10, later, later + 1_000).unwrap()),
            vec![a2]
        );
    }

    #[test]
    fn a_claim_carries_no_body_and_leaves_the_event_row_alone() {
        let conn = db();
        let id = add(&conn, "e", None, 10);
        conn.execute("UPDATE events SET body = zeroblob(100000)", [])
            .unwrap();
        let row = |conn: &Connection| -> Vec<u8> {
            conn.query_row(
                "SELECT state || attempts || coalesce(next_attempt_at, '') || hex(body)
                 FROM events WHERE id = ?1",
                [id],
                |r| r.get::<_, String>(0),
            )
            .unwrap()
            .into_bytes()
        };
        let before = row(&conn);
        let claimed = claim(&conn, "s", 1, 100, 1_000).unwrap();
        assert_eq!(ids(&claimed), vec![id]);
        assert_eq!(row(&conn), before, "leasing does not touch the event");
        assert_eq!(body(&conn, id).unwrap(), Some(vec![0; 100_000]));
        assert_eq!(body(&conn, id + 1).unwrap(), None);
    }
}
