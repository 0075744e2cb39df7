//! `--deliver` runs: what hookbox forwarded to the local downstream, measured
//! against when the load generator got each 202.
//!
//! Both ends read the same process's monotonic clock: the load generator
//! notes the [`Instant`] each accepted delivery id got its 202
//! ([`Receipts`]), the downstream the [`Instant`] each request head arrived
//! ([`Downstream`]). Receipt-to-downstream latency is the difference, taken
//! for the ids whose 202 came back inside the measured window, from the
//! first time the downstream saw the id.
//!
//! After the ingest stops, [`wait_for_drain`] waits (up to a cap) until the
//! downstream has seen every accepted id and the database holds no pending
//! row; [`Figures::collect`] then joins both sides and reads the database.

use anyhow::Result;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::downstream::Downstream;
use crate::load::Receipts;
use crate::server::{attempt_summary, count_pending, count_states, log_problems};

/// How often the drain wait looks at the downstream.
const DRAIN_POLL: Duration = Duration::from_millis(10);
/// How often it looks at the database once the downstream has everything.
const DB_POLL: Duration = Duration::from_millis(50);

/// How the wait after the ingest ended.
pub struct Drain {
    /// When the downstream had seen every accepted id (polling precision).
    pub downstream_done: Option<Instant>,
    /// When the database first showed no pending row, after that.
    pub database_done: Option<Instant>,
    /// Pending rows at the last look, when the database never got there.
    pub pending_left: Option<u64>,
    /// When the wait ended (drained, or the cap).
    pub ended: Instant,
}

/// Waits until the downstream has seen every id in `receipts` and then
/// until `database` has no pending row, giving up at `until`.
pub async fn wait_for_drain(
    downstream: &Downstream,
    receipts: &Receipts,
    database: &Path,
    until: Instant,
) -> Drain {
    let mut drain = Drain {
        downstream_done: None,
        database_done: None,
        pending_left: None,
        ended: until,
    };
    while Instant::now() < until {
        // The cheap count first; the exact check only when it can pass.
        if downstream.distinct() >= receipts.len() && unseen(downstream, receipts) == 0 {
            drain.downstream_done = Some(Instant::now());
            break;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
    if drain.downstream_done.is_none() {
        drain.ended = Instant::now();
        drain.pending_left = count_pending(database)
            .inspect_err(|e| eprintln!("reading pending rows: {e:#}"))
            .ok();
        return drain;
    }
    loop {
        match count_pending(database) {
            Ok(0) => {
                drain.database_done = Some(Instant::now());
                drain.pending_left = Some(0);
                break;
            }
            Ok(n) => drain.pending_left = Some(n),
            Err(e) => eprintln!("reading pending rows: {e:#}"),
        }
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(DB_POLL).await;
    }
    drain.ended = Instant::now();
    drain
}

/// Accepted ids the downstream has not seen yet.
fn unseen(downstream: &Downstream, receipts: &Receipts) -> u64 {
    receipts.with_map(|accepted| {
        downstream.with_seen(|seen| {
            accepted
                .keys()
                .filter(|id| !seen.first.contains_key(*id))
                .count() as u64
        })
    })
}

/// Everything a `--deliver` run reports beyond the ingest figures.
pub struct Figures {
    /// Accepted ids first seen downstream inside the measured window.
    pub delivered_in_window: u64,
    /// Receipt-to-downstream, microseconds, sorted; ids whose 202 came back
    /// in the measured window and that reached the downstream.
    pub latencies_us: Vec<u64>,
    /// Of those, how many reached the downstream before the load generator
    /// had read their 202 (counted as 0 µs).
    pub before_202: u64,
    /// From the end of the ingest until the downstream had seen the last
    /// accepted id; `None` when it had not within the cap.
    pub drain: Option<Duration>,
    /// Accepted ids the downstream had not seen when the ingest ended: the
    /// backlog the drain works off.
    pub backlog_at_ingest_end: u64,
    /// Accepted ids the downstream had not seen when the wait ended.
    pub backlog_at_cap: u64,
    /// Accepted ids the downstream never saw, even after the server stopped.
    pub missing: u64,
    /// Ids the downstream saw that never got a 202 (a request that timed out
    /// on our side but was stored, or something stranger).
    pub unknown: u64,
    pub requests: u64,
    pub distinct: u64,
    /// Requests beyond the first per id (at-least-once allows them).
    pub duplicates: u64,
    /// The longest a repeat came after its id's first arrival: a lease
    /// running out shows as ~90 s, a retry as the backoff.
    pub duplicate_max_gap: Option<Duration>,
    pub no_id: u64,
    pub bad_signature: u64,
    pub body_errors: u64,
    /// Database rows per state after the server stopped.
    pub states: Vec<(String, u64)>,
    /// Attempt rows per outcome, and the commonest failure texts.
    pub attempt_outcomes: Vec<(String, u64)>,
    pub attempt_errors: Vec<(String, u64)>,
    /// Time the database needed to show no pending row after the downstream
    /// had everything.
    pub db_settle: Option<Duration>,
    pub pending_at_cap: Option<u64>,
    /// WARN/ERROR lines in the server log, and the first few.
    pub log_problems: u64,
    pub log_examples: Vec<String>,
}

impl Figures {
    /// Joins receipts with arrivals and reads the stopped server's database
    /// and log. `window` is the measured window, `ingest_end` when the last
    /// connection finished.
    pub fn collect(
        downstream: &Downstream,
        receipts: &Receipts,
        window: (Instant, Instant),
        ingest_end: Instant,
        drain: &Drain,
        database: &Path,
        log: &str,
    ) -> Result<Figures> {
        let (from, until) = window;
        let mut f = receipts.with_map(|accepted| {
            downstream.with_seen(|seen| {
                let mut f = Figures::empty();
                f.requests = seen.arrivals.len() as u64;
                f.distinct = seen.first.len() as u64;
                f.duplicates = f.requests - f.distinct;
                f.duplicate_max_gap = seen
                    .arrivals
                    .iter()
                    .filter_map(|a| {
                        Some(a.at.saturating_duration_since(*seen.first.get(&a.delivery_id)?))
                    })
                    .filter(|gap| !gap.is_zero())
                    .max();
                f.no_id = seen.no_id;
                f.bad_signature = seen.bad_signature;
                f.body_errors = seen.body_errors;
                f.unknown = seen
                    .first
                    .keys()
                    .filter(|id| !accepted.contains_key(*id))
                    .count() as u64;
                let mut last_first: Option<Instant> = None;
                for (id, &got_202) in accepted {
                    let Some(&arrived) = seen.first.get(id) else {
                        f.missing += 1;
                        f.backlog_at_ingest_end += 1;
                        continue;
                    };
                    last_first = last_first.max(Some(arrived));
                    if arrived > ingest_end {
                        f.backlog_at_ingest_end += 1;
                    }
                    if (from..=until).contains(&arrived) {
                        f.delivered_in_window += 1;
                    }
                    if (from..=until).contains(&got_202) {
                        match arrived.checked_duration_since(got_202) {
                            Some(d) => f.latencies_us.push(d.as_micros() as u64),
                            None => {
                                f.before_202 += 1;
                                f.latencies_us.push(0);
                            }
                        }
                    }
                }
                f.latencies_us.sort_unstable();
                f.drain = drain.downstream_done.map(|_| {
                    last_first.map_or(Duration::ZERO, |t| t.saturating_duration_since(ingest_end))
                });
                f
            })
        });
        f.backlog_at_cap = if drain.downstream_done.is_some() {
            0
        } else {
            // Seen after the wait gave up (during shutdown) still counts as
            // backlog at the cap; `missing` says what never arrived.
            receipts.with_map(|accepted| {
                downstream.with_seen(|seen| {
                    accepted
                        .keys()
                        .filter(|id| seen.first.get(*id).is_none_or(|&t| t > drain.ended))
                        .count() as u64
                })
            })
        };
        f.db_settle = match (drain.downstream_done, drain.database_done) {
            (Some(a), Some(b)) => Some(b.saturating_duration_since(a)),
            _ => None,
        };
        f.pending_at_cap = drain.pending_left;
        f.states = count_states(database)?;
        let (outcomes, errors) = attempt_summary(database)?;
        f.attempt_outcomes = outcomes;
        f.attempt_errors = errors;
        let (n, examples) = log_problems(log, 5);
        f.log_problems = n;
        f.log_examples = examples;
        Ok(f)
    }

    fn empty() -> Figures {
        Figures {
            delivered_in_window: 0,
            latencies_us: Vec::new(),
            before_202: 0,
            drain: None,
            backlog_at_ingest_end: 0,
            backlog_at_cap: 0,
            missing: 0,
            unknown: 0,
            requests: 0,
            distinct: 0,
            duplicates: 0,
            duplicate_max_gap: None,
            no_id: 0,
            bad_signature: 0,
            body_errors: 0,
            states: Vec::new(),
            attempt_outcomes: Vec::new(),
            attempt_errors: Vec::new(),
            db_settle: None,
            pending_at_cap: None,
            log_problems: 0,
            log_examples: Vec::new(),
        }
    }

    /// The `q` quantile (0..=1) of receipt-to-downstream, in milliseconds
    /// (nearest rank); `None` with no samples.
    pub fn latency_ms(&self, q: f64) -> Option<f64> {
        let v = &self.latencies_us;
        if v.is_empty() {
            return None;
        }
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Some(v[rank - 1] as f64 / 1000.0)
    }

    /// Events/s the downstream got while working off the backlog left when
    /// the ingest ended (delivery alone, no ingest competing); `None` when
    /// there was no backlog or it did not drain.
    pub fn drain_per_sec(&self) -> Option<f64> {
        let secs = self.drain?.as_secs_f64();
        (self.backlog_at_ingest_end > 0 && secs > 0.0)
            .then(|| self.backlog_at_ingest_end as f64 / secs)
    }

    /// Rows in `state` after the server stopped.
    pub fn rows(&self, state: &str) -> u64 {
        self.states
            .iter()
            .find(|(s, _)| s == state)
            .map_or(0, |(_, n)| *n)
    }

    pub fn attempts(&self, outcome: &str) -> u64 {
        self.attempt_outcomes
            .iter()
            .find(|(s, _)| s == outcome)
            .map_or(0, |(_, n)| *n)
    }

    /// Rows in any state but `delivered`.
    pub fn undelivered_rows(&self) -> u64 {
        self.states
            .iter()
            .filter(|(s, _)| s != "delivered")
            .map(|(_, n)| n)
            .sum()
    }
}
