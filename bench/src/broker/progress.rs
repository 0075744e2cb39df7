//! Delivered rows over time, read from the database: a broker has no
//! downstream that notes arrivals. A thread counts the delivered rows every
//! [`PERIOD`] (a read-only WAL reader, which does not block the server's
//! writer); the rate in the measured window and the backlog drain come
//! from those samples, to [`PERIOD`]'s precision.
//!
//! Both read only indexes of `deliveries` ([`DELIVERED`],
//! [`ANY_PENDING`]), never the `events` rows that hold the bodies: counting
//! `events` by state scanned the whole table every period, and that took
//! most of a core from the two the server and the broker share (the broker
//! kinds' drains were measured a third slower than they are).

use anyhow::Result;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::server::open_read_only;

const PERIOD: Duration = Duration::from_millis(50);

/// Deliveries no longer pending: all of them less the pending ones. In a
/// bench database rows are only ever added, never deleted, so the
/// largest `id` is how many there are (a B-tree's last entry, where a
/// `count(*)` reads every entry); the pending ones are the partial index
/// `deliveries_due`, as small as the backlog. A bench source has no
/// filter and no transform, so none is `skipped`; a `dead` one would
/// count here, and fails the run's check at the end.
const DELIVERED: &str = "SELECT (SELECT coalesce(max(id), 0) FROM deliveries) \
     - (SELECT count(*) FROM deliveries WHERE state = 'pending')";

/// Whether any delivery is pending: the first entry of `deliveries_due`.
const ANY_PENDING: &str = "SELECT EXISTS (SELECT 1 FROM deliveries WHERE state = 'pending')";

/// `(when, delivered rows)`, oldest first.
type Samples = Arc<Mutex<Vec<(Instant, u64)>>>;

pub struct Sampler {
    samples: Samples,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    pub fn start(database: &Path) -> Sampler {
        let samples: Samples = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (into, stopped, database) =
            (Arc::clone(&samples), Arc::clone(&stop), database.to_owned());
        let thread = std::thread::spawn(move || sample(&database, &into, &stopped));
        Sampler {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// Delivered rows at `at`: the last sample at or before it.
    pub fn at(&self, at: Instant) -> u64 {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples
            .iter()
            .take_while(|(t, _)| *t <= at)
            .last()
            .map_or(0, |(_, n)| *n)
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop();
    }
}

fn sample(database: &Path, into: &Samples, stop: &AtomicBool) {
    let conn = match open_read_only(database) {
        Ok(c) => c,
        Err(e) => return eprintln!("delivered-rows sampler: {e:#}"),
    };
    while !stop.load(Ordering::Relaxed) {
        let n: rusqlite::Result<i64> = conn.query_row(DELIVERED, [], |r| r.get(0));
        match n {
            Ok(n) => into
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((Instant::now(), u64::try_from(n).unwrap_or(0))),
            Err(e) => eprintln!("delivered-rows sampler: {e}"),
        }
        std::thread::sleep(PERIOD);
    }
}

/// Waits until the database has no pending row (polled every [`PERIOD`]),
/// up to `until`; returns when it got there.
pub async fn wait_for_drain(database: &Path, until: Instant) -> Option<Instant> {
    let conn = match open_read_only(database) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("reading pending rows: {e:#}");
            return None;
        }
    };
    loop {
        match conn.query_row(ANY_PENDING, [], |r| r.get::<_, bool>(0)) {
            Ok(false) => return Some(Instant::now()),
            Ok(true) => {}
            Err(e) => eprintln!("reading pending rows: {e:#}"),
        }
        if Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(PERIOD).await;
    }
}

/// What a `--broker` run reports beyond the ingest figures.
pub struct BrokerFigures {
    pub kind: &'static str,
    /// Delivered rows per second inside the measured window.
    pub delivered_per_sec: f64,
    /// Accepted events not yet delivered when the ingest ended.
    pub backlog_at_ingest_end: u64,
    /// From the end of the ingest to no pending row; `None`: not within
    /// the cap.
    pub drain: Option<Duration>,
    pub rows_undelivered: u64,
    pub rows_delivered: u64,
    /// What the broker holds after hookbox stopped.
    pub held: u64,
    pub attempts_retry: u64,
}

impl BrokerFigures {
    /// Delivered/s while working off the backlog, with no ingest competing.
    pub fn drain_per_sec(&self) -> Option<f64> {
        let secs = self.drain?.as_secs_f64();
        (self.backlog_at_ingest_end > 0 && secs > 0.0)
            .then(|| self.backlog_at_ingest_end as f64 / secs)
    }

    pub fn fields(&self) -> Vec<(String, Value)> {
        let round = |x: f64| (x * 10.0).round() / 10.0;
        [
            ("broker", json!(self.kind)),
            ("delivered_per_sec", json!(round(self.delivered_per_sec))),
            ("backlog_at_ingest_end", json!(self.backlog_at_ingest_end)),
            (
                "drain_secs",
                json!(
                    self.drain
                        .map(|d| (d.as_secs_f64() * 100.0).round() / 100.0)
                ),
            ),
            ("drain_per_sec", json!(self.drain_per_sec().map(round))),
            ("rows_undelivered", json!(self.rows_undelivered)),
            ("broker_held", json!(self.held)),
            (
                "broker_held_minus_delivered",
                json!(self.held as i64 - self.rows_delivered as i64),
            ),
            ("attempts_retry", json!(self.attempts_retry)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    pub fn print(&self) {
        println!(
            "  {}: delivered {:.0}/s during ingest | backlog {} at ingest end, drained in {} ({}/s) | rows delivered {} undelivered {} | broker holds {} | failed attempts {}",
            self.kind,
            self.delivered_per_sec,
            self.backlog_at_ingest_end,
            self.drain
                .map_or("not within the cap".to_owned(), |d| format!(
                    "{:.2} s",
                    d.as_secs_f64()
                )),
            self.drain_per_sec()
                .map_or("-".to_owned(), |r| format!("{r:.0}")),
            self.rows_delivered,
            self.rows_undelivered,
            self.held,
            self.attempts_retry,
        );
    }

    /// Every row delivered, and the broker holds exactly those.
    pub fn check(&self) -> Result<(), String> {
        if self.drain.is_none() || self.rows_undelivered > 0 {
            return Err(format!(
                "{} rows not delivered (drained: {})",
                self.rows_undelivered,
                self.drain.is_some()
            ));
        }
        if self.held != self.rows_delivered {
            return Err(format!(
                "the broker holds {} messages but {} rows were delivered",
                self.held, self.rows_delivered
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_at_an_instant_is_the_last_sample_before_it() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let sampler = Sampler {
            samples: Arc::new(Mutex::new(vec![(ms(10), 1), (ms(60), 5), (ms(110), 9)])),
            stop: Arc::new(AtomicBool::new(true)),
            thread: None,
        };
        assert_eq!(sampler.at(ms(5)), 0);
        assert_eq!(sampler.at(ms(60)), 5);
        assert_eq!(sampler.at(ms(100)), 5);
        assert_eq!(sampler.at(ms(500)), 9);
    }

    #[test]
    fn a_broker_holding_other_than_the_delivered_rows_fails() {
        let mut f = BrokerFigures {
            kind: "nats",
            delivered_per_sec: 1.0,
            backlog_at_ingest_end: 10,
            drain: Some(Duration::from_secs(2)),
            rows_undelivered: 0,
            rows_delivered: 100,
            held: 100,
            attempts_retry: 0,
        };
        assert!(f.check().is_ok());
        assert_eq!(f.drain_per_sec(), Some(5.0));
        f.held = 101;
        assert!(f.check().is_err());
        f.held = 100;
        f.drain = None;
        assert!(f.check().is_err());
    }
}
