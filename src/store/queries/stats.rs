//! The counts behind `/api/stats` and `/metrics`, and the catch-up runs.

use std::collections::BTreeMap;

use anyhow::Context;
use rusqlite::{Connection, params};
use serde::Serialize;

use crate::store::models::State;
use crate::store::outcomes;

/// One source's counts for `/api/stats`.
#[derive(Debug, Clone, Serialize)]
pub struct SourceStats {
    pub source: String,
    /// Events per (derived) state, every state listed, zero included.
    pub counts: BTreeMap<String, i64>,
    /// The oldest event with a pending delivery.
    pub oldest_pending_age_seconds: Option<f64>,
    /// Every configured destination, and every other one that still holds
    /// deliveries (a destination removed from the config keeps its rows).
    pub destinations: BTreeMap<String, DestinationStats>,
}

/// One destination's deliveries, per state.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DestinationStats {
    pub pending: i64,
    pub delivered: i64,
    pub dead: i64,
    /// Final without a send: the destination's transform gave no output.
    pub skipped: i64,
    /// When the event of its oldest pending delivery arrived (unix ms).
    pub oldest_pending_at: Option<i64>,
    /// Whether the source's config still names it; one that does not is
    /// kept but never dispatched.
    pub configured: bool,
}

/// The sources to list in [`source_stats`], each with its configured
/// destinations' names.
pub type Known = [(String, Vec<String>)];

/// Counts per source and state (every source in `known` listed, even when
/// empty), the age at `now` of each source's oldest pending event, and
/// each destination's deliveries per state.
pub fn source_stats(
    conn: &Connection,
    known: &Known,
    now: i64,
) -> anyhow::Result<Vec<SourceStats>> {
    let mut by_source: BTreeMap<String, SourceStats> = BTreeMap::new();
    fn entry<'a>(map: &'a mut BTreeMap<String, SourceStats>, source: &str) -> &'a mut SourceStats {
        map.entry(source.to_owned()).or_insert_with(|| SourceStats {
            source: source.to_owned(),
            counts: State::ALL
                .iter()
                .map(|s| (s.as_str().to_owned(), 0))
                .collect(),
            oldest_pending_age_seconds: None,
            destinations: BTreeMap::new(),
        })
    }
    for (name, destinations) in known {
        let e = entry(&mut by_source, name);
        for d in destinations {
            e.destinations.insert(
                d.clone(),
                DestinationStats {
                    configured: true,
                    ..DestinationStats::default()
                },
            );
        }
    }
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT e.source, {state}, count(*) FROM events AS e {join} GROUP BY e.source, {state}",
        state = outcomes::STATE,
        join = outcomes::JOIN
    ))?;
    let rows = stmt.query_map([], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get(2)?))
    })?;
    for row in rows {
        let (source, state, n) = row.context("counting events")?;
        entry(&mut by_source, &source).counts.insert(state, n);
    }
    for (source, _, oldest) in pending(conn)? {
        entry(&mut by_source, &source).oldest_pending_age_seconds = Some(age_seconds(now, oldest));
    }
    for lane in lane_counts(conn)? {
        let d = entry(&mut by_source, &lane.source)
            .destinations
            .entry(lane.destination)
            .or_default();
        (d.pending, d.delivered, d.dead, d.skipped) =
            (lane.pending, lane.delivered, lane.dead, lane.skipped);
    }
    for (source, destination, _, oldest) in pending_by_lane(conn)? {
        entry(&mut by_source, &source)
            .destinations
            .entry(destination)
            .or_default()
            .oldest_pending_at = Some(oldest);
    }
    Ok(by_source.into_values().collect())
}

/// `(source, events, oldest received_at)` of events with a pending
/// delivery, per source. Read through `deliveries_due`, which holds the
/// pending deliveries only: few.
fn pending(conn: &Connection) -> anyhow::Result<Vec<(String, i64, i64)>> {
    conn.prepare_cached(PENDING_BY_SOURCE)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("counting pending events")
}

const PENDING_BY_SOURCE: &str = "SELECT d.source, count(DISTINCT d.event_id), min(e.received_at)
     FROM deliveries AS d JOIN events AS e ON e.id = d.event_id
     WHERE d.state = 'pending' GROUP BY d.source";

/// `(source, destination, deliveries, oldest received_at)` of pending
/// deliveries, per lane; through `deliveries_due` as [`pending`] is.
fn pending_by_lane(conn: &Connection) -> anyhow::Result<Vec<(String, String, i64, i64)>> {
    conn.prepare_cached(PENDING_BY_LANE)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("counting pending deliveries")
}

/// `(source, destination, pending deliveries)` of each lane that has any;
/// through `deliveries_due` as [`pending`] is, so cheap at start-up
/// whatever the size of the table.
pub fn pending_per_lane(conn: &Connection) -> anyhow::Result<Vec<(String, String, i64)>> {
    Ok(pending_by_lane(conn)?
        .into_iter()
        .map(|(source, destination, count, _)| (source, destination, count))
        .collect())
}

/// The lane and arrival time (unix ms) of the event of the oldest pending
/// delivery, for the `backlog` alert; through `deliveries_due` as
/// [`pending`] is.
pub fn oldest_pending(conn: &Connection) -> anyhow::Result<Option<(String, String, i64)>> {
    Ok(pending_by_lane(conn)?
        .into_iter()
        .min_by_key(|(_, _, _, oldest)| *oldest)
        .map(|(source, destination, _, oldest)| (source, destination, oldest)))
}

const PENDING_BY_LANE: &str = "SELECT d.source, d.destination, count(*), min(e.received_at)
     FROM deliveries AS d JOIN events AS e ON e.id = d.event_id
     WHERE d.state = 'pending' GROUP BY d.source, d.destination";

/// One destination's deliveries per state, as [`lane_counts`] reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneCount {
    pub source: String,
    pub destination: String,
    pub pending: i64,
    pub delivered: i64,
    pub dead: i64,
    pub skipped: i64,
}

/// Deliveries per (source, destination) and state. Reads the whole
/// `deliveries` table (narrow rows, no bodies): for `/api/stats`, the
/// overview and `hookbox check`, never for `/metrics`, which a scraper
/// calls every few seconds.
pub fn lane_counts(conn: &Connection) -> anyhow::Result<Vec<LaneCount>> {
    conn.prepare_cached(
        "SELECT source, destination,
                sum(state = 'pending'), sum(state = 'delivered'), sum(state = 'dead'),
                sum(state = 'skipped')
         FROM deliveries GROUP BY source, destination ORDER BY source, destination",
    )?
    .query_map([], |r| {
        Ok(LaneCount {
            source: r.get(0)?,
            destination: r.get(1)?,
            pending: r.get(2)?,
            delivered: r.get(3)?,
            dead: r.get(4)?,
            skipped: r.get(5)?,
        })
    })?
    .collect::<rusqlite::Result<Vec<_>>>()
    .context("counting deliveries per destination")
}

fn age_seconds(now: i64, then: i64) -> f64 {
    (now - then).max(0) as f64 / 1000.0
}

/// One catch-up run, as `catchup_runs` keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct CatchupRun {
    pub id: i64,
    pub source: String,
    pub job: String,
    pub dry_run: bool,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub pages: i64,
    pub seen: i64,
    pub asked: i64,
    pub failed: i64,
    pub complete: bool,
    pub error: Option<String>,
}

const RUN_COLUMNS: &str = "id, source, job, dry_run, started_at, finished_at, pages, seen, asked, failed, complete, error";

fn run(r: &rusqlite::Row<'_>) -> rusqlite::Result<CatchupRun> {
    Ok(CatchupRun {
        id: r.get(0)?,
        source: r.get(1)?,
        job: r.get(2)?,
        dry_run: r.get(3)?,
        started_at: r.get(4)?,
        finished_at: r.get(5)?,
        pages: r.get(6)?,
        seen: r.get(7)?,
        asked: r.get(8)?,
        failed: r.get(9)?,
        complete: r.get(10)?,
        error: r.get(11)?,
    })
}

/// The newest `limit` catch-up runs (of `source`, if given), newest first.
pub fn catchup_runs(
    conn: &Connection,
    source: Option<&str>,
    limit: usize,
) -> anyhow::Result<Vec<CatchupRun>> {
    conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM catchup_runs
         WHERE (?1 IS NULL OR source = ?1) ORDER BY id DESC LIMIT ?2"
    ))?
    .query_map(params![source, limit as i64], run)?
    .collect::<rusqlite::Result<Vec<_>>>()
    .context("listing catch-up runs")
}

/// The latest run of each `(source, job)`.
pub fn last_catchup_runs(conn: &Connection) -> anyhow::Result<Vec<CatchupRun>> {
    conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM catchup_runs
         WHERE id IN (SELECT max(id) FROM catchup_runs GROUP BY source, job)
         ORDER BY source, job"
    ))?
    .query_map([], run)?
    .collect::<rusqlite::Result<Vec<_>>>()
    .context("reading the last catch-up runs")
}

/// What `/metrics` reads from the database at scrape time.
#[derive(Debug, Clone, Default)]
pub struct MetricsSnapshot {
    /// `(source, events, oldest received_at)` of events with a pending delivery.
    pub pending: Vec<(String, i64, i64)>,
    /// `(source, events)` of dead events.
    pub dead: Vec<(String, i64)>,
    /// `(source, destination, deliveries, oldest received_at)` of pending
    /// deliveries.
    pub lane_pending: Vec<(String, String, i64, i64)>,
    /// `(source, destination, deliveries)` of dead deliveries.
    pub lane_dead: Vec<(String, String, i64)>,
    /// `(source, job, runs)`.
    pub catchup_runs: Vec<(String, String, i64)>,
    /// `(source, job, unix ms)` of each job's last complete run.
    pub catchup_last_success: Vec<(String, String, i64)>,
    /// `(source, outcome, requests)`.
    pub redeliveries: Vec<(String, String, i64)>,
}

pub fn metrics_snapshot(conn: &Connection) -> anyhow::Result<MetricsSnapshot> {
    let pairs = |sql: &str| -> anyhow::Result<Vec<(String, String, i64)>> {
        conn.prepare_cached(sql)?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .with_context(|| format!("reading metrics: {sql}"))
    };
    // `event_outcomes_dead` holds only dead rows, so this reads the dead
    // letters, not the table.
    let dead = conn
        .prepare_cached(DEAD_BY_SOURCE)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .context("counting dead events")?;
    Ok(MetricsSnapshot {
        pending: pending(conn)?,
        dead,
        lane_pending: pending_by_lane(conn)?,
        lane_dead: pairs(DEAD_BY_LANE)?,
        // Kept rows plus what retention pruned: these are counters.
        catchup_runs: pairs(
            "SELECT source, job, sum(n) FROM (
                 SELECT source, job, count(*) AS n FROM catchup_runs GROUP BY source, job
                 UNION ALL
                 SELECT source, label, n FROM catchup_pruned WHERE kind = 'runs')
             GROUP BY source, job",
        )?,
        catchup_last_success: pairs("SELECT source, job, last_success_at FROM catchup_state")?,
        redeliveries: pairs(
            "SELECT source, outcome, sum(n) FROM (
                 SELECT source, outcome, count(*) AS n FROM redelivery_requests GROUP BY source, outcome
                 UNION ALL
                 SELECT source, label, n FROM catchup_pruned WHERE kind = 'redeliveries')
             GROUP BY source, outcome",
        )?,
    })
}

/// Dead events are those whose outcome says so: ingest never stores one.
const DEAD_BY_SOURCE: &str =
    "SELECT source, count(*) FROM event_outcomes WHERE state = 'dead' GROUP BY source";

/// Read from `deliveries_dead` alone, as [`DEAD_BY_SOURCE`] from
/// `event_outcomes_dead`.
const DEAD_BY_LANE: &str = "SELECT source, destination, count(*) FROM deliveries
     WHERE state = 'dead' GROUP BY source, destination";

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::*;
    use crate::store::queries::tests::{add, db, deliver, plan};

    #[test]
    fn counting_dead_letters_reads_their_index_only() {
        let conn = db();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {DEAD_BY_SOURCE}"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let plan = plan.join("\n");
        assert!(
            plan.contains("COVERING INDEX event_outcomes_dead"),
            "{plan}"
        );
    }

    #[test]
    fn stats_list_known_sources_and_destinations_and_the_oldest_pending_age() {
        let conn = db();
        let one = add(&conn, "a", "pending", 1_000);
        deliver(&conn, one, "a", "ci", "pending", 1, Some(2_000), None);
        deliver(&conn, one, "a", "chat", "pending", 0, Some(1_000), None);
        let two = add(&conn, "a", "pending", 5_000);
        deliver(&conn, two, "a", "chat", "pending", 0, None, None);
        deliver(&conn, two, "a", "ci", "dead", 2, None, Some("gone"));
        let three = add(&conn, "a", "dead", 6_000);
        deliver(&conn, three, "a", "old", "dead", 1, None, None);
        let four = add(&conn, "a", "delivered", 7_000);
        deliver(&conn, four, "a", "ci", "delivered", 1, None, None);
        let known = [
            (
                "a".to_owned(),
                vec!["ci".to_owned(), "chat".to_owned(), "log".to_owned()],
            ),
            ("quiet".to_owned(), vec![]),
        ];
        let stats = source_stats(&conn, &known, 11_000).unwrap();
        assert_eq!(stats.len(), 2);
        assert_eq!(stats[0].counts["pending"], 2);
        assert_eq!(stats[0].counts["dead"], 1);
        assert_eq!(stats[0].counts["stored"], 0);
        assert_eq!(stats[0].oldest_pending_age_seconds, Some(10.0));
        let d = &stats[0].destinations;
        assert_eq!(d.keys().collect::<Vec<_>>(), ["chat", "ci", "log", "old"]);
        assert_eq!(
            d["ci"],
            DestinationStats {
                pending: 1,
                delivered: 1,
                dead: 1,
                skipped: 0,
                oldest_pending_at: Some(1_000),
                configured: true,
            }
        );
        assert_eq!(
            (d["chat"].pending, d["chat"].oldest_pending_at),
            (2, Some(1_000))
        );
        assert_eq!(
            d["log"],
            DestinationStats {
                configured: true,
                ..DestinationStats::default()
            }
        );
        assert_eq!((d["old"].dead, d["old"].configured), (1, false));
        assert_eq!(stats[1].source, "quiet");
        assert_eq!(stats[1].oldest_pending_age_seconds, None);
        assert!(stats[1].destinations.is_empty());
        let snap = metrics_snapshot(&conn).unwrap();
        assert_eq!(snap.pending, vec![("a".to_owned(), 2, 1_000)]);
        assert_eq!(snap.dead, vec![("a".to_owned(), 1)]);
        assert_eq!(
            snap.lane_pending,
            vec![
                ("a".to_owned(), "chat".to_owned(), 2, 1_000),
                ("a".to_owned(), "ci".to_owned(), 1, 1_000)
            ]
        );
        assert_eq!(
            snap.lane_dead,
            vec![
                ("a".to_owned(), "ci".to_owned(), 1),
                ("a".to_owned(), "old".to_owned(), 1)
            ]
        );
        assert_eq!(
            lane_counts(&conn).unwrap()[1],
            LaneCount {
                source: "a".into(),
                destination: "ci".into(),
                pending: 1,
                delivered: 1,
                dead: 1,
                skipped: 0,
            }
        );
    }

    #[test]
    fn pending_and_dead_counts_for_metrics_read_their_partial_indexes() {
        let conn = db();
        for (sql, index) in [
            (PENDING_BY_SOURCE, "deliveries_due"),
            (PENDING_BY_LANE, "deliveries_due"),
            (DEAD_BY_LANE, "COVERING INDEX deliveries_dead"),
        ] {
            let plan = plan(&conn, sql, Vec::new());
            assert!(plan.contains(index), "{sql}:\n{plan}");
            assert!(
                plan.contains("SEARCH e USING INTEGER PRIMARY KEY") || !sql.contains("JOIN"),
                "{plan}"
            );
        }
    }

    #[test]
    fn catch_up_runs_are_listed_newest_first_and_the_last_per_job() {
        let conn = db();
        for (source, job, at) in [("g", "github_redelivery", 1), ("g", "github_redelivery", 2)] {
            conn.execute(
                "INSERT INTO catchup_runs (source, job, started_at, complete) VALUES (?1, ?2, ?3, 1)",
                params![source, job, at],
            )
            .unwrap();
        }
        let runs = catchup_runs(&conn, Some("g"), 10).unwrap();
        assert_eq!(
            runs.iter().map(|r| r.started_at).collect::<Vec<_>>(),
            [2, 1]
        );
        let last = last_catchup_runs(&conn).unwrap();
        assert_eq!((last.len(), last[0].started_at), (1, 2));
        assert!(last[0].complete);
    }
}
