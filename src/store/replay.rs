//! The SQL of replay: putting deliveries back to `pending`, and giving a
//! destination the events it never had.
//!
//! Replay never creates an event row. It resets the matching `dead`,
//! `delivered` and `skipped` deliveries (attempts to 0, due now: a
//! skipped one runs the transform again, which may have been fixed), and, when asked to
//! [`ReplayFilter::create`], inserts a delivery at the named destination
//! for each matching event that has none there: how a destination added
//! to the config receives old events. Only events that still have their
//! body move: one that retention emptied can no longer be delivered as it
//! was received. A [`Replay`] runs in the writer, the server's (the admin
//! API) or the CLI's own (`hookbox replay`), in one transaction either way.

use std::collections::BTreeSet;

use anyhow::Context;
use rusqlite::{Connection, Transaction, params};

use super::counters::Tally;
use super::models::State;
use super::write::Write;
use crate::config::route::{Body, Filter};

/// What replay should pick up.
#[derive(Debug, Clone, Default)]
pub struct ReplayFilter {
    pub id: Option<i64>,
    pub source: Option<String>,
    /// Only this destination's deliveries (of `source`, when set).
    pub destination: Option<String>,
    /// `dead`, `delivered` or `skipped`: the delivery's state; `None`
    /// means any of them.
    pub state: Option<State>,
    /// Only events received at or after this (unix ms).
    pub since: Option<i64>,
    /// Only events received before this (unix ms).
    pub until: Option<i64>,
    /// With `source` and `destination` set: also create a delivery there
    /// for each matching event that has none and that this filter takes
    /// (the destination's own, or the empty filter for "every event").
    pub create: Option<Filter>,
}

/// Every filter in one transaction (replaying an event at each of its
/// destinations is one change); answers how many deliveries were put back
/// to pending or created, once durable.
pub struct Replay {
    pub filters: Vec<ReplayFilter>,
    pub now: i64,
}

impl Write for Replay {
    type Output = usize;

    fn apply(&mut self, tx: &Transaction, _: &mut Tally) -> anyhow::Result<usize> {
        let mut n = 0;
        for filter in &self.filters {
            n += replay(tx, filter, self.now)?;
        }
        Ok(n)
    }
}

/// Replays what `filter` picks at time `now`; returns how many deliveries
/// were put back to pending or created.
pub fn replay(conn: &Connection, filter: &ReplayFilter, now: i64) -> anyhow::Result<usize> {
    let mut touched = Touched::default();
    reset(conn, filter, now, &mut touched)?;
    if let (Some(create), Some(source), Some(destination)) =
        (&filter.create, &filter.source, &filter.destination)
    {
        add_missing(conn, filter, create, source, destination, now, &mut touched)?;
    }
    // A replayed delivery may now be behind an older one of its key, or
    // ahead of the one that was its key's oldest: hold what is behind. Per
    // lane, over scheduled deliveries only (held ones have no time).
    let mut hold = conn.prepare_cached(
        "UPDATE deliveries SET next_attempt_at = NULL
         WHERE state = 'pending' AND source = ?1 AND destination = ?2
           AND next_attempt_at IS NOT NULL AND attempts = 0 AND order_key IS NOT NULL
           AND EXISTS (
               SELECT 1 FROM deliveries AS o
               WHERE o.state = 'pending' AND o.source = deliveries.source
                 AND o.destination = deliveries.destination
                 AND o.order_key = deliveries.order_key AND o.event_id < deliveries.event_id)",
    )?;
    for (source, destination) in &touched.keyed_lanes {
        hold.execute(params![source, destination])
            .context("holding replayed deliveries behind their key")?;
    }
    for id in &touched.events {
        super::outcomes::derive_state(conn, *id, now)?;
    }
    Ok(touched.deliveries)
}

/// What a replay changed, for the fix-ups after it.
#[derive(Default)]
struct Touched {
    deliveries: usize,
    events: BTreeSet<i64>,
    /// Lanes that got a keyed delivery back.
    keyed_lanes: BTreeSet<(String, String)>,
}

/// Puts matching dead, delivered and skipped deliveries back to pending,
/// due now.
fn reset(
    conn: &Connection,
    filter: &ReplayFilter,
    now: i64,
    touched: &mut Touched,
) -> anyhow::Result<()> {
    let mut update = conn.prepare_cached(
        "UPDATE deliveries SET state = 'pending', attempts = 0, next_attempt_at = ?1,
                               last_error = NULL, delivered_at = NULL
         WHERE state IN ('dead', 'delivered', 'skipped')
           AND (?2 IS NULL OR source = ?2)
           AND (?3 IS NULL OR destination = ?3)
           AND (?4 IS NULL OR state = ?4)
           AND event_id IN (
               SELECT id FROM events
               WHERE body IS NOT NULL
                 AND (?5 IS NULL OR id = ?5)
                 AND (?2 IS NULL OR source = ?2)
                 AND (?6 IS NULL OR received_at >= ?6)
                 AND (?7 IS NULL OR received_at < ?7))
         RETURNING event_id, source, destination, order_key IS NOT NULL",
    )?;
    let mut rows = update
        .query(params![
            now,
            filter.source,
            filter.destination,
            filter.state,
            filter.id,
            filter.since,
            filter.until
        ])
        .context("replaying deliveries")?;
    while let Some(row) = rows.next().context("replaying deliveries")? {
        touched.deliveries += 1;
        touched.events.insert(row.get(0)?);
        if row.get::<_, bool>(3)? {
            touched.keyed_lanes.insert((row.get(1)?, row.get(2)?));
        }
    }
    Ok(())
}

/// Creates a pending delivery at `destination` for each event of `source`
/// matching `filter` (and `create`) that has none there.
fn add_missing(
    conn: &Connection,
    filter: &ReplayFilter,
    create: &Filter,
    source: &str,
    destination: &str,
    now: i64,
    touched: &mut Touched,
) -> anyhow::Result<()> {
    // Events that have a delivery there were handled by `reset`, or are
    // pending there already.
    let mut select = conn.prepare_cached(
        "SELECT e.id, e.event_type, e.order_key, e.body FROM events AS e
         WHERE e.source = ?1 AND e.body IS NOT NULL
           AND (?3 IS NULL OR e.id = ?3)
           AND (?4 IS NULL OR e.received_at >= ?4)
           AND (?5 IS NULL OR e.received_at < ?5)
           AND NOT EXISTS (
               SELECT 1 FROM deliveries AS d WHERE d.event_id = e.id AND d.destination = ?2)
         ORDER BY e.id",
    )?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO deliveries (event_id, source, destination, order_key, state, next_attempt_at)
         VALUES (?1, ?2, ?3, ?4, 'pending', ?5)",
    )?;
    let mut rows = select
        .query(params![
            source,
            destination,
            filter.id,
            filter.since,
            filter.until
        ])
        .context("finding events to give a destination")?;
    let needs_json = create.reads_body();
    while let Some(row) = rows
        .next()
        .context("finding events to give a destination")?
    {
        let id: i64 = row.get(0)?;
        let event_type: Option<String> = row.get(1)?;
        let order_key: Option<String> = row.get(2)?;
        let body = row
            .get_ref(3)?
            .as_blob()
            .context("reading an event's body")?;
        if !create.matches(event_type.as_deref(), &Body::new(body, needs_json)) {
            continue;
        }
        insert
            .execute(params![id, source, destination, order_key, now])
            .context("creating a delivery")?;
        touched.deliveries += 1;
        touched.events.insert(id);
        if order_key.is_some() {
            touched
                .keyed_lanes
                .insert((source.to_owned(), destination.to_owned()));
        }
    }
    Ok(())
}
