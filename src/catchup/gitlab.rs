//! GitLab resend: list a project or group hook's events, find the ones
//! that never got through, and ask GitLab to send each again.
//!
//! API facts (GitLab's "Project webhooks API" and "Group webhooks API"
//! pages, and `lib/api/hooks/{events,resend_hook}.rb`,
//! `app/models/hooks/web_hook_log.rb` in gitlab-org/gitlab):
//! `GET /projects/:id/hooks/:hook_id/events` (17.3+) lists the hook's
//! events of the last 7 days, newest first, at most 20 a page, paged by
//! `page` (`X-Next-Page`, `Link: rel="next"`). Each item is one *attempt*:
//! `id`, `request_headers` (with `Idempotency-Key`, the same for every
//! attempt of one event since 17.4, and the delivery id hookbox stores),
//! `response_status` (a string: the status the endpoint answered, or
//! `internal error` when GitLab could not reach it; success is `2xx`) and
//! `created_at`. `POST …/events/:hook_event_id/resend` (17.4+) sends that
//! attempt's request again, with its `Idempotency-Key`, and answers 201;
//! it allows 5 requests a minute per user and project (or group), and 429
//! past that. Group hooks are the same under `/groups/:id/hooks/…`. GitLab
//! retries a failing hook only a little and then disables it for a while,
//! so what failed during an outage stays failed.
//!
//! A pass reads back to the last successful pass minus `overlap` (never
//! past [`MAX_AGE`]) and hands the attempts to `redeliver`, which groups
//! them by delivery id, skips what was delivered or is in the inbox, and
//! asks for the newest attempt of each other event, at most `resend_limit`
//! in any `resend_window`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::{Context, bail};
use axum::http::{HeaderName, HeaderValue};
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap};
use reqwest::{Response, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use super::http::{excerpt, next_link, parse_time, retry_after, send_waiting};
use super::redeliver::{self, Answer, Candidate, Pacing, Resend};
use super::{RateLimited, RunCtx};
use crate::config::GitlabRedeliveryConfig;

/// How far back GitLab lists a hook's events (7 days), less an hour so an
/// event does not age out between listing and asking.
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600 - 3600);

/// GitLab's largest page of hook events.
const PER_PAGE: u32 = 20;

/// Pages one pass reads at most: a bound, not a goal.
const MAX_PAGES: u32 = 5000;

/// One item of the events list (`API::Entities::WebHookLog`); the request
/// and response bodies it also carries are not read.
#[derive(Debug, Deserialize)]
struct Event {
    id: i64,
    #[serde(default)]
    trigger: String,
    #[serde(default)]
    request_headers: HashMap<String, Value>,
    #[serde(default)]
    response_status: Value,
    #[serde(default)]
    created_at: Option<String>,
}

impl Event {
    /// `2xx`, as GitLab's own `WebHookLog#success?`; anything else,
    /// `internal error` included, failed.
    fn ok(&self) -> bool {
        let status = match &self.response_status {
            Value::String(s) => s.trim().parse::<u16>().ok(),
            Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
            _ => None,
        };
        status.is_some_and(|s| (200..300).contains(&s))
    }

    fn headers(&self) -> HeaderMap {
        self.request_headers
            .iter()
            .filter_map(|(name, value)| {
                let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
                let value = HeaderValue::from_str(value.as_str()?).ok()?;
                Some((name, value))
            })
            .collect()
    }
}

pub async fn run(ctx: &mut RunCtx<'_>, cfg: &GitlabRedeliveryConfig) -> anyhow::Result<()> {
    let pass = redeliver::Pass {
        overlap: cfg.overlap,
        event_types: &cfg.event_types,
        pacing: Pacing::Window {
            limit: cfg.resend_limit,
            window: cfg.resend_window,
        },
    };
    redeliver::run(ctx, &Gitlab(cfg), pass).await
}

/// Reads every page back to `start`. Pages are asked for by number on
/// `api_url`, so the token never goes anywhere else.
async fn list(
    ctx: &mut RunCtx<'_>,
    cfg: &GitlabRedeliveryConfig,
    start: i64,
) -> anyhow::Result<Vec<redeliver::Attempt>> {
    let base = format!("{}{}/events", cfg.api_url, cfg.hook_path());
    let mut page = 1;
    // Offset pages shift when new events arrive while reading: an event
    // may come twice, and is taken once.
    let mut ids = HashSet::new();
    let mut kept = Vec::new();
    loop {
        ctx.step().await?;
        if ctx.report.pages >= MAX_PAGES {
            bail!("read {MAX_PAGES} pages without reaching the window's start; stopping");
        }
        let url = format!("{base}?per_page={PER_PAGE}&page={page}");
        let auth = auth(cfg)?;
        let response = send_waiting(ctx, "GitLab", || {
            authorized(ctx.runner.client.get(&url), auth.clone())
        })
        .await
        .context("listing the hook's events")?;
        let response = check(response, "listing the hook's events").await?;
        let next = next_page(response.headers());
        let events: Vec<Event> = response
            .json()
            .await
            .context("reading a page of hook events")?;
        ctx.report.pages += 1;
        let mut reached_start = false;
        for event in events {
            let at = event
                .created_at
                .as_deref()
                .and_then(parse_time)
                .unwrap_or(ctx.started_at);
            if at < start {
                reached_start = true;
                continue;
            }
            if !ids.insert(event.id) {
                continue;
            }
            let headers = event.headers();
            let Some(key) = crate::ingress::receive::gitlab::delivery_key(&headers) else {
                ctx.report.skipped.unidentified += 1;
                continue;
            };
            let kind = headers
                .get("x-gitlab-event")
                .and_then(|v| v.to_str().ok())
                .unwrap_or(&event.trigger);
            kept.push(redeliver::Attempt {
                id: event.id,
                target: String::new(),
                key: key.to_owned(),
                at,
                ok: event.ok(),
                pending: false,
                event: kind.to_owned(),
            });
        }
        match next {
            Some(next) if !reached_start && next > page => page = next,
            _ => return Ok(kept),
        }
    }
}

/// The next page's number: `X-Next-Page` (empty on the last page), else
/// the `page` of the `Link: rel="next"` URL.
fn next_page(headers: &HeaderMap) -> Option<u32> {
    if let Some(next) = headers.get("x-next-page").and_then(|v| v.to_str().ok()) {
        return next.trim().parse().ok();
    }
    let link = reqwest::Url::parse(&next_link(headers)?).ok()?;
    link.query_pairs()
        .find(|(k, _)| k == "page")
        .and_then(|(_, v)| v.parse().ok())
}

/// Adds the token and sends. `Authorization: Bearer` takes personal,
/// project and group access tokens and OAuth tokens alike.
async fn send(
    cfg: &GitlabRedeliveryConfig,
    request: reqwest::RequestBuilder,
) -> anyhow::Result<Response> {
    Ok(authorized(request, auth(cfg)?).send().await?)
}

fn auth(cfg: &GitlabRedeliveryConfig) -> anyhow::Result<HeaderValue> {
    let mut auth = HeaderValue::from_str(&format!("Bearer {}", cfg.token.expose()))
        .context("the token holds characters a header cannot")?;
    auth.set_sensitive(true);
    Ok(auth)
}

fn authorized(request: reqwest::RequestBuilder, auth: HeaderValue) -> reqwest::RequestBuilder {
    request
        .header(AUTHORIZATION, auth)
        .header(ACCEPT, "application/json")
}

/// Turns an error status into an error that says what to fix.
async fn check(response: Response, doing: &str) -> anyhow::Result<Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    if let Some((_, limit)) = rate_limited(&response) {
        return Err(limit.into());
    }
    let hint = match status {
        StatusCode::UNAUTHORIZED => {
            "the token is wrong, expired or revoked (check gitlab_redelivery.token)"
        }
        StatusCode::FORBIDDEN => {
            "the token lacks the api scope, or its user is not a Maintainer of the project (Owner of the group)"
        }
        StatusCode::NOT_FOUND => {
            "no such project, group or hook, or the token may not see it; the events API needs GitLab 17.3 and resending 17.4"
        }
        _ => "unexpected answer",
    };
    let body = excerpt(response).await;
    bail!("GitLab answered {status} {doing}: {hint}: {body}")
}

/// A 429, with the wait GitLab asked for, if it said.
fn rate_limited(response: &Response) -> Option<(Option<Duration>, RateLimited)> {
    if response.status() != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let wait = retry_after(response.headers());
    let detail = match wait {
        Some(w) => format!("retry after {}s", w.as_secs()),
        None => "status 429".to_owned(),
    };
    Some((
        wait,
        RateLimited {
            provider: "GitLab",
            detail,
        },
    ))
}

/// One resend: `POST …/events/{id}/resend`.
struct Gitlab<'a>(&'a GitlabRedeliveryConfig);

impl Resend for Gitlab<'_> {
    const PROVIDER: &'static str = "GitLab";
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
            "{}{}/events/{}/resend",
            cfg.api_url,
            cfg.hook_path(),
            c.attempt_id
        );
        let response = match send(cfg, client.post(&url)).await {
            Ok(response) => response,
            Err(e) => return Answer::Failed(None, format!("{e:#}")),
        };
        let status = response.status();
        let code = status.as_u16();
        if status.is_success() {
            return Answer::Asked(code);
        }
        if let Some((wait, limit)) = rate_limited(&response) {
            return Answer::Wait(wait, limit);
        }
        // 404 after the event was just listed: the hook went away, or
        // GitLab is older than 17.4 and cannot resend; the pass stops and
        // says so rather than give every event up.
        if matches!(
            status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND
        ) {
            let e = match check(response, "asking for a resend").await {
                Err(e) => e,
                Ok(_) => anyhow::anyhow!("GitLab answered {status} asking for a resend"),
            };
            return Answer::Stop(Some(code), e);
        }
        if status.is_client_error() {
            // 422: GitLab will not resend it, e.g. the hook's URL changed since.
            Answer::Permanent(code, excerpt(response).await)
        } else {
            Answer::Failed(Some(code), excerpt(response).await)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(status: Value, headers: Value) -> Event {
        serde_json::from_value(json!({
            "id": 1, "trigger": "push_hooks", "request_headers": headers,
            "response_status": status, "created_at": "2026-11-30T10:00:00.000Z",
            "request_data": {"object_kind": "push"}
        }))
        .unwrap()
    }

    #[test]
    fn only_2xx_statuses_count_as_delivered() {
        for (status, ok) in [
            (json!("200"), true),
            (json!("204"), true),
            (json!(201), true),
            (json!("301"), false),
            (json!("404"), false),
            (json!("500"), false),
            (json!("internal error"), false),
            (json!(null), false),
        ] {
            assert_eq!(event(status.clone(), json!({})).ok(), ok, "{status}");
        }
    }

    #[test]
    fn the_delivery_id_is_read_from_the_listed_headers_as_receive_reads_it() {
        let key = |headers: Value| {
            let e = event(json!("500"), headers);
            crate::ingress::receive::gitlab::delivery_key(&e.headers()).map(str::to_owned)
        };
        let both = json!({"Idempotency-Key": "k-1", "X-Gitlab-Webhook-UUID": "w-1",
                          "X-Gitlab-Token": "[REDACTED]"});
        assert_eq!(key(both).as_deref(), Some("k-1"));
        let old = json!({"X-Gitlab-Webhook-UUID": "w-2", "X-Gitlab-Event": "Push Hook"});
        assert_eq!(key(old).as_deref(), Some("w-2"), "GitLab before 17.4");
        assert_eq!(key(json!({"X-Gitlab-Event": "Push Hook"})), None);
        assert_eq!(key(json!({"Idempotency-Key": 7})), None, "not a string");
    }

    #[test]
    fn the_next_page_comes_from_x_next_page_or_the_link_header() {
        let mut h = HeaderMap::new();
        assert_eq!(next_page(&h), None);
        h.insert("x-next-page", HeaderValue::from_static("3"));
        assert_eq!(next_page(&h), Some(3));
        h.insert("x-next-page", HeaderValue::from_static(""));
        assert_eq!(next_page(&h), None, "empty on the last page");
        let mut h = HeaderMap::new();
        h.insert(
            reqwest::header::LINK,
            HeaderValue::from_static(
                "<https://gitlab.example.com/api/v4/projects/1/hooks/2/events?page=4&per_page=20>; rel=\"next\"",
            ),
        );
        assert_eq!(next_page(&h), Some(4));
    }
}
