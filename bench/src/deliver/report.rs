//! A `--deliver` run's figures as the report shows them: JSON fields, the
//! summary lines, and the checks that fail the run.
//!
//! A run with one lane (`--deliver`) keeps the keys and the line it always
//! had. With `--routes`, `destinations` lists the lanes, every per-lane key
//! is prefixed with the lane's name (`a.delivered_per_sec`,
//! `b.downstream_extra`), and each lane gets its own line; what belongs to
//! the whole run (event rows, all attempts, the server log) stays
//! unprefixed.

use serde_json::{Value, json};

use super::{Figures, LaneFigures, count};
use crate::{pairs, round};

/// One JSON field of the report.
pub type Field = (String, Value);

impl Figures {
    /// The report's fields; `duration` is the measured window in seconds.
    pub fn fields(&self, duration: f64, drain_timeout: f64) -> Vec<Field> {
        let mut out = Vec::new();
        let named = |prefix: &str, fields: Vec<(&str, Value)>| -> Vec<Field> {
            fields
                .into_iter()
                .map(|(k, v)| (format!("{prefix}{k}"), v))
                .collect()
        };
        let prefix = |lane: &LaneFigures| {
            if self.routes {
                format!("{}.", lane.name)
            } else {
                String::new()
            }
        };
        if self.routes {
            let names: Vec<&str> = self.lanes.iter().map(|l| l.name.as_str()).collect();
            out.push(("destinations".to_owned(), json!(names)));
        }
        for lane in &self.lanes {
            out.extend(named(&prefix(lane), lane.headline(duration)));
        }
        out.extend(named(
            "",
            vec![
                ("rows_delivered", json!(self.rows("delivered"))),
                ("rows_pending", json!(self.rows("pending"))),
                ("rows_dead", json!(self.rows("dead"))),
                ("rows_undelivered", json!(self.undelivered_rows())),
            ],
        ));
        for lane in &self.lanes {
            out.extend(named(&prefix(lane), lane.detail(self.routes)));
        }
        let mut shared = vec![
            (
                "db_settle_ms",
                json!(self.db_settle.map(|t| t.as_millis() as u64)),
            ),
            ("pending_at_cap", json!(self.pending_at_cap)),
            ("attempts_delivered", json!(self.attempts("delivered"))),
            ("attempts_retry", json!(self.attempts("retry"))),
            ("attempts_dead", json!(self.attempts("dead"))),
            ("server_log_warnings", json!(self.log_problems)),
            ("drain_timeout", json!(drain_timeout)),
        ];
        if self.routes {
            shared.push(("downstream_stray", json!(self.stray)));
            shared.push((
                "deliveries_other_destinations",
                json!(self.other_deliveries.iter().map(|(_, n)| n).sum::<u64>()),
            ));
        }
        out.extend(named("", shared));
        out
    }

    /// The summary lines under the run's headline.
    pub fn print(&self, duration: f64, drain_timeout: f64) {
        if !self.routes {
            for lane in &self.lanes {
                println!(
                    "  deliver: {} | rows {} | attempts {} | server log {} warn/error lines",
                    lane.line(duration, drain_timeout),
                    pairs(&self.states),
                    pairs(&self.attempt_outcomes),
                    self.log_problems,
                );
            }
            return;
        }
        for lane in &self.lanes {
            println!(
                "  deliver {} ({}): {} | {} expected {} extra | deliveries {} | attempts {}",
                lane.name,
                lane.takes.describe(),
                lane.line(duration, drain_timeout),
                lane.expected,
                lane.extra,
                pairs(&lane.deliveries),
                pairs(&lane.attempts),
            );
        }
        println!(
            "  deliver: rows {} | attempts {} | {} stray requests | deliveries elsewhere {} | server log {} warn/error lines",
            pairs(&self.states),
            pairs(&self.attempt_outcomes),
            self.stray,
            pairs(&self.other_deliveries),
            self.log_problems,
        );
    }

    /// Prints what failed; returns whether every check passed.
    pub fn check(&self, drain_timeout: f64) -> bool {
        let mut ok = true;
        for (error, n) in &self.attempt_errors {
            eprintln!("  failed attempts: {n} x {error}");
        }
        for line in &self.log_examples {
            eprintln!("  server log: {line}");
        }
        if self.undelivered_rows() > 0 {
            ok = false;
            eprintln!(
                "FAIL: {} rows are not delivered after the run ({}); pending at the end of the wait: {:?}",
                self.undelivered_rows(),
                pairs(&self.states),
                self.pending_at_cap
            );
        }
        for lane in &self.lanes {
            ok &= lane.check(self.routes, drain_timeout);
        }
        if self.stray > 0 {
            ok = false;
            eprintln!(
                "FAIL: the downstream got {} requests on a path no destination posts to",
                self.stray
            );
        }
        if !self.other_deliveries.is_empty() {
            ok = false;
            eprintln!(
                "FAIL: the database holds deliveries to destinations the run did not configure: {}",
                pairs(&self.other_deliveries)
            );
        }
        ok
    }
}

impl LaneFigures {
    fn latency_field(&self, q: f64) -> Value {
        json!(self.latency_ms(q).map(|v| round(v, 3)))
    }

    fn headline(&self, duration: f64) -> Vec<(&'static str, Value)> {
        vec![
            (
                "delivered_per_sec",
                json!(round(self.delivered_in_window as f64 / duration, 1)),
            ),
            ("recv_to_downstream_p50_ms", self.latency_field(0.5)),
            ("recv_to_downstream_p99_ms", self.latency_field(0.99)),
            ("recv_to_downstream_max_ms", self.latency_field(1.0)),
            (
                "drain_secs",
                json!(self.drain.map(|t| round(t.as_secs_f64(), 3))),
            ),
            ("backlog_remaining", json!(self.backlog_at_cap)),
            ("backlog_at_ingest_end", json!(self.backlog_at_ingest_end)),
            (
                "drain_per_sec",
                json!(self.drain_per_sec().map(|r| round(r, 1))),
            ),
        ]
    }

    /// Beyond the headline; `routes` adds what only a filtered lane and a
    /// per-destination database have.
    fn detail(&self, routes: bool) -> Vec<(&'static str, Value)> {
        let mut out = vec![
            ("downstream_requests", json!(self.requests)),
            ("downstream_distinct", json!(self.distinct)),
            ("downstream_duplicates", json!(self.duplicates)),
            (
                "duplicate_max_gap_ms",
                json!(self.duplicate_max_gap.map(|t| t.as_millis() as u64)),
            ),
            ("downstream_missing", json!(self.missing)),
            ("downstream_unknown", json!(self.unknown)),
            ("downstream_no_id", json!(self.no_id)),
            ("bad_signatures", json!(self.bad_signature)),
            ("latency_samples", json!(self.latencies_us.len())),
            ("delivered_before_202", json!(self.before_202)),
        ];
        if routes {
            out.extend([
                ("filter", json!(self.takes.describe())),
                ("expected", json!(self.expected)),
                ("downstream_extra", json!(self.extra)),
                ("deliveries", json!(self.deliveries_total())),
                (
                    "deliveries_delivered",
                    json!(count(&self.deliveries, "delivered")),
                ),
                (
                    "deliveries_undelivered",
                    json!(self.deliveries_total() - count(&self.deliveries, "delivered")),
                ),
                (
                    "attempts_delivered",
                    json!(count(&self.attempts, "delivered")),
                ),
                ("attempts_retry", json!(count(&self.attempts, "retry"))),
                ("attempts_dead", json!(count(&self.attempts, "dead"))),
            ]);
        }
        out
    }

    fn deliveries_total(&self) -> u64 {
        self.deliveries.iter().map(|(_, n)| n).sum()
    }

    /// Delivery rate, latency, drain and what the downstream saw.
    fn line(&self, duration: f64, drain_timeout: f64) -> String {
        let ms = |q: f64| {
            self.latency_ms(q)
                .map_or("-".to_owned(), |v| round(v, 3).to_string())
        };
        format!(
            "{} delivered/s | receipt->downstream p50 {} ms p99 {} ms max {} ms ({} samples, {} before the 202) | drain {} | downstream {} requests {} ids {} duplicates {} missing {} unknown {} bad signatures",
            round(self.delivered_in_window as f64 / duration, 1),
            ms(0.5),
            ms(0.99),
            ms(1.0),
            self.latencies_us.len(),
            self.before_202,
            match self.drain {
                Some(t) => format!(
                    "{:.3} s for a backlog of {}{}",
                    t.as_secs_f64(),
                    self.backlog_at_ingest_end,
                    self.drain_per_sec()
                        .map_or(String::new(), |r| format!(" ({} /s)", round(r, 0)))
                ),
                None => format!(
                    "NOT within {} s ({} ids still unseen)",
                    drain_timeout, self.backlog_at_cap
                ),
            },
            self.requests,
            self.distinct,
            self.duplicates,
            self.missing,
            self.unknown,
            self.bad_signature,
        )
    }

    /// Prints what failed for this lane; returns whether all passed.
    fn check(&self, routes: bool, drain_timeout: f64) -> bool {
        let mut ok = true;
        // `default` for the single table: the messages read as before.
        let to = if routes {
            format!("destination {:?}", self.name)
        } else {
            "the downstream".to_owned()
        };
        if self.missing > 0 {
            ok = false;
            eprintln!("FAIL: {} ids answered 202 never reached {to}", self.missing);
        }
        if self.extra > 0 {
            ok = false;
            eprintln!(
                "FAIL: {to} got {} ids its filter ({}) does not take",
                self.extra,
                self.takes.describe()
            );
        }
        if self.drain.is_none() {
            ok = false;
            eprintln!(
                "FAIL: the backlog {}did not drain within {drain_timeout} s of the ingest ending ({} ids unseen then)",
                if routes {
                    format!("of {to} ")
                } else {
                    String::new()
                },
                self.backlog_at_cap
            );
        }
        if self.bad_signature > 0 || self.no_id > 0 || self.body_errors > 0 {
            ok = false;
            eprintln!(
                "FAIL: {to} got {} requests with a bad webhook-signature, {} without a delivery id, {} with a broken body",
                self.bad_signature, self.no_id, self.body_errors
            );
        }
        if routes {
            let delivered = count(&self.deliveries, "delivered");
            if self.deliveries_total() != self.expected || delivered != self.expected {
                ok = false;
                eprintln!(
                    "FAIL: the database holds {} deliveries to {to} ({}), expected {} delivered",
                    self.deliveries_total(),
                    pairs(&self.deliveries),
                    self.expected
                );
            }
        }
        ok
    }
}
