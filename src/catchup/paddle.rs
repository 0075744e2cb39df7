//! Paddle replay: list a notification destination's notifications, find
//! the events that never got through, and ask Paddle to replay each.
//!
//! API facts (shared/catchup-apis.md "Paddle Billing", Paddle's API
//! reference for list, replay and their errors): `GET /notifications`
//! with `Authorization: Bearer <api key>`, filtered by
//! `notification_setting_id` and `from` (RFC 3339), paged by following
//! `meta.pagination.next` while `has_more`. Each notification is one
//! delivery of one event (`payload.event_id`, the inbox key the webhook
//! verifier uses too), with a `status` (`delivered`, `failed`, and
//! `needs_retry` / `not_attempted` while Paddle still tries by itself) and
//! an `origin` (`event`, or `replay` for a notification made by a replay).
//! `POST /notifications/{id}/replay` answers 202 and sends the event again,
//! signed, as a new notification; only an `origin = event` notification
//! can be replayed, and none older than 90 days. Errors are
//! `{"error": {"type", "code", "detail"}}`; a rate limit is a 429 with
//! `Retry-After`.
//!
//! A pass reads back to the last successful pass minus `overlap` and
//! Paddle's own retry span (never past [`MAX_AGE`]) and hands the notifications to `redeliver`, which
//! groups them by event, skips what was delivered, is still retried, or is
//! in the inbox, and asks for the others one at a time.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::{Response, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use super::RunCtx;
use super::http::{parse_time, rate_limit, send_waiting};
use super::redeliver::{self, Answer, Candidate, Pacing, Resend, numeric_id};
use crate::config::PaddleReplayConfig;

/// How long Paddle keeps notifications and replays them (90 days), less
/// an hour so one does not age out between listing and asking.
pub const MAX_AGE: Duration = Duration::from_secs(90 * 24 * 3600 - 3600);

/// How long Paddle retries a notification by itself (live: up to 60
/// attempts over 3 days), and a margin. A notification is listed at its
/// event's time, but fails for good only when Paddle stops retrying, so a
/// pass reads this much further back than its window: one still retried
/// when the last pass ran is looked at again.
const RETRY_SPAN: Duration = Duration::from_secs(3 * 24 * 3600 + 3600);

/// The largest page Paddle gives.
const PER_PAGE: u32 = 200;

/// Pages one pass reads at most: a bound, not a goal.
const MAX_PAGES: u32 = 5000;

/// Paddle has no documented replay rate beyond its API limits; a short
/// gap keeps a large backlog from bursting into them.
const PACE: Duration = Duration::from_millis(100);

/// One notification, the fields read.
#[derive(Debug, Deserialize)]
struct Notification {
    id: String,
    #[serde(default, rename = "type")]
    kind: String,
    status: String,
    #[serde(default)]
    payload: Value,
    #[serde(default)]
    origin: String,
    #[serde(default)]
    occurred_at: Option<String>,
    #[serde(default)]
    last_attempt_at: Option<String>,
    #[serde(default)]
    replayed_at: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Page {
    data: Vec<Notification>,
    #[serde(default)]
    meta: Meta,
}

#[derive(Debug, Default, Deserialize)]
struct Meta {
    #[serde(default)]
    pagination: Pagination,
}

#[derive(Debug, Default, Deserialize)]
struct Pagination {
    #[serde(default)]
    next: Option<String>,
    #[serde(default)]
    has_more: bool,
}

pub async fn run(ctx: &mut RunCtx<'_>, cfg: &PaddleReplayConfig) -> anyhow::Result<()> {
    let pass = redeliver::Pass {
        overlap: cfg.overlap,
        event_types: &[],
        pacing: Pacing::Fixed(PACE),
    };
    redeliver::run(ctx, &Paddle(cfg), pass).await
}

/// Reads every page of the destination's notifications since `start`.
async fn list(
    ctx: &mut RunCtx<'_>,
    cfg: &PaddleReplayConfig,
    start: i64,
) -> anyhow::Result<Vec<redeliver::Attempt>> {
    let floor = ctx.started_at - MAX_AGE.as_millis() as i64;
    let start = (start - RETRY_SPAN.as_millis() as i64).max(floor);
    let from = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(start).unwrap_or(0)),
    )
    .to_string();
    let first = reqwest::Url::parse_with_params(
        &format!("{}/notifications", cfg.api_url),
        [
            (
                "notification_setting_id",
                cfg.notification_setting_id.as_str(),
            ),
            ("per_page", &PER_PAGE.to_string()),
            ("order_by", "id[DESC]"),
            ("from", &from),
        ],
    )
    .context("building the notifications URL")?;
    let mut url = first.clone();
    let mut read = HashSet::new();
    let mut notifications = Vec::new();
    loop {
        ctx.step().await?;
        if !read.insert(url.to_string()) {
            bail!("Paddle's next page is one already read; stopping rather than looping");
        }
        if ctx.report.pages >= MAX_PAGES {
            bail!("read {MAX_PAGES} pages of notifications; stopping");
        }
        let response = send_waiting(ctx, "Paddle", || {
            ctx.runner
                .client
                .get(url.clone())
                .bearer_auth(cfg.api_key.expose())
        })
        .await
        .context("listing Paddle notifications")?;
        let response = check(response, "listing notifications").await?;
        let page: Page = response
            .json()
            .await
            .context("reading a page of Paddle notifications")?;
        ctx.report.pages += 1;
        notifications.extend(page.data);
        match page.meta.pagination.next {
            Some(next) if page.meta.pagination.has_more => {
                let parsed = reqwest::Url::parse(&next)
                    .with_context(|| format!("Paddle's next page is not a URL: {next:?}"))?;
                if parsed.origin() != first.origin() {
                    bail!(
                        "Paddle's next page is on another host ({}); not sending the API key there",
                        parsed.origin().ascii_serialization()
                    );
                }
                url = parsed;
            }
            _ => break,
        }
    }
    Ok(attempts(notifications, start, ctx.started_at))
}

/// The notifications since `start` as attempts of their events. Each
/// attempt names the event's first notification as what to replay: Paddle
/// replays only those.
fn attempts(notifications: Vec<Notification>, start: i64, now: i64) -> Vec<redeliver::Attempt> {
    let time = |t: &Option<String>| t.as_deref().and_then(parse_time);
    let mut originals: HashMap<String, String> = HashMap::new();
    let mut kept = Vec::new();
    for n in notifications {
        let Some(key) = n.payload.get("event_id").and_then(Value::as_str) else {
            continue;
        };
        if time(&n.occurred_at).unwrap_or(now) < start {
            continue;
        }
        if n.origin == "event" {
            originals.insert(key.to_owned(), n.id.clone());
        }
        let event = n
            .payload
            .get("event_type")
            .and_then(Value::as_str)
            .unwrap_or(&n.kind)
            .to_owned();
        let at = time(&n.last_attempt_at)
            .or(time(&n.replayed_at))
            .or(time(&n.occurred_at))
            .unwrap_or(now);
        kept.push(redeliver::Attempt {
            id: numeric_id(&n.id),
            target: n.id,
            key: key.to_owned(),
            at,
            ok: n.status == "delivered",
            pending: matches!(n.status.as_str(), "needs_retry" | "not_attempted"),
            event,
        });
    }
    for a in &mut kept {
        if let Some(original) = originals.get(&a.key) {
            a.target = original.clone();
        }
    }
    kept
}

/// Turns an error status into an error that says what to fix.
async fn check(response: Response, doing: &str) -> anyhow::Result<Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    if let Some((_, limit)) = rate_limit(&response, "Paddle") {
        return Err(limit.into());
    }
    let hint = match status {
        StatusCode::UNAUTHORIZED => {
            "the api_key is wrong, expired or revoked (check paddle_replay.api_key; a sandbox key needs the sandbox api_url)"
        }
        StatusCode::FORBIDDEN => {
            "the API key lacks the notification.read or notification.write permission"
        }
        StatusCode::NOT_FOUND => "no such notification destination (check notification_setting_id)",
        _ => "unexpected answer",
    };
    let (code, detail) = super::http::error_fields(response, "/error").await;
    bail!("Paddle answered {status} {doing}: {hint}: {code}: {detail}")
}

/// One replay request: `POST /notifications/{id}/replay`.
struct Paddle<'a>(&'a PaddleReplayConfig);

impl Resend for Paddle<'_> {
    const PROVIDER: &'static str = "Paddle";
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
        let url = format!("{}/notifications/{}/replay", cfg.api_url, c.target);
        let sent = client
            .post(&url)
            .bearer_auth(cfg.api_key.expose())
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return Answer::Failed(None, format!("asking Paddle for a replay: {e}")),
        };
        let status = response.status();
        let code = status.as_u16();
        if status.is_success() {
            return Answer::Asked(code);
        }
        if let Some((wait, limit)) = rate_limit(&response, "Paddle") {
            return Answer::Wait(wait, limit);
        }
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            let e = match check(response, "asking for a replay").await {
                Err(e) => e,
                Ok(_) => anyhow::anyhow!("Paddle answered {status} asking for a replay"),
            };
            return Answer::Stop(Some(code), e);
        }
        let (error, detail) = super::http::error_fields(response, "/error").await;
        let why = format!("{error}: {detail}");
        if status.is_client_error() && error != "notification_cannot_replay" {
            // Not retained any more (past 90 days), not an `event`
            // notification, or unknown: Paddle will not replay it.
            Answer::Permanent(code, why)
        } else {
            // Still being delivered, or Paddle's own trouble: next pass.
            Answer::Failed(Some(code), why)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn notification(id: &str, event: &str, status: &str, origin: &str, at: &str) -> Notification {
        serde_json::from_value(json!({
            "id": id, "type": "transaction.completed", "status": status, "origin": origin,
            "payload": {"event_id": event, "event_type": "transaction.completed", "data": {}},
            "occurred_at": at, "last_attempt_at": at, "times_attempted": 3,
            "notification_setting_id": "ntfset_01"
        }))
        .unwrap()
    }

    #[test]
    fn every_attempt_of_an_event_names_its_first_notification_for_the_replay() {
        let list = vec![
            notification("ntf_b", "evt_1", "failed", "replay", "2026-11-30T11:00:00Z"),
            notification("ntf_a", "evt_1", "failed", "event", "2026-11-30T10:00:00Z"),
            notification(
                "ntf_c",
                "evt_2",
                "needs_retry",
                "event",
                "2026-11-30T10:30:00Z",
            ),
            notification(
                "ntf_old",
                "evt_0",
                "failed",
                "event",
                "2026-10-01T10:00:00Z",
            ),
        ];
        let start = parse_time("2026-11-01T00:00:00Z").unwrap();
        let got = attempts(list, start, start);
        assert_eq!(got.len(), 3, "one before the window left out");
        assert!(
            got.iter()
                .filter(|a| a.key == "evt_1")
                .all(|a| a.target == "ntf_a")
        );
        let retrying = got.iter().find(|a| a.key == "evt_2").unwrap();
        assert!(retrying.pending && !retrying.ok);
        assert_eq!(got[0].id, numeric_id("ntf_b"));
        assert_ne!(numeric_id("ntf_a"), numeric_id("ntf_b"));
        assert!(numeric_id("ntf_a") >= 0);
    }
}
