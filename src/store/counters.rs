//! Hourly traffic counters per source (`hourly_counts`), for the
//! dashboard's charts: what each source received, and what its deliveries
//! did, hour by hour, without ever scanning `events`.
//!
//! What is counted, in the hour (UTC) it happened:
//!
//! * `received`: new events stored, by their `received_at` (a duplicate
//!   is not counted; an event a catch-up job fetched is).
//! * `delivered`: attempts that delivered (2xx, exit 0, a pull ack), by
//!   when the attempt ended. With several destinations each counts.
//! * `failed`: attempts that did not (an error, a timeout, a refusal, a
//!   pull nack), by when the attempt ended. Every retry counts, so an
//!   outage shows while it lasts, not only once deliveries go dead.
//!
//! The writer keeps them: each command adds to a [`Tally`] in memory while
//! it runs inside the group's transaction, and before the commit the
//! group's tally is written with one UPSERT per (source, hour)
//! ([`flush`]), so they commit with (and only with) what they count.
//! Retention trims hours older than [`KEEP_DAYS`] ([`trim`]). The
//! migration to version 13 filled them from the events and attempts the
//! database held (the last 30 days).

use anyhow::Context;
use rusqlite::{Connection, params};

use super::deliveries::{AttemptRecord, Settled};

pub const HOUR_MS: i64 = 60 * 60 * 1000;

/// Hours older than this many days are trimmed: the dashboard shows 30
/// whole days, and the day before them may still be partly in view.
pub const KEEP_DAYS: i64 = 32;

/// One of the three counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Received = 0,
    Delivered = 1,
    Failed = 2,
}

/// The start of the hour `at_ms` falls in (unix ms).
pub fn hour_of(at_ms: i64) -> i64 {
    at_ms - at_ms.rem_euclid(HOUR_MS)
}

/// Counts gathered in memory, per (source, hour), until they are written.
#[derive(Debug, Default)]
pub struct Tally {
    /// Few entries (a group rarely spans more than a few sources and one
    /// hour), so a scan beats hashing, and nothing is allocated for a key
    /// already there.
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    source: String,
    hour: i64,
    n: [i64; 3],
}

impl Tally {
    /// Counts one `what` for `source` at `at_ms`.
    pub fn add(&mut self, source: &str, at_ms: i64, what: Count) {
        self.add_n(source, hour_of(at_ms), what as usize, 1);
    }

    /// Counts a finished attempt: delivered or failed, when it ended.
    pub fn attempt(&mut self, r: &AttemptRecord) {
        let what = match r.settled {
            Settled::Delivered => Count::Delivered,
            Settled::Retry(_) | Settled::Dead => Count::Failed,
            // Nothing was sent: neither a delivery nor a failure.
            Settled::Skipped => return,
        };
        self.add(&r.source, r.started_at.saturating_add(r.duration_ms), what);
    }

    fn add_n(&mut self, source: &str, hour: i64, i: usize, n: i64) {
        match self
            .entries
            .iter_mut()
            .find(|e| e.hour == hour && e.source == source)
        {
            Some(e) => e.n[i] += n,
            None => {
                let mut counts = [0; 3];
                counts[i] = n;
                self.entries.push(Entry {
                    source: source.to_owned(),
                    hour,
                    n: counts,
                });
            }
        }
    }

    /// Adds everything `other` counted.
    pub fn merge(&mut self, other: &Tally) {
        for e in &other.entries {
            for (i, n) in e.n.iter().enumerate() {
                if *n != 0 {
                    self.add_n(&e.source, e.hour, i, *n);
                }
            }
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Writes `tally` into `hourly_counts`: one UPSERT per (source, hour).
pub fn flush(conn: &Connection, tally: &Tally) -> anyhow::Result<()> {
    let mut upsert = conn.prepare_cached(
        "INSERT INTO hourly_counts (source, hour, received, delivered, failed)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (source, hour) DO UPDATE SET
             received = received + excluded.received,
             delivered = delivered + excluded.delivered,
             failed = failed + excluded.failed",
    )?;
    for e in &tally.entries {
        upsert
            .execute(params![e.source, e.hour, e.n[0], e.n[1], e.n[2]])
            .context("adding to the hourly counters")?;
    }
    Ok(())
}

/// Deletes the hours that started before `before` (unix ms); returns how
/// many rows went. The table holds a few hundred rows per source, so the
/// scan this takes is short.
pub fn trim(conn: &Connection, before: i64) -> anyhow::Result<usize> {
    conn.prepare_cached("DELETE FROM hourly_counts WHERE hour < ?1")?
        .execute([before])
        .context("trimming old hourly counters")
}

/// One source's counts in one hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HourCounts {
    pub source: String,
    /// Start of the hour, unix ms.
    pub hour: i64,
    pub received: i64,
    pub delivered: i64,
    pub failed: i64,
}

/// Every hour from `since` (unix ms) on, by source then hour. Hours
/// without traffic have no row.
pub fn since(conn: &Connection, since: i64) -> anyhow::Result<Vec<HourCounts>> {
    conn.prepare_cached(
        "SELECT source, hour, received, delivered, failed FROM hourly_counts
         WHERE hour >= ?1 ORDER BY source, hour",
    )?
    .query_map([since], |r| {
        Ok(HourCounts {
            source: r.get(0)?,
            hour: r.get(1)?,
            received: r.get(2)?,
            delivered: r.get(3)?,
            failed: r.get(4)?,
        })
    })?
    .collect::<rusqlite::Result<Vec<_>>>()
    .context("reading the hourly counters")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::db;

    #[test]
    fn hours_start_on_the_hour_even_before_1970() {
        assert_eq!(hour_of(0), 0);
        assert_eq!(hour_of(HOUR_MS - 1), 0);
        assert_eq!(hour_of(HOUR_MS), HOUR_MS);
        assert_eq!(hour_of(-1), -HOUR_MS);
    }

    #[test]
    fn a_tally_keeps_one_entry_per_source_and_hour_and_flushes_by_adding() {
        let conn = db();
        let mut t = Tally::default();
        t.add("a", 10, Count::Received);
        t.add("a", 20, Count::Received);
        t.add("a", HOUR_MS + 5, Count::Failed);
        t.add("b", 30, Count::Delivered);
        assert_eq!(t.entries.len(), 3);
        flush(&conn, &t).unwrap();
        let mut more = Tally::default();
        more.add("a", 40, Count::Delivered);
        more.add("a", 50, Count::Received);
        t.clear();
        assert!(t.is_empty());
        t.merge(&more);
        flush(&conn, &t).unwrap();
        let rows = since(&conn, 0).unwrap();
        let short: Vec<_> = rows
            .iter()
            .map(|r| (r.source.as_str(), r.hour, r.received, r.delivered, r.failed))
            .collect();
        assert_eq!(
            short,
            [
                ("a", 0, 3, 1, 0),
                ("a", HOUR_MS, 0, 0, 1),
                ("b", 0, 0, 1, 0)
            ]
        );
        assert_eq!(since(&conn, HOUR_MS).unwrap().len(), 1);
        assert_eq!(trim(&conn, HOUR_MS).unwrap(), 2);
        assert_eq!(since(&conn, 0).unwrap().len(), 1);
    }
}
