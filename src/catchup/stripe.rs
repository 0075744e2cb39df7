//! Stripe backfill: list the events Stripe still keeps and insert the ones
//! the inbox lacks, marked `fetched`.
//!
//! API facts (shared/catchup-apis.md §2): `GET /v1/events` with the key as
//! a Bearer token, newest first, `created[gte]` in unix seconds, paged with
//! `starting_after=<last id>` while `has_more`; the list goes back 30 days.
//! A 429 is waited out (its `Retry-After`, within bounds) and the pass goes
//! on reading.
//! A listed event has the id and shape of the pushed one, so both share one
//! inbox key: the id, `account/id` for Connect events (the same rule as the
//! webhook verifier, whose code this reuses).
//!
//! The window starts at the newest Stripe event the inbox holds (by its
//! `created`), or the last successful pass if that is older, minus
//! `overlap`, and never more than [`MAX_AGE`] back. Missing events are
//! inserted oldest first, so arrival order follows creation order: the
//! window, the look-up and the insert are `backfill`'s, shared with
//! Square; this module lists Stripe's events.

use std::time::Duration;

use anyhow::{Context, bail};
use axum::http::HeaderMap;
use bytes::Bytes;
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::backfill::{self, Fetch, Fetched};
use super::http::send_waiting;
use super::{RateLimited, RunCtx};
use crate::config::StripeBackfillConfig;
use crate::ingress::receive::payload::{Identified, Inbound};
use crate::store::catchup::TimeField;

/// How far back Stripe lists events.
pub const MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Pages one pass reads at most (100 events each).
const MAX_PAGES: u32 = 5000;

#[derive(Deserialize)]
struct Page {
    data: Vec<Box<RawValue>>,
    #[serde(default)]
    has_more: bool,
}

pub async fn run(ctx: &mut RunCtx<'_>, cfg: &StripeBackfillConfig) -> anyhow::Result<()> {
    backfill::run(ctx, &Stripe(cfg), cfg.overlap).await
}

struct Stripe<'a>(&'a StripeBackfillConfig);

impl Fetch for Stripe<'_> {
    const PROVIDER: &'static str = "Stripe";
    const MAX_AGE: Duration = MAX_AGE;
    const TIME_FIELD: TimeField = TimeField::UnixSeconds("$.created");

    async fn list(&self, ctx: &mut RunCtx<'_>, start: i64) -> anyhow::Result<Vec<Fetched>> {
        let mut listed = list(ctx, self.0, start / 1000).await?;
        // Stripe lists newest first.
        listed.reverse();
        Ok(listed)
    }
}

/// Reads every page since `start` (unix seconds), newest first.
async fn list(
    ctx: &mut RunCtx<'_>,
    cfg: &StripeBackfillConfig,
    start: i64,
) -> anyhow::Result<Vec<Fetched>> {
    let url = format!("{}/v1/events", cfg.api_url);
    let mut after: Option<String> = None;
    let mut listed = Vec::new();
    loop {
        ctx.step().await?;
        if ctx.report.pages >= MAX_PAGES {
            bail!("read {MAX_PAGES} pages of events; stopping");
        }
        let mut query = vec![
            ("limit", "100".to_owned()),
            ("created[gte]", start.to_string()),
        ];
        if let Some(id) = &after {
            query.push(("starting_after", id.clone()));
        }
        let page_url =
            reqwest::Url::parse_with_params(&url, &query).context("building the events URL")?;
        let response = send_waiting(ctx, "Stripe", || {
            ctx.runner
                .client
                .get(page_url.clone())
                .bearer_auth(cfg.api_key.expose())
        })
        .await
        .context("listing Stripe events")?;
        let response = check(response).await?;
        let page: Page = response
            .json()
            .await
            .context("reading a page of Stripe events")?;
        ctx.report.pages += 1;
        let mut last_id = None;
        for raw in &page.data {
            let body = raw.get().as_bytes();
            let headers = HeaderMap::new();
            let req = Inbound::new(&headers, body);
            last_id = req.json_str("/id");
            match crate::ingress::receive::stripe::identify(&req) {
                Ok(Identified::Event(identity)) => listed.push(Fetched {
                    delivery_id: identity.delivery_id,
                    event_type: identity.event_type,
                    order_key: ctx.job.order_key.iter().find_map(|p| req.json_str(p)),
                    body: Bytes::copy_from_slice(body),
                }),
                Ok(_) => {}
                Err(e) => {
                    ctx.report.failed += 1;
                    tracing::warn!(reason = e.reason(), "skipped a listed Stripe event");
                }
            }
        }
        match (page.has_more, last_id) {
            (false, _) => return Ok(listed),
            (true, Some(id)) if after.as_ref() != Some(&id) => after = Some(id),
            (true, _) => {
                bail!("Stripe said has_more but gave no new cursor; stopping rather than looping")
            }
        }
    }
}

/// Turns an error status into an error that says what to fix.
async fn check(response: reqwest::Response) -> anyhow::Result<reqwest::Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        return Err(RateLimited {
            provider: "Stripe",
            detail: format!("status {status}"),
        }
        .into());
    }
    let hint = match status {
        StatusCode::UNAUTHORIZED => {
            "the api_key is wrong or revoked (check stripe_backfill.api_key)"
        }
        StatusCode::FORBIDDEN => "the key lacks read access to Events",
        _ => "unexpected answer",
    };
    let bytes = response.bytes().await.unwrap_or_default();
    let body = crate::support::excerpt::bytes(&bytes[..bytes.len().min(300)]);
    bail!("Stripe answered {status} listing events: {hint}: {body}")
}
