//! Retention and purge: what leaves the database, and when.
//!
//! * A `delivered` event keeps its body for `retention.body_days` after
//!   `delivered_at`, and its row (so its key, which answers a provider's
//!   resend "duplicate") for `retention.key_days`; its attempts go with it
//!   (`ON DELETE CASCADE`).
//! * A `stored` event (a source without a destination: the user's inbox,
//!   read through the API) follows the same two windows, counted from
//!   `received_at`, since it is never delivered.
//! * `pending` and `dead` events are never touched by retention. Dead rows
//!   stay until replayed or purged (`hookbox purge --dead --older-than`).
//! * The catch-up log (`catchup_runs`, and with each run the redelivery
//!   requests it made) keeps finished runs for `retention.key_days`, but
//!   never less than [`LOG_FLOOR_DAYS`]: GitLab catch-up reads a week back,
//!   and GitHub's asks whether a GUID was already asked for in its 3 days.
//!   The newest run of each job, finished or not, stays whatever its age
//!   (stats show it); a run that never finished (its process died) is
//!   never pruned, as it may be the one running now; and
//!   what goes is added to `catchup_pruned`, so the metrics that count runs
//!   and requests never go back.
//! * The hourly counters behind the dashboard's charts
//!   (`super::counters`) keep [`super::counters::KEEP_DAYS`] days, whatever
//!   the other windows: they hold no key and no body.
//!
//! An event's words leave the search index with its row or its body, by
//! triggers on `events` (`migrations/0011_search.sql`), in the same
//! transaction, whichever of the paths below removes them.
//!
//! Retention runs in the server, in small batches: a read-only connection
//! walks the table in id order to find candidates (off the writer, so a
//! long scan never holds the write lock), and each batch of at most
//! [`BATCH`] ids goes to the writer as one [`PruneBatch`] ([`prune`]),
//! which re-checks every row by primary key (a row replayed meanwhile is
//! left alone) and commits with whatever ingest is queued. The keys of
//! deleted rows leave the recent-keys cache once the delete is durable, so
//! a resend after that is stored again as new.
//!
//! Purge runs from the CLI, through the writer it starts on its own
//! connection, in the same small batches ([`PurgeBatch`]). It cannot reach
//! a running server's recent-keys cache, so until that server restarts a resend of
//! a purged event may still be answered "duplicate" (docs/src/operating/retention.md says so).
//!
//! Finding candidates walks the table in id order (there is no index on
//! `delivered_at`); that read costs one pass over the table per run, off
//! the writer.

use std::sync::Arc;

use anyhow::Context;
use rusqlite::{Connection, Transaction, params};
use tokio_util::sync::CancellationToken;

use super::counters::Tally;
use super::outcomes;
use super::recent::RecentKeys;
use super::write::Write;
use super::{Store, StoreError, WriterHandle};

/// Rows per writer command (and per purge transaction).
pub const BATCH: usize = 500;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// The catch-up log is kept at least this long, whatever `key_days` says.
pub const LOG_FLOOR_DAYS: i64 = 7;

/// What a batch does to its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prune {
    /// Delete the rows (past `key_days`).
    Rows,
    /// Set `body = NULL` (past `body_days`).
    Bodies,
    /// Delete finished catch-up runs and their requests, counting them.
    CatchupRuns,
    /// Delete the hourly counters of hours before `before` (no ids: the
    /// table is small, and one statement takes them all).
    Counters,
}

/// Rows the writer is to prune, each re-checked against `before` (unix ms).
#[derive(Debug, Clone)]
pub struct PruneBatch {
    pub what: Prune,
    pub ids: Vec<i64>,
    pub before: i64,
}

/// What the writer did with a batch.
#[derive(Debug, Default)]
pub struct Pruned {
    pub rows: usize,
    /// `(source, delivery_id)` of each deleted row, to forget.
    pub keys: Vec<(String, String)>,
}

/// The two cut-off times (unix ms) of a retention run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoffs {
    pub body_before: i64,
    pub key_before: i64,
    /// Catch-up runs that started before this go.
    pub log_before: i64,
    /// Hourly counters of hours that started before this go.
    pub counters_before: i64,
}

impl Cutoffs {
    pub fn at(now_ms: i64, body_days: u32, key_days: u32) -> Cutoffs {
        let key_before = now_ms - i64::from(key_days) * DAY_MS;
        Cutoffs {
            body_before: now_ms - i64::from(body_days) * DAY_MS,
            key_before,
            log_before: key_before.min(now_ms - LOG_FLOOR_DAYS * DAY_MS),
            counters_before: now_ms - super::counters::KEEP_DAYS * DAY_MS,
        }
    }
}

/// A finished catch-up run that is not its job's last.
const RUN_EXPIRED: &str = "started_at < ?2 AND finished_at IS NOT NULL
    AND id NOT IN (SELECT max(id) FROM catchup_runs GROUP BY source, job)";

/// Delivered rows count from delivery, stored rows from arrival (the
/// state and delivery time of a row of `events` itself: a DELETE cannot
/// join its outcome).
fn expired() -> String {
    format!(
        "(CASE {} WHEN 'delivered' THEN {} < ?2 WHEN 'stored' THEN received_at < ?2 ELSE 0 END)",
        outcomes::EVENTS_STATE,
        outcomes::EVENTS_DELIVERED_AT
    )
}

/// Up to `limit` ids after `after_id` that `what` applies to, in id order.
pub fn candidates(
    conn: &Connection,
    what: Prune,
    before: i64,
    after_id: i64,
    limit: usize,
) -> anyhow::Result<Vec<i64>> {
    let sql = match what {
        Prune::Rows => {
            format!(
                "SELECT id FROM events WHERE id > ?1 AND {} ORDER BY id LIMIT ?3",
                expired()
            )
        }
        Prune::Bodies => format!(
            "SELECT id FROM events WHERE id > ?1 AND {} AND body IS NOT NULL ORDER BY id LIMIT ?3",
            expired()
        ),
        Prune::CatchupRuns => format!(
            "SELECT id FROM catchup_runs WHERE id > ?1 AND {RUN_EXPIRED} ORDER BY id LIMIT ?3"
        ),
        Prune::Counters => return Ok(Vec::new()),
    };
    conn.prepare_cached(&sql)?
        .query_map(params![after_id, before, limit as i64], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()
        .context("finding rows past retention")
}

/// Prunes `batch` through the writer, durably; returns how many rows
/// changed. Waits for room in the queue rather than fail: retention is
/// never in a hurry, and it yields to ingest by queueing behind it.
pub async fn prune(writer: &WriterHandle, batch: PruneBatch) -> Result<usize, StoreError> {
    let recent = writer.recent().clone();
    let pruned = writer.write(Forgetting { batch, recent }).await?;
    Ok(pruned.rows)
}

/// A batch, and the cache whose keys of deleted rows it forgets once the
/// delete is durable, in the same order as inserts remember theirs.
struct Forgetting {
    batch: PruneBatch,
    recent: Arc<RecentKeys>,
}

impl Write for Forgetting {
    type Output = Pruned;
    const WAITS_FOR_ROOM: bool = true;

    fn apply(&mut self, tx: &Transaction, _: &mut Tally) -> anyhow::Result<Pruned> {
        apply(tx, &self.batch)
    }

    fn answered(&self, pruned: &Pruned) {
        for (source, delivery_id) in &pruned.keys {
            self.recent.forget(source, delivery_id);
        }
    }
}

/// Applies a batch inside the writer's transaction, re-checking each row.
pub fn apply(conn: &Connection, batch: &PruneBatch) -> anyhow::Result<Pruned> {
    let mut pruned = Pruned::default();
    match batch.what {
        Prune::Rows => {
            let mut delete = conn.prepare_cached(&format!(
                "DELETE FROM events WHERE id = ?1 AND {} RETURNING source, delivery_id",
                expired()
            ))?;
            for id in &batch.ids {
                let mut rows = delete.query(params![id, batch.before])?;
                while let Some(row) = rows.next().context("deleting an expired event")? {
                    pruned.keys.push((row.get(0)?, row.get(1)?));
                }
            }
            pruned.rows = pruned.keys.len();
            super::search::removed(conn, pruned.rows)?;
        }
        Prune::Bodies => {
            let mut drop_body = conn.prepare_cached(&format!(
                "UPDATE events SET body = NULL WHERE id = ?1 AND body IS NOT NULL AND {}",
                expired()
            ))?;
            for id in &batch.ids {
                pruned.rows += drop_body
                    .execute(params![id, batch.before])
                    .context("dropping an expired body")?;
            }
            super::search::removed(conn, pruned.rows)?;
        }
        Prune::CatchupRuns => {
            let mut count_requests = conn.prepare_cached(&format!(
                "INSERT INTO catchup_pruned (kind, source, label, n)
                 SELECT 'redeliveries', source, outcome, count(*) FROM redelivery_requests
                 WHERE run_id = ?1 AND EXISTS (SELECT 1 FROM catchup_runs WHERE id = ?1 AND {RUN_EXPIRED})
                 GROUP BY source, outcome
                 ON CONFLICT (kind, source, label) DO UPDATE SET n = n + excluded.n"
            ))?;
            let mut count_run = conn.prepare_cached(&format!(
                "INSERT INTO catchup_pruned (kind, source, label, n)
                 SELECT 'runs', source, job, 1 FROM catchup_runs WHERE id = ?1 AND {RUN_EXPIRED}
                 ON CONFLICT (kind, source, label) DO UPDATE SET n = n + 1"
            ))?;
            // Its requests go with it (ON DELETE CASCADE).
            let mut delete = conn.prepare_cached("DELETE FROM catchup_runs WHERE id = ?1")?;
            for id in &batch.ids {
                count_requests
                    .execute(params![id, batch.before])
                    .context("counting a pruned run's redelivery requests")?;
                if count_run
                    .execute(params![id, batch.before])
                    .context("counting a pruned catch-up run")?
                    == 1
                {
                    pruned.rows += delete.execute([id]).context("deleting a catch-up run")?;
                }
            }
        }
        Prune::Counters => pruned.rows = super::counters::trim(conn, batch.before)?,
    }
    Ok(pruned)
}

/// What one retention run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetentionReport {
    pub rows_deleted: usize,
    pub bodies_dropped: usize,
    pub catchup_runs_deleted: usize,
    pub counter_hours_deleted: usize,
}

/// One retention run: deletes expired rows, then drops expired bodies,
/// batch by batch through the writer. Stops between batches when
/// `shutdown` is cancelled.
pub async fn run_once(
    store: &Store,
    writer: &WriterHandle,
    cutoffs: Cutoffs,
    shutdown: &CancellationToken,
) -> anyhow::Result<RetentionReport> {
    let mut report = RetentionReport::default();
    for (what, before) in [
        (Prune::Rows, cutoffs.key_before),
        (Prune::Bodies, cutoffs.body_before),
        (Prune::CatchupRuns, cutoffs.log_before),
    ] {
        let mut after = 0;
        while !shutdown.is_cancelled() {
            let ids = store
                .read(move |c| candidates(c, what, before, after, BATCH))
                .await?;
            let Some(&last) = ids.last() else { break };
            after = last;
            let n = prune(writer, PruneBatch { what, ids, before })
                .await
                .context("pruning a batch")?;
            match what {
                Prune::Rows => report.rows_deleted += n,
                Prune::Bodies => report.bodies_dropped += n,
                Prune::CatchupRuns => report.catchup_runs_deleted += n,
                Prune::Counters => report.counter_hours_deleted += n,
            }
        }
    }
    if !shutdown.is_cancelled() {
        let trim = PruneBatch {
            what: Prune::Counters,
            ids: Vec::new(),
            before: cutoffs.counters_before,
        };
        report.counter_hours_deleted += prune(writer, trim)
            .await
            .context("trimming the hourly counters")?;
    }
    Ok(report)
}

/// Which `dead` events (of `source`, if given) had their last attempt (or
/// arrival, without one) before `before`.
fn dead_since() -> String {
    format!(
        "{} = 'dead' AND (?2 IS NULL OR source = ?2)
         AND coalesce((SELECT max(started_at) FROM attempts WHERE event_id = events.id),
                      received_at) < ?1",
        outcomes::EVENTS_STATE
    )
}

/// Deletes `dead` events (of `source`, if given) whose last attempt (or
/// arrival, without one) is before `before`; returns how many. For the
/// CLI: batches of at most [`BATCH`] rows found on a read connection, so
/// the scan never holds a writer back, each deleted by a [`PurgeBatch`]
/// through `writer`, committed with whatever else is queued.
pub async fn purge_dead(
    store: &Store,
    writer: &WriterHandle,
    before: i64,
    source: Option<String>,
) -> anyhow::Result<usize> {
    let mut purged = 0;
    let mut after = 0;
    loop {
        let from = source.clone();
        let ids = store
            .read(move |c| dead_candidates(c, before, from.as_deref(), after))
            .await?;
        let Some(&last) = ids.last() else { break };
        after = last;
        let batch = PurgeBatch {
            ids,
            before,
            source: source.clone(),
        };
        purged += writer.write(batch).await.context("purging a batch")?;
    }
    Ok(purged)
}

/// The next [`BATCH`] dead events past id `after` that a purge takes.
fn dead_candidates(
    conn: &Connection,
    before: i64,
    source: Option<&str>,
    after: i64,
) -> anyhow::Result<Vec<i64>> {
    conn.prepare_cached(&format!(
        "SELECT id FROM events WHERE id > ?3 AND {} ORDER BY id LIMIT ?4",
        dead_since()
    ))?
    .query_map(params![before, source, after, BATCH as i64], |r| r.get(0))?
    .collect::<rusqlite::Result<Vec<i64>>>()
    .context("finding dead events to purge")
}

/// Deletes those of `ids` that are still dead and idle since before
/// `before` (a row replayed meanwhile stays); answers how many went.
pub struct PurgeBatch {
    pub ids: Vec<i64>,
    pub before: i64,
    pub source: Option<String>,
}

impl Write for PurgeBatch {
    type Output = usize;

    fn apply(&mut self, tx: &Transaction, _: &mut Tally) -> anyhow::Result<usize> {
        let mut delete = tx.prepare_cached(&format!(
            "DELETE FROM events WHERE id = ?3 AND {}",
            dead_since()
        ))?;
        let mut purged = 0;
        for id in &self.ids {
            purged += delete
                .execute(params![self.before, self.source, id])
                .context("purging a dead event")?;
        }
        super::search::removed(tx, purged)?;
        Ok(purged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::db_with_foreign_keys as db;

    /// Adds an event; `at` is both its arrival and (when delivered) delivery.
    fn add(conn: &Connection, key: &str, state: &str, at: i64) -> i64 {
        conn.execute(
            "INSERT INTO events (source, delivery_id, received_at, body, state, delivered_at)
             VALUES ('s', ?1, ?2, x'7b7d', ?3, CASE ?3 WHEN 'delivered' THEN ?2 END)",
            params![key, at, state],
        )
        .unwrap();
        let id = conn.last_insert_rowid();
        conn.execute(
            "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome)
             VALUES (?1, 1, ?2, 1, 'x')",
            params![id, at],
        )
        .unwrap();
        id
    }

    fn prune_all(conn: &Connection, what: Prune, before: i64) -> Pruned {
        let ids = candidates(conn, what, before, 0, 100).unwrap();
        apply(
            conn,
            &PruneBatch {
                what,
                ids: ids.clone(),
                before,
            },
        )
        .unwrap()
    }

    /// The ids of the events left, in order.
    fn event_ids(conn: &Connection) -> Vec<i64> {
        conn.prepare("SELECT id FROM events ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn body(conn: &Connection, id: i64) -> Option<Vec<u8>> {
        conn.query_row("SELECT body FROM events WHERE id = ?1", [id], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn only_delivered_and_stored_rows_expire_and_their_attempts_go_too() {
        let conn = db();
        let old_delivered = add(&conn, "d-old", "delivered", 100);
        let old_stored = add(&conn, "s-old", "stored", 100);
        let old_dead = add(&conn, "x-old", "dead", 100);
        let old_pending = add(&conn, "p-old", "pending", 100);
        let new_delivered = add(&conn, "d-new", "delivered", 900);
        let pruned = prune_all(&conn, Prune::Rows, 500);
        assert_eq!(pruned.rows, 2);
        assert_eq!(
            pruned.keys,
            [("s".into(), "d-old".into()), ("s".into(), "s-old".into())]
        );
        let left = event_ids(&conn);
        assert_eq!(left, [old_dead, old_pending, new_delivered]);
        let orphans: i64 = conn
            .query_row(
                "SELECT count(*) FROM attempts WHERE event_id IN (?1, ?2)",
                [old_delivered, old_stored],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(orphans, 0);
    }

    #[test]
    fn bodies_go_first_and_a_row_changed_since_it_was_found_is_left_alone() {
        let conn = db();
        let delivered = add(&conn, "d", "delivered", 100);
        let replayed = add(&conn, "r", "delivered", 100);
        let dead = add(&conn, "x", "dead", 100);
        let ids = candidates(&conn, Prune::Bodies, 500, 0, 100).unwrap();
        assert_eq!(ids, [delivered, replayed]);
        conn.execute(
            "UPDATE events SET state = 'pending', delivered_at = NULL WHERE id = ?1",
            [replayed],
        )
        .unwrap();
        let pruned = apply(
            &conn,
            &PruneBatch {
                what: Prune::Bodies,
                ids,
                before: 500,
            },
        )
        .unwrap();
        assert_eq!(pruned.rows, 1);
        assert!(pruned.keys.is_empty());
        assert_eq!(body(&conn, delivered), None);
        assert!(body(&conn, replayed).is_some());
        assert!(body(&conn, dead).is_some());
        // Nothing is left to do.
        assert!(
            candidates(&conn, Prune::Bodies, 500, 0, 100)
                .unwrap()
                .is_empty()
        );
    }

    /// Sets event `id`'s outcome row, as dispatch or the upgrade to
    /// version 21 leaves it.
    fn outcome(conn: &Connection, id: i64, state: &str, delivered_at: Option<i64>) {
        conn.execute(
            "INSERT INTO event_outcomes (event_id, source, state, delivered_at)
             VALUES (?1, 's', ?2, ?3)",
            params![id, state, delivered_at],
        )
        .unwrap();
    }

    #[test]
    fn an_event_s_outcome_decides_over_the_state_its_row_still_holds() {
        let mut conn = db();
        let delivered = add(&conn, "delivered", "pending", 100);
        outcome(&conn, delivered, "delivered", Some(100));
        let recent = add(&conn, "recent", "pending", 100);
        outcome(&conn, recent, "delivered", Some(900));
        // Delivered before version 21, replayed since: pending again.
        let replayed = add(&conn, "replayed", "delivered", 100);
        outcome(&conn, replayed, "pending", None);
        let dead = add(&conn, "dead", "pending", 100);
        outcome(&conn, dead, "dead", None);
        let revived = add(&conn, "revived", "dead", 100);
        outcome(&conn, revived, "pending", None);

        let pruned = prune_all(&conn, Prune::Rows, 500);
        assert_eq!(pruned.keys, [("s".into(), "delivered".into())]);
        assert_eq!(purge_dead(&mut conn, 500, None), 1);
        let left = event_ids(&conn);
        assert_eq!(left, [recent, replayed, revived]);
        let outcomes: i64 = conn
            .query_row("SELECT count(*) FROM event_outcomes", [], |r| r.get(0))
            .unwrap();
        assert_eq!(outcomes, 3, "the deleted events' outcomes went with them");
    }

    #[test]
    fn candidates_page_through_the_table_in_id_order() {
        let conn = db();
        let ids: Vec<i64> = (0..7)
            .map(|i| add(&conn, &i.to_string(), "delivered", 1))
            .collect();
        let first = candidates(&conn, Prune::Rows, 10, 0, 3).unwrap();
        let second = candidates(&conn, Prune::Rows, 10, first[2], 3).unwrap();
        let third = candidates(&conn, Prune::Rows, 10, second[2], 3).unwrap();
        assert_eq!([first, second, third].concat(), ids);
    }

    /// [`super::purge_dead`]'s batches, run here on one connection.
    fn purge_dead(conn: &mut Connection, before: i64, source: Option<&str>) -> usize {
        let mut purged = 0;
        let mut after = 0;
        loop {
            let ids = dead_candidates(conn, before, source, after).unwrap();
            let Some(&last) = ids.last() else { break };
            after = last;
            let mut batch = PurgeBatch {
                ids,
                before,
                source: source.map(str::to_owned),
            };
            let tx = conn.transaction().unwrap();
            purged += batch.apply(&tx, &mut Tally::default()).unwrap();
            tx.commit().unwrap();
        }
        purged
    }

    #[test]
    fn purge_takes_only_dead_rows_idle_long_enough_of_the_asked_source() {
        let mut conn = db();
        let old = add(&conn, "old", "dead", 100);
        add(&conn, "recent", "dead", 900);
        add(&conn, "delivered", "delivered", 100);
        // Received long ago, but its last attempt is recent (a replay).
        let retried = add(&conn, "retried", "dead", 100);
        conn.execute(
            "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome)
             VALUES (?1, 2, 900, 1, 'dead')",
            [retried],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO events (source, delivery_id, received_at, state) VALUES ('other', 'o', 1, 'dead')",
            [],
        )
        .unwrap();
        assert_eq!(purge_dead(&mut conn, 500, Some("s")), 1);
        let gone: i64 = conn
            .query_row("SELECT count(*) FROM events WHERE id = ?1", [old], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(gone, 0);
        assert_eq!(purge_dead(&mut conn, 500, None), 1);
        assert_eq!(purge_dead(&mut conn, 500, None), 0);
    }

    /// A run of `job` on source `g`, with one request per outcome given.
    fn run(conn: &Connection, job: &str, started: i64, finished: bool, outcomes: &[&str]) -> i64 {
        conn.execute(
            "INSERT INTO catchup_runs (source, job, started_at, finished_at)
             VALUES ('g', ?1, ?2, CASE WHEN ?3 THEN ?2 END)",
            params![job, started, finished],
        )
        .unwrap();
        let id = conn.last_insert_rowid();
        for outcome in outcomes {
            conn.execute(
                "INSERT INTO redelivery_requests (run_id, source, guid, attempt_id, requested_at, outcome)
                 VALUES (?1, 'g', 'guid', 1, ?2, ?3)",
                params![id, started, outcome],
            )
            .unwrap();
        }
        id
    }

    #[test]
    fn old_finished_catchup_runs_go_with_their_requests_and_the_counts_stay() {
        let conn = db();
        let old = run(&conn, "github_redelivery", 100, true, &["asked", "failed"]);
        let unfinished = run(&conn, "github_redelivery", 110, false, &[]);
        let recent = run(&conn, "github_redelivery", 900, true, &["asked"]);
        let other_old = run(&conn, "stripe_backfill", 120, true, &[]);
        let last_of_its_job = run(&conn, "stripe_backfill", 130, true, &["asked"]);
        for run_id in [old, recent] {
            let entry = crate::store::ledger::Entry {
                run_id,
                source: "g".into(),
                job: "github_redelivery".into(),
                ..Default::default()
            };
            crate::store::ledger::insert(&conn, &entry).unwrap();
        }
        let before = crate::store::queries::metrics_snapshot(&conn).unwrap();

        let pruned = prune_all(&conn, Prune::CatchupRuns, 500);
        assert_eq!(pruned.rows, 2);
        let left: Vec<i64> = conn
            .prepare("SELECT id FROM catchup_runs ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(left, [unfinished, recent, last_of_its_job]);
        assert!(!left.contains(&old) && !left.contains(&other_old));
        let requests: i64 = conn
            .query_row("SELECT count(*) FROM redelivery_requests", [], |r| r.get(0))
            .unwrap();
        assert_eq!(requests, 2, "the old run's requests went with it");
        let ledger: i64 = conn
            .query_row("SELECT count(*) FROM catchup_ledger", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ledger, 1, "and its line of the ledger");

        let after = crate::store::queries::metrics_snapshot(&conn).unwrap();
        let sorted = |mut v: Vec<(String, String, i64)>| {
            v.sort();
            v
        };
        assert_eq!(sorted(after.catchup_runs), sorted(before.catchup_runs));
        assert_eq!(sorted(after.redeliveries), sorted(before.redeliveries));
        assert!(prune_all(&conn, Prune::CatchupRuns, 500).keys.is_empty());
        assert_eq!(prune_all(&conn, Prune::CatchupRuns, 500).rows, 0);
    }

    #[test]
    fn the_catchup_log_outlives_a_short_key_window() {
        let now = 100 * DAY_MS;
        let c = Cutoffs::at(now, 1, 1);
        assert_eq!(c.key_before, now - DAY_MS);
        assert_eq!(c.log_before, now - LOG_FLOOR_DAYS * DAY_MS);
        assert_eq!(Cutoffs::at(now, 7, 30).log_before, now - 30 * DAY_MS);
    }

    #[test]
    fn cutoffs_count_whole_days_back() {
        let c = Cutoffs::at(10 * DAY_MS, 7, 30);
        assert_eq!(c.body_before, 3 * DAY_MS);
        assert_eq!(c.key_before, -20 * DAY_MS);
    }
}
