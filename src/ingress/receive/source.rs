//! A configured source, ready to check requests: the verifier its kind
//! builds (from `super::registry`), its limits, its filters and what it
//! says when it refuses. The HTTP side (`super`) asks it; the provider
//! files (`super::github`, …) do the checking.

use axum::http::{HeaderMap, header};
use bytes::Bytes;

use super::log_gate::{self, LogGate};
use super::payload::{Handshake, Identified, IdentifyError, Inbound};
use super::provider::Provider;
use super::registry::PROVIDERS;
use super::verify::VerifyError;
use crate::config::route::Routes;
use crate::config::{AllowIps, SourceConfig};
use crate::store::models::{NewEvent, Origin};
use crate::support::error::ApiError;
use crate::telemetry::metrics::SourceMetrics;

/// Bodies above this are verified on the blocking pool, so hashing 25 MiB
/// does not stall the other requests sharing the worker thread.
pub(super) const INLINE_VERIFY_MAX: usize = 512 * 1024;

/// A configured source, ready to check requests.
pub struct Source {
    pub name: String,
    /// The kind's verifier, from the registry.
    pub(super) verifier: Box<dyn Provider>,
    pub(super) order_key: Vec<String>,
    pub(super) max_body_bytes: u64,
    pub(super) keep_headers: Vec<String>,
    /// The destinations and their filters: an event goes to each that
    /// takes it; one that none takes is only kept (`stored`).
    pub(super) routes: Routes,
    /// `None`: every address may post.
    pub(super) allow_ips: Option<AllowIps>,
    pub(super) metrics: SourceMetrics,
    /// How many secrets are configured and the timestamp tolerance: said
    /// when a signature or a timestamp is refused.
    pub(super) secrets: u32,
    pub(super) tolerance_secs: u64,
    /// Lets a refused request's or handshake's log line through now and then.
    pub(super) refusal_log: LogGate,
}

impl Source {
    pub fn new(cfg: &SourceConfig, metrics: SourceMetrics) -> Self {
        let verifier = PROVIDERS.build(cfg);
        Source {
            name: cfg.name.clone(),
            keep_headers: verifier.keep_headers(),
            verifier,
            order_key: cfg.order_key.clone(),
            max_body_bytes: cfg.max_body_bytes,
            routes: Routes::new(&cfg.destinations),
            allow_ips: cfg.allow_ips.clone(),
            metrics,
            secrets: u32::try_from(cfg.secrets.len()).unwrap_or(u32::MAX),
            tolerance_secs: cfg.tolerance.as_secs(),
            refusal_log: LogGate::new(log_gate::EVERY),
        }
    }

    pub(super) fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        self.verifier.verify(req, now_ms)
    }

    pub(super) fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        self.verifier.identify(req)
    }

    /// Verifies and identifies a request, and if it is an event, builds the
    /// row to store. Pure: no I/O, so it can run on any thread.
    pub(super) fn examine(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
        body: Bytes,
        now_ms: i64,
    ) -> Result<Examined, ApiError> {
        let req = Inbound::new(headers, &body).with_query(query);
        self.verify(&req, now_ms)?;
        let identity = match self.identify(&req)? {
            Identified::Handshake(answer) => return Ok(Examined::Handshake(answer)),
            Identified::Event(identity) => identity,
        };
        let order_key = self.order_key.iter().find_map(|p| req.json_str(p));
        let event_type = identity.event_type;
        let destinations = self
            .routes
            .matching(event_type.as_deref(), &body_of(&self.routes, &req));
        let event = NewEvent {
            source: self.name.clone(),
            delivery_id: identity.delivery_id,
            event_type,
            order_key,
            received_at: now_ms,
            origin: Origin::Push,
            content_type: headers
                .get(header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
            headers: kept_headers(headers, &self.keep_headers),
            body,
            destinations,
        };
        Ok(Examined::Event(event))
    }
}

/// The body as `routes` read it: the receiver's own parse, when needed.
pub(super) fn body_of<'a>(routes: &Routes, req: &'a Inbound<'_>) -> crate::config::route::Body<'a> {
    crate::config::route::Body::parsed(routes.reads_body().then(|| req.json()).flatten())
}

/// The configured `public_url`; validation requires it for the kinds that
/// call this.
pub(super) fn public_url(cfg: &SourceConfig) -> &str {
    cfg.public_url
        .as_deref()
        .expect("config validation requires public_url for kinds that sign the URL")
}

pub(super) enum Examined {
    Event(NewEvent),
    Handshake(Handshake),
}

/// The provider headers worth keeping, as a JSON object. Values that are not
/// UTF-8 are kept lossily: they are for people to read, not to verify.
pub(super) fn kept_headers(headers: &HeaderMap, keep: &[String]) -> String {
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
