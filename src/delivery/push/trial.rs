//! `hookbox try` and `POST /api/try`: a destination's filter and transform
//! run over stored events, sending nothing, to show for each event whether
//! it matches and exactly what would be sent.
//!
//! "Exactly" is kept by construction: the job is built from the stored
//! row as the dispatcher builds it, the transform runs in the same
//! transform processes through the same call, and a url request's headers
//! come from the code that sends ([`super::url::preview`]), a command's
//! argv and variables from the code that runs it. Only what exists at
//! sending alone (the signature, its time) and the destination's secret
//! header values are shown as placeholders.

use base64::Engine as _;
use serde::Serialize;

use crate::config::route::Body;
use crate::config::{self, DeliverConfig};
use crate::delivery::Job;
use crate::delivery::transform::{Applied, Transform};
use crate::store::queries::StoredEvent;

/// What trying one event gave.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub event_id: i64,
    pub delivery_id: String,
    pub event_type: Option<String>,
    /// Whether the destination's filter takes the event.
    pub matches: bool,
    /// `send`, `skipped` (the transform had no output), `dead` (it
    /// failed), `retry` (no transform process could run it),
    /// `not_matched`, or `gone` (retention dropped the body).
    pub outcome: &'static str,
    /// Why `dead` or `gone`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// With `send`: what would be sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<Request>,
}

/// What a delivery would send.
#[derive(Debug, Clone, Serialize)]
pub struct Request {
    /// url destinations: the method and the URL (its password redacted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Command destinations: the argv run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// HTTP headers (url) or the variables set (command), in order.
    pub headers: Vec<(String, String)>,
    pub content_type: Option<String>,
    /// The body (a command's stdin) as text; `None` when it is not UTF-8.
    pub body: Option<String>,
    /// The body in base64 when it is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

/// Tries `destination` of `source` on `events`, in their order.
pub async fn run(
    source: &str,
    destination: &DeliverConfig,
    transform: Option<&Transform>,
    events: Vec<StoredEvent>,
) -> Vec<Trial> {
    let mut trials = Vec::with_capacity(events.len());
    for event in events {
        trials.push(one(source, destination, transform, event).await);
    }
    trials
}

async fn one(
    source: &str,
    destination: &DeliverConfig,
    transform: Option<&Transform>,
    event: StoredEvent,
) -> Trial {
    let mut trial = Trial {
        event_id: event.id,
        delivery_id: event.delivery_id.clone(),
        event_type: event.event_type.clone(),
        matches: false,
        outcome: "not_matched",
        reason: None,
        request: None,
    };
    let Some(body) = event.body else {
        trial.outcome = "gone";
        trial.reason = Some("the body is no longer stored (retention dropped it)".into());
        return trial;
    };
    let needed = destination.filter.reads_body();
    trial.matches = destination
        .filter
        .matches(event.event_type.as_deref(), &Body::new(&body, needed));
    if !trial.matches {
        return trial;
    }
    // As the dispatcher builds it (`worker::attempt`), for a first attempt.
    let mut job = Job {
        event_id: event.id,
        source: source.to_owned(),
        destination: destination.name.clone(),
        delivery_id: event.delivery_id,
        event_type: event.event_type,
        received_at: event.received_at,
        content_type: event.content_type,
        headers: serde_json::from_str(&event.headers).unwrap_or_default(),
        body: body.into(),
        attempt: 1,
    };
    if let Some(transform) = transform {
        match transform.apply(&job).await {
            Applied::Send { body, content_type } => {
                job.body = body;
                job.content_type = Some(content_type.to_owned());
            }
            Applied::Skip => {
                trial.outcome = "skipped";
                return trial;
            }
            Applied::Fail(why) => {
                trial.outcome = "dead";
                trial.reason = Some(why);
                return trial;
            }
            Applied::Retry(why) => {
                trial.outcome = "retry";
                trial.reason = Some(why);
                return trial;
            }
        }
    }
    trial.outcome = "send";
    trial.request = Some(request(&destination.destination, &job));
    trial
}

fn request(destination: &config::Destination, job: &Job) -> Request {
    let (body, body_base64) = match std::str::from_utf8(&job.body) {
        Ok(text) => (Some(text.to_owned()), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(&job.body)),
        ),
    };
    let mut request = Request {
        method: None,
        url: None,
        argv: None,
        headers: Vec::new(),
        content_type: job.content_type.clone(),
        body,
        body_base64,
    };
    match destination {
        config::Destination::Url {
            url,
            signing_key,
            options,
        } => {
            let (method, url, headers) =
                super::url::preview(url, signing_key.is_some(), options, job);
            (request.method, request.url, request.headers) = (Some(method), Some(url), headers);
        }
        config::Destination::Command { template, .. } => {
            request.argv = Some(super::command::argv(template, job));
            request.headers = super::command::event_env(job)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
        }
        // A consumer takes the event as stored (no transform there); a
        // broker's message is the body, with the event's metadata as its
        // headers or properties.
        _ => {}
    }
    request
}
