//! A configured source, ready to check requests: which verifier its kind
//! uses, its limits, its filters and what it says when it refuses. The
//! HTTP side (`super`) asks it; the provider files (`super::github`, …)
//! do the checking.

use axum::http::{HeaderMap, header};
use bytes::Bytes;

use super::log_gate::{self, LogGate};
use super::payload::{Handshake, Identified, IdentifyError, Inbound};
use super::verify::VerifyError;
use super::{
    discord, github, gitlab, hmac, linear, mailgun, meta, paddle, sendgrid, shopify, slack, square,
    standard, stripe, twilio, twitch, zoom,
};
use crate::config::route::Routes;
use crate::config::{AllowIps, Kind, SourceConfig};
use crate::error::ApiError;
use crate::metrics::SourceMetrics;
use crate::store::models::{NewEvent, Origin};

/// Bodies above this are verified on the blocking pool, so hashing 25 MiB
/// does not stall the other requests sharing the worker thread.
pub(super) const INLINE_VERIFY_MAX: usize = 512 * 1024;

/// A configured source, ready to check requests.
pub struct Source {
    pub name: String,
    pub(super) verifier: Verifier,
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

pub(super) enum Verifier {
    Github(github::GitHub),
    Stripe(stripe::Stripe),
    Shopify(shopify::Shopify),
    Standard(standard::Standard),
    Gitlab(gitlab::Gitlab),
    Slack(slack::Slack),
    Hmac(hmac::Hmac),
    Linear(linear::Linear),
    Discord(discord::Discord),
    Sendgrid(sendgrid::Sendgrid),
    Mailgun(mailgun::Mailgun),
    Meta(meta::Meta),
    Paddle(paddle::Paddle),
    Twilio(twilio::Twilio),
    Square(square::Square),
    Zoom(zoom::Zoom),
    Twitch(twitch::Twitch),
}

impl Source {
    pub fn new(cfg: &SourceConfig, metrics: SourceMetrics) -> Self {
        // Saturating: a wrapped (negative) tolerance would refuse every
        // timestamp, valid deliveries included.
        let tolerance = i64::try_from(cfg.tolerance.as_secs()).unwrap_or(i64::MAX);
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
            (Kind::Linear, _) => (
                Verifier::Linear(linear::Linear::new(secrets, tolerance)),
                owned(linear::KEEP_HEADERS),
            ),
            (Kind::Discord, _) => (
                Verifier::Discord(discord::Discord::new(secrets, tolerance)),
                owned(discord::KEEP_HEADERS),
            ),
            (Kind::Sendgrid, _) => (
                Verifier::Sendgrid(sendgrid::Sendgrid::new(secrets)),
                owned(sendgrid::KEEP_HEADERS),
            ),
            (Kind::Mailgun, _) => (
                Verifier::Mailgun(mailgun::Mailgun::new(secrets)),
                owned(mailgun::KEEP_HEADERS),
            ),
            (Kind::Meta, _) => (
                Verifier::Meta(meta::Meta::new(secrets, cfg.verify_token.clone())),
                owned(meta::KEEP_HEADERS),
            ),
            (Kind::Paddle, _) => (
                Verifier::Paddle(paddle::Paddle::new(secrets, tolerance)),
                owned(paddle::KEEP_HEADERS),
            ),
            (Kind::Twilio, _) => (
                Verifier::Twilio(twilio::Twilio::new(secrets, public_url(cfg))),
                owned(twilio::KEEP_HEADERS),
            ),
            (Kind::Square, _) => (
                Verifier::Square(square::Square::new(secrets, public_url(cfg))),
                owned(square::KEEP_HEADERS),
            ),
            (Kind::Zoom, _) => (
                Verifier::Zoom(zoom::Zoom::new(secrets)),
                owned(zoom::KEEP_HEADERS),
            ),
            (Kind::Twitch, _) => (
                Verifier::Twitch(twitch::Twitch::new(secrets, tolerance)),
                owned(twitch::KEEP_HEADERS),
            ),
        };
        Source {
            name: cfg.name.clone(),
            verifier,
            order_key: cfg.order_key.clone(),
            max_body_bytes: cfg.max_body_bytes,
            keep_headers,
            routes: Routes::new(&cfg.destinations),
            allow_ips: cfg.allow_ips.clone(),
            metrics,
            secrets: u32::try_from(secrets.len()).unwrap_or(u32::MAX),
            tolerance_secs: cfg.tolerance.as_secs(),
            refusal_log: LogGate::new(log_gate::EVERY),
        }
    }

    pub(super) fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        let now = now_ms / 1000;
        match &self.verifier {
            Verifier::Github(v) => v.verify(req),
            Verifier::Stripe(v) => v.verify(req, now),
            Verifier::Shopify(v) => v.verify(req),
            Verifier::Standard(v) => v.verify(req, now),
            Verifier::Gitlab(v) => v.verify(req),
            Verifier::Slack(v) => v.verify(req, now),
            Verifier::Hmac(v) => v.verify(req, now),
            // Linear's timestamp is in milliseconds.
            Verifier::Linear(v) => v.verify(req, now_ms),
            Verifier::Discord(v) => v.verify(req, now),
            Verifier::Sendgrid(v) => v.verify(req),
            Verifier::Mailgun(v) => v.verify(req),
            Verifier::Meta(v) => v.verify(req),
            Verifier::Paddle(v) => v.verify(req, now),
            Verifier::Twilio(v) => v.verify(req),
            Verifier::Square(v) => v.verify(req),
            Verifier::Zoom(v) => v.verify(req),
            Verifier::Twitch(v) => v.verify(req, now),
        }
    }

    pub(super) fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        match &self.verifier {
            Verifier::Github(v) => v.identify(req),
            Verifier::Stripe(v) => v.identify(req),
            Verifier::Shopify(v) => v.identify(req),
            Verifier::Standard(v) => v.identify(req),
            Verifier::Gitlab(v) => v.identify(req),
            Verifier::Slack(v) => v.identify(req),
            Verifier::Hmac(v) => v.identify(req),
            Verifier::Linear(v) => v.identify(req),
            Verifier::Discord(v) => v.identify(req),
            Verifier::Sendgrid(v) => v.identify(req),
            Verifier::Mailgun(v) => v.identify(req),
            Verifier::Meta(v) => v.identify(req),
            Verifier::Paddle(v) => v.identify(req),
            Verifier::Twilio(v) => v.identify(req),
            Verifier::Square(v) => v.identify(req),
            Verifier::Zoom(v) => v.identify(req),
            Verifier::Twitch(v) => v.identify(req),
        }
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
