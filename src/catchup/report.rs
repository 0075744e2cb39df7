//! What a catch-up pass found and did: returned to the CLI (which prints
//! it), the admin API (which serialises it) and the scheduler (which logs
//! it).

use std::fmt;

use serde::Serialize;

use super::Task;
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
        writeln!(f)?;
        for r in &self.requests {
            let status = r.status.map(|s| format!(" ({s})")).unwrap_or_default();
            let verb = match r.outcome {
                "would_ask" => "would ask",
                "deferred" => "left for the next pass",
                other => other,
            };
            writeln!(
                f,
                "{verb}: {} attempt {} [{}]{status}",
                r.guid, r.attempt_id, r.event
            )?;
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
