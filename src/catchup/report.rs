//! What a catch-up pass found and did: returned to the CLI (which prints
//! it), the admin API (which serialises it) and the scheduler (which logs
//! it).

use std::fmt;

use serde::Serialize;

use super::Task;
use crate::store::ledger::{Entry, MissingBy, Summary};
use crate::support::clock::format_ms;

/// A provider said "slow down": the pass stops and the next one resumes.
#[derive(Debug, thiserror::Error)]
#[error("{provider} rate limit reached; stopping this pass, the next one resumes ({detail})")]
pub struct RateLimited {
    pub provider: &'static str,
    pub detail: String,
}

/// Why events (by GUID on GitHub, `Idempotency-Key` on GitLab, event id on
/// Stripe) were left alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// An event with an attempt the provider counts delivered (GitHub
    /// `OK`, GitLab 2xx).
    pub delivered: u32,
    /// The provider is still retrying it by itself (Paddle
    /// `needs_retry`, `not_attempted`).
    pub in_flight: u32,
    /// Already in the inbox for this source.
    pub held: u32,
    /// Its newest attempt was already asked for, and the provider has not
    /// tried it again yet.
    pub asked_before: u32,
    /// The provider refused to send it again for good in an earlier pass.
    pub refused_before: u32,
    /// Not in `event_types`.
    pub filtered: u32,
    /// GitLab: an attempt without `Idempotency-Key` or
    /// `X-Gitlab-Webhook-UUID`, so nothing to look for in the inbox.
    pub unidentified: u32,
}

/// One redelivery request (or, in a dry run, one that would be made).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Request {
    pub guid: String,
    /// The attempt asked to redeliver: the GUID's newest.
    pub attempt_id: i64,
    /// What the request named, when not `attempt_id` (Paddle: the event's
    /// first notification, `ntf_…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub event: String,
    /// `asked`, `permanent`, `failed`; `deferred`: left for the next pass
    /// by a rate limit; `would_ask` in a dry run.
    pub outcome: &'static str,
    pub status: Option<u16>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RunReport {
    pub source: String,
    pub job: &'static str,
    pub dry_run: bool,
    pub run_id: Option<i64>,
    /// Another pass of this job held its lock: nothing was done.
    pub busy: bool,
    /// The oldest time (unix ms) the pass looked back to.
    pub window_start: Option<i64>,
    /// Where the pass should have started (unix ms), when that is older
    /// than the provider keeps: what happened between it and
    /// `window_start` cannot be recovered.
    pub uncovered_from: Option<i64>,
    pub pages: u32,
    /// GUIDs (GitHub) or events (Stripe) in the window.
    pub seen: u32,
    pub skipped: Skipped,
    pub requests: Vec<Request>,
    /// Stripe: the event ids inserted (in a dry run: that would be).
    pub inserted: Vec<String>,
    /// Requests or events that failed (for good or for now).
    pub failed: u32,
    /// The whole window was read and nothing is left to try again.
    pub complete: bool,
    pub rate_limited: bool,
    pub error: Option<String>,
}

impl RunReport {
    pub fn new(job: &Task, dry_run: bool) -> Self {
        RunReport {
            source: job.source.clone(),
            job: job.name(),
            dry_run,
            ..RunReport::default()
        }
    }

    /// Redeliveries GitHub accepted, or events inserted.
    pub fn asked(&self) -> u32 {
        let accepted = self
            .requests
            .iter()
            .filter(|r| r.outcome == "asked")
            .count();
        (accepted + self.inserted.len()) as u32
    }

    fn outcomes(&self, outcome: &str) -> u32 {
        self.requests
            .iter()
            .filter(|r| r.outcome == outcome)
            .count() as u32
    }

    /// What the pass could not recover, by reason.
    pub fn missing(&self) -> MissingBy {
        let permanent = self.outcomes("permanent");
        // Left for the next pass: by a rate limit, or by what stopped it.
        let deferred = self.outcomes("deferred");
        let (limited, stopped) = if self.rate_limited {
            (deferred, 0)
        } else {
            (0, deferred)
        };
        MissingBy {
            outside_window: u32::from(self.uncovered_from.is_some()),
            refused: permanent,
            refused_before: self.skipped.refused_before,
            rate_limited: limited,
            // `failed` counts refused requests too, and unreadable events.
            provider_error: self.failed.saturating_sub(permanent) + stopped,
        }
    }

    /// The pass's line in the completeness ledger: listed, what the inbox
    /// held (or the provider delivered), what the pass recovered, what it
    /// left to the provider and what it could not recover.
    pub fn ledger(&self, run_id: i64, started_at: i64) -> Entry {
        let s = &self.skipped;
        Entry {
            run_id,
            source: self.source.clone(),
            job: self.job.to_owned(),
            window_start: self.window_start,
            window_end: started_at,
            uncovered_from: self.uncovered_from,
            listed: self.seen.saturating_sub(s.filtered),
            held: s.held + s.delivered,
            recovered: self.asked(),
            pending: s.in_flight + s.asked_before,
            missing: self.missing().total(),
            missing_by: self.missing(),
            complete: self.complete,
            error: self.error.clone(),
        }
    }

    /// One line for the log: info when whole, warn on a rate limit, error
    /// otherwise (someone should look: a token, a key, a hook id).
    pub fn log(&self) {
        let asked = self.asked();
        match (&self.error, self.rate_limited) {
            (None, _) => tracing::info!(
                dry_run = self.dry_run,
                pages = self.pages,
                seen = self.seen,
                asked,
                failed = self.failed,
                complete = self.complete,
                "catch-up pass finished"
            ),
            (Some(error), true) => tracing::warn!(
                pages = self.pages,
                asked,
                error = %error,
                "catch-up pass stopped early"
            ),
            (Some(error), false) => tracing::error!(
                pages = self.pages,
                asked,
                error = %error,
                "catch-up pass failed; the next pass tries the same window again"
            ),
        }
    }
}

/// The ledger in one line: `last 72 h: 1,204 listed, 1,204 held, 3
/// recovered, 0 missing`, and the reasons when something is missing.
pub fn completeness_line(s: &Summary, window: std::time::Duration) -> String {
    let hours = window.as_secs() / 3600;
    let span = if window.as_secs().is_multiple_of(3600) && hours > 0 {
        format!("{hours} h")
    } else {
        humantime::format_duration(window).to_string()
    };
    let mut line = format!(
        "last {span}: {} listed, {} held, {} recovered, {} missing",
        thousands(s.listed),
        thousands(s.held),
        thousands(s.recovered),
        thousands(s.missing)
    );
    if s.passes == 0 {
        line.push_str(" (no catch-up pass in that time)");
    } else if s.missing > 0 {
        line.push_str(&format!(" ({})", s.missing_by.describe()));
    }
    line
}

/// `1204` as `1,204`.
fn thousands(n: u32) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What `hookbox catch-up` prints.
impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dry = if self.dry_run { " (dry run)" } else { "" };
        writeln!(f, "{} {}{dry}", self.source, self.job)?;
        if self.busy {
            return writeln!(
                f,
                "busy: another pass of this job is running (the server?); try again later"
            );
        }
        if let Some(start) = self.window_start {
            writeln!(f, "window: since {}", format_ms(start))?;
        }
        writeln!(f, "pages read: {}, seen: {}", self.pages, self.seen)?;
        let s = &self.skipped;
        write!(
            f,
            "skipped: {} delivered, {} already in the inbox, {} asked before, {} refused before, {} filtered out",
            s.delivered, s.held, s.asked_before, s.refused_before, s.filtered
        )?;
        if s.unidentified > 0 {
            write!(f, ", {} without a delivery id", s.unidentified)?;
        }
        if s.in_flight > 0 {
            write!(f, ", {} still retried by the provider", s.in_flight)?;
        }
        writeln!(f)?;
        for r in &self.requests {
            let status = r.status.map(|s| format!(" ({s})")).unwrap_or_default();
            let verb = match r.outcome {
                "would_ask" => "would ask",
                "deferred" => "left for the next pass",
                other => other,
            };
            match &r.target {
                Some(target) => {
                    writeln!(f, "{verb}: {} via {target} [{}]{status}", r.guid, r.event)?
                }
                None => writeln!(
                    f,
                    "{verb}: {} attempt {} [{}]{status}",
                    r.guid, r.attempt_id, r.event
                )?,
            }
        }
        let verb = if self.dry_run {
            "would insert"
        } else {
            "inserted"
        };
        for id in &self.inserted {
            writeln!(f, "{verb}: {id}")?;
        }
        match &self.error {
            None if self.complete => writeln!(f, "result: complete"),
            None => writeln!(
                f,
                "result: incomplete ({} failed; the next pass tries again)",
                self.failed
            ),
            Some(e) => writeln!(f, "result: stopped: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_reads_as_the_design_writes_it() {
        let mut s = Summary {
            passes: 3,
            listed: 1204,
            held: 1204,
            recovered: 3,
            ..Summary::default()
        };
        let day3 = std::time::Duration::from_secs(72 * 3600);
        assert_eq!(
            completeness_line(&s, day3),
            "last 72 h: 1,204 listed, 1,204 held, 3 recovered, 0 missing"
        );
        s.missing_by.refused = 2;
        s.missing = 2;
        assert!(completeness_line(&s, day3).ends_with("2 missing (2 refused)"));
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }
}
