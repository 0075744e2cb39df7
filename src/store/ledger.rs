//! The SQL of the completeness ledger (`catchup_ledger`): one row per
//! catch-up pass that was not a dry run, saying what the provider listed in
//! the pass's window, what the inbox held, what the pass recovered, and
//! what it could not, by reason.
//!
//! The row is written by `catchup::Op::Ledger` when the pass ends; the reads
//! serve `GET /api/sources/{name}/completeness`, the dashboard's panel,
//! `hookbox catch-up --report` and the `hookbox_catchup_missing` gauge.

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

/// Why events could not be recovered, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MissingBy {
    /// Part of the window is older than the provider keeps: counted as
    /// one, since how many events it held is unknown.
    pub outside_window: u32,
    /// The provider will not send them again: refused in this pass.
    pub refused: u32,
    /// Refused in an earlier pass and listed again: still missing, and
    /// already counted where first refused.
    pub refused_before: u32,
    /// Left for the next pass by a rate limit.
    pub rate_limited: u32,
    /// The provider failed, or listed something unreadable.
    pub provider_error: u32,
}

impl MissingBy {
    pub fn total(&self) -> u32 {
        self.outside_window
            + self.refused
            + self.refused_before
            + self.rate_limited
            + self.provider_error
    }

    /// What no earlier pass reported: worth telling a person about.
    pub fn unreported(&self) -> u32 {
        self.total() - self.refused_before
    }

    /// `3 refused, 1 outside the provider's window`, or `none`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            (self.outside_window, "outside the provider's window"),
            (self.refused, "refused"),
            (self.refused_before, "refused before"),
            (self.rate_limited, "rate-limited"),
            (self.provider_error, "the provider's error"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, why)| format!("{n} {why}"))
        .collect();
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// What one pass saw (`catchup_ledger`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub run_id: i64,
    pub source: String,
    pub job: String,
    /// Unix ms: the oldest time the pass read back to.
    pub window_start: Option<i64>,
    /// Unix ms: when the pass started.
    pub window_end: i64,
    /// Unix ms: where the pass should have started, when the provider no
    /// longer keeps that far back.
    pub uncovered_from: Option<i64>,
    pub listed: u32,
    pub held: u32,
    pub recovered: u32,
    pub pending: u32,
    pub missing: u32,
    pub missing_by: MissingBy,
    /// From the run: it read its whole window and nothing is left to try.
    pub complete: bool,
    pub error: Option<String>,
}

/// Records `e` (its `complete` and `error` are the run's, not stored).
pub fn insert(conn: &Connection, e: &Entry) -> anyhow::Result<()> {
    let m = &e.missing_by;
    conn.prepare_cached(
        "INSERT OR REPLACE INTO catchup_ledger (run_id, source, job, window_start, window_end,
             uncovered_from, listed, held, recovered, pending, missing, outside_window, refused,
             refused_before, rate_limited, provider_error)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    )?
    .execute(params![
        e.run_id,
        e.source,
        e.job,
        e.window_start,
        e.window_end,
        e.uncovered_from,
        e.listed,
        e.held,
        e.recovered,
        e.pending,
        m.total(),
        m.outside_window,
        m.refused,
        m.refused_before,
        m.rate_limited,
        m.provider_error
    ])
    .context("recording a catch-up pass in the ledger")?;
    Ok(())
}

const COLUMNS: &str = "l.run_id, l.source, l.job, l.window_start, l.window_end, l.uncovered_from,
    l.listed, l.held, l.recovered, l.pending, l.missing, l.outside_window, l.refused,
    l.refused_before, l.rate_limited, l.provider_error, r.complete, r.error";

fn entry(r: &rusqlite::Row) -> rusqlite::Result<Entry> {
    Ok(Entry {
        run_id: r.get(0)?,
        source: r.get(1)?,
        job: r.get(2)?,
        window_start: r.get(3)?,
        window_end: r.get(4)?,
        uncovered_from: r.get(5)?,
        listed: r.get(6)?,
        held: r.get(7)?,
        recovered: r.get(8)?,
        pending: r.get(9)?,
        missing: r.get(10)?,
        missing_by: MissingBy {
            outside_window: r.get(11)?,
            refused: r.get(12)?,
            refused_before: r.get(13)?,
            rate_limited: r.get(14)?,
            provider_error: r.get(15)?,
        },
        complete: r.get(16)?,
        error: r.get(17)?,
    })
}

/// The latest passes of `source`, newest first.
pub fn recent(conn: &Connection, source: &str, limit: usize) -> anyhow::Result<Vec<Entry>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM catchup_ledger l JOIN catchup_runs r ON r.id = l.run_id
         WHERE l.source = ?1 ORDER BY l.run_id DESC LIMIT ?2"
    ))?
    .query_map(params![source, limit as i64], entry)?
    .collect::<rusqlite::Result<Vec<_>>>()
    .context("reading the catch-up ledger")
}

/// The passes of `source` over a time, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Unix ms: passes that started at or after this are summed.
    pub since: i64,
    pub passes: u32,
    /// Sums over the passes; an event in the overlap of two passes counts
    /// in both.
    pub listed: u32,
    pub held: u32,
    pub recovered: u32,
    /// What is missing now: what no pass will recover (refused, outside
    /// the provider's window) summed over the passes, each refusal once,
    /// where it was first refused, and what the newest pass left for the
    /// next one (rate-limited, the provider's error).
    pub missing: u32,
    pub missing_by: MissingBy,
}

/// Sums the passes of `source` that started at or after `since` (unix ms).
pub fn summary(conn: &Connection, source: &str, since: i64) -> anyhow::Result<Summary> {
    let mut s = conn
        .prepare_cached(
            "SELECT count(*), coalesce(sum(listed), 0), coalesce(sum(held), 0),
                    coalesce(sum(recovered), 0), coalesce(sum(outside_window), 0),
                    coalesce(sum(refused), 0)
             FROM catchup_ledger WHERE source = ?1 AND window_end >= ?2",
        )?
        .query_row(params![source, since], |r| {
            Ok(Summary {
                since,
                passes: r.get(0)?,
                listed: r.get(1)?,
                held: r.get(2)?,
                recovered: r.get(3)?,
                missing: 0,
                missing_by: MissingBy {
                    outside_window: r.get(4)?,
                    refused: r.get(5)?,
                    ..MissingBy::default()
                },
            })
        })
        .context("summing the catch-up ledger")?;
    let newest = conn
        .prepare_cached(
            "SELECT rate_limited, provider_error FROM catchup_ledger
             WHERE source = ?1 AND window_end >= ?2 ORDER BY run_id DESC LIMIT 1",
        )?
        .query_row(params![source, since], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .context("reading the newest pass of the ledger")?;
    if let Some((rate_limited, provider_error)) = newest {
        s.missing_by.rate_limited = rate_limited;
        s.missing_by.provider_error = provider_error;
    }
    s.missing = s.missing_by.total();
    Ok(s)
}

/// Per source, what its newest pass could not recover.
pub fn latest_missing(conn: &Connection) -> anyhow::Result<Vec<(String, i64)>> {
    conn.prepare_cached(
        "SELECT source, missing FROM catchup_ledger
         WHERE run_id IN (SELECT max(run_id) FROM catchup_ledger GROUP BY source)",
    )?
    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
    .collect::<rusqlite::Result<Vec<_>>>()
    .context("reading what the newest catch-up passes missed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::db;

    fn pass(conn: &Connection, id: i64, at: i64, listed: u32, missing_by: MissingBy) {
        conn.execute(
            "INSERT INTO catchup_runs (id, source, job, started_at, complete) VALUES (?1, 's', 'square_backfill', ?2, 1)",
            params![id, at],
        )
        .unwrap();
        let e = Entry {
            run_id: id,
            source: "s".into(),
            job: "square_backfill".into(),
            window_end: at,
            listed,
            held: listed - missing_by.refused,
            missing_by,
            ..Entry::default()
        };
        insert(conn, &e).unwrap();
    }

    #[test]
    fn the_summary_keeps_what_is_lost_for_good_and_what_the_newest_pass_left() {
        let conn = db();
        let lost = MissingBy {
            refused: 2,
            rate_limited: 5,
            ..MissingBy::default()
        };
        pass(&conn, 1, 1000, 10, lost);
        let left = MissingBy {
            provider_error: 1,
            refused_before: 2,
            ..MissingBy::default()
        };
        pass(&conn, 2, 2000, 6, left);
        let s = summary(&conn, "s", 0).unwrap();
        assert_eq!((s.passes, s.listed, s.held), (2, 16, 14));
        assert_eq!(s.missing_by.refused, 2, "for good, counted once");
        assert_eq!(left.unreported(), 1, "the refusals are not news");
        assert_eq!(s.missing_by.rate_limited, 0, "the newer pass took them");
        assert_eq!(s.missing_by.provider_error, 1);
        assert_eq!(s.missing, 3);
        assert_eq!(summary(&conn, "s", 1500).unwrap().passes, 1);
        assert_eq!(latest_missing(&conn).unwrap(), [("s".to_owned(), 3)]);
        let rows = recent(&conn, "s", 10).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].run_id, 2);
        assert!(rows[0].complete);
        assert_eq!(left.describe(), "2 refused before, 1 the provider's error");
        assert_eq!(MissingBy::default().describe(), "none");
    }
}
