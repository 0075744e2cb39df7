//! The request as a verifier sees it, and what identification yields.
//!
//! The body is parsed as JSON at most once, lazily, and only after the
//! signature has been checked on the raw bytes: kinds that need no JSON
//! (GitHub without an `order_key`, say) never pay for a parse.

use std::cell::OnceCell;

use axum::http::HeaderMap;
use serde_json::Value;

use crate::support::error::ApiError;

/// One received request: headers, the exact body bytes, and the query.
pub struct Inbound<'a> {
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    /// The request's query string as received, without the `?`: part of
    /// what the URL-signing kinds (Twilio, Square) sign.
    pub query: Option<&'a str>,
    json: OnceCell<Option<Value>>,
}

impl<'a> Inbound<'a> {
    pub fn new(headers: &'a HeaderMap, body: &'a [u8]) -> Self {
        Inbound {
            headers,
            body,
            query: None,
            json: OnceCell::new(),
        }
    }

    /// The same request with the query string it arrived with.
    pub fn with_query(mut self, query: Option<&'a str>) -> Self {
        self.query = query;
        self
    }

    /// The body parsed as JSON, or `None` when it is not JSON.
    pub fn json(&self) -> Option<&Value> {
        self.json
            .get_or_init(|| serde_json::from_slice(self.body).ok())
            .as_ref()
    }

    /// A string at a JSON pointer (`/data/object/id`) of the body. Numbers
    /// are rendered as text so numeric ids work as keys too.
    pub fn json_str(&self, pointer: &str) -> Option<String> {
        match self.json()?.pointer(pointer)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// Where an event sits in the inbox: its dedupe key and its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub delivery_id: String,
    pub event_type: Option<String>,
}

/// What identification decided about a verified request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identified {
    /// An event to store.
    Event(Identity),
    /// A handshake to answer (200, or 204 for [`Handshake::NoContent`])
    /// and not store.
    Handshake(Handshake),
}

/// The answer to a provider's handshake, in the shape that provider
/// expects: each checks the body, some the content type too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handshake {
    /// A JSON body: Slack's `{"challenge": ..}`, Zoom's
    /// `{"plainToken": .., "encryptedToken": ..}`.
    Json(Value),
    /// A `text/plain` body: Twitch wants the bare challenge string.
    Text(String),
    /// `204 No Content`: what Discord expects for the PING of its webhook
    /// events (its interactions PING wants `Json({"type": 1})` instead).
    NoContent,
}

/// A verified request that cannot be stored: the provider sent something
/// malformed, so the answer is 400 and retrying will not help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdentifyError {
    #[error("missing_delivery_id")]
    MissingDeliveryId,
    #[error("invalid_json")]
    InvalidJson,
}

impl IdentifyError {
    pub fn reason(self) -> &'static str {
        match self {
            IdentifyError::MissingDeliveryId => "missing_delivery_id",
            IdentifyError::InvalidJson => "invalid_json",
        }
    }
}

impl From<IdentifyError> for ApiError {
    fn from(e: IdentifyError) -> Self {
        ApiError::Unidentified(e.reason())
    }
}

/// Longest delivery id we accept; ids are keys, not payloads.
pub const MAX_DELIVERY_ID_LEN: usize = 256;

/// Checks a delivery id taken from a header or the body.
pub fn delivery_id(raw: Option<&str>) -> Result<String, IdentifyError> {
    match raw {
        Some(id) if !id.is_empty() && id.len() <= MAX_DELIVERY_ID_LEN => Ok(id.to_owned()),
        _ => Err(IdentifyError::MissingDeliveryId),
    }
}
