//! `POST /hooks/{source}`: read, verify, identify, store, answer.
//!
//! The handler reads as the contract does: find the source (404), ask the
//! edge about the client address before anything else (400 a trusted
//! proxy's header names no client, 403 not allowed, 429 blocked; see
//! `crate::edge`), read the body within its limit and time (413, 408),
//! charging its bytes to the edge's body budget as they arrive (503 when
//! the budget or the address's share of it is spent), verify the signature
//! on the exact bytes (401), identify the event (400), hand it to the
//! writer and answer only once it is committed (202 new, 200 duplicate, 503
//! when the store cannot take it). A 401 and a 408 count toward the
//! client's failure limit. Every refusal is also recorded for the
//! rejections table ([`refusal`]), without waiting. Provider specifics live
//! one file per kind, each implementing [`provider::Provider`] and listed
//! on one line of [`registry`]; a configured [`Source`] (`source.rs`) is
//! built from its kind's line, and this module is the HTTP side.

pub mod discord;
pub mod github;
pub mod gitlab;
pub mod hmac;
pub mod linear;
mod log_gate;
pub mod mailgun;
pub mod meta;
pub mod paddle;
pub mod payload;
pub mod provider;
mod refusal;
pub mod registry;
pub mod sendgrid;
pub mod shopify;
pub mod slack;
mod source;
pub mod square;
pub mod standard;
pub mod stripe;
pub mod twilio;
pub mod twitch;
pub mod verify;
pub mod zoom;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::json;
use tokio::sync::Notify;

use crate::config::Config;
use crate::delivery::pull::PullHub;
use crate::edge::Edge;
use crate::edge::bodies::Charge;
use crate::store::models::Inserted;
use crate::store::{StoreError, WriterHandle};
use crate::support::clock;
use crate::support::error::ApiError;
use crate::telemetry::metrics::{Metrics, SourceMetrics};
use payload::Handshake;
use provider::Refused;
use refusal::{Recorder, Refusal};

pub use source::Source;
use source::{Examined, INLINE_VERIFY_MAX};

/// What the receive route needs.
#[derive(Clone)]
pub struct Receiver {
    sources: Arc<HashMap<String, Arc<Source>>>,
    writer: WriterHandle,
    body_timeout: Duration,
    /// Wakes the dispatcher when a new event is pending.
    dispatch: Arc<Notify>,
    /// Wakes the pull long-polls of the destinations a new event went to.
    pull: Arc<PullHub>,
    /// Counts requests to names no source answers, under one label.
    unknown: SourceMetrics,
    /// Client address, allowlists, the failure limit and the body budget.
    edge: Arc<Edge>,
    /// Counts refused signatures and refused writes (atomics only).
    alerts: crate::alerts::Alerter,
}

impl Receiver {
    pub fn new(
        config: &Config,
        writer: WriterHandle,
        dispatch: Arc<Notify>,
        pull: Arc<PullHub>,
        metrics: &Metrics,
        edge: Arc<Edge>,
    ) -> Self {
        let sources = config
            .sources
            .iter()
            .map(|cfg| {
                (
                    cfg.name.clone(),
                    Arc::new(Source::new(cfg, metrics.source(&cfg.name))),
                )
            })
            .collect();
        Receiver {
            sources: Arc::new(sources),
            writer,
            body_timeout: config.server.body_timeout,
            dispatch,
            pull,
            unknown: metrics.unknown_source(),
            edge,
            alerts: crate::alerts::Alerter::default(),
        }
    }

    /// Tells `alerts` of refused signatures and refused writes.
    pub fn with_alerts(mut self, alerts: crate::alerts::Alerter) -> Self {
        self.alerts = alerts;
        self
    }

    /// Records refusals of the request to `name` with headers in `parts`.
    fn recorder<'a>(&'a self, name: &'a str, parts: &'a Parts) -> Recorder<'a> {
        Recorder {
            writer: &self.writer,
            name,
            source: None,
            client: None,
            headers: &parts.headers,
            body_timeout_secs: self.body_timeout.as_secs(),
        }
    }

    /// Asks the edge who the client is and whether it may post to `source`.
    fn admit(&self, source: &Source, parts: &Parts) -> Result<IpAddr, Refusal> {
        let declared = declared_length(&parts.headers);
        let client = self
            .edge
            .client(&source.name, parts)
            .map_err(|e| Refusal::new(e, declared))?;
        self.edge
            .admit(&source.name, source.allow_ips.as_ref(), client)
            .map_err(|e| {
                let cause = match (&e, &source.allow_ips) {
                    (ApiError::ForbiddenAddress, Some(allow)) => self.edge.forbidden(allow, client),
                    _ => None,
                };
                let refusal = Refusal::new(e, declared);
                match cause {
                    Some(cause) => refusal.because(cause),
                    None => refusal,
                }
            })?;
        Ok(client)
    }
}

/// What a stored (or answered) request became.
enum Answer {
    Accepted(i64),
    Duplicate(i64),
    Handshake(Handshake),
}

/// `POST /hooks/{source}`: [`handle`], counted and timed.
pub async fn receive(
    State(rx): State<Receiver>,
    name: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let name = match name {
        Ok(Path(name)) => name,
        // A name that is not UTF-8 once decoded names no source either.
        Err(PathRejection::FailedToDeserializePathParams(_)) => String::new(),
        Err(other) => {
            return Err(ApiError::Internal(anyhow::anyhow!(
                "the receive route lost its path parameter: {other}"
            )));
        }
    };
    let (parts, body) = request.into_parts();
    let mut recorder = rx.recorder(&name, &parts);
    let Some(source) = rx.sources.get(&name).cloned() else {
        rx.unknown
            .rejected(ApiError::UnknownSource.reason(), started.elapsed());
        recorder.client = rx.edge.resolve(&parts);
        let declared = declared_length(&parts.headers);
        recorder.refused(&Refusal::new(ApiError::UnknownSource, declared));
        return Err(ApiError::UnknownSource);
    };
    recorder.source = Some(&source);
    let metrics = &source.metrics;
    let client = match rx.admit(&source, &parts) {
        Ok(client) => client,
        Err(refused) => {
            metrics.rejected(refused.error.reason(), started.elapsed());
            recorder.client = rx.edge.resolve(&parts);
            recorder.refused(&refused);
            return Err(refused.error);
        }
    };
    recorder.client = Some(client);
    let answer = handle(&rx, source.clone(), client, &parts, body).await;
    // A body that never comes holds a connection and a reader's place for
    // the whole body timeout, at no cost to whoever sends it: it counts
    // like a forged signature.
    if let Err(ApiError::Unverified { .. } | ApiError::BodyTimeout) =
        answer.as_ref().map_err(|r| &r.error)
    {
        rx.edge.failed(client);
    }
    if let Err(ApiError::Unverified { .. }) = answer.as_ref().map_err(|r| &r.error) {
        rx.alerts.rejected(&source.name);
    }
    let took = started.elapsed();
    match &answer {
        Ok(Answer::Accepted(_)) => metrics.accepted(took),
        Ok(Answer::Duplicate(_)) => metrics.duplicate(took),
        Ok(Answer::Handshake(_)) => metrics.challenge(took),
        Err(refused) => {
            metrics.rejected(refused.error.reason(), took);
            recorder.refused(refused);
        }
    }
    Ok(match answer.map_err(|r| r.error)? {
        Answer::Accepted(id) => (
            StatusCode::ACCEPTED,
            Json(json!({ "status": "accepted", "id": id })),
        )
            .into_response(),
        Answer::Duplicate(id) => (
            StatusCode::OK,
            Json(json!({ "status": "duplicate", "id": id })),
        )
            .into_response(),
        Answer::Handshake(Handshake::Json(answer)) => {
            (StatusCode::OK, Json(answer)).into_response()
        }
        Answer::Handshake(Handshake::Text(answer)) => echo(answer),
        Answer::Handshake(Handshake::NoContent) => StatusCode::NO_CONTENT.into_response(),
    })
}

/// `GET /hooks/{source}`: a subscription handshake, for the kinds that
/// have one (`Provider::subscribe`: Meta's); any other source answers
/// 405, as before the route took `GET`. The edge checks the client as for a delivery, and a wrong
/// `hub.verify_token` counts toward the client's failure limit like a
/// forged signature: the token is a password. Nothing is stored.
pub async fn handshake(
    State(rx): State<Receiver>,
    name: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let name = name.map(|Path(name)| name).unwrap_or_default();
    let (parts, _body) = request.into_parts();
    let mut recorder = rx.recorder(&name, &parts);
    let Some(source) = rx.sources.get(&name).cloned() else {
        rx.unknown
            .rejected(ApiError::UnknownSource.reason(), started.elapsed());
        recorder.client = rx.edge.resolve(&parts);
        recorder.refused(&Refusal::new(ApiError::UnknownSource, None));
        return Err(ApiError::UnknownSource);
    };
    recorder.source = Some(&source);
    let metrics = &source.metrics;
    let client = match rx.admit(&source, &parts) {
        Ok(client) => client,
        Err(refused) => {
            metrics.rejected(refused.error.reason(), started.elapsed());
            recorder.client = rx.edge.resolve(&parts);
            recorder.refused(&refused);
            return Err(refused.error);
        }
    };
    recorder.client = Some(client);
    let query = parts.uri.query().unwrap_or("");
    let Some(answer) = source.verifier.subscribe(query) else {
        metrics.rejected("method_not_allowed", started.elapsed());
        recorder.record(405, "method_not_allowed", None, Default::default());
        let body = Json(json!({ "error": "method_not_allowed" }));
        return Ok((
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            body,
        )
            .into_response());
    };
    match answer {
        Ok(challenge) => {
            metrics.challenge(started.elapsed());
            Ok(echo(challenge))
        }
        Err(refused) => {
            if refused == Refused::WrongToken {
                rx.edge.failed(client);
            }
            if let Some(held_back) = source.refusal_log.pass(Instant::now()) {
                tracing::info!(source = %source.name, reason = refused.reason(), held_back, "refused a handshake");
            }
            metrics.rejected(refused.reason(), started.elapsed());
            let status = match refused {
                Refused::WrongToken => StatusCode::FORBIDDEN,
                Refused::NotAHandshake => StatusCode::NOT_FOUND,
            };
            recorder.record(status.as_u16(), refused.reason(), None, Default::default());
            Ok((status, Json(json!({ "error": refused.reason() }))).into_response())
        }
    }
}

/// A challenge echoed back as text. Meta's is whatever the sender of the
/// `GET` chose, so no browser may sniff it into HTML and run it as this
/// origin's page.
fn echo(text: String) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        text,
    )
        .into_response()
}

/// Reads, verifies, identifies and stores one request from `client`.
async fn handle(
    rx: &Receiver,
    source: Arc<Source>,
    client: IpAddr,
    parts: &Parts,
    body: Body,
) -> Result<Answer, Refusal> {
    let declared = declared_length(&parts.headers);
    if declared.is_some_and(|len| len > source.max_body_bytes) {
        return Err(Refusal::new(ApiError::BodyTooLarge, declared));
    }
    // Held until the event is stored or refused.
    let mut charge = rx
        .edge
        .start_body(&source.name, client)
        .map_err(|e| Refusal::new(e, declared).because("body_budget"))?;
    let mut read = 0;
    let body = read_body(rx, &source, body, &mut charge, &mut read)
        .await
        .map_err(|e| {
            let budget = matches!(e, ApiError::Unavailable);
            let refusal = Refusal::new(e, Some(read));
            if budget {
                refusal.because("body_budget")
            } else {
                refusal
            }
        })?;
    charge.read();
    let len = Some(body.len() as u64);
    let now = clock::now_ms();
    let examined = if body.len() <= INLINE_VERIFY_MAX {
        source.examine(&parts.headers, parts.uri.query(), body, now)
    } else {
        let source = source.clone();
        let headers = parts.headers.clone();
        let query = parts.uri.query().map(str::to_owned);
        tokio::task::spawn_blocking(move || source.examine(&headers, query.as_deref(), body, now))
            .await
            .map_err(|_| Refusal::new(ApiError::Unavailable, len).because("internal"))?
    };
    let examined = examined.map_err(|e| {
        if let Some(held_back) = source.refusal_log.pass(Instant::now()) {
            tracing::info!(source = %source.name, reason = e.reason(), held_back, "refused a delivery");
        }
        Refusal::new(e, len)
    })?;
    let event = match examined {
        Examined::Handshake(answer) => return Ok(Answer::Handshake(answer)),
        Examined::Event(event) => event,
    };
    let dispatched = !event.destinations.is_empty();
    // Only kept when a long-poll may want it.
    let pulled = (dispatched && rx.pull.serves(&source.name)).then(|| event.destinations.clone());
    match crate::store::ingest::store(&rx.writer, event).await {
        Ok(Inserted::New(id)) => {
            tracing::debug!(source = %source.name, event.id = id, "accepted");
            if dispatched {
                rx.dispatch.notify_one();
            }
            if let Some(destinations) = pulled {
                rx.pull.wake(&source.name, &destinations);
            }
            Ok(Answer::Accepted(id))
        }
        Ok(Inserted::Duplicate(id)) => {
            tracing::debug!(source = %source.name, event.id = id, "duplicate");
            Ok(Answer::Duplicate(id))
        }
        Err(e) => {
            // The writer logs commit failures once per group; overload is
            // worth a line of its own since nothing else reports it.
            if matches!(e, StoreError::Overloaded) {
                tracing::warn!(source = %source.name, "writer queue full; answering 503");
            }
            rx.alerts.refused_write();
            Err(Refusal::new(ApiError::Unavailable, len).because("store"))
        }
    }
}

/// The `Content-Length` a request declares, if it is a number.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads the whole body within the body timeout, charging each piece to
/// `charge` as it arrives and stopping as soon as the bytes read pass the
/// source's limit (a `Content-Length` over it was refused before).
async fn read_body(
    rx: &Receiver,
    source: &Source,
    body: Body,
    charge: &mut Charge,
    len: &mut u64,
) -> Result<Bytes, ApiError> {
    let read = async {
        let mut body = body;
        let mut whole = Whole::default();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| ApiError::BodyUnreadable)?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            *len = len.saturating_add(data.len() as u64);
            if *len > source.max_body_bytes {
                return Err(ApiError::BodyTooLarge);
            }
            rx.edge.charge(&source.name, charge, data.len())?;
            whole.push(data);
        }
        Ok(whole.freeze())
    };
    tokio::time::timeout(rx.body_timeout, read)
        .await
        .unwrap_or(Err(ApiError::BodyTimeout))
}

/// A body as it arrives. One frame (the usual body with a
/// `Content-Length`) is kept as it came, without a copy; from the second on,
/// every frame is copied into one buffer and let go at once. Kept as
/// separate pieces, a body sent in 1-byte chunks would hold a slice of the
/// connection's read buffer and a `Bytes` per byte: many times what it is
/// charged.
#[derive(Default)]
enum Whole {
    #[default]
    Empty,
    One(Bytes),
    Many(bytes::BytesMut),
}

impl Whole {
    fn push(&mut self, data: Bytes) {
        *self = match std::mem::take(self) {
            Whole::Empty => Whole::One(data),
            Whole::One(first) => {
                let mut buf = bytes::BytesMut::with_capacity(first.len() + data.len());
                buf.extend_from_slice(&first);
                buf.extend_from_slice(&data);
                Whole::Many(buf)
            }
            Whole::Many(mut buf) => {
                buf.extend_from_slice(&data);
                Whole::Many(buf)
            }
        }
    }

    fn freeze(self) -> Bytes {
        match self {
            Whole::Empty => Bytes::new(),
            Whole::One(data) => data,
            Whole::Many(buf) => buf.freeze(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_body_in_many_frames_is_one_buffer_and_one_frame_is_not_copied() {
        let mut whole = Whole::default();
        for b in b"hello, world" {
            whole.push(Bytes::copy_from_slice(&[*b]));
        }
        assert!(matches!(&whole, Whole::Many(buf) if buf.len() == 12));
        assert_eq!(whole.freeze(), Bytes::from_static(b"hello, world"));
        let one = Bytes::from_static(b"as it came");
        let mut whole = Whole::default();
        whole.push(one.clone());
        assert_eq!(whole.freeze().as_ptr(), one.as_ptr(), "not copied");
        assert!(Whole::default().freeze().is_empty());
    }

    #[test]
    fn a_declared_length_is_read_only_when_it_is_a_number() {
        let mut h = HeaderMap::new();
        assert_eq!(declared_length(&h), None);
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(2048u64));
        assert_eq!(declared_length(&h), Some(2048));
        h.insert(
            header::CONTENT_LENGTH,
            HeaderValue::from_static("99999999999999999999999"),
        );
        assert_eq!(declared_length(&h), None);
    }

    #[test]
    fn pieces_are_joined_in_order() {
        let mut whole = Whole::default();
        for piece in ["a", "bc", "", "def"] {
            whole.push(Bytes::from(piece));
        }
        assert_eq!(whole.freeze(), "abcdef");
    }
}
