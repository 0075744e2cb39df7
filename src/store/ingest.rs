//! The SQL of ingest: storing an event once under its key.

use anyhow::Context;
use rusqlite::{Transaction, params};

use super::models::{Inserted, NewEvent};

/// Inserts unless `(source, delivery_id)` is already there; either way
/// returns the row id. A duplicate inside the same group finds the row the
/// earlier command of the group inserted.
pub fn insert(tx: &Transaction, e: &NewEvent) -> anyhow::Result<Inserted> {
    // `INSERT OR IGNORE` and `changes()` rather than `RETURNING`, which
    // makes SQLite materialise a result set for every row. A pending event
    // behind another of its key is held, not scheduled (see
    // `super::dispatch`): it becomes due when it is its key's oldest.
    let changed = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO events (source, delivery_id, event_type, order_key, received_at,
                                           origin, content_type, headers, body, state, next_attempt_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,
                     CASE WHEN ?10 = 'pending' AND (?4 IS NULL OR NOT EXISTS (
                              SELECT 1 FROM events AS o
                              WHERE o.state = 'pending' AND o.source = ?1 AND o.order_key = ?4))
                          THEN ?5 END)",
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
            e.state.as_str(),
        ])
        .context("inserting an event")?;
    if changed == 1 {
        return Ok(Inserted::New(tx.last_insert_rowid()));
    }
    let id = tx
        .prepare_cached("SELECT id FROM events WHERE source = ?1 AND delivery_id = ?2")?
        .query_row(params![e.source, e.delivery_id], |r| r.get(0))
        .context("finding the stored duplicate")?;
    Ok(Inserted::Duplicate(id))
}

/// Writes the heartbeat row: the smallest write that proves a commit works.
pub fn heartbeat(tx: &Transaction) -> anyhow::Result<()> {
    tx.prepare_cached(
        "INSERT INTO meta (key, value) VALUES ('heartbeat', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute([crate::clock::now_ms().to_string()])
    .context("writing the heartbeat")?;
    Ok(())
}
