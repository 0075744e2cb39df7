//! `POST /hooks/{source}`: read, verify, identify, store, answer.
//!
//! The handler reads as the contract does: find the source (404), ask the
//! edge about the client address before anything else (400 a trusted
//! proxy's header names no client, 403 not allowed, 429 blocked; see
//! `crate::edge`), read the
//! body within its limit and time (413, 408), verify the signature on the
//! exact bytes (401), identify the event (400), hand it to the writer and
//! answer only once it is committed (202 new, 200 duplicate, 503 when the
//! store cannot take it). Provider specifics live one file per kind; this
//! module only chooses among them.

pub mod github;
pub mod gitlab;
pub mod hmac;
pub mod payload;
pub mod shopify;
pub mod slack;
pub mod standard;
pub mod stripe;
pub mod verify;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use serde_json::json;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::clock;
use crate::config::{AllowIps, Config, Kind, SourceConfig};
use crate::edge::Edge;
use crate::error::ApiError;
use crate::metrics::{Metrics, SourceMetrics};
use crate::store::models::{Inserted, NewEvent, Origin, State as EventState};
use crate::store::{StoreError, WriterHandle};
use payload::{Identified, IdentifyError, Inbound};
use verify::VerifyError;

/// Bodies above this are verified on the blocking pool, so hashing 25 MiB
/// does not stall the other requests sharing the worker thread.
const INLINE_VERIFY_MAX: usize = 512 * 1024;

/// A configured source, ready to check requests.
pub struct Source {
    pub name: String,
    verifier: Verifier,
    order_key: Vec<String>,
    max_body_bytes: u64,
    keep_headers: Vec<String>,
    /// Whether events go on to a destination (`pending`) or are only kept
    /// (`stored`).
    delivers: bool,
    /// `None`: every address may post.
    allow_ips: Option<AllowIps>,
    metrics: SourceMetrics,
}

enum Verifier {
    Github(github::GitHub),
    Stripe(stripe::Stripe),
    Shopify(shopify::Shopify),
    Standard(standard::Standard),
    Gitlab(gitlab::Gitlab),
    Slack(slack::Slack),
    Hmac(hmac::Hmac),
}

impl Source {
    pub fn new(cfg: &SourceConfig, metrics: SourceMetrics) -> Self {
        let tolerance = cfg.tolerance.as_secs() as i64;
        let secrets = &cfg.secrets;
        let owned = |names: &[&str]| names.iter().map(|h| (*h).to_owned()).collect();
        let (verifier, keep_headers) = match (cfg.kind, &cfg.hmac) {
            (Kind::Github, _) => (
                Verifier::Github(github::GitHub::new(secrets)),
                owned(github::KEEP_HEADERS),
            ),
            (Kind::Stripe, _) => (
                Verifier::Stripe(stripe::Stripe::new(secrets, tolerance)),
                owned(stripe::KEEP_HEADERS),
            ),
            (Kind::Shopify, _) => (
                Verifier::Shopify(shopify::Shopify::new(secrets)),
                owned(shopify::KEEP_HEADERS),
            ),
            (Kind::Standard, _) => (
                Verifier::Standard(standard::Standard::new(secrets, tolerance)),
                owned(standard::KEEP_HEADERS),
            ),
            (Kind::Gitlab, _) => (
                Verifier::Gitlab(gitlab::Gitlab::new(secrets)),
                owned(gitlab::KEEP_HEADERS),
            ),
            (Kind::Slack, _) => (
                Verifier::Slack(slack::Slack::new(secrets, tolerance)),
                owned(slack::KEEP_HEADERS),
            ),
            (Kind::Hmac, Some(h)) => {
                let v = hmac::Hmac::new(secrets, tolerance, h);
                let keep = v.keep_headers();
                (Verifier::Hmac(v), keep)
            }
            (Kind::Hmac, None) => {
                unreachable!("config validation requires [sources.hmac] for kind hmac")
            }
        };
        Source {
            name: cfg.name.clone(),
            verifier,
            order_key: cfg.order_key.clone(),
            max_body_bytes: cfg.max_body_bytes,
            keep_headers,
            delivers: cfg.deliver.is_some(),
            allow_ips: cfg.allow_ips.clone(),
            metrics,
        }
    }

    fn verify(&self, req: &Inbound, now: i64) -> Result<(), VerifyError> {
        match &self.verifier {
            Verifier::Github(v) => v.verify(req),
            Verifier::Stripe(v) => v.verify(req, now),
            Verifier::Shopify(v) => v.verify(req),
            Verifier::Standard(v) => v.verify(req, now),
            Verifier::Gitlab(v) => v.verify(req),
            Verifier::Slack(v) => v.verify(req, now),
            Verifier::Hmac(v) => v.verify(req, now),
        }
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        match &self.verifier {
            Verifier::Github(v) => v.identify(req),
            Verifier::Stripe(v) => v.identify(req),
            Verifier::Shopify(v) => v.identify(req),
            Verifier::Standard(v) => v.identify(req),
            Verifier::Gitlab(v) => v.identify(req),
            Verifier::Slack(v) => v.identify(req),
            Verifier::Hmac(v) => v.identify(req),
        }
    }

    /// Verifies and identifies a request, and if it is an event, builds the
    /// row to store. Pure: no I/O, so it can run on any thread.
    fn examine(&self, headers: &HeaderMap, body: Bytes, now_ms: i64) -> Result<Examined, ApiError> {
        let req = Inbound::new(headers, &body);
        self.verify(&req, now_ms / 1000)
            .map_err(ApiError::Unverified)?;
        let identity = match self.identify(&req).map_err(ApiError::Unidentified)? {
            Identified::Challenge(challenge) => return Ok(Examined::Challenge(challenge)),
            Identified::Event(identity) => identity,
        };
        let order_key = self.order_key.iter().find_map(|p| req.json_str(p));
        let event = NewEvent {
            source: self.name.clone(),
            delivery_id: identity.delivery_id,
            event_type: identity.event_type,
            order_key,
            received_at: now_ms,
            origin: Origin::Push,
            content_type: headers
                .get(header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
            headers: kept_headers(headers, &self.keep_headers),
            body,
            state: if self.delivers {
                EventState::Pending
            } else {
                EventState::Stored
            },
        };
        Ok(Examined::Event(event))
    }
}

enum Examined {
    Event(NewEvent),
    Challenge(String),
}

/// The provider headers worth keeping, as a JSON object. Values that are not
/// UTF-8 are kept lossily: they are for people to read, not to verify.
fn kept_headers(headers: &HeaderMap, keep: &[String]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = keep
        .iter()
        .filter_map(|name| {
            let value = headers.get(name.as_str())?;
            Some((
                name.clone(),
                String::from_utf8_lossy(value.as_bytes()).into(),
            ))
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// What the receive route needs.
#[derive(Clone)]
pub struct Receiver {
    sources: Arc<HashMap<String, Arc<Source>>>,
    writer: WriterHandle,
    body_timeout: Duration,
    /// Wakes the dispatcher when a new event is pending.
    dispatch: Arc<Notify>,
    /// Counts requests to names no source answers, under one label.
    unknown: SourceMetrics,
    /// Client address, allowlists and the failure limit.
    edge: Arc<Edge>,
    /// Bodies being read or stored, in KiB: see [`BODY_MEMORY_KIB`].
    body_memory: Arc<Semaphore>,
}

impl Receiver {
    pub fn new(
        config: &Config,
        writer: WriterHandle,
        dispatch: Arc<Notify>,
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
            body_memory: Arc::new(Semaphore::new(BODY_MEMORY_KIB)),
            dispatch,
            unknown: metrics.unknown_source(),
            edge,
        }
    }
}

/// What a stored (or answered) request became.
enum Answer {
    Accepted(i64),
    Duplicate(i64),
    Challenge(String),
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
    let Some(source) = rx.sources.get(&name).cloned() else {
        rx.unknown
            .rejected(ApiError::UnknownSource.reason(), started.elapsed());
        return Err(ApiError::UnknownSource);
    };
    let metrics = &source.metrics;
    let (parts, body) = request.into_parts();
    let admitted = rx.edge.client(&name, &parts).and_then(|client| {
        rx.edge
            .admit(&name, source.allow_ips.as_ref(), client)
            .map(|()| client)
    });
    let client = match admitted {
        Ok(client) => client,
        Err(refused) => {
            metrics.rejected(refused.reason(), started.elapsed());
            return Err(refused);
        }
    };
    let answer = handle(&rx, source.clone(), Request::from_parts(parts, body)).await;
    if let Err(ApiError::Unverified(_)) = &answer {
        rx.edge.failed(client);
    }
    let took = started.elapsed();
    match &answer {
        Ok(Answer::Accepted(_)) => metrics.accepted(took),
        Ok(Answer::Duplicate(_)) => metrics.duplicate(took),
        Ok(Answer::Challenge(_)) => metrics.challenge(took),
        Err(e) => metrics.rejected(e.reason(), took),
    }
    Ok(match answer? {
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
        Answer::Challenge(challenge) => {
            (StatusCode::OK, Json(json!({ "challenge": challenge }))).into_response()
        }
    })
}

/// Reads, verifies, identifies and stores one request.
async fn handle(rx: &Receiver, source: Arc<Source>, request: Request) -> Result<Answer, ApiError> {
    let (parts, body) = request.into_parts();
    // Held until the event is stored or refused.
    let _memory = reserve_body_memory(&rx.body_memory, &parts.headers, source.max_body_bytes)?;
    let body = read_body(body, source.max_body_bytes, rx.body_timeout).await?;
    let now = clock::now_ms();
    let examined = if body.len() <= INLINE_VERIFY_MAX {
        source.examine(&parts.headers, body, now)
    } else {
        let source = source.clone();
        tokio::task::spawn_blocking(move || source.examine(&parts.headers, body, now))
            .await
            .map_err(|_| ApiError::Unavailable)?
    };
    let examined = examined.inspect_err(|e| {
        tracing::info!(source = %source.name, reason = e.reason(), "refused a delivery");
    })?;
    let event = match examined {
        Examined::Challenge(challenge) => return Ok(Answer::Challenge(challenge)),
        Examined::Event(event) => event,
    };
    match rx.writer.insert(event).await {
        Ok(Inserted::New(id)) => {
            tracing::debug!(source = %source.name, event.id = id, "accepted");
            if source.delivers {
                rx.dispatch.notify_one();
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
            Err(ApiError::Unavailable)
        }
    }
}

/// Memory for request bodies across all requests, in KiB (256 MiB). Bodies
/// are read whole before their signature can be checked, so without a
/// budget a thousand connections could each hold a 25 MiB body. A request
/// reserves its `Content-Length` (or, without one, its source's limit)
/// before reading; when the budget is spent it gets 503 with
/// `Retry-After`, which every provider retries.
const BODY_MEMORY_KIB: usize = 256 * 1024;

fn reserve_body_memory(
    budget: &Arc<Semaphore>,
    headers: &HeaderMap,
    limit: u64,
) -> Result<OwnedSemaphorePermit, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(ApiError::BodyTooLarge);
    }
    let bytes = declared.unwrap_or(limit);
    // A source limit above the whole budget takes all of it, not forever 503.
    let kib = bytes.div_ceil(1024).clamp(1, BODY_MEMORY_KIB as u64);
    let kib = u32::try_from(kib).unwrap_or(u32::MAX);
    budget.clone().try_acquire_many_owned(kib).map_err(|_| {
        tracing::warn!("request bodies use all of their memory budget; answering 503");
        ApiError::Unavailable
    })
}

/// Reads the whole body, stopping as soon as the bytes read pass the limit
/// (a `Content-Length` over it was refused by [`reserve_body_memory`]).
async fn read_body(body: Body, limit: u64, timeout: Duration) -> Result<Bytes, ApiError> {
    let limited = Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    match tokio::time::timeout(timeout, limited.collect()).await {
        Err(_) => Err(ApiError::BodyTimeout),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::BodyTooLarge),
        Ok(Err(_)) => Err(ApiError::BodyUnreadable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn length(n: u64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        h
    }

    #[test]
    fn bodies_reserve_their_length_or_their_limit_and_share_one_budget() {
        let budget = Arc::new(Semaphore::new(BODY_MEMORY_KIB));
        let small = reserve_body_memory(&budget, &length(2048), 1 << 20).unwrap();
        assert_eq!(small.num_permits(), 2);
        // Without a length, the source's limit is reserved.
        let chunked = reserve_body_memory(&budget, &HeaderMap::new(), 10 << 20).unwrap();
        assert_eq!(chunked.num_permits(), 10 * 1024);
        // Over the limit is 413 before any reservation.
        assert!(matches!(
            reserve_body_memory(&budget, &length(2 << 20), 1 << 20),
            Err(ApiError::BodyTooLarge)
        ));
        // A limit above the whole budget takes all of it once it is free.
        assert!(matches!(
            reserve_body_memory(&budget, &HeaderMap::new(), 1 << 40),
            Err(ApiError::Unavailable)
        ));
        drop((small, chunked));
        let all = reserve_body_memory(&budget, &HeaderMap::new(), 1 << 40).unwrap();
        assert!(matches!(
            reserve_body_memory(&budget, &length(1), 1 << 20),
            Err(ApiError::Unavailable)
        ));
        drop(all);
    }
}
