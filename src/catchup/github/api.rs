//! The HTTP side of GitHub redelivery: headers and credentials (token or
//! App JWT), error statuses turned into errors that say what to fix, rate
//! limits (catchup-apis.md §1.8).

use anyhow::{Context, bail};
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use reqwest::{Response, StatusCode};
use serde::Serialize;

use super::super::RateLimited;
use super::super::http::excerpt;
use crate::config::{AppId, GithubRedeliveryConfig, HookTarget};
use crate::support::clock;

pub const API_VERSION: &str = "2022-11-28";

/// Adds GitHub's headers and fresh credentials, and sends.
pub(super) async fn send(
    cfg: &GithubRedeliveryConfig,
    request: reqwest::RequestBuilder,
) -> anyhow::Result<Response> {
    let token = match &cfg.target {
        HookTarget::Repo { token, .. } | HookTarget::Org { token, .. } => token.expose().to_owned(),
        HookTarget::App {
            app_id,
            private_key,
        } => app_jwt(app_id, private_key.expose(), clock::now_secs())?,
    };
    let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))
        .context("the token holds characters a header cannot")?;
    auth.set_sensitive(true);
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, auth);
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/vnd.github+json"),
    );
    headers.insert(
        "x-github-api-version",
        HeaderValue::from_static(API_VERSION),
    );
    Ok(request.headers(headers).send().await?)
}

#[derive(Serialize)]
struct Claims {
    iat: i64,
    exp: i64,
    iss: String,
}

/// A GitHub App JWT (catchup-apis.md §1.7): RS256, issued 60 s in the past
/// against clock drift, expiring 9 minutes from now (GitHub's limit is 10),
/// issued by the App ID or its client ID, as a string (RFC 7519 makes
/// `iss` a StringOrURI; GitHub takes the App ID either way).
pub fn app_jwt(app_id: &AppId, pem: &str, now: i64) -> anyhow::Result<String> {
    let claims = Claims {
        iat: now - 60,
        exp: now + 9 * 60,
        iss: app_id.to_string(),
    };
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes())
        .context("reading the GitHub App's private key")?;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256),
        &claims,
        &key,
    )
    .context("signing the GitHub App JWT")
}

/// Turns an error status into an error that says what to fix.
pub(super) async fn check(response: Response, doing: &str) -> anyhow::Result<Response> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    if let Some(limit) = rate_limited(&response) {
        return Err(limit.into());
    }
    let permissions = response
        .headers()
        .get("x-accepted-github-permissions")
        .and_then(|v| v.to_str().ok())
        .map(|p| format!(" (the endpoint needs: {p})"))
        .unwrap_or_default();
    let body = excerpt(response).await;
    let hint = match status {
        StatusCode::UNAUTHORIZED => {
            "the token or App key is wrong, expired or revoked (check github_redelivery.token / private_key)"
        }
        StatusCode::FORBIDDEN => "the token lacks the permission (Webhooks: read and write)",
        StatusCode::NOT_FOUND => {
            "no such hook, or the token may not administer it (GitHub answers 404 for both)"
        }
        _ => "unexpected answer",
    };
    bail!("GitHub answered {status} {doing}: {hint}{permissions}: {body}")
}

/// A primary or secondary rate limit (catchup-apis.md §1.8): 429, or 403
/// with `x-ratelimit-remaining: 0` or a `retry-after`.
/// How long GitHub asks to wait: `retry-after`, else until
/// `x-ratelimit-reset` when the limit is spent, else a minute (GitHub's
/// advice for a secondary limit that names no wait).
pub(super) fn rate_wait(response: &Response) -> std::time::Duration {
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    if let Some(secs) = header("retry-after") {
        return std::time::Duration::from_secs(secs);
    }
    let spent = header("x-ratelimit-remaining") == Some(0);
    match header("x-ratelimit-reset") {
        Some(reset) if spent => {
            let now = u64::try_from(clock::now_ms() / 1000).unwrap_or(0);
            std::time::Duration::from_secs(reset.saturating_sub(now).max(1))
        }
        _ => std::time::Duration::from_secs(60),
    }
}

pub(super) fn rate_limited(response: &Response) -> Option<RateLimited> {
    let status = response.status();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let exhausted = header("x-ratelimit-remaining").as_deref() == Some("0");
    let retry_after = header("retry-after");
    let limited = status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::FORBIDDEN && (exhausted || retry_after.is_some()));
    limited.then(|| RateLimited {
        provider: "GitHub",
        detail: match (retry_after, header("x-ratelimit-reset")) {
            (Some(s), _) => format!("retry after {s}s"),
            (None, Some(reset)) => format!("the limit resets at unix time {reset}"),
            (None, None) => format!("status {status}"),
        },
    })
}
