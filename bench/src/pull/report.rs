//! What a pull run measures and prints: latency samples, the hand-off
//! joined with the 202s, the server's CPU over a window, the stopped
//! server's database, the run's checks and its JSON line.

use anyhow::Result;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{DESTINATION, Mode};
use crate::load::Receipts;
use crate::server::{
    LaneTally, Tally, attempt_summary, clock_ticks_per_sec, count_events, count_states,
    log_problems, per_destination, proc_cpu,
};
use crate::{ordered_json, pairs, round};

/// Sorted latency samples in microseconds.
#[derive(Default)]
pub struct Latencies(Vec<u64>);

impl Latencies {
    pub fn new(mut us: Vec<u64>) -> Latencies {
        us.sort_unstable();
        Latencies(us)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The `q` quantile (0..=1) in milliseconds, nearest rank; `None`
    /// with no samples.
    pub fn ms(&self, q: f64) -> Option<f64> {
        let v = &self.0;
        if v.is_empty() {
            return None;
        }
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Some(round(v[rank - 1] as f64 / 1000.0, 3))
    }

    pub fn show(&self, q: f64) -> String {
        self.ms(q).map_or("-".to_owned(), |v| v.to_string())
    }
}

/// What the consumers took, joined with when each id got its 202.
#[derive(Debug, Default, PartialEq)]
pub struct Handoff {
    /// 202 to the answer that held the id, for ids whose 202 came back
    /// inside the window, microseconds.
    pub latencies_us: Vec<u64>,
    /// Of those, answers that arrived before the load generator had read
    /// the 202 (counted as 0).
    pub before_202: u64,
    /// Accepted ids no take ever held.
    pub missing: u64,
    /// Taken ids that never got a 202.
    pub unknown: u64,
}

impl Handoff {
    /// `taken` maps each taken id to when its first answer arrived.
    pub fn join(
        receipts: &Receipts,
        taken: &HashMap<String, Instant>,
        window: (Instant, Instant),
    ) -> Handoff {
        let mut h = Handoff::default();
        receipts.with_map(|accepted| {
            for (id, r) in accepted {
                let Some(&at) = taken.get(id) else {
                    h.missing += 1;
                    continue;
                };
                if !(window.0..=window.1).contains(&r.at) {
                    continue;
                }
                match at.checked_duration_since(r.at) {
                    Some(d) => h.latencies_us.push(d.as_micros() as u64),
                    None => {
                        h.before_202 += 1;
                        h.latencies_us.push(0);
                    }
                }
            }
            h.unknown = taken
                .keys()
                .filter(|id| !accepted.contains_key(*id))
                .count() as u64;
        });
        h
    }
}

/// CPU time a process uses from now on, as a share of wall time.
pub struct CpuWindow {
    pid: u32,
    ticks: f64,
    before: Option<Duration>,
    started: Instant,
}

impl CpuWindow {
    pub fn start(pid: u32) -> CpuWindow {
        let ticks = clock_ticks_per_sec();
        CpuWindow {
            pid,
            ticks,
            before: proc_cpu(pid, ticks).ok(),
            started: Instant::now(),
        }
    }

    /// CPU seconds used since [`CpuWindow::start`] and their share of the
    /// wall time, in percent (of one core); `None` when /proc could not
    /// tell.
    pub fn used(&self) -> Option<(f64, f64)> {
        let cpu = proc_cpu(self.pid, self.ticks)
            .ok()?
            .saturating_sub(self.before?);
        let wall = self.started.elapsed().as_secs_f64();
        Some((
            round(cpu.as_secs_f64(), 3),
            round(cpu.as_secs_f64() / wall * 100.0, 1),
        ))
    }
}

/// What the stopped server's database holds.
pub struct Stored {
    rows: u64,
    states: Tally,
    /// Per destination and state.
    deliveries: LaneTally,
    attempts: Tally,
}

impl Stored {
    pub fn read(database: &Path) -> Result<Stored> {
        let (deliveries, _) = per_destination(database)?;
        Ok(Stored {
            rows: count_events(database)?,
            states: count_states(database)?,
            deliveries,
            attempts: attempt_summary(database)?.0,
        })
    }

    pub fn undelivered_rows(&self) -> u64 {
        self.states
            .iter()
            .filter(|(s, _)| s != "delivered")
            .map(|(_, n)| n)
            .sum()
    }

    fn deliveries_delivered(&self) -> u64 {
        self.deliveries
            .iter()
            .filter(|(d, s, _)| d == DESTINATION && s == "delivered")
            .map(|(_, _, n)| n)
            .sum()
    }

    fn deliveries(&self) -> u64 {
        self.deliveries.iter().map(|(_, _, n)| n).sum()
    }

    pub fn fields(&self) -> Vec<(&'static str, Value)> {
        vec![
            ("rows", json!(self.rows)),
            ("rows_undelivered", json!(self.undelivered_rows())),
            ("deliveries", json!(self.deliveries())),
            ("deliveries_delivered", json!(self.deliveries_delivered())),
            (
                "attempts_delivered",
                json!(crate::deliver::count(&self.attempts, "delivered")),
            ),
            (
                "attempts_failed",
                json!(
                    self.attempts
                        .iter()
                        .filter(|(o, _)| o != "delivered")
                        .map(|(_, n)| n)
                        .sum::<u64>()
                ),
            ),
        ]
    }

    pub fn line(&self) -> String {
        let deliveries: Vec<(String, u64)> = self
            .deliveries
            .iter()
            .map(|(d, s, n)| (format!("{d}/{s}"), *n))
            .collect();
        format!(
            "rows {} ({}) | deliveries {} | attempts {}",
            self.rows,
            pairs(&self.states),
            pairs(&deliveries),
            pairs(&self.attempts)
        )
    }

    /// Every one of `expected` rows stored and delivered, through the pull
    /// destination and nowhere else.
    pub fn check(&self, expected: u64, checks: &mut Checks) {
        checks.expect(self.rows == expected, || {
            format!(
                "events holds {} rows but the server answered 202 {expected} times",
                self.rows
            )
        });
        checks.expect(self.undelivered_rows() == 0, || {
            format!(
                "{} rows are not delivered after the run ({})",
                self.undelivered_rows(),
                pairs(&self.states)
            )
        });
        checks.expect(
            self.deliveries() == expected && self.deliveries_delivered() == expected,
            || {
                format!(
                    "the database holds {} deliveries ({:?}), expected {expected} delivered to {DESTINATION:?}",
                    self.deliveries(),
                    self.deliveries
                )
            },
        );
    }
}

/// The failed checks of one run.
#[derive(Default)]
pub struct Checks {
    failed: Vec<String>,
}

impl Checks {
    pub fn expect(&mut self, ok: bool, why: impl FnOnce() -> String) {
        if !ok {
            self.failed.push(why());
        }
    }

    /// Whether every check so far passed.
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
    }

    /// Prints each failure, or `OK`; returns whether all passed.
    pub fn finish(self) -> bool {
        for why in &self.failed {
            eprintln!("FAIL: {why}");
        }
        if self.failed.is_empty() {
            println!("OK");
        }
        self.failed.is_empty()
    }
}

/// Prints the run's JSON line (the one `bench/run.sh` collects): `kind`
/// marks a pull run, `pull` says which.
pub fn print_json(
    scenario: &str,
    mode: Mode,
    durability: &str,
    fields: Vec<(&'static str, Value)>,
) {
    let pull = match mode {
        Mode::Latency => "latency",
        Mode::Listen => "listen",
        Mode::Idle => "idle",
    };
    let mut all = vec![
        ("scenario".to_owned(), json!(scenario)),
        ("kind".to_owned(), json!("pull")),
        ("pull".to_owned(), json!(pull)),
        ("durability".to_owned(), json!(durability)),
    ];
    all.extend(fields.into_iter().map(|(k, v)| (k.to_owned(), v)));
    println!("{}", ordered_json(&all));
}

/// The server log's WARN/ERROR lines: counted, the first few printed.
pub fn log_warnings(log: &str) -> u64 {
    let (n, first) = log_problems(log, 5);
    for line in first {
        eprintln!("  server log: {line}");
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Receipt;
    use crate::payload::Parity;
    use std::collections::HashMap;

    #[test]
    fn handoff_measures_from_the_202_and_counts_missing_and_unknown_apart() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let receipts = Receipts::default();
        for (id, at) in [("a", 10), ("b", 20), ("c", 30), ("late", 150)] {
            receipts.record(
                id.to_owned(),
                Receipt {
                    at: ms(at),
                    parity: Parity::Even,
                },
            );
        }
        let taken: HashMap<String, Instant> = [
            ("a", ms(12)),
            // Answered before the 202 was read: 0.
            ("b", ms(19)),
            ("late", ms(151)),
            ("stray", ms(40)),
        ]
        .into_iter()
        .map(|(id, at)| (id.to_owned(), at))
        .collect();
        let h = Handoff::join(&receipts, &taken, (t0, ms(100)));
        let mut us = h.latencies_us.clone();
        us.sort_unstable();
        assert_eq!(us, vec![0, 2_000]);
        assert_eq!((h.before_202, h.missing, h.unknown), (1, 1, 1));
    }

    #[test]
    fn latencies_use_the_nearest_rank() {
        let l = Latencies::new((1..=1000).rev().collect());
        assert_eq!(l.ms(0.5), Some(0.5));
        assert_eq!(l.ms(0.99), Some(0.99));
        assert_eq!(l.ms(1.0), Some(1.0));
        assert_eq!(Latencies::default().ms(0.5), None);
        assert_eq!(Latencies::default().show(0.5), "-");
    }

    #[test]
    fn checks_pass_only_when_nothing_failed() {
        let mut c = Checks::default();
        c.expect(true, || unreachable!("not asked for when it holds"));
        assert!(c.failed.is_empty());
        c.expect(false, || "lost".to_owned());
        assert_eq!(c.failed, vec!["lost".to_owned()]);
    }

    #[test]
    fn stored_counts_undelivered_rows_and_the_pull_lanes_deliveries() {
        let s = Stored {
            rows: 3,
            states: vec![("delivered".into(), 2), ("pending".into(), 1)],
            deliveries: vec![
                (DESTINATION.into(), "delivered".into(), 2),
                (DESTINATION.into(), "pending".into(), 1),
            ],
            attempts: vec![("delivered".into(), 2)],
        };
        assert_eq!(s.undelivered_rows(), 1);
        assert_eq!((s.deliveries(), s.deliveries_delivered()), (3, 2));
        let mut c = Checks::default();
        s.check(3, &mut c);
        assert_eq!(c.failed.len(), 2, "{:?}", c.failed);
    }
}
