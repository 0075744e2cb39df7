//! The SQL of dispatch: claiming due deliveries under a lease, keeping
//! leases alive, recording what an attempt did, and releasing leases.
//! Replay is [`super::replay`](mod@super::replay).
//!
//! A delivery is one event on its way to one destination (`deliveries`,
//! since version 9): its own state, attempts, schedule and lease. A
//! source's destinations are separate *lanes*, `(source, destination)`,
//! and every query here takes one lane, so a destination that fails never
//! delays, retries or kills another's deliveries. The event's own state
//! is derived from its deliveries when one of them settles ([`record`],
//! [`super::outcomes`]).
//!
//! Claims and outcomes run inside the writer's transactions (see
//! [`super::writer`]) as the writes of [`writes`]; the functions here are
//! plain functions over a `Connection`.
//!
//! Leases are rows of their own (`leases`), not columns: a claim only
//! inserts lease rows, and renewing or dropping one touches only it. The
//! attempt a claim makes is counted in its lease and moved to the delivery
//! when the attempt settles (or, at the next start, when a crash cut it
//! off). A claim hands out the event's metadata, and the bodies that fit
//! the asker's budget ([`ClaimFrom::bodies`]): the row is already in hand,
//! and an attempt whose body came with its claim starts without a trip to
//! the read pool (a thread hop per delivery: a url destination's drain
//! ran 1.6 times as fast without it). Any other attempt reads its body
//! when it starts, on a read-only connection ([`body`]).
//!
//! Claim tokens: each lease row's id is its claim's token, never reused
//! within a run (AUTOINCREMENT). Only that claim's result settles the
//! delivery ([`record`]), renews its lease ([`renew`]) or gives it back
//! ([`release`]); a result that arrives after the delivery was claimed
//! again (its lease ran out, or it was released and replayed) changes
//! nothing. A token is a counter, fit for the dispatcher that holds it;
//! a pull consumer shows the lease's random secret instead
//! ([`super::pull_leases`]).
//!
//! A lease that runs out is a failed attempt ("lease expired"): the next
//! claim of its lane records it ([`expire`]) by the lane's
//! [`OnFailure`], so a consumer that takes and never settles ends in
//! `dead`, not in a loop. A lease left by a process that stopped is
//! marked at start-up ([`interrupt_all`]) and recorded the same way,
//! except that its delivery is due again at once.
//!
//! Leases are wall-clock times. Every claim of the dispatcher first renews
//! the leases it holds (queued or running), in the same transaction and by
//! the same clock reading: a wall clock stepped forward past a lease never
//! makes a delivery it is still running claimable.
//!
//! Ordering, per lane: a delivery whose event has an `order_key` is
//! claimable only when no *pending* delivery of an older event of its key
//! is in the lane, and none of the key is in flight there. A retrying
//! delivery is still pending, so it holds its key's later ones back; a dead
//! or delivered one does not. Another destination's deliveries never hold
//! anything back.
//!
//! So that a claim never walks a key's backlog, a delivery held behind an
//! older one of its key is not scheduled: its `next_attempt_at` is NULL,
//! which keeps it out of the due index the claim scans. It gets a time
//! when it becomes its key's oldest pending delivery in the lane. Every
//! write that changes which deliveries of a key are pending keeps that so:
//! the insert, [`record`] and replay. Only a delivery that never finished
//! an attempt is held: one waiting for a retry keeps its time (Retry-After
//! included), and the claim's own key check keeps it back meanwhile.

use std::sync::Arc;

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension as _, params};

use super::counters::Tally;
use super::models::State;

mod writes;

pub use writes::{Claim, Claims, MakeDue, Record, Release};

/// Length of a lease's secret, in bytes: 128 bits, not to be guessed.
pub const SECRET_LEN: usize = 16;

/// One claim of a delivery: its token settles, renews or releases it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    /// `deliveries.id`.
    pub delivery: i64,
    pub token: i64,
}

/// A claimed delivery, with what a destination needs to deliver it: the
/// event's body too when it came with the claim, else [`body`] reads it
/// when the attempt starts.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// `deliveries.id`.
    pub delivery: i64,
    /// `events.id`.
    pub event_id: i64,
    /// This claim's token (see [`Lease`]).
    pub token: i64,
    /// This claim's secret, which a pull consumer shows to settle it.
    pub secret: [u8; SECRET_LEN],
    /// The [`ClaimFrom::lane`] it was claimed for.
    pub lane: usize,
    pub delivery_id: String,
    pub event_type: Option<String>,
    /// Unix ms.
    pub received_at: i64,
    pub content_type: Option<String>,
    pub headers: String,
    /// This attempt's number, 1-based.
    pub attempt: u32,
    /// The event's body, when it came with the claim.
    pub body: Option<Carried>,
}

impl Claimed {
    pub fn lease(&self) -> Lease {
        Lease {
            delivery: self.delivery,
            token: self.token,
        }
    }

    /// The bytes of the body this claim carries.
    pub fn carried_bytes(&self) -> u64 {
        self.body.as_ref().map_or(0, |b| b.0.len() as u64)
    }
}

/// A body that came with its claim. Its `Debug` shows only the length:
/// payloads are never logged.
#[derive(Clone)]
pub struct Carried(pub Vec<u8>);

impl std::fmt::Debug for Carried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Carried({} bytes)", self.0.len())
    }
}

/// The largest body a claim carries: a larger one is read when its attempt
/// starts, so the writer never pulls long overflow chains for a claim.
pub const CARRIED_BODY_MAX: u64 = 64 * 1024;

/// One lane's part of a claim.
#[derive(Debug, Clone)]
pub struct ClaimFrom {
    /// The asker's number for the lane, handed back in each [`Claimed`].
    pub lane: usize,
    pub source: String,
    pub destination: String,
    /// How many due deliveries to claim (0: only report when the next is due).
    pub limit: usize,
    /// The longest a retry of this lane is ever scheduled ahead
    /// (`backoff_cap`, which also caps Retry-After), in milliseconds.
    pub max_delay_ms: i64,
    /// A circuit breaker's probe: the lane's next delivery, due or not
    /// (a paused destination's backlog waits out backoffs the probe must
    /// not).
    pub ahead: bool,
    /// What an attempt of this lane whose lease ran out becomes.
    pub on_failure: OnFailure,
    /// How many bytes of bodies the claim may carry for this lane: each
    /// body that still fits, of at most [`CARRIED_BODY_MAX`] (0: none).
    pub bodies: u64,
}

/// What a failed attempt of a lane leaves its delivery as, from the
/// attempt's number (1-based), whether a stop of hookbox cut it short, and
/// when it failed (unix ms): a retry after the lane's backoff (at once if
/// cut short), or dead after its `max_attempts`. Built from the
/// destination's settings by `crate::delivery::settle::Rule::on_failure`.
#[derive(Clone)]
pub struct OnFailure(pub Arc<dyn Fn(u32, bool, i64) -> Settled + Send + Sync>);

impl OnFailure {
    pub fn decide(&self, attempt: u32, interrupted: bool, now: i64) -> Settled {
        (self.0)(attempt, interrupted, now)
    }
}

impl std::fmt::Debug for OnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnFailure")
    }
}

/// Pending deliveries `d` of lane (`?1`, `?2`) that no lease holds at time
/// `?3` and that no older pending delivery of their key in the lane, nor
/// one of their key in flight there (a live lease, so never the delivery
/// itself), holds back: what may go next, once due. The key's check names
/// its index: `leases_lane` would also serve it, reading every live lease
/// of the lane instead of those of one key.
const HEADS: &str = "
    d.state = 'pending' AND d.source = ?1 AND d.destination = ?2
      AND NOT EXISTS (
            SELECT 1 FROM leases AS l WHERE l.delivery = d.id AND l.lease_until > ?3)
      AND (d.order_key IS NULL OR (NOT EXISTS (
            SELECT 1 FROM deliveries AS p
            WHERE p.state = 'pending' AND p.source = d.source AND p.destination = d.destination
              AND p.order_key = d.order_key AND p.event_id < d.event_id)
          AND NOT EXISTS (
            SELECT 1 FROM leases AS f INDEXED BY leases_key
            WHERE f.source = d.source AND f.destination = d.destination
              AND f.order_key = d.order_key AND f.lease_until > ?3)))";

/// The claim's query: [`HEADS`] that are due at `?3`, oldest due first;
/// with `ahead`, those scheduled at all, soonest first.
fn claimable(ahead: bool) -> String {
    let due = if ahead {
        "d.next_attempt_at IS NOT NULL"
    } else {
        "d.next_attempt_at <= ?3"
    };
    format!(
        "SELECT d.id, d.event_id, e.delivery_id, e.event_type, e.content_type, e.headers,
                max(d.attempts, coalesce(
                    (SELECT x.attempt FROM leases AS x WHERE x.delivery = d.id), 0)),
                d.order_key, e.received_at,
                CASE WHEN ?5 > 0 AND coalesce(length(e.body), 0) <= {CARRIED_BODY_MAX}
                     THEN coalesce(e.body, x'') END
         FROM deliveries AS d JOIN events AS e ON e.id = d.event_id
         WHERE {HEADS} AND {due}
         ORDER BY d.next_attempt_at, d.id LIMIT ?4"
    )
}

/// Claims up to `from.limit` due deliveries of its lane, oldest due
/// first, leasing each until `lease_until` under a token of its own.
pub fn claim(
    conn: &Connection,
    from: &ClaimFrom,
    now: i64,
    lease_until: i64,
) -> anyhow::Result<Vec<Claimed>> {
    // A delivery whose lease ran out (its outcome was lost) counts the
    // attempt that lease made: the destination may have seen it.
    let mut select = conn.prepare_cached(&claimable(from.ahead))?;
    // Read in full before any lease is written: the query reads `leases`.
    let mut budget = from.bodies;
    let found = select
        .query_map(
            params![
                from.source,
                from.destination,
                now,
                from.limit as i64,
                i64::from(from.bodies > 0)
            ],
            |r| {
                let order_key: Option<String> = r.get(7)?;
                let body = match r.get_ref(9)?.as_blob_or_null()? {
                    Some(body) if body.len() as u64 <= budget => {
                        budget -= body.len() as u64;
                        Some(Carried(body.to_vec()))
                    }
                    _ => None,
                };
                let claimed = Claimed {
                    delivery: r.get(0)?,
                    event_id: r.get(1)?,
                    token: 0,
                    secret: [0; SECRET_LEN],
                    lane: from.lane,
                    delivery_id: r.get(2)?,
                    event_type: r.get(3)?,
                    received_at: r.get(8)?,
                    content_type: r.get(4)?,
                    headers: r.get(5)?,
                    attempt: r.get::<_, u32>(6)? + 1,
                    body,
                };
                Ok((claimed, order_key))
            },
        )?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("finding due deliveries")?;
    // A lease that ran out (a lost outcome) is replaced: its token is dead.
    let mut lease = conn.prepare_cached(
        "INSERT OR REPLACE INTO leases (delivery, source, destination, order_key, attempt, lease_until,
                                        secret)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING token",
    )?;
    let mut claimed = Vec::with_capacity(found.len());
    for (mut c, order_key) in found {
        getrandom::fill(&mut c.secret)
            .map_err(|e| anyhow::anyhow!("drawing a lease's secret: {e}"))?;
        c.token = lease
            .query_row(
                params![
                    c.delivery,
                    from.source,
                    from.destination,
                    order_key,
                    c.attempt,
                    lease_until,
                    c.secret
                ],
                |l| l.get(0),
            )
            .context("leasing a delivery")?;
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
         WHERE token = ?1 AND delivery = ?2 AND lease_until < ?4",
    )?;
    let half_left = now + (lease_until - now) / 2;
    let mut renewed = 0;
    for l in leases {
        renewed += stmt
            .execute(params![l.token, l.delivery, lease_until, half_left])
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

/// What [`bodies_within`] made of one event.
#[derive(Debug, PartialEq, Eq)]
pub enum Fit {
    Body(Vec<u8>),
    /// The row is gone (a purge since the claim).
    Gone,
    /// It did not fit.
    Left,
}

/// The bodies of events `ids`, in order, as many as fit in `max_bytes`
/// (the first one there always does). Each size is read first (SQLite
/// reads a blob's length from its record header) and only a body that
/// fits is read, so no more than `max_bytes`, or the one larger body, is
/// ever held.
pub fn bodies_within(conn: &Connection, ids: &[i64], max_bytes: u64) -> anyhow::Result<Vec<Fit>> {
    let mut size_of =
        conn.prepare_cached("SELECT coalesce(length(body), 0) FROM events WHERE id = ?1")?;
    let mut fits = Vec::with_capacity(ids.len());
    let mut bytes = 0u64;
    let mut any = false;
    for &id in ids {
        let size: Option<i64> = size_of
            .query_row([id], |r| r.get(0))
            .optional()
            .context("reading the size of an event's body")?;
        let Some(size) = size else {
            fits.push(Fit::Gone);
            continue;
        };
        let size = u64::try_from(size).unwrap_or(0);
        if any && bytes.saturating_add(size) > max_bytes {
            fits.push(Fit::Left);
            continue;
        }
        match body(conn, id)? {
            Some(body) => {
                bytes = bytes.saturating_add(size);
                any = true;
                fits.push(Fit::Body(body));
            }
            None => fits.push(Fit::Gone),
        }
    }
    Ok(fits)
}

/// When the next delivery of lane (`source`, `destination`) becomes
/// claimable, if any is pending.
pub fn next_due(
    conn: &Connection,
    source: &str,
    destination: &str,
    now: i64,
) -> anyhow::Result<Option<i64>> {
    // Leased deliveries are in flight: their outcome will wake the
    // dispatcher. Held ones have no time (and NULL would sort first).
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT d.next_attempt_at FROM deliveries AS d
         WHERE {HEADS} AND d.next_attempt_at IS NOT NULL
         ORDER BY d.next_attempt_at LIMIT 1"
    ))?;
    let mut rows = stmt.query(params![source, destination, now])?;
    Ok(match rows.next()? {
        Some(row) => row.get(0)?,
        None => None,
    })
}

/// When the next lease of lane (`source`, `destination`) still running at
/// `now` runs out, if it holds any: its delivery (and any of its key held
/// behind it) is claimable again then. Only a pull consumer that went away
/// lets one run out; the dispatcher renews its own. One that ran out
/// already is not counted: the claim that looked has recorded it
/// ([`expire`]), and counting it would have a waiting take look again at
/// once, forever.
pub fn next_lease_end(
    conn: &Connection,
    source: &str,
    destination: &str,
    now: i64,
) -> anyhow::Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT min(lease_until) FROM leases
         WHERE source = ?1 AND destination = ?2 AND lease_until > ?3",
    )?
    .query_row(params![source, destination, now], |r| r.get(0))
    .context("finding when a lease runs out")
}

/// What an attempt whose lease ran out is logged with.
pub const LEASE_EXPIRED: &str = "lease expired";

/// What an attempt cut off by a stop of hookbox is logged with.
pub const INTERRUPTED: &str = "interrupted: hookbox stopped during the attempt";

/// Records every lease of `from`'s lane that ran out by `now` as a failed
/// attempt of its delivery, settled by the lane's [`OnFailure`]: the
/// consumer or process that held it may have acted on it, so it counts
/// toward `max_attempts`. One cut off by a stop ([`interrupt_all`]) is due
/// again at once unless it was the last attempt allowed. Answers how many
/// deliveries this made dead.
pub fn expire(
    conn: &Connection,
    from: &ClaimFrom,
    now: i64,
    tally: &mut Tally,
) -> anyhow::Result<usize> {
    let expired = conn
        .prepare_cached(
            "SELECT l.token, l.delivery, d.event_id, l.attempt, l.lease_until
             FROM leases AS l JOIN deliveries AS d ON d.id = l.delivery
             WHERE l.source = ?1 AND l.destination = ?2 AND l.lease_until <= ?3",
        )?
        .query_map(params![from.source, from.destination, now], |r| {
            Ok((
                Lease {
                    token: r.get(0)?,
                    delivery: r.get(1)?,
                },
                r.get::<_, i64>(2)?,
                r.get::<_, u32>(3)?,
                r.get::<_, i64>(4)? == 0,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("finding leases that ran out")?;
    let mut died = 0;
    for (lease, event_id, attempt, interrupted) in expired {
        let settled = from.on_failure.decide(attempt, interrupted, now);
        died += usize::from(settled == Settled::Dead);
        let record_of = AttemptRecord {
            lease,
            event_id,
            source: from.source.clone(),
            destination: from.destination.clone(),
            attempt,
            started_at: now,
            duration_ms: 0,
            settled,
            status: None,
            error: Some(
                if interrupted {
                    INTERRUPTED
                } else {
                    LEASE_EXPIRED
                }
                .to_owned(),
            ),
            counted: true,
        };
        record(conn, &record_of, now)?;
        tally.attempt(&record_of);
    }
    Ok(died)
}

/// Brings retries scheduled under a wall clock since set back within
/// reach: none is ever scheduled more than `max_delay_ms` ahead, so one
/// due later than `now + max_delay_ms` was scheduled before the clock went
/// backwards, and would otherwise wait out the whole jump. Runs with every
/// claim (the due index makes it a short range scan), so a jump while
/// hookbox was stopped is caught too.
pub fn clamp_retries(
    conn: &Connection,
    source: &str,
    destination: &str,
    now: i64,
    max_delay_ms: i64,
) -> anyhow::Result<usize> {
    let mut stmt = conn.prepare_cached(
        "UPDATE deliveries SET next_attempt_at = ?3 + ?4
         WHERE source = ?1 AND destination = ?2 AND state = 'pending'
           AND next_attempt_at > ?3 + ?4",
    )?;
    Ok(stmt.execute(params![source, destination, now, max_delay_ms])?)
}

/// After the wall clock went backwards: leases granted under the old
/// clock end no later than one granted now (`lease_until`), rather than
/// holding their deliveries for the length of the jump. Only run when the
/// dispatcher saw the clock go back.
pub fn clamp_leases(
    conn: &Connection,
    source: &str,
    destination: &str,
    lease_until: i64,
) -> anyhow::Result<usize> {
    let mut stmt = conn.prepare_cached(
        "UPDATE leases SET lease_until = ?3
         WHERE source = ?1 AND destination = ?2 AND lease_until > ?3",
    )?;
    Ok(stmt.execute(params![source, destination, lease_until])?)
}

/// How an attempt left its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Delivered,
    /// Due again at this time (unix ms).
    Retry(i64),
    Dead,
    /// Nothing sent (a transform had no output); final, and not an attempt.
    Skipped,
}

/// One attempt's result, as the `attempts` table keeps it.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub lease: Lease,
    pub event_id: i64,
    /// The event's source, whose counters the attempt counts in.
    pub source: String,
    pub destination: String,
    pub attempt: u32,
    pub started_at: i64,
    pub duration_ms: i64,
    pub settled: Settled,
    pub status: Option<u16>,
    pub error: Option<String>,
    /// `false` for a circuit breaker's probe: it is logged but not counted
    /// against `max_attempts` (a pause must not push deliveries to dead).
    pub counted: bool,
}

/// Records an attempt and, if its claim still holds the delivery, moves
/// the delivery on, drops the lease, and derives the event's state.
pub fn record(conn: &Connection, r: &AttemptRecord, now: i64) -> anyhow::Result<()> {
    let outcome = match r.settled {
        Settled::Delivered => "delivered",
        Settled::Retry(_) => "retry",
        Settled::Dead => "dead",
        Settled::Skipped => "skipped",
    };
    // A skip made no attempt: the delivery's state says it, not a row.
    if r.settled != Settled::Skipped {
        conn.prepare_cached(
        "INSERT INTO attempts (event_id, destination, attempt, started_at, duration_ms, outcome,
                               status_code, error)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
        .execute(params![
            r.event_id,
            r.destination,
            r.attempt,
            r.started_at,
            r.duration_ms,
            outcome,
            r.status,
            r.error
        ])
        .context("recording an attempt")?;
    }
    // Only the claim that ran the attempt settles the delivery: once its
    // lease was released, or the delivery claimed again, it is others'.
    let attempt: Option<i64> = conn
        .prepare_cached("DELETE FROM leases WHERE token = ?1 AND delivery = ?2 RETURNING attempt")?
        .query_row(params![r.lease.token, r.lease.delivery], |row| row.get(0))
        .optional()
        .context("dropping a lease")?;
    let Some(attempt) = attempt else {
        return Ok(());
    };
    let (state, next, delivered_at) = match r.settled {
        Settled::Delivered => (State::Delivered, None, Some(now)),
        Settled::Retry(at) => (State::Pending, Some(at), None),
        Settled::Dead => (State::Dead, None, None),
        Settled::Skipped => (State::Skipped, None, None),
    };
    let attempt = if r.settled == Settled::Skipped {
        attempt - 1
    } else {
        attempt
    };
    // `Some(keyed)` when it settled.
    let settled: Option<bool> = conn
        .prepare_cached(
            "UPDATE deliveries SET state = ?2, attempts = ?3, next_attempt_at = ?4,
                                   delivered_at = ?5, last_error = ?6
             WHERE id = ?1 AND state = 'pending'
             RETURNING order_key IS NOT NULL",
        )?
        .query_row(
            params![
                r.lease.delivery,
                state,
                attempt,
                next,
                delivered_at,
                r.error
            ],
            |row| row.get(0),
        )
        .optional()
        .context("settling a delivery")?;
    let Some(keyed) = settled else {
        return Ok(());
    };
    if state == State::Pending {
        return Ok(());
    }
    if keyed {
        // The next delivery of its key in the lane, if any, is now the
        // oldest. It is due from when its event arrived, as if never held,
        // so it does not queue behind everything that came after it.
        conn.prepare_cached(
            "UPDATE deliveries
             SET next_attempt_at = min((SELECT received_at FROM events WHERE id = deliveries.event_id), ?2)
             WHERE next_attempt_at IS NULL AND id = (
                 SELECT o.id FROM deliveries AS d JOIN deliveries AS o
                   ON o.source = d.source AND o.destination = d.destination
                  AND o.order_key = d.order_key
                 WHERE d.id = ?1 AND o.state = 'pending'
                 ORDER BY o.event_id LIMIT 1)",
        )?
        .execute(params![r.lease.delivery, now])
        .context("scheduling the next delivery of a key")?;
    }
    super::outcomes::derive_state(conn, r.event_id, now)
}

/// Makes every pending delivery of lane (`source`, `destination`)
/// scheduled later than `now` due at `now` (held ones stay held): the
/// backlog a paused destination kept, once a probe found it back.
pub fn make_due(
    conn: &Connection,
    source: &str,
    destination: &str,
    now: i64,
) -> anyhow::Result<usize> {
    conn.prepare_cached(
        "UPDATE deliveries SET next_attempt_at = ?3
         WHERE source = ?1 AND destination = ?2 AND state = 'pending' AND next_attempt_at > ?3",
    )?
    .execute(params![source, destination, now])
    .context("making a destination's backlog due")
}

/// Gives back leases that will not be used (shutdown). The interrupted
/// attempt was only counted in its lease, so it does not count against
/// `max_attempts`; the delivery was due when claimed, and still is.
pub fn release(conn: &Connection, leases: &[Lease]) -> anyhow::Result<()> {
    let mut stmt = conn.prepare_cached("DELETE FROM leases WHERE token = ?1 AND delivery = ?2")?;
    for l in leases {
        stmt.execute(params![l.token, l.delivery])
            .context("releasing a lease")?;
    }
    Ok(())
}

/// Marks every lease as cut off by a stop. Only one hookbox runs on a
/// database, so at start-up any lease left is from a process that died
/// mid-attempt: the first claim of its lane records the attempt
/// ([`INTERRUPTED`], counted, as the destination may have seen it) and
/// makes the delivery due again at once, rather than when its lease would
/// have run out. Answers how many were left.
pub fn interrupt_all(conn: &Connection) -> anyhow::Result<usize> {
    conn.execute("UPDATE leases SET lease_until = 0", [])
        .context("marking the leases the previous run left")
}

#[cfg(test)]
mod tests;
