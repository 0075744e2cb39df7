//! One event to the local app: the request a url destination would send,
//! and the line `listen` prints for it.

use std::time::{Instant, SystemTime};

use anyhow::Context as _;
use base64::Engine as _;
use serde_json::Value;

/// POSTs `event` of `source` to `to` and prints its line; `Err` says why
/// it did not go through (a status other than 2xx, or no answer).
pub(super) async fn forward(
    local: &reqwest::Client,
    to: &reqwest::Url,
    source: &str,
    event: &Value,
) -> Result<(), String> {
    let started = Instant::now();
    let outcome = match request(local, to, source, event) {
        Ok(request) => request.send().await.map_err(|e| format!("{e}")),
        Err(e) => Err(format!("{e:#}")),
    };
    let took = started.elapsed().as_millis();
    let shown = match &outcome {
        Ok(r) => r.status().as_u16().to_string(),
        Err(e) => format!("failed ({e})"),
    };
    println!(
        "{} {source} {} {} {} {shown} {took}ms",
        humantime::format_rfc3339_seconds(SystemTime::now()),
        text(&event["event_type"]),
        text(&event["delivery_id"]),
        event["id"],
    );
    match outcome {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("the local endpoint answered {}", r.status())),
        Err(e) => Err(e),
    }
}

/// The local request for `event` of `source`: its body, content type and
/// kept headers, and hookbox's own `X-Hookbox-*`.
fn request(
    client: &reqwest::Client,
    to: &reqwest::Url,
    source: &str,
    event: &Value,
) -> anyhow::Result<reqwest::RequestBuilder> {
    let body = base64::engine::general_purpose::STANDARD
        .decode(event["body_base64"].as_str().unwrap_or_default())
        .context("the event's body is not base64")?;
    let mut request = client.post(to.clone()).body(body);
    if let Some(ct) = event["content_type"].as_str() {
        request = request.header(reqwest::header::CONTENT_TYPE, ct);
    }
    if let Some(headers) = event["headers"].as_object() {
        for (name, value) in headers {
            if let Some(value) = value.as_str() {
                request = request.header(name.as_str(), value);
            }
        }
    }
    // As a url destination sends them.
    request = request
        .header("x-hookbox-source", source)
        .header("x-hookbox-event-id", event["id"].to_string())
        .header("x-hookbox-delivery-id", text(&event["delivery_id"]))
        .header("x-hookbox-attempt", event["attempt"].to_string());
    if let Some(t) = event["event_type"].as_str() {
        request = request.header("x-hookbox-event-type", t);
    }
    Ok(request)
}

/// A JSON string as text, anything else (null) as `-`.
fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("-")
}
