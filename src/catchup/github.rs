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
//! event first, one request at a time, `pace` apart. Grouping, skipping,
//! pacing and the request log are `redeliver`'s, shared with GitLab; this
//! module lists deliveries and says what GitHub's answers mean.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::StatusCode;
use serde::Deserialize;

use super::RunCtx;
use super::http::{excerpt, next_link, parse_time};
use super::redeliver::{self, Answer, Candidate, Pacing, Resend};
use crate::config::{GithubRedeliveryConfig, HookTarget};

/// How far back GitHub redelivers (3 days), less an hour so an attempt
/// does not age out between listing and asking.
pub const MAX_AGE: Duration = Duration::from_secs(71 * 3600);

/// Pages one pass reads at most (100 attempts each): a bound, not a goal.
const MAX_PAGES: u32 = 1000;

mod api;

pub use api::{API_VERSION, app_jwt};
use api::{check, rate_limited, rate_wait, send};

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

pub async fn run(ctx: &mut RunCtx<'_>, cfg: &GithubRedeliveryConfig) -> anyhow::Result<()> {
    let pass = redeliver::Pass {
        overlap: cfg.overlap,
        event_types: &cfg.event_types,
        pacing: Pacing::Fixed(cfg.pace),
    };
    redeliver::run(ctx, &Github(cfg), pass).await
}

/// Reads every page back to `start`.
async fn list(
    ctx: &mut RunCtx<'_>,
    cfg: &GithubRedeliveryConfig,
    start: i64,
) -> anyhow::Result<Vec<redeliver::Attempt>> {
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
        let response = read_page(ctx, cfg, &url).await?;
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
                kept.push(redeliver::Attempt {
                    id: attempt.id,
                    target: String::new(),
                    ok: attempt.status == "OK",
                    pending: false,
                    key: attempt.guid,
                    at,
                    event: attempt.event,
                });
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

/// GETs one page, waiting out a short rate limit (what `rate_wait` says,
/// within `redeliver::MAX_RATE_WAIT`, a few times in a row); a longer one
/// is returned for `check` to stop the pass with.
async fn read_page(
    ctx: &RunCtx<'_>,
    cfg: &GithubRedeliveryConfig,
    url: &str,
) -> anyhow::Result<reqwest::Response> {
    let mut waits = 0;
    loop {
        let response = send(cfg, ctx.runner.client.get(url))
            .await
            .context("listing the hook's deliveries")?;
        if rate_limited(&response).is_none() {
            return Ok(response);
        }
        let wait = rate_wait(&response);
        waits += 1;
        if waits > 3 || wait > redeliver::MAX_RATE_WAIT {
            return Ok(response);
        }
        tracing::info!(
            wait_ms = wait.as_millis() as u64,
            "GitHub rate limit reached; waiting before reading on"
        );
        ctx.pause(wait).await;
        ctx.step().await?;
    }
}

/// One redelivery request: `POST …/deliveries/{id}/attempts`.
struct Github<'a>(&'a GithubRedeliveryConfig);

impl Resend for Github<'_> {
    const PROVIDER: &'static str = "GitHub";
    const MAX_AGE: Duration = MAX_AGE;

    async fn list(
        &self,
        ctx: &mut RunCtx<'_>,
        start: i64,
    ) -> anyhow::Result<Vec<redeliver::Attempt>> {
        list(ctx, self.0, start).await
    }

    async fn ask(&self, client: &reqwest::Client, c: &Candidate) -> Answer {
        let cfg = self.0;
        let url = format!(
            "{}{}/deliveries/{}/attempts",
            cfg.api_url,
            hook_path(cfg),
            c.attempt_id
        );
        let response = match send(cfg, client.post(&url)).await {
            Ok(response) => response,
            Err(e) => return Answer::Failed(None, format!("{e:#}")),
        };
        let status = response.status();
        let code = status.as_u16();
        if status.is_success() {
            Answer::Asked(code)
        } else if let Some(limit) = rate_limited(&response) {
            // Waited out within the pass when short; past the bound, the
            // rest is left to the next pass.
            Answer::Wait(Some(rate_wait(&response)), limit)
        } else if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            let e = match check(response, "asking for a redelivery").await {
                Err(e) => e,
                Ok(_) => anyhow::anyhow!("GitHub answered {status} asking for a redelivery"),
            };
            Answer::Stop(Some(code), e)
        } else if status.is_client_error() {
            Answer::Permanent(code, excerpt(response).await)
        } else {
            Answer::Failed(Some(code), excerpt(response).await)
        }
    }
}

fn hook_path(cfg: &GithubRedeliveryConfig) -> String {
    match &cfg.target {
        HookTarget::Repo { repo, hook_id, .. } => format!("/repos/{repo}/hooks/{hook_id}"),
        HookTarget::Org { org, hook_id, .. } => format!("/orgs/{org}/hooks/{hook_id}"),
        HookTarget::App { .. } => "/app/hook".to_owned(),
    }
}
