//! A fake Square Events API on 127.0.0.1, after Square's `SearchEvents`
//! reference and Events API overview: `POST /v2/events` with
//! `Authorization: Bearer` and `Square-Version`, a body of `limit` (at most
//! 100), `query.filter.created_at.start_at`, `query.filter.event_types`
//! and `query.sort`, answering `{"events", "metadata", "cursor"}`; a later
//! page needs the same query with the cursor; only the last 28 days are
//! kept; errors are `{"errors": [{"category", "code", "detail"}]}`; a 429
//! with `Retry-After` on demand. Each event is the body Square POSTs to a
//! webhook subscription, serialized the same way in both places.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};

use super::paddle_fake::rfc3339;
use crate::helpers::{hmac_sha256, now_secs, serve_loopback};

pub const SQUARE_TOKEN: &str = "EAAAl-square-personal-access-token";
/// The subscription's signature key: what the source verifies with.
pub const SQUARE_KEY: &str = "sq0wsk-hookbox-test-signature-key";
/// The URL entered in the subscription (the source's `public_url`).
pub const SQUARE_URL: &str = "https://hooks.example.com/hooks/square";

/// Square keeps events this long.
const RETENTION: i64 = 28 * 86_400;

/// An event as Square sends and lists it; `created_at` is `at` (unix s).
pub fn event(n: u32, at: i64) -> Value {
    json!({
        "merchant_id": "MLV4HBKRC5Q0T",
        "location_id": "L8YHX0FQ3W6Z2",
        "type": if n.is_multiple_of(3) { "order.updated" } else { "payment.updated" },
        "event_id": format!("6a8f5f28-54a1-4eb0-a98a-{n:012}"),
        "created_at": rfc3339(at),
        "data": {
            "type": "payment",
            "id": format!("pay-{n}"),
            "object": {"payment": {"id": format!("pay-{n}"), "status": "COMPLETED",
                                   "amount_money": {"amount": 100 + n, "currency": "USD"}}},
        },
    })
}

/// The bytes Square POSTs (and lists) for `event`: its fields in Square's
/// order, not sorted as a re-serialized `Value` would have them, so a copy
/// that was parsed and written again does not pass for the original.
pub fn body(event: &Value) -> Vec<u8> {
    let field = |k: &str| serde_json::to_string(&event[k]).unwrap();
    format!(
        r#"{{"merchant_id":{},"location_id":{},"type":{},"event_id":{},"created_at":{},"data":{}}}"#,
        field("merchant_id"),
        field("location_id"),
        field("type"),
        field("event_id"),
        field("created_at"),
        field("data")
    )
    .into_bytes()
}

/// Square's signature of a notification: base64 HMAC-SHA256 of the
/// subscription URL and the body.
pub fn square_signature(body: &[u8]) -> String {
    let mut signed = SQUARE_URL.as_bytes().to_vec();
    signed.extend_from_slice(body);
    base64::engine::general_purpose::STANDARD.encode(hmac_sha256(SQUARE_KEY.as_bytes(), &signed))
}

#[derive(Default)]
pub struct Inner {
    pub events: Vec<Value>,
    /// Every search body, in order.
    pub searches: Vec<Value>,
    pub throttled: usize,
    /// What the fake found wrong with hookbox's requests.
    pub problems: Vec<String>,
}

#[derive(Default)]
struct Config {
    page_size: usize,
    /// Searches (counted from 1) answered 429 with `Retry-After: 1`.
    throttle: Vec<usize>,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    config: Arc<Mutex<Config>>,
}

pub struct SquareFake {
    pub addr: SocketAddr,
    pub inner: Arc<Mutex<Inner>>,
    config: Arc<Mutex<Config>>,
}

impl SquareFake {
    pub async fn start(events: Vec<Value>) -> SquareFake {
        let inner = Arc::new(Mutex::new(Inner {
            events,
            ..Inner::default()
        }));
        let config = Arc::new(Mutex::new(Config {
            page_size: 4,
            ..Config::default()
        }));
        let (addr, _server) = serve_loopback(|_| {
            let shared = Shared {
                inner: inner.clone(),
                config: config.clone(),
            };
            Router::new().fallback(handle).with_state(shared)
        })
        .await;
        SquareFake {
            addr,
            inner,
            config,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers the `n`th search (from 1) with 429, `Retry-After: 1`.
    pub fn throttle(&self, n: usize) {
        self.config.lock().unwrap().throttle.push(n);
    }

    pub fn searches(&self) -> Vec<Value> {
        self.inner.lock().unwrap().searches.clone()
    }

    pub fn throttled(&self) -> usize {
        self.inner.lock().unwrap().throttled
    }

    pub fn assert_no_problems(&self) {
        let inner = self.inner.lock().unwrap();
        assert!(inner.problems.is_empty(), "{:#?}", inner.problems);
    }
}

fn error(status: StatusCode, category: &str, code: &str, detail: &str) -> Response {
    let body = json!({"errors": [{"category": category, "code": code, "detail": detail}]});
    (status, axum::Json(body)).into_response()
}

async fn handle(
    State(s): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if auth != format!("Bearer {SQUARE_TOKEN}") {
        s.inner
            .lock()
            .unwrap()
            .problems
            .push("wrong token".to_owned());
        return error(
            StatusCode::UNAUTHORIZED,
            "AUTHENTICATION_ERROR",
            "UNAUTHORIZED",
            "This request could not be authorized.",
        );
    }
    if !headers.contains_key("square-version") {
        s.inner
            .lock()
            .unwrap()
            .problems
            .push("no Square-Version".to_owned());
    }
    if method != Method::POST || uri.path() != "/v2/events" {
        return error(
            StatusCode::NOT_FOUND,
            "INVALID_REQUEST_ERROR",
            "NOT_FOUND",
            "Resource not found.",
        );
    }
    let Ok(search) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST_ERROR",
            "INVALID_JSON",
            "The body is not valid JSON.",
        );
    };
    search_events(&s, search)
}

fn search_events(s: &Shared, search: Value) -> Response {
    let n = {
        let mut inner = s.inner.lock().unwrap();
        inner.searches.push(search.clone());
        inner.searches.len()
    };
    if s.config.lock().unwrap().throttle.contains(&n) {
        s.inner.lock().unwrap().throttled += 1;
        let mut response = error(
            StatusCode::TOO_MANY_REQUESTS,
            "RATE_LIMIT_ERROR",
            "RATE_LIMITED",
            "Rate limit exceeded.",
        );
        response
            .headers_mut()
            .insert("retry-after", "1".parse().unwrap());
        return response;
    }
    let limit = search["limit"].as_u64().unwrap_or(100) as usize;
    if !(1..=100).contains(&limit) {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST_ERROR",
            "INVALID_VALUE",
            "`limit` must be between 1 and 100.",
        );
    }
    // The cursor is the offset and the query it belongs to.
    let query = search["query"].clone();
    let query_text = query.to_string();
    let offset = match search["cursor"].as_str() {
        None => 0,
        Some(c) => match c.split_once(':') {
            Some((offset, q)) if q == query_text => offset.parse().unwrap_or(0),
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "INVALID_REQUEST_ERROR",
                    "INVALID_CURSOR",
                    "The cursor does not belong to this query.",
                );
            }
        },
    };
    let start = query
        .pointer("/filter/created_at/start_at")
        .and_then(Value::as_str)
        .and_then(|t| humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).ok())
        .map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64)
        .unwrap_or(0);
    let types: Option<Vec<String>> = query
        .pointer("/filter/event_types")
        .and_then(|t| serde_json::from_value(t.clone()).ok());
    let created = |e: &Value| {
        humantime::parse_rfc3339(e["created_at"].as_str().unwrap())
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    };
    let kept_since = now_secs() - RETENTION;
    let mut all: Vec<Value> = s
        .inner
        .lock()
        .unwrap()
        .events
        .iter()
        .filter(|e| created(e) >= start.max(kept_since))
        .filter(|e| {
            types
                .as_ref()
                .is_none_or(|t| t.iter().any(|t| e["type"] == t.as_str()))
        })
        .cloned()
        .collect();
    all.sort_by_key(|e| created(e));
    if query.pointer("/sort/order").and_then(Value::as_str) == Some("DESC") {
        all.reverse();
    }
    let size = limit.min(s.config.lock().unwrap().page_size);
    let page: Vec<Value> = all.iter().skip(offset).take(size).cloned().collect();
    let metadata: Vec<Value> = page
        .iter()
        .map(|e| json!({"event_id": e["event_id"], "api_version": "2024-12-18"}))
        .collect();
    // Written out by hand, so each event is the very bytes of `body`.
    let events: Vec<String> = page
        .iter()
        .map(|e| String::from_utf8(body(e)).unwrap())
        .collect();
    let cursor = if offset + size < all.len() {
        format!(
            ",\"cursor\":{}",
            json!(format!("{}:{query_text}", offset + size))
        )
    } else {
        String::new()
    };
    let text = format!(
        "{{\"events\":[{}],\"metadata\":{}{cursor}}}",
        events.join(","),
        json!(metadata)
    );
    ([("content-type", "application/json")], text).into_response()
}
