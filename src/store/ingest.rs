//! The SQL of ingest: storing an event once under its key, and the
//! writes that run it ([`store`]) and prove the writer commits ([`Ping`]).

use std::sync::Arc;

use anyhow::Context;
use rusqlite::{Transaction, params};

use super::counters::{Count, Tally};
use super::error::StoreError;
use super::models::{Inserted, NewEvent};
use super::recent::RecentKeys;
use super::write::Write;
use super::writer::{POISONED, WriterHandle};

/// Stores an event, answering once it is durable (or a known duplicate).
pub async fn store(writer: &WriterHandle, event: NewEvent) -> Result<Inserted, StoreError> {
    // A remembered key proves nothing once the store is poisoned (its
    // file may be gone).
    if writer.poisoned() {
        return Err(StoreError::Unavailable(POISONED.into()));
    }
    let recent = writer.recent();
    if let Some(id) = recent.get(&event.source, &event.delivery_id) {
        return Ok(Inserted::Duplicate(id));
    }
    let recent = recent.clone();
    writer.write(Insert { event, recent }).await
}

/// Stores an event; once durable its key is remembered, so a resend is
/// answered without the writer.
pub(super) struct Insert {
    pub(super) event: NewEvent,
    pub(super) recent: Arc<RecentKeys>,
}

impl Write for Insert {
    type Output = Inserted;

    fn apply(&mut self, tx: &Transaction, tally: &mut Tally) -> anyhow::Result<Inserted> {
        let inserted = insert(tx, &self.event)?;
        if let Inserted::New(_) = inserted {
            tally.add(&self.event.source, self.event.received_at, Count::Received);
        }
        Ok(inserted)
    }

    fn answered(&self, inserted: &Inserted) {
        let (Inserted::New(id) | Inserted::Duplicate(id)) = *inserted;
        self.recent
            .insert(&self.event.source, &self.event.delivery_id, id);
    }
}

/// Proves the writer thread is alive and the database takes a commit.
pub struct Ping;

impl Write for Ping {
    type Output = ();

    fn apply(&mut self, tx: &Transaction, _: &mut Tally) -> anyhow::Result<()> {
        heartbeat(tx)
    }
}

/// Inserts unless `(source, delivery_id)` is already there, with one
/// delivery per destination that took it, in the same transaction; either
/// way returns the row id. A duplicate inside the same group finds the row
/// the earlier command of the group inserted.
pub fn insert(tx: &Transaction, e: &NewEvent) -> anyhow::Result<Inserted> {
    // `INSERT OR IGNORE` and `changes()` rather than `RETURNING`, which
    // makes SQLite materialise a result set for every row.
    let changed = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO events (source, delivery_id, event_type, order_key, received_at,
                                           origin, content_type, headers, body, state)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            e.source,
            e.delivery_id,
            e.event_type,
            e.order_key,
            e.received_at,
            e.origin.as_str(),
            e.content_type,
            e.headers,
            &e.body[..],
            e.state().as_str(),
        ])
        .context("inserting an event")?;
    if changed == 1 {
        let id = tx.last_insert_rowid();
        add_deliveries(tx, id, e)?;
        return Ok(Inserted::New(id));
    }
    let id = tx
        .prepare_cached("SELECT id FROM events WHERE source = ?1 AND delivery_id = ?2")?
        .query_row(params![e.source, e.delivery_id], |r| r.get(0))
        .context("finding the stored duplicate")?;
    Ok(Inserted::Duplicate(id))
}

/// One pending delivery of event `id` per destination that took it. One
/// behind a pending delivery of its key in the same lane is held, not
/// scheduled (see `super::deliveries`): it becomes due when it is its key's
/// oldest there.
fn add_deliveries(tx: &Transaction, id: i64, e: &NewEvent) -> anyhow::Result<()> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO deliveries (event_id, source, destination, order_key, state, next_attempt_at)
         VALUES (?1, ?2, ?3, ?4, 'pending',
                 CASE WHEN ?4 IS NULL OR NOT EXISTS (
                          SELECT 1 FROM deliveries AS o
                          WHERE o.state = 'pending' AND o.source = ?2 AND o.destination = ?3
                            AND o.order_key = ?4)
                      THEN ?5 END)",
    )?;
    for destination in &e.destinations {
        insert
            .execute(params![
                id,
                e.source,
                &**destination,
                e.order_key,
                e.received_at
            ])
            .context("adding a delivery")?;
    }
    Ok(())
}

/// Writes the heartbeat row: the smallest write that proves a commit works.
fn heartbeat(tx: &Transaction) -> anyhow::Result<()> {
    tx.prepare_cached(
        "INSERT INTO meta (key, value) VALUES ('heartbeat', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute([crate::support::clock::now_ms().to_string()])
    .context("writing the heartbeat")?;
    Ok(())
}
