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
//! A run has one *lane* per destination ([`Lane`]): its name in the config,
//! the downstream path it posts to, its signing key, and which accepted ids
//! it must receive ([`Takes`]). `--deliver` alone has one lane, the single
//! `[sources.deliver]` table; with `--routes` there are two, `a` (every
//! event) and `b` (the even half, by a filter). Arrival figures are per lane
//! ([`LaneFigures`]); the database and the server log are read once per run
//! ([`Figures`]).
//!
//! After the ingest stops, [`wait_for_drain`] waits (up to a cap) until
//! every lane has seen every id it takes and the database holds no pending
//! row; [`Figures::collect`] then joins both sides and reads the database.
//! `report` turns the figures into the run's lines and checks.

mod report;

use anyhow::Result;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::downstream::{Downstream, Seen, whsec};
use crate::load::{Receipt, Receipts};
use crate::payload::{PARITY_POINTER, Parity};
use crate::server::{
    Deliver, LaneTally, Route, Tally, attempt_summary, count_pending, count_states, log_problems,
    per_destination,
};

/// How often the drain wait looks at the downstream.
const DRAIN_POLL: Duration = Duration::from_millis(10);
/// How often it looks at the database once the downstream has everything.
const DB_POLL: Duration = Duration::from_millis(50);

/// Which accepted ids a destination must receive: what its filter takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    /// No filter.
    Every,
    /// `events = ["push"]` and `when` on [`PARITY_POINTER`]: half.
    Only(Parity),
}

impl Takes {
    pub fn takes(self, receipt: &Receipt) -> bool {
        match self {
            Takes::Every => true,
            Takes::Only(parity) => receipt.parity == parity,
        }
    }

    /// How many accepted ids the lane must receive, from the counts.
    fn expected(self, receipts: &Receipts) -> usize {
        match self {
            Takes::Every => receipts.len(),
            Takes::Only(parity) => receipts.len_of(parity),
        }
    }

    /// The filter, for the report.
    pub fn describe(self) -> String {
        match self {
            Takes::Every => "every event".to_owned(),
            Takes::Only(parity) => format!("push with {PARITY_POINTER} = {}", parity.as_str()),
        }
    }
}

/// One destination of the run and the downstream path it posts to.
pub struct Lane {
    /// Its name in the config; `default` for the single table.
    pub name: String,
    /// Where the downstream receives it.
    pub path: String,
    pub takes: Takes,
    /// The HMAC key of its `whsec_` signing secret: each lane has its own,
    /// so a request signed for another lane fails the check.
    pub key: Vec<u8>,
}

/// The lanes of a `--deliver` run: `default` at `/hook`, or with `routes`
/// `a` (every event) at `/a` and `b` (the even half) at `/b`.
pub fn lanes(routes: bool, nonce: u64) -> Vec<Lane> {
    let lane = |i: u64, name: &str, path: &str, takes| Lane {
        name: name.to_owned(),
        path: path.to_owned(),
        takes,
        key: signing_key(nonce ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
    };
    if routes {
        vec![
            lane(0, "a", "/a", Takes::Every),
            lane(1, "b", "/b", Takes::Only(Parity::Even)),
        ]
    } else {
        vec![lane(0, "default", "/hook", Takes::Every)]
    }
}

/// A 24-byte key that differs per run.
fn signing_key(seed: u64) -> Vec<u8> {
    (0..24u32)
        .map(|i| (seed.rotate_left(i * 7) >> 3) as u8 ^ (i as u8).wrapping_mul(37))
        .collect()
}

/// The source's destinations for `lanes` served at `addr`: the single
/// table for one lane without `routes` (so older binaries read it too),
/// named `[[sources.deliver]]` tables otherwise.
pub fn config(lanes: &[Lane], addr: SocketAddr, routes: bool, transform: Option<&str>) -> Deliver {
    let url = |lane: &Lane| format!("http://{addr}{}", lane.path);
    match lanes {
        [] => Deliver::Nowhere,
        [one] if !routes => Deliver::One {
            url: url(one),
            signing_secret: whsec(&one.key),
            transform: transform.map(str::to_owned),
            concurrency: None,
        },
        many => Deliver::Routes(
            many.iter()
                .map(|lane| Route {
                    name: lane.name.clone(),
                    url: url(lane),
                    signing_secret: whsec(&lane.key),
                    only: match lane.takes {
                        Takes::Every => None,
                        Takes::Only(parity) => Some(parity),
                    },
                })
                .collect(),
        ),
    }
}

/// How the wait after the ingest ended.
pub struct Drain {
    /// Per lane: when the downstream had seen every id the lane takes
    /// (polling precision).
    pub lanes_done: Vec<Option<Instant>>,
    /// When the database first showed no pending row, after that.
    pub database_done: Option<Instant>,
    /// Pending rows at the last look, when the database never got there.
    pub pending_left: Option<u64>,
    /// When the wait ended (drained, or the cap).
    pub ended: Instant,
}

impl Drain {
    /// When the last lane had everything; `None` while any lane lacks some.
    pub fn downstream_done(&self) -> Option<Instant> {
        self.lanes_done
            .iter()
            .try_fold(None, |last: Option<Instant>, done| {
                done.map(|t| last.max(Some(t)))
            })
            .flatten()
    }
}

/// Waits until each lane of `downstream` has seen every id in `receipts`
/// it takes and then until `database` has no pending row, giving up at
/// `until`.
pub async fn wait_for_drain(
    downstream: &Downstream,
    lanes: &[Lane],
    receipts: &Receipts,
    database: &Path,
    until: Instant,
) -> Drain {
    let mut drain = Drain {
        lanes_done: vec![None; lanes.len()],
        database_done: None,
        pending_left: None,
        ended: until,
    };
    while Instant::now() < until {
        for (i, lane) in lanes.iter().enumerate() {
            // The cheap count first; the exact check only when it can pass.
            if drain.lanes_done[i].is_none()
                && downstream.distinct(i) >= lane.takes.expected(receipts)
                && unseen(downstream, i, lane.takes, receipts) == 0
            {
                drain.lanes_done[i] = Some(Instant::now());
            }
        }
        if drain.downstream_done().is_some() {
            break;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
    if drain.downstream_done().is_none() {
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

/// Accepted ids lane `lane` takes and has not seen yet.
fn unseen(downstream: &Downstream, lane: usize, takes: Takes, receipts: &Receipts) -> u64 {
    receipts.with_map(|accepted| {
        downstream.with_seen(lane, |seen| {
            accepted
                .iter()
                .filter(|(id, r)| takes.takes(r) && !seen.first.contains_key(*id))
                .count() as u64
        })
    })
}

/// What one destination got, joined with the receipts.
pub struct LaneFigures {
    pub name: String,
    pub takes: Takes,
    /// Accepted ids this lane takes.
    pub expected: u64,
    /// Of those, first seen downstream inside the measured window.
    pub delivered_in_window: u64,
    /// Receipt-to-downstream, microseconds, sorted; ids the lane takes
    /// whose 202 came back in the measured window and that reached it.
    pub latencies_us: Vec<u64>,
    /// Of those, how many reached the downstream before the load generator
    /// had read their 202 (counted as 0 µs).
    pub before_202: u64,
    /// From the end of the ingest until the lane had seen the last id it
    /// takes; `None` when it had not within the cap.
    pub drain: Option<Duration>,
    /// Ids the lane takes that it had not seen when the ingest ended: the
    /// backlog the drain works off.
    pub backlog_at_ingest_end: u64,
    /// Ids the lane takes that it had not seen when the wait ended.
    pub backlog_at_cap: u64,
    /// Ids the lane takes that it never saw, even after the server stopped.
    pub missing: u64,
    /// Accepted ids the lane saw although its filter does not take them.
    pub extra: u64,
    /// Ids the lane saw that never got a 202 (a request that timed out on
    /// our side but was stored, or something stranger).
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
    /// The destination's delivery rows per state and attempt rows per
    /// outcome (`--routes` runs; empty otherwise).
    pub deliveries: Tally,
    pub attempts: Tally,
}

impl LaneFigures {
    /// Joins what lane `takes` saw with the receipts. `window` is the
    /// measured window, `ingest_end` when the last connection finished,
    /// `done` when the drain wait saw the lane complete, `ended` when the
    /// wait ended.
    fn join(
        accepted: &HashMap<String, Receipt>,
        seen: &Seen,
        takes: Takes,
        window: (Instant, Instant),
        ingest_end: Instant,
        done: Option<Instant>,
        ended: Instant,
    ) -> LaneFigures {
        let (from, until) = window;
        let mut f = LaneFigures::empty(takes);
        f.requests = seen.arrivals.len() as u64;
        f.distinct = seen.first.len() as u64;
        f.duplicates = f.requests - f.distinct;
        f.duplicate_max_gap = seen
            .arrivals
            .iter()
            .filter_map(|a| Some(a.at.saturating_duration_since(*seen.first.get(&a.delivery_id)?)))
            .filter(|gap| !gap.is_zero())
            .max();
        f.no_id = seen.no_id;
        f.bad_signature = seen.bad_signature;
        f.body_errors = seen.body_errors;
        for id in seen.first.keys() {
            match accepted.get(id) {
                None => f.unknown += 1,
                Some(r) if !takes.takes(r) => f.extra += 1,
                Some(_) => {}
            }
        }
        let mut last_first: Option<Instant> = None;
        for (id, r) in accepted.iter().filter(|(_, r)| takes.takes(r)) {
            f.expected += 1;
            let Some(&arrived) = seen.first.get(id) else {
                f.missing += 1;
                f.backlog_at_ingest_end += 1;
                f.backlog_at_cap += u64::from(done.is_none());
                continue;
            };
            last_first = last_first.max(Some(arrived));
            if arrived > ingest_end {
                f.backlog_at_ingest_end += 1;
            }
            // Seen after the wait gave up (during shutdown) still counts as
            // backlog at the cap; `missing` says what never arrived.
            if done.is_none() && arrived > ended {
                f.backlog_at_cap += 1;
            }
            if (from..=until).contains(&arrived) {
                f.delivered_in_window += 1;
            }
            if (from..=until).contains(&r.at) {
                match arrived.checked_duration_since(r.at) {
                    Some(d) => f.latencies_us.push(d.as_micros() as u64),
                    None => {
                        f.before_202 += 1;
                        f.latencies_us.push(0);
                    }
                }
            }
        }
        f.latencies_us.sort_unstable();
        f.drain = done.map(|_| {
            last_first.map_or(Duration::ZERO, |t| t.saturating_duration_since(ingest_end))
        });
        f
    }

    fn empty(takes: Takes) -> LaneFigures {
        LaneFigures {
            name: String::new(),
            takes,
            expected: 0,
            delivered_in_window: 0,
            latencies_us: Vec::new(),
            before_202: 0,
            drain: None,
            backlog_at_ingest_end: 0,
            backlog_at_cap: 0,
            missing: 0,
            extra: 0,
            unknown: 0,
            requests: 0,
            distinct: 0,
            duplicates: 0,
            duplicate_max_gap: None,
            no_id: 0,
            bad_signature: 0,
            body_errors: 0,
            deliveries: Vec::new(),
            attempts: Vec::new(),
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

    /// Events/s the lane got while working off the backlog left when the
    /// ingest ended (delivery alone, no ingest competing); `None` when
    /// there was no backlog or it did not drain.
    pub fn drain_per_sec(&self) -> Option<f64> {
        let secs = self.drain?.as_secs_f64();
        (self.backlog_at_ingest_end > 0 && secs > 0.0)
            .then(|| self.backlog_at_ingest_end as f64 / secs)
    }
}

/// Everything a `--deliver` run reports beyond the ingest figures.
pub struct Figures {
    /// In the order of the run's lanes.
    pub lanes: Vec<LaneFigures>,
    /// Whether the source had `[[sources.deliver]]` destinations (and the
    /// database was read per destination).
    pub routes: bool,
    /// Downstream requests to a path no lane serves.
    pub stray: u64,
    /// Delivery rows of destinations the run does not know, per state.
    pub other_deliveries: Tally,
    /// Database rows per state after the server stopped.
    pub states: Tally,
    /// Attempt rows per outcome, and the commonest failure texts.
    pub attempt_outcomes: Tally,
    pub attempt_errors: Tally,
    /// Time the database needed to show no pending row after the downstream
    /// had everything.
    pub db_settle: Option<Duration>,
    pub pending_at_cap: Option<u64>,
    /// WARN/ERROR lines in the server log, and the first few.
    pub log_problems: u64,
    pub log_examples: Vec<String>,
}

/// What [`Figures::collect`] joins.
pub struct Run<'a> {
    pub downstream: &'a Downstream,
    pub lanes: &'a [Lane],
    pub routes: bool,
    pub receipts: &'a Receipts,
    /// The measured window.
    pub window: (Instant, Instant),
    /// When the last connection finished.
    pub ingest_end: Instant,
    pub drain: &'a Drain,
    pub database: &'a Path,
    pub log: &'a str,
}

impl Figures {
    /// Joins receipts with arrivals, lane by lane, and reads the stopped
    /// server's database and log.
    pub fn collect(run: &Run) -> Result<Figures> {
        let mut lanes: Vec<LaneFigures> = run
            .lanes
            .iter()
            .enumerate()
            .map(|(i, lane)| {
                let mut f = run.receipts.with_map(|accepted| {
                    run.downstream.with_seen(i, |seen| {
                        LaneFigures::join(
                            accepted,
                            seen,
                            lane.takes,
                            run.window,
                            run.ingest_end,
                            run.drain.lanes_done[i],
                            run.drain.ended,
                        )
                    })
                });
                f.name = lane.name.clone();
                f
            })
            .collect();
        let mut other_deliveries = Vec::new();
        if run.routes {
            let (deliveries, attempts) = per_destination(run.database)?;
            other_deliveries = split_by_lane(&mut lanes, deliveries, |f| &mut f.deliveries);
            // Attempts of unknown destinations show in the run's totals.
            split_by_lane(&mut lanes, attempts, |f| &mut f.attempts);
        }
        let (attempt_outcomes, attempt_errors) = attempt_summary(run.database)?;
        let (log_problems, log_examples) = log_problems(run.log, 5);
        let drain = run.drain;
        Ok(Figures {
            lanes,
            routes: run.routes,
            stray: run.downstream.stray(),
            other_deliveries,
            states: count_states(run.database)?,
            attempt_outcomes,
            attempt_errors,
            db_settle: match (drain.downstream_done(), drain.database_done) {
                (Some(a), Some(b)) => Some(b.saturating_duration_since(a)),
                _ => None,
            },
            pending_at_cap: drain.pending_left,
            log_problems,
            log_examples,
        })
    }

    /// Rows in `state` after the server stopped.
    pub fn rows(&self, state: &str) -> u64 {
        count(&self.states, state)
    }

    pub fn attempts(&self, outcome: &str) -> u64 {
        count(&self.attempt_outcomes, outcome)
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

/// Hands each `(destination, label, count)` row to its lane's tally;
/// returns the rows of destinations no lane has, as `destination/label`.
fn split_by_lane(
    lanes: &mut [LaneFigures],
    rows: LaneTally,
    tally: impl Fn(&mut LaneFigures) -> &mut Tally,
) -> Tally {
    let mut other = Vec::new();
    for (destination, label, n) in rows {
        match lanes.iter_mut().find(|f| f.name == destination) {
            Some(f) => tally(f).push((label, n)),
            None => other.push((format!("{destination}/{label}"), n)),
        }
    }
    other
}

/// The count under `label`; 0 when absent.
pub fn count(tally: &Tally, label: &str) -> u64 {
    tally
        .iter()
        .find(|(s, _)| s == label)
        .map_or(0, |(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downstream::Arrival;

    fn receipt(at: Instant, parity: Parity) -> Receipt {
        Receipt { at, parity }
    }

    #[test]
    fn a_lane_that_takes_half_counts_missing_extra_and_unknown_apart() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let accepted: HashMap<String, Receipt> = [
            ("e1", receipt(ms(10), Parity::Even)),
            ("e2", receipt(ms(20), Parity::Even)),
            ("e3", receipt(ms(30), Parity::Even)),
            ("o1", receipt(ms(10), Parity::Odd)),
            ("o2", receipt(ms(20), Parity::Odd)),
        ]
        .into_iter()
        .map(|(id, r)| (id.to_owned(), r))
        .collect();
        let mut seen = Seen::default();
        // e1 twice, e2 once, e3 never; o1 (filtered out) once; x never accepted.
        for (id, at) in [("e1", 12), ("e2", 25), ("o1", 14), ("x", 15), ("e1", 40)] {
            seen.first.entry(id.to_owned()).or_insert(ms(at));
            seen.arrivals.push(Arrival {
                at: ms(at),
                delivery_id: id.to_owned(),
                status: 204,
            });
        }
        let f = LaneFigures::join(
            &accepted,
            &seen,
            Takes::Only(Parity::Even),
            (t0, ms(100)),
            ms(100),
            None,
            ms(200),
        );
        assert_eq!(f.expected, 3);
        assert_eq!(f.missing, 1);
        assert_eq!(f.extra, 1);
        assert_eq!(f.unknown, 1);
        assert_eq!((f.requests, f.distinct, f.duplicates), (5, 4, 1));
        assert_eq!(f.duplicate_max_gap, Some(Duration::from_millis(28)));
        assert_eq!(f.delivered_in_window, 2);
        assert_eq!(f.latencies_us, vec![2_000, 5_000]);
        assert_eq!((f.backlog_at_ingest_end, f.backlog_at_cap), (1, 1));
        assert_eq!(f.drain, None);

        let every = LaneFigures::join(
            &accepted,
            &seen,
            Takes::Every,
            (t0, ms(100)),
            ms(100),
            None,
            ms(200),
        );
        assert_eq!((every.expected, every.missing, every.extra), (5, 2, 0));
    }

    #[test]
    fn a_lane_drains_when_it_has_seen_the_last_id_it_takes() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let accepted: HashMap<String, Receipt> = [
            ("e1".to_owned(), receipt(ms(10), Parity::Even)),
            ("o1".to_owned(), receipt(ms(10), Parity::Odd)),
        ]
        .into_iter()
        .collect();
        let mut seen = Seen::default();
        for (id, at) in [("e1", 130), ("o1", 170)] {
            seen.first.insert(id.to_owned(), ms(at));
            seen.arrivals.push(Arrival {
                at: ms(at),
                delivery_id: id.to_owned(),
                status: 204,
            });
        }
        let b = LaneFigures::join(
            &accepted,
            &seen,
            Takes::Only(Parity::Even),
            (t0, ms(100)),
            ms(100),
            Some(ms(140)),
            ms(180),
        );
        // The odd id came later but is not b's: b drained at e1.
        assert_eq!(b.drain, Some(Duration::from_millis(30)));
        assert_eq!((b.backlog_at_ingest_end, b.backlog_at_cap), (1, 0));
        assert_eq!(b.drain_per_sec(), Some(1.0 / 0.030));
    }

    #[test]
    fn the_drain_is_done_when_every_lane_is() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(5);
        let drain = |lanes_done| Drain {
            lanes_done,
            database_done: None,
            pending_left: None,
            ended: later,
        };
        assert_eq!(drain(vec![Some(t0), None]).downstream_done(), None);
        assert_eq!(
            drain(vec![Some(later), Some(t0)]).downstream_done(),
            Some(later)
        );
        assert_eq!(drain(vec![]).downstream_done(), None);
    }

    #[test]
    fn routes_name_two_lanes_with_their_own_keys_and_one_lane_stays_the_single_table() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let two = lanes(true, 42);
        let Deliver::Routes(routes) = config(&two, addr, true, None) else {
            panic!("two lanes are routes");
        };
        let names: Vec<_> = routes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(routes[0].url, "http://127.0.0.1:9/a");
        assert_eq!(routes[1].url, "http://127.0.0.1:9/b");
        assert_eq!((routes[0].only, routes[1].only), (None, Some(Parity::Even)));
        assert_ne!(two[0].key, two[1].key);
        assert_ne!(routes[0].signing_secret, routes[1].signing_secret);

        let one = lanes(false, 42);
        assert_eq!(one[0].key, two[0].key);
        match config(&one, addr, false, None) {
            Deliver::One { url, .. } => assert_eq!(url, "http://127.0.0.1:9/hook"),
            _ => panic!("one lane without routes is the single table"),
        }
        assert!(matches!(config(&[], addr, false, None), Deliver::Nowhere));
    }
}
