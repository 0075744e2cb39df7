//! Stripe backfill: list the events Stripe still keeps and insert the ones
//! the inbox lacks, marked `fetched`.
//!
//! API facts (shared/catchup-apis.md §2): `GET /v1/events` with the key as
//! a Bearer token, newest first, `created[gte]` in unix seconds, paged with
//! `starting_after=<last id>` while `has_more`; the list goes back 30 days.
//! A listed event has the id and shape of the pushed one, so both share one
//! inbox key: the id, `account/id` for Connect events (the same rule as the
//! webhook verifier, whose code this reuses).
//!
//! The window starts at the newest Stripe event the inbox holds (by its
//! `created`), or the last successful pass if that is older, minus
//! `overlap`, and never more than [`MAX_AGE`] back. Missing events are
//! inserted oldest first, so arrival order follows creation order.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::http::HeaderMap;
use bytes::Bytes;
use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{RateLimited, RunCtx};
use crate::config::StripeBackfillConfig;
use crate::config::route::Body;
use crate::ingress::receive::payload::{Identified, Inbound};
use crate::store::catchup as tables;
use crate::store::models::{Inserted, NewEvent, Origin};
use crate::support::clock;

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

/// A listed event the inbox lacks.
struct Missing {
    delivery_id: String,
    event_type: Option<String>,
    order_key: Option<String>,
    body: Bytes,
}

pub async fn run(ctx: &mut RunCtx<'_>, cfg: &StripeBackfillConfig) -> anyhow::Result<()> {
    let now_secs = ctx.started_at / 1000;
    let floor = now_secs - MAX_AGE.as_secs() as i64;
    let source = ctx.job.source.clone();
    let (newest, last) = ctx
        .runner
        .db
        .read(move |conn| {
            Ok((
                tables::newest_event_time(conn, &source)?,
                tables::last_success(conn, &source, super::STRIPE_JOB)?,
            ))
        })
        .await?;
    let anchor = match (newest, last.map(|ms| ms / 1000)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let start = anchor
        .map(|a| a.saturating_sub(i64::try_from(cfg.overlap.as_secs()).unwrap_or(i64::MAX)))
        .unwrap_or(floor)
        .max(floor);
    ctx.report.window_start = Some(start * 1000);

    let missing = list(ctx, cfg, start).await?;
    insert(ctx, missing).await?;
    ctx.report.complete = true;
    Ok(())
}

/// Reads every page since `start`, keeping the events the inbox lacks.
async fn list(
    ctx: &mut RunCtx<'_>,
    cfg: &StripeBackfillConfig,
    start: i64,
) -> anyhow::Result<Vec<Missing>> {
    let url = format!("{}/v1/events", cfg.api_url);
    let mut after: Option<String> = None;
    let mut missing = Vec::new();
    let mut known = HashSet::new();
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
        let response = ctx
            .runner
            .client
            .get(page_url)
            .bearer_auth(cfg.api_key.expose())
            .send()
            .await
            .context("listing Stripe events")?;
        let response = check(response).await?;
        let page: Page = response
            .json()
            .await
            .context("reading a page of Stripe events")?;
        ctx.report.pages += 1;
        let mut last_id = None;
        let mut listed = Vec::new();
        for raw in &page.data {
            let body = raw.get().as_bytes();
            let headers = HeaderMap::new();
            let req = Inbound::new(&headers, body);
            last_id = req.json_str("/id");
            match crate::ingress::receive::stripe::identify(&req) {
                Ok(Identified::Event(identity)) if known.insert(identity.delivery_id.clone()) => {
                    ctx.report.seen += 1;
                    listed.push(Missing {
                        delivery_id: identity.delivery_id,
                        event_type: identity.event_type,
                        order_key: ctx.job.order_key.iter().find_map(|p| req.json_str(p)),
                        body: Bytes::copy_from_slice(body),
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    ctx.report.failed += 1;
                    tracing::warn!(reason = e.reason(), "skipped a listed Stripe event");
                }
            }
        }
        let ids: Vec<String> = listed.iter().map(|m| m.delivery_id.clone()).collect();
        let source = ctx.job.source.clone();
        let held = ctx
            .runner
            .db
            .read(move |conn| tables::held(conn, &source, &ids))
            .await?;
        ctx.report.skipped.held += held.len() as u32;
        missing.extend(
            listed
                .into_iter()
                .filter(|m| !held.contains(&m.delivery_id)),
        );
        match (page.has_more, last_id) {
            (false, _) => return Ok(missing),
            (true, Some(id)) if after.as_ref() != Some(&id) => after = Some(id),
            (true, _) => {
                bail!("Stripe said has_more but gave no new cursor; stopping rather than looping")
            }
        }
    }
}

/// Inserts the missing events, oldest first (the list is newest first).
async fn insert(ctx: &mut RunCtx<'_>, missing: Vec<Missing>) -> anyhow::Result<()> {
    let mut pending = false;
    for m in missing.into_iter().rev() {
        if ctx.dry_run {
            ctx.report.inserted.push(m.delivery_id);
            continue;
        }
        ctx.step().await?;
        let routes = &ctx.job.routes;
        let destinations = routes.matching(
            m.event_type.as_deref(),
            &Body::new(&m.body, routes.reads_body()),
        );
        let dispatched = !destinations.is_empty();
        let event = NewEvent {
            source: ctx.job.source.clone(),
            delivery_id: m.delivery_id.clone(),
            event_type: m.event_type,
            order_key: m.order_key,
            received_at: clock::now_ms(),
            origin: Origin::Fetched,
            content_type: Some("application/json".to_owned()),
            headers: "{}".to_owned(),
            body: m.body,
            destinations,
        };
        match ctx.runner.db.insert(event).await? {
            Inserted::New(id) => {
                tracing::info!(event.id = id, delivery.id = %m.delivery_id, "inserted a missed Stripe event");
                ctx.report.inserted.push(m.delivery_id);
                pending |= dispatched;
            }
            // Pushed by Stripe while this pass ran.
            Inserted::Duplicate(_) => ctx.report.skipped.held += 1,
        }
    }
    if pending {
        ctx.runner.db.wake_dispatch();
    }
    Ok(())
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
