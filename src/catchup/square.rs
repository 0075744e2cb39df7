//! Square backfill: search the events Square keeps and insert the ones the
//! inbox lacks, marked `fetched`.
//!
//! API facts (shared/catchup-apis.md "Square", Square's Events API
//! overview and `SearchEvents` reference): `POST /v2/events` with
//! `Authorization: Bearer <personal access token>` and `Square-Version`;
//! the body is a query (`filter.created_at.start_at`, optional
//! `filter.event_types`, `sort` by `DEFAULT` ascending) and, for a later
//! page, the `cursor` the previous answer gave with the same query. The
//! answer is `{"events": [...], "cursor"}`, each event carrying the
//! `event_id`, `type`, `merchant_id`, `created_at` and `data` of the
//! webhook notification; errors are `{"errors": [{"category", "code",
//! "detail"}]}`. Square keeps events 28 days, and serves them only to an
//! application whose Events API was enabled (`PUT /v2/events/enable`).
//!
//! The window, the inbox look-up and the insert are `backfill`'s, shared
//! with Stripe; the inbox key is the body's `event_id`, as the webhook
//! verifier derives it, so a fetched and a pushed copy are one row.

use std::time::Duration;

use anyhow::{Context, bail};
use axum::http::HeaderMap;
use bytes::Bytes;
use reqwest::{Response, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::RunCtx;
use super::backfill::{self, Fetch, Fetched};
use super::http::{rate_limit, send_waiting};
use crate::config::SquareBackfillConfig;
use crate::ingress::receive::payload::{Identified, Inbound};
use crate::store::catchup::TimeField;

/// How far back Square keeps events (28 days), less an hour so the start
/// asked for is never refused as too old.
pub const MAX_AGE: Duration = Duration::from_secs(28 * 24 * 3600 - 3600);

/// The API version the requests are written against (the Events API came
/// in 2024-06-04, in beta).
const SQUARE_VERSION: &str = "2024-12-18";

/// Square's largest page.
const LIMIT: u32 = 100;

/// Pages one pass reads at most: a bound, not a goal.
const MAX_PAGES: u32 = 5000;

#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    events: Vec<Box<RawValue>>,
    #[serde(default)]
    cursor: Option<String>,
}

pub async fn run(ctx: &mut RunCtx<'_>, cfg: &SquareBackfillConfig) -> anyhow::Result<()> {
    backfill::run(ctx, &Square(cfg), cfg.overlap).await
}

struct Square<'a>(&'a SquareBackfillConfig);

impl Fetch for Square<'_> {
    const PROVIDER: &'static str = "Square";
    const MAX_AGE: Duration = MAX_AGE;
    const TIME_FIELD: TimeField = TimeField::Rfc3339("$.created_at");

    async fn list(&self, ctx: &mut RunCtx<'_>, start: i64) -> anyhow::Result<Vec<Fetched>> {
        list(ctx, self.0, start).await
    }
}

/// The search query: since `start` (unix ms), oldest first.
fn query(cfg: &SquareBackfillConfig, start: i64) -> Value {
    let start_at = humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(start).unwrap_or(0)),
    )
    .to_string();
    let mut filter = json!({ "created_at": { "start_at": start_at } });
    if !cfg.types.is_empty() {
        filter["event_types"] = json!(cfg.types);
    }
    json!({
        "filter": filter,
        "sort": { "field": "DEFAULT", "order": "ASC" },
    })
}

/// Reads every page since `start`, oldest first.
async fn list(
    ctx: &mut RunCtx<'_>,
    cfg: &SquareBackfillConfig,
    start: i64,
) -> anyhow::Result<Vec<Fetched>> {
    let url = format!("{}/v2/events", cfg.api_url);
    let query = query(cfg, start);
    // The receiver's own rule for the key and type; it reads no secret.
    let identify = crate::ingress::receive::square::Square::new(&[], "");
    let mut cursor: Option<String> = None;
    let mut listed = Vec::new();
    loop {
        ctx.step().await?;
        if ctx.report.pages >= MAX_PAGES {
            bail!("read {MAX_PAGES} pages of events; stopping");
        }
        let mut body = json!({ "limit": LIMIT, "query": query });
        if let Some(c) = &cursor {
            body["cursor"] = json!(c);
        }
        let response = send_waiting(ctx, "Square", || {
            ctx.runner
                .client
                .post(&url)
                .bearer_auth(cfg.access_token.expose())
                .header("square-version", SQUARE_VERSION)
                .json(&body)
        })
        .await
        .context("searching Square events")?;
        let response = check(response).await?;
        let page: Page = response
            .json()
            .await
            .context("reading a page of Square events")?;
        ctx.report.pages += 1;
        for raw in &page.events {
            let body = raw.get().as_bytes();
            let headers = HeaderMap::new();
            let req = Inbound::new(&headers, body);
            match identify.identify(&req) {
                Ok(Identified::Event(identity)) => listed.push(Fetched {
                    delivery_id: identity.delivery_id,
                    event_type: identity.event_type,
                    order_key: ctx.job.order_key.iter().find_map(|p| req.json_str(p)),
                    body: Bytes::copy_from_slice(body),
                }),
                Ok(_) => {}
                Err(e) => {
                    ctx.report.failed += 1;
                    tracing::warn!(reason = e.reason(), "skipped a listed Square event");
                }
            }
        }
        match page.cursor.filter(|c| !c.is_empty()) {
            None => return Ok(listed),
            Some(next) if cursor.as_ref() == Some(&next) => {
                bail!("Square gave the same cursor twice; stopping rather than looping")
            }
            Some(next) => cursor = Some(next),
        }
    }
}

/// Turns an error status into an error that says what to fix.
async fn check(response: Response) -> anyhow::Result<Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    if let Some((_, limit)) = rate_limit(&response, "Square") {
        return Err(limit.into());
    }
    let hint = match status {
        StatusCode::UNAUTHORIZED => {
            "the access_token is wrong or revoked, or an OAuth token (the Events API takes the application's personal access token)"
        }
        StatusCode::FORBIDDEN => {
            "the token may not search events (the Events API takes the application's personal access token; enable it with PUT /v2/events/enable)"
        }
        _ => "unexpected answer",
    };
    let (code, detail) = super::http::error_fields(response, "/errors/0").await;
    bail!("Square answered {status} searching events: {hint}: {code}: {detail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    #[test]
    fn the_query_starts_at_the_window_and_filters_types_when_set() {
        let mut cfg = SquareBackfillConfig {
            access_token: Secret::new("t"),
            interval: Duration::from_secs(3600),
            overlap: Duration::from_secs(600),
            api_url: "http://x".into(),
            types: Vec::new(),
        };
        let q = query(&cfg, 1_714_564_800_123);
        assert_eq!(
            q["filter"]["created_at"]["start_at"],
            "2024-05-01T12:00:00.123Z"
        );
        assert!(q["filter"].get("event_types").is_none());
        assert_eq!(q["sort"]["order"], "ASC");
        cfg.types = vec!["payment.updated".into()];
        assert_eq!(
            query(&cfg, 0)["filter"]["event_types"],
            json!(["payment.updated"])
        );
    }
}
