//! GitHub redelivery: list a hook's deliveries, find the events that never
//! got through, and ask GitHub to send each again.
//!
//! API facts (shared/catchup-apis.md §1): deliveries come newest first,
//! paged by the `Link: rel="next"` URL, which is followed exactly as given;
//! each item is one *attempt* (`id`, 64-bit) of one event (`guid`, the
//! `X-GitHub-Delivery` header); `status == "OK"` is success; a redelivery is
//! `POST …/deliveries/{id}/attempts`, answered 202. GitHub only lists and
//! redelivers the last 3 days, and never retries by itself.
//!
//! A pass reads back to the last successful pass minus `overlap` (never
//! past [`MAX_AGE`]), groups attempts by GUID, leaves alone a GUID with an
//! `OK` attempt, one the inbox holds, one filtered out by `event_types`,
//! one whose newest attempt was already asked for, and one GitHub refused
//! for good; then asks for the newest attempt of each remaining GUID, oldest
//! event first, one request at a time, `pace` apart.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::StatusCode;
use serde::Deserialize;

use super::{Request, RunCtx};
use crate::clock;
use crate::config::{GithubRedeliveryConfig, HookTarget};
use crate::store::catchup::{self as sql, Op, RequestRecord};

/// How far back GitHub redelivers (3 days), less an hour so an attempt
/// does not age out between listing and asking.
pub const MAX_AGE: Duration = Duration::from_secs(71 * 3600);

/// Pages one pass reads at most (100 attempts each): a bound, not a goal.
const MAX_PAGES: u32 = 1000;

mod api;

pub use api::{API_VERSION, app_jwt, next_link, parse_time};
use api::{check, excerpt, rate_limited, send};

/// One item of the deliveries list (`hook-delivery-item`).
#[derive(Debug, Clone, Deserialize)]
pub struct Attempt {
    pub id: i64,
    pub guid: String,
    pub delivered_at: String,
    pub status: String,
    #[serde(default)]
    pub event: String,
}

/// A GUID's newest attempt, the one a redelivery names.
struct Candidate {
    guid: String,
    attempt_id: i64,
    event: String,
    at: i64,
}

pub async fn run(ctx: &mut RunCtx<'_>, cfg: &GithubRedeliveryConfig) -> anyhow::Result<()> {
    let source = ctx.job.source.clone();
    let floor = ctx.started_at - MAX_AGE.as_millis() as i64;
    let last = ctx
        .runner
        .db
        .read({
            let source = source.clone();
            move |conn| sql::last_success(conn, &source, super::GITHUB_JOB)
        })
        .await?;
    let start = last
        .map(|at| at.saturating_sub(i64::try_from(cfg.overlap.as_millis()).unwrap_or(i64::MAX)))
        .unwrap_or(floor)
        .max(floor);
    ctx.report.window_start = Some(start);

    let attempts = list(ctx, cfg, start).await?;
    let candidates = choose(ctx, cfg, attempts).await?;
    let transient = ask(ctx, cfg, candidates).await?;
    ctx.report.complete = !transient;
    Ok(())
}

/// Reads every page back to `start`.
async fn list(
    ctx: &mut RunCtx<'_>,
    cfg: &GithubRedeliveryConfig,
    start: i64,
) -> anyhow::Result<Vec<(i64, Attempt)>> {
    let first = format!("{}{}/deliveries?per_page=100", cfg.api_url, hook_path(cfg));
    let base = reqwest::Url::parse(&first).context("building the deliveries URL")?;
    let mut url = first;
    let mut read = HashSet::new();
    let mut kept = Vec::new();
    loop {
        ctx.step().await?;
        if !read.insert(url.clone()) {
            bail!("GitHub's next link points at a page already read; stopping rather than looping");
        }
        if ctx.report.pages >= MAX_PAGES {
            bail!("read {MAX_PAGES} pages without reaching the window's start; stopping");
        }
        let response = send(cfg, ctx.runner.client.get(&url))
            .await
            .context("listing the hook's deliveries")?;
        let response = check(response, "listing the hook's deliveries").await?;
        let next = next_link(response.headers());
        let page: Vec<Attempt> = response
            .json()
            .await
            .context("reading a page of deliveries")?;
        ctx.report.pages += 1;
        let mut reached_start = false;
        for attempt in page {
            let at = parse_time(&attempt.delivered_at).unwrap_or(ctx.started_at);
            if at < start {
                reached_start = true;
            } else {
                kept.push((at, attempt));
            }
        }
        match next {
            Some(next) if !reached_start => {
                let parsed = reqwest::Url::parse(&next)
                    .with_context(|| format!("GitHub's next link is not a URL: {next:?}"))?;
                if parsed.origin() != base.origin() {
                    bail!(
                        "GitHub's next link points at another host ({}); not sending the credentials there",
                        parsed.origin().ascii_serialization()
                    );
                }
                url = next;
            }
            _ => return Ok(kept),
        }
    }
}

/// Groups attempts by GUID and keeps the GUIDs to ask for, oldest first.
async fn choose(
    ctx: &mut RunCtx<'_>,
    cfg: &GithubRedeliveryConfig,
    attempts: Vec<(i64, Attempt)>,
) -> anyhow::Result<Vec<Candidate>> {
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<(i64, Attempt)>> = HashMap::new();
    for (at, a) in attempts {
        if !groups.contains_key(&a.guid) {
            order.push(a.guid.clone());
        }
        groups.entry(a.guid.clone()).or_default().push((at, a));
    }
    ctx.report.seen = order.len() as u32;
    let mut candidates = Vec::new();
    for guid in order {
        let group = &groups[&guid];
        if group.iter().any(|(_, a)| a.status == "OK") {
            ctx.report.skipped.delivered += 1;
            continue;
        }
        let (at, newest) = group
            .iter()
            .max_by_key(|(at, a)| (*at, a.id))
            .expect("a group has at least one attempt");
        if !cfg.event_types.is_empty() && !cfg.event_types.contains(&newest.event) {
            ctx.report.skipped.filtered += 1;
            continue;
        }
        candidates.push(Candidate {
            guid,
            attempt_id: newest.id,
            event: newest.event.clone(),
            at: *at,
        });
    }
    let guids: Vec<String> = candidates.iter().map(|c| c.guid.clone()).collect();
    let source = ctx.job.source.clone();
    let since = ctx.started_at - 2 * MAX_AGE.as_millis() as i64;
    let (held, prior) = ctx
        .runner
        .db
        .read(move |conn| {
            Ok((
                sql::held(conn, &source, &guids)?,
                sql::prior_requests(conn, &source, &guids, since)?,
            ))
        })
        .await?;
    let skipped = &mut ctx.report.skipped;
    candidates.retain(|c| {
        if held.contains(&c.guid) {
            skipped.held += 1;
        } else if prior.permanent.contains(&c.guid) {
            skipped.refused_before += 1;
        } else if prior
            .asked
            .get(&c.guid)
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

/// Asks for each candidate in turn. Returns whether some request failed in
/// a way worth trying again next pass.
async fn ask(
    ctx: &mut RunCtx<'_>,
    cfg: &GithubRedeliveryConfig,
    candidates: Vec<Candidate>,
) -> anyhow::Result<bool> {
    let mut transient = false;
    for (i, c) in candidates.into_iter().enumerate() {
        if ctx.dry_run {
            ctx.report.requests.push(request(&c, "would_ask", None));
            continue;
        }
        if i > 0 {
            ctx.pause(cfg.pace).await;
        }
        ctx.step().await?;
        let url = format!(
            "{}{}/deliveries/{}/attempts",
            cfg.api_url,
            hook_path(cfg),
            c.attempt_id
        );
        let requested_at = clock::now_ms();
        let answer = send(cfg, ctx.runner.client.post(&url)).await;
        let (status, outcome, error, stop) = match answer {
            Err(e) => (None, "failed", Some(format!("{e:#}")), None),
            Ok(response) => {
                let status = response.status();
                let code = Some(status.as_u16());
                if status.is_success() {
                    (code, "asked", None, None)
                } else if let Some(limit) = rate_limited(&response) {
                    (code, "failed", Some(limit.to_string()), Some(limit.into()))
                } else if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                    let e = check(response, "asking for a redelivery")
                        .await
                        .expect_err("a 401 or 403 is an error");
                    (code, "failed", Some(format!("{e:#}")), Some(e))
                } else if status.is_client_error() {
                    let body = excerpt(response).await;
                    (code, "permanent", Some(body), None)
                } else {
                    (code, "failed", Some(excerpt(response).await), None)
                }
            }
        };
        match outcome {
            "asked" => {}
            "permanent" => {
                ctx.report.failed += 1;
                tracing::warn!(
                    delivery.guid = %c.guid,
                    attempt.id = c.attempt_id,
                    status = status.unwrap_or_default(),
                    "GitHub refused to redeliver; not asking for this delivery again"
                );
            }
            _ => {
                ctx.report.failed += 1;
                transient = true;
            }
        }
        ctx.report.requests.push(request(&c, outcome, status));
        let record = RequestRecord {
            run_id: ctx.run_id,
            source: ctx.job.source.clone(),
            guid: c.guid,
            attempt_id: c.attempt_id,
            requested_at,
            status_code: status,
            outcome,
            error,
        };
        ctx.runner.db.write(Op::Request(record)).await?;
        if let Some(stop) = stop {
            return Err(stop);
        }
    }
    Ok(transient)
}

fn request(c: &Candidate, outcome: &'static str, status: Option<u16>) -> Request {
    Request {
        guid: c.guid.clone(),
        attempt_id: c.attempt_id,
        event: c.event.clone(),
        outcome,
        status,
    }
}

fn hook_path(cfg: &GithubRedeliveryConfig) -> String {
    match &cfg.target {
        HookTarget::Repo { repo, hook_id, .. } => format!("/repos/{repo}/hooks/{hook_id}"),
        HookTarget::Org { org, hook_id, .. } => format!("/orgs/{org}/hooks/{hook_id}"),
        HookTarget::App { .. } => "/app/hook".to_owned(),
    }
}
