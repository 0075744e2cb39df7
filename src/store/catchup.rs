//! The SQL of the catch-up jobs: job locks, runs, redelivery requests, the
//! "last successful run" mark, and the inbox look-ups a run needs.
//!
//! Plain functions over a `Connection`: the writes are [`Op`]s, run by the
//! writer (the server's, or the one `hookbox catch-up` starts on its own
//! connection), and the reads run on the read pool. `crate::catchup` decides what to do; this module only
//! knows the tables.

use std::collections::{HashMap, HashSet};

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::counters::Tally;
use super::write::Write;

/// A catch-up write, so the server can send it to the writer.
#[derive(Debug, Clone)]
pub enum Op {
    /// Takes or renews `name` for `holder` until `expires_at`: succeeds when
    /// the lock is free, expired, or already `holder`'s.
    Lock {
        name: String,
        holder: String,
        now: i64,
        expires_at: i64,
    },
    Unlock {
        name: String,
        holder: String,
    },
    StartRun {
        source: String,
        job: String,
        dry_run: bool,
        started_at: i64,
    },
    FinishRun {
        run_id: i64,
        counts: RunCounts,
        finished_at: i64,
    },
    Request(RequestRecord),
    /// The run that started at `at` read its whole window.
    MarkSuccess {
        source: String,
        job: String,
        at: i64,
    },
    /// What a finished pass saw (`super::ledger`).
    Ledger(Box<super::ledger::Entry>),
}

/// What an [`Op`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    Locked(bool),
    RunId(i64),
    Ok,
}

/// The totals a run ends with (`catchup_runs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub pages: u32,
    pub seen: u32,
    pub asked: u32,
    pub failed: u32,
    pub complete: bool,
    pub error: Option<String>,
}

/// One redelivery request and what GitHub answered.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub run_id: i64,
    pub source: String,
    pub guid: String,
    pub attempt_id: i64,
    pub requested_at: i64,
    pub status_code: Option<u16>,
    /// `asked` | `permanent` | `failed`
    pub outcome: &'static str,
    pub error: Option<String>,
}

/// A catch-up job is in no hurry: its writes wait for room in the queue,
/// behind ingest.
impl Write for Op {
    type Output = Done;
    const WAITS_FOR_ROOM: bool = true;

    fn apply(&mut self, tx: &Transaction, _: &mut Tally) -> anyhow::Result<Done> {
        apply(tx, self)
    }
}

/// Applies one catch-up write.
pub fn apply(conn: &Connection, op: &Op) -> anyhow::Result<Done> {
    Ok(match op {
        Op::Lock {
            name,
            holder,
            now,
            expires_at,
        } => {
            let changed = conn
                .prepare_cached(
                    "INSERT INTO job_locks (name, holder, expires_at) VALUES (?1, ?2, ?3)
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,
                                                      expires_at = excluded.expires_at
                     WHERE job_locks.expires_at <= ?4 OR job_locks.holder = excluded.holder",
                )?
                .execute(params![name, holder, expires_at, now])
                .context("taking a job lock")?;
            Done::Locked(changed == 1)
        }
        Op::Unlock { name, holder } => {
            conn.prepare_cached("DELETE FROM job_locks WHERE name = ?1 AND holder = ?2")?
                .execute(params![name, holder])
                .context("releasing a job lock")?;
            Done::Ok
        }
        Op::StartRun {
            source,
            job,
            dry_run,
            started_at,
        } => {
            conn.prepare_cached(
                "INSERT INTO catchup_runs (source, job, dry_run, started_at) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![source, job, dry_run, started_at])
            .context("recording the start of a catch-up run")?;
            Done::RunId(conn.last_insert_rowid())
        }
        Op::FinishRun {
            run_id,
            counts,
            finished_at,
        } => {
            conn.prepare_cached(
                "UPDATE catchup_runs SET finished_at = ?2, pages = ?3, seen = ?4, asked = ?5,
                        failed = ?6, complete = ?7, error = ?8
                 WHERE id = ?1",
            )?
            .execute(params![
                run_id,
                finished_at,
                counts.pages,
                counts.seen,
                counts.asked,
                counts.failed,
                counts.complete,
                counts.error
            ])
            .context("recording the end of a catch-up run")?;
            Done::Ok
        }
        Op::Request(r) => {
            conn.prepare_cached(
                "INSERT INTO redelivery_requests (run_id, source, guid, attempt_id, requested_at,
                                                  status_code, outcome, error)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                r.run_id,
                r.source,
                r.guid,
                r.attempt_id,
                r.requested_at,
                r.status_code,
                r.outcome,
                r.error
            ])
            .context("recording a redelivery request")?;
            Done::Ok
        }
        Op::MarkSuccess { source, job, at } => {
            conn.prepare_cached(
                "INSERT INTO catchup_state (source, job, last_success_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (source, job) DO UPDATE
                 SET last_success_at = max(last_success_at, excluded.last_success_at)",
            )?
            .execute(params![source, job, at])
            .context("advancing the catch-up mark")?;
            Done::Ok
        }
        Op::Ledger(entry) => {
            super::ledger::insert(conn, entry)?;
            Done::Ok
        }
    })
}

/// Who holds the lock `name` now, if anyone (expired or not).
pub fn lock_holder(conn: &Connection, name: &str) -> anyhow::Result<Option<String>> {
    conn.prepare_cached("SELECT holder FROM job_locks WHERE name = ?1")?
        .query_row(params![name], |r| r.get(0))
        .optional()
        .context("reading a job lock")
}

/// When the last run that read its whole window started (unix ms).
pub fn last_success(conn: &Connection, source: &str, job: &str) -> anyhow::Result<Option<i64>> {
    conn.prepare_cached("SELECT last_success_at FROM catchup_state WHERE source = ?1 AND job = ?2")?
        .query_row(params![source, job], |r| r.get(0))
        .optional()
        .context("reading the catch-up mark")
}

/// Which of `ids` the inbox holds for `source`.
pub fn held(conn: &Connection, source: &str, ids: &[String]) -> anyhow::Result<HashSet<String>> {
    let mut stmt =
        conn.prepare_cached("SELECT 1 FROM events WHERE source = ?1 AND delivery_id = ?2")?;
    let mut found = HashSet::new();
    for id in ids {
        if stmt
            .query_row(params![source, id], |_| Ok(()))
            .optional()
            .context("looking for a delivery in the inbox")?
            .is_some()
        {
            found.insert(id.clone());
        }
    }
    Ok(found)
}

/// What hookbox already asked GitHub about each of `guids` since `since`:
/// the attempt ids it asked to redeliver, and whether one was refused for
/// good.
#[derive(Debug, Default)]
pub struct PriorRequests {
    pub asked: HashMap<String, HashSet<i64>>,
    pub permanent: HashSet<String>,
}

pub fn prior_requests(
    conn: &Connection,
    source: &str,
    guids: &[String],
    since: i64,
) -> anyhow::Result<PriorRequests> {
    let mut stmt = conn.prepare_cached(
        "SELECT attempt_id, outcome FROM redelivery_requests
         WHERE source = ?1 AND guid = ?2 AND requested_at >= ?3 AND outcome IN ('asked', 'permanent')",
    )?;
    let mut prior = PriorRequests::default();
    for guid in guids {
        let rows = stmt
            .query_map(params![source, guid, since], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
            .context("reading earlier redelivery requests")?;
        for (attempt, outcome) in rows {
            if outcome == "permanent" {
                prior.permanent.insert(guid.clone());
            }
            prior.asked.entry(guid.clone()).or_default().insert(attempt);
        }
    }
    Ok(prior)
}

/// How many recent events [`newest_event_time`] looks at: arrival order is
/// close to creation order, and a bounded look keeps the query cheap.
const NEWEST_SCAN: i64 = 1000;

/// Where an event's body says when it happened, as a JSON path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeField {
    /// A number of unix seconds (Stripe's `created`).
    UnixSeconds(&'static str),
    /// An RFC 3339 time (Square's `created_at`).
    Rfc3339(&'static str),
}

/// The newest creation time (unix seconds) among the latest events of
/// `source`: the body's `field` where it holds one, else when the event
/// arrived.
pub fn newest_event_time(
    conn: &Connection,
    source: &str,
    field: TimeField,
) -> anyhow::Result<Option<i64>> {
    let sql = match field {
        TimeField::UnixSeconds(_) => {
            "SELECT max(coalesce(
                    CASE WHEN body IS NOT NULL AND json_valid(CAST(body AS TEXT))
                         THEN CAST(json_extract(CAST(body AS TEXT), ?3) AS INTEGER) END,
                    received_at / 1000))
             FROM (SELECT body, received_at FROM events WHERE source = ?1 ORDER BY id DESC LIMIT ?2)"
        }
        TimeField::Rfc3339(_) => {
            "SELECT max(coalesce(
                    CASE WHEN body IS NOT NULL AND json_valid(CAST(body AS TEXT))
                         THEN CAST(strftime('%s', json_extract(CAST(body AS TEXT), ?3)) AS INTEGER) END,
                    received_at / 1000))
             FROM (SELECT body, received_at FROM events WHERE source = ?1 ORDER BY id DESC LIMIT ?2)"
        }
    };
    let (TimeField::UnixSeconds(path) | TimeField::Rfc3339(path)) = field;
    conn.prepare_cached(sql)?
        .query_row(params![source, NEWEST_SCAN, path], |r| r.get(0))
        .context("finding the newest event of the source")
}

/// One run as the API and the CLI show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub id: i64,
    pub source: String,
    pub job: String,
    pub dry_run: bool,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub counts: RunCounts,
}

/// The latest runs, newest first (of `source`, if given).
pub fn recent_runs(
    conn: &Connection,
    source: Option<&str>,
    limit: usize,
) -> anyhow::Result<Vec<RunRow>> {
    conn.prepare_cached(
        "SELECT id, source, job, dry_run, started_at, finished_at, pages, seen, asked, failed,
                complete, error
         FROM catchup_runs WHERE ?1 IS NULL OR source = ?1 ORDER BY id DESC LIMIT ?2",
    )?
    .query_map(params![source, limit as i64], |r| {
        Ok(RunRow {
            id: r.get(0)?,
            source: r.get(1)?,
            job: r.get(2)?,
            dry_run: r.get(3)?,
            started_at: r.get(4)?,
            finished_at: r.get(5)?,
            counts: RunCounts {
                pages: r.get(6)?,
                seen: r.get(7)?,
                asked: r.get(8)?,
                failed: r.get(9)?,
                complete: r.get(10)?,
                error: r.get(11)?,
            },
        })
    })?
    .collect::<rusqlite::Result<Vec<_>>>()
    .context("listing catch-up runs")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::db;

    fn lock(conn: &Connection, holder: &str, now: i64) -> bool {
        let op = Op::Lock {
            name: "catchup:github".into(),
            holder: holder.into(),
            now,
            expires_at: now + 100,
        };
        apply(conn, &op).unwrap() == Done::Locked(true)
    }

    #[test]
    fn a_lock_is_exclusive_until_it_expires_or_is_released() {
        let conn = db();
        assert!(lock(&conn, "a", 1000));
        assert!(!lock(&conn, "b", 1050), "held by a");
        assert!(lock(&conn, "a", 1060), "a renews");
        assert!(!lock(&conn, "b", 1150), "renewed until 1160");
        assert!(lock(&conn, "b", 1160), "expired: a died");
        let unlock = Op::Unlock {
            name: "catchup:github".into(),
            holder: "a".into(),
        };
        apply(&conn, &unlock).unwrap();
        assert!(!lock(&conn, "a", 1170), "a cannot release b's lock");
    }

    #[test]
    fn the_mark_only_moves_forward() {
        let conn = db();
        let mark = |at| Op::MarkSuccess {
            source: "github".into(),
            job: "github_redelivery".into(),
            at,
        };
        apply(&conn, &mark(2000)).unwrap();
        apply(&conn, &mark(1000)).unwrap();
        assert_eq!(
            last_success(&conn, "github", "github_redelivery").unwrap(),
            Some(2000)
        );
        assert_eq!(last_success(&conn, "github", "other").unwrap(), None);
    }

    #[test]
    fn newest_event_time_reads_rfc3339_times_too() {
        let conn = db();
        conn.execute_batch(
            "INSERT INTO events (source, delivery_id, received_at, body, state)
             VALUES ('square', 'a', 9000000000, CAST('{\"created_at\": \"2024-05-01T12:00:00.123Z\"}' AS BLOB), 'stored'),
                    ('square', 'b', 9000000000, CAST('{\"created_at\": \"2024-04-01T12:00:00Z\"}' AS BLOB), 'stored');",
        )
        .unwrap();
        let field = TimeField::Rfc3339("$.created_at");
        assert_eq!(
            newest_event_time(&conn, "square", field).unwrap(),
            Some(1_714_564_800)
        );
    }

    #[test]
    fn newest_event_time_prefers_the_body_created_field() {
        let conn = db();
        conn.execute_batch(
            "INSERT INTO events (source, delivery_id, received_at, body, state)
             VALUES ('stripe', 'evt_1', 9000000, CAST('{\"created\": 1234}' AS BLOB), 'stored'),
                    ('stripe', 'evt_2', 5000, NULL, 'stored'),
                    ('other', 'x', 99999999999, NULL, 'stored');",
        )
        .unwrap();
        let created = TimeField::UnixSeconds("$.created");
        assert_eq!(
            newest_event_time(&conn, "stripe", created).unwrap(),
            Some(1234)
        );
        assert_eq!(newest_event_time(&conn, "none", created).unwrap(), None);
    }
}
