//! What the jobs that ask a provider to send failed deliveries again share
//! (GitHub redelivery, GitLab resend): where a pass starts reading, which
//! events to ask for, and the loop that asks for each one, paced, and
//! records what the provider answered.
//!
//! The provider modules implement [`Resend`]: they list their attempts as
//! [`Attempt`]s, and say how one request is made and what its answer
//! means. Everything else is [`run`]'s, so both jobs skip, pace, stop and
//! record alike. Requests go to `redelivery_requests` keyed by the event's
//! delivery id (`guid`: GitHub's GUID, GitLab's `Idempotency-Key`) and the
//! attempt asked for.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::{RateLimited, Request, RunCtx};
use crate::store::catchup::{self as tables, Op, RequestRecord};
use crate::support::clock;

/// One delivery attempt of an event, as a provider lists it.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The attempt's own id: what a redelivery request names, and what
    /// the request log records (a provider with text ids gives a stable
    /// number derived from it, see [`numeric_id`]).
    pub id: i64,
    /// What a request to send the event again names, when that is not
    /// `id` (Paddle replays an event's first notification, whichever
    /// attempt is newest); empty: `id`.
    pub target: String,
    /// The event's delivery id, the one the inbox stores it under.
    pub key: String,
    /// When it was attempted (unix ms).
    pub at: i64,
    /// The provider counts it delivered.
    pub ok: bool,
    /// The provider is still trying it by itself (Paddle's `needs_retry`):
    /// asking now would be refused.
    pub pending: bool,
    pub event: String,
}

/// An event to ask for: its newest attempt.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub key: String,
    pub attempt_id: i64,
    /// [`Attempt::target`] of the newest attempt.
    pub target: String,
    pub event: String,
    pub at: i64,
}

/// The oldest time (unix ms) a pass reads back to: the last successful
/// pass minus `overlap`, never past `max_age` (the first pass reads all of
/// it). What the provider no longer keeps of the wanted window is reported
/// as `uncovered_from`.
async fn window_start(
    ctx: &mut RunCtx<'_>,
    overlap: Duration,
    max_age: Duration,
) -> anyhow::Result<i64> {
    let floor = ctx.started_at - millis(max_age);
    let (source, job) = (ctx.job.source.clone(), ctx.job.name());
    let last = ctx
        .runner
        .db
        .read(move |conn| tables::last_success(conn, &source, job))
        .await?;
    let wanted = last.map(|at| at.saturating_sub(millis(overlap)));
    let start = wanted.unwrap_or(floor).max(floor);
    ctx.report.window_start = Some(start);
    ctx.report.uncovered_from = wanted.filter(|w| *w < floor);
    Ok(start)
}

/// A stable, positive 63-bit number for a provider's text id (Paddle's
/// `ntf_…`), for the request log's integer `attempt_id`.
pub fn numeric_id(text: &str) -> i64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(bytes) >> 1) as i64
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Groups attempts by event and keeps the events to ask for, oldest
/// first: not one with a delivered attempt, one outside `event_types`
/// (when set), one the inbox holds, one refused for good before, or one
/// whose newest attempt was already asked for (the provider adds a new
/// attempt when it tries again, and the next pass asks for that one).
async fn choose(
    ctx: &mut RunCtx<'_>,
    event_types: &[String],
    attempts: Vec<Attempt>,
    max_age: Duration,
) -> anyhow::Result<Vec<Candidate>> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<Attempt>> = HashMap::new();
    for a in attempts {
        if !groups.contains_key(&a.key) {
            order.push(a.key.clone());
        }
        groups.entry(a.key.clone()).or_default().push(a);
    }
    ctx.report.seen = order.len() as u32;
    let mut candidates = Vec::new();
    for key in order {
        let group = &groups[&key];
        if group.iter().any(|a| a.ok) {
            ctx.report.skipped.delivered += 1;
            continue;
        }
        if group.iter().any(|a| a.pending) {
            ctx.report.skipped.in_flight += 1;
            continue;
        }
        let Some(newest) = group.iter().max_by_key(|a| (a.at, a.id)) else {
            continue;
        };
        if !event_types.is_empty() && !event_types.contains(&newest.event) {
            ctx.report.skipped.filtered += 1;
            continue;
        }
        candidates.push(Candidate {
            key,
            attempt_id: newest.id,
            target: newest.target.clone(),
            event: newest.event.clone(),
            at: newest.at,
        });
    }
    let keys: Vec<String> = candidates.iter().map(|c| c.key.clone()).collect();
    let source = ctx.job.source.clone();
    let since = ctx.started_at - 2 * millis(max_age);
    let (held, prior) = ctx
        .runner
        .db
        .read(move |conn| {
            Ok((
                tables::held(conn, &source, &keys)?,
                tables::prior_requests(conn, &source, &keys, since)?,
            ))
        })
        .await?;
    let skipped = &mut ctx.report.skipped;
    candidates.retain(|c| {
        if held.contains(&c.key) {
            skipped.held += 1;
        } else if prior.permanent.contains(&c.key) {
            skipped.refused_before += 1;
        } else if prior
            .asked
            .get(&c.key)
            .is_some_and(|ids| ids.contains(&c.attempt_id))
        {
            skipped.asked_before += 1;
        } else {
            return true;
        }
        false
    });
    candidates.sort_by_key(|c| (c.at, c.attempt_id));
    Ok(candidates)
}

/// What the provider answered one request, as the loop acts on it.
pub enum Answer {
    /// Accepted, with the HTTP status.
    Asked(u16),
    /// Refused for good: never asked again.
    Permanent(u16, String),
    /// Failed for now: the next pass asks again.
    Failed(Option<u16>, String),
    /// Rate limited, with the wait the provider asked for (if it said):
    /// the loop waits and asks again, within bounds.
    Wait(Option<Duration>, RateLimited),
    /// Stops the pass (credentials, or a limit not worth waiting out);
    /// recorded as failed.
    Stop(Option<u16>, anyhow::Error),
}

/// How one provider lists its attempts and asks for one event again.
pub trait Resend {
    /// Named in log lines.
    const PROVIDER: &'static str;
    /// How far back the provider lists attempts and sends them again.
    const MAX_AGE: Duration;

    /// Every attempt back to `start` (unix ms), in any order.
    async fn list(&self, ctx: &mut RunCtx<'_>, start: i64) -> anyhow::Result<Vec<Attempt>>;

    async fn ask(&self, client: &reqwest::Client, c: &Candidate) -> Answer;
}

/// What a pass takes from its job's settings.
pub struct Pass<'a> {
    pub overlap: Duration,
    pub event_types: &'a [String],
    pub pacing: Pacing,
}

/// One pass of a redelivery job: reads the provider's attempts back to
/// where the last successful pass left off, chooses the events to ask for,
/// and asks for each. The pass is complete when no request failed in a way
/// worth trying again.
pub async fn run<R: Resend>(
    ctx: &mut RunCtx<'_>,
    resend: &R,
    pass: Pass<'_>,
) -> anyhow::Result<()> {
    let start = window_start(ctx, pass.overlap, R::MAX_AGE).await?;
    let attempts = resend.list(ctx, start).await?;
    let candidates = choose(ctx, pass.event_types, attempts, R::MAX_AGE).await?;
    let transient = ask_all(ctx, pass.pacing, resend, candidates).await?;
    ctx.report.complete = !transient;
    Ok(())
}

/// How requests are spaced.
#[derive(Debug, Clone, Copy)]
pub enum Pacing {
    /// At least this long between two requests.
    Fixed(Duration),
    /// At most `limit` requests in any `window`.
    Window { limit: u32, window: Duration },
}

/// The longest a pass waits out one rate limit; a provider asking for
/// longer gets the rest in the next pass.
pub const MAX_RATE_WAIT: Duration = Duration::from_secs(5 * 60);

/// Rate limits in a row on one request before the pass gives up.
const MAX_WAITS: u32 = 3;

/// Asks for each candidate in turn, paced. Returns whether some request
/// failed in a way worth trying again next pass; an error stops the pass,
/// and the candidates not asked for are reported `deferred`.
async fn ask_all<R: Resend>(
    ctx: &mut RunCtx<'_>,
    pacing: Pacing,
    resend: &R,
    candidates: Vec<Candidate>,
) -> anyhow::Result<bool> {
    if ctx.dry_run {
        for c in &candidates {
            ctx.report.requests.push(request(c, "would_ask", None));
        }
        return Ok(false);
    }
    let mut sent: VecDeque<Instant> = VecDeque::new();
    let mut transient = false;
    let mut queue = candidates.into_iter();
    let mut waits = 0;
    let mut current = queue.next();
    while let Some(c) = current.take() {
        pace(ctx, pacing, &mut sent).await;
        ctx.step().await?;
        let requested_at = clock::now_ms();
        let answer = resend.ask(&ctx.runner.client, &c).await;
        // Counted from the answer: later than the provider counts, so never
        // over its limit.
        sent.push_back(Instant::now());
        let (status, outcome, error, stop) = match answer {
            Answer::Asked(code) => (Some(code), "asked", None, None),
            Answer::Permanent(code, body) => {
                tracing::warn!(
                    delivery.id = %c.key,
                    attempt.id = c.attempt_id,
                    status = code,
                    "{} refused to send it again; not asking for this delivery again",
                    R::PROVIDER
                );
                (Some(code), "permanent", Some(body), None)
            }
            Answer::Failed(code, why) => (code, "failed", Some(why), None),
            Answer::Stop(code, e) => (code, "failed", Some(format!("{e:#}")), Some(e)),
            Answer::Wait(wait, limit) => {
                waits += 1;
                let wait = wait.unwrap_or(match pacing {
                    Pacing::Window { window, .. } => window,
                    Pacing::Fixed(_) => MAX_RATE_WAIT,
                });
                if waits > MAX_WAITS || wait > MAX_RATE_WAIT {
                    defer(ctx, std::iter::once(c).chain(queue));
                    return Err(limit.into());
                }
                tracing::info!(
                    wait_ms = wait.as_millis() as u64,
                    "{} rate limit reached; waiting before asking again",
                    R::PROVIDER
                );
                ctx.pause(wait).await;
                current = Some(c);
                continue;
            }
        };
        waits = 0;
        if outcome != "asked" {
            ctx.report.failed += 1;
            transient |= outcome == "failed";
        }
        ctx.report.requests.push(request(&c, outcome, status));
        let record = RequestRecord {
            run_id: ctx.run_id,
            source: ctx.job.source.clone(),
            guid: c.key,
            attempt_id: c.attempt_id,
            requested_at,
            status_code: status,
            outcome,
            error,
        };
        ctx.runner.db.write(Op::Request(record)).await?;
        if let Some(stop) = stop {
            defer(ctx, queue);
            return Err(stop);
        }
        current = queue.next();
    }
    Ok(transient)
}

/// Waits until the next request is within `pacing`.
async fn pace(ctx: &RunCtx<'_>, pacing: Pacing, sent: &mut VecDeque<Instant>) {
    let wait_until = match pacing {
        Pacing::Fixed(gap) => sent.back().map(|last| *last + gap),
        Pacing::Window { limit, window } => {
            let now = Instant::now();
            while sent.front().is_some_and(|t| *t + window <= now) {
                sent.pop_front();
            }
            (sent.len() >= limit as usize)
                .then(|| sent.front().map(|oldest| *oldest + window))
                .flatten()
        }
    };
    if let Some(at) = wait_until {
        let wait = at.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            ctx.pause(wait).await;
        }
    }
}

/// Reports what a stopped pass leaves for the next one.
fn defer(ctx: &mut RunCtx<'_>, rest: impl Iterator<Item = Candidate>) {
    for c in rest {
        ctx.report.requests.push(request(&c, "deferred", None));
    }
}

fn request(c: &Candidate, outcome: &'static str, status: Option<u16>) -> Request {
    Request {
        guid: c.key.clone(),
        attempt_id: c.attempt_id,
        target: Some(c.target.clone()).filter(|t| !t.is_empty()),
        event: c.event.clone(),
        outcome,
        status,
    }
}
