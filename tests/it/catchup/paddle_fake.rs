//! A fake Paddle Billing notifications API on 127.0.0.1, after Paddle's
//! API reference (list notifications, replay a notification, the error
//! pages): `GET /notifications` filtered by `notification_setting_id` and
//! `from`, ordered by `id[DESC]`, paged with `after` and
//! `meta.pagination.{next, has_more}`; `POST /notifications/{id}/replay`
//! answering 202 `{"data": {"notification_id"}}`, or Paddle's error body
//! (`notification_cannot_replay`, `notification_replay_invalid_origin_type`,
//! `not_found`); `Authorization: Bearer` checked on every request; a 429
//! with `Retry-After` on demand. When told where hookbox is, a replay
//! POSTs the event there as Paddle does, signed `Paddle-Signature:
//! ts=…;h1=…` with the destination's secret, and lists the new
//! notification (`origin: replay`) with its outcome.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::helpers::{hmac_sha256, now_secs, query_pairs, serve_loopback};

pub const PADDLE_KEY: &str = "pdl_sdbx_apikey_01hookboxtestkey";
pub const SETTING: &str = "ntfset_01hookboxtestdestination";
/// The destination's secret: what the source verifies with.
pub const PADDLE_SECRET: &str = "pdl_ntfset_01hookboxtest_secret";

#[derive(Debug, Clone)]
pub struct Notification {
    /// `ntf_` and 26 digits, so `id[DESC]` is newest first.
    pub id: String,
    pub event_id: String,
    pub event_type: String,
    /// Unix seconds.
    pub occurred_at: i64,
    /// `delivered`, `failed`, `needs_retry`, `not_attempted`.
    pub status: String,
    /// `event` or `replay`.
    pub origin: String,
    pub setting: String,
    /// Unix seconds: when Paddle last tried it.
    pub last_attempt: i64,
}

pub fn ntf_id(n: u64) -> String {
    format!("ntf_{n:026}")
}

pub fn evt_id(n: u64) -> String {
    format!("evt_{n:026}")
}

impl Notification {
    pub fn new(n: u64, occurred_at: i64, status: &str) -> Notification {
        Notification {
            id: ntf_id(n),
            event_id: evt_id(n),
            event_type: "transaction.completed".to_owned(),
            occurred_at,
            status: status.to_owned(),
            origin: "event".to_owned(),
            setting: SETTING.to_owned(),
            last_attempt: occurred_at + 1,
        }
    }

    /// The event as Paddle POSTs it.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "event_id": self.event_id,
            "event_type": self.event_type,
            "occurred_at": rfc3339(self.occurred_at),
            "notification_id": self.id,
            "data": {"id": format!("txn_{}", &self.event_id[4..]), "status": "completed"},
        }))
        .unwrap()
    }

    fn listed(&self) -> Value {
        let payload: Value = serde_json::from_slice(&self.body()).unwrap();
        let attempted = self.status != "not_attempted";
        json!({
            "id": self.id,
            "type": self.event_type,
            "status": self.status,
            "payload": payload,
            "occurred_at": rfc3339(self.occurred_at),
            "delivered_at": (self.status == "delivered").then(|| rfc3339(self.occurred_at + 1)),
            "replayed_at": (self.origin == "replay").then(|| rfc3339(self.last_attempt)),
            "origin": self.origin,
            "last_attempt_at": attempted.then(|| rfc3339(self.last_attempt)),
            "retry_at": (self.status == "needs_retry").then(|| rfc3339(self.occurred_at + 600)),
            "times_attempted": if attempted { 3 } else { 0 },
            "notification_setting_id": self.setting,
        })
    }
}

pub fn rfc3339(secs: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_secs(secs as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Signs `body` as Paddle does: `ts=<unix>;h1=<hex HMAC of "ts:body">`.
pub fn paddle_signature(secret: &str, body: &[u8]) -> String {
    let ts = now_secs();
    let mut signed = format!("{ts}:").into_bytes();
    signed.extend_from_slice(body);
    format!(
        "ts={ts};h1={}",
        hex::encode(hmac_sha256(secret.as_bytes(), &signed))
    )
}

#[derive(Default)]
pub struct Inner {
    pub notifications: Vec<Notification>,
    /// Notification ids Paddle accepted to replay, in order.
    pub replays: Vec<String>,
    /// Replay requests answered 429.
    pub throttled: usize,
    /// Every request: method and path with query.
    pub requests: Vec<String>,
    /// What the fake found wrong with hookbox's requests.
    pub problems: Vec<String>,
    next: u64,
}

#[derive(Default)]
struct Config {
    page_size: usize,
    /// Replay requests (counted from 1) answered 429 with `Retry-After: 1`.
    throttle: Vec<usize>,
    replay_requests: usize,
    /// hookbox's `/hooks/…` URL.
    replay_to: Option<String>,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    config: Arc<Mutex<Config>>,
    addr: SocketAddr,
}

pub struct PaddleFake {
    pub addr: SocketAddr,
    pub inner: Arc<Mutex<Inner>>,
    config: Arc<Mutex<Config>>,
}

impl PaddleFake {
    pub async fn start(notifications: Vec<Notification>) -> PaddleFake {
        let inner = Arc::new(Mutex::new(Inner {
            notifications,
            next: 900_000,
            ..Inner::default()
        }));
        let config = Arc::new(Mutex::new(Config {
            page_size: 7,
            ..Config::default()
        }));
        let (addr, _server) = serve_loopback(|addr| {
            let shared = Shared {
                inner: inner.clone(),
                config: config.clone(),
                addr,
            };
            Router::new().fallback(handle).with_state(shared)
        })
        .await;
        PaddleFake {
            addr,
            inner,
            config,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn replay_to(&self, url: String) {
        self.config.lock().unwrap().replay_to = Some(url);
    }

    /// Answers the `n`th replay request (from 1) with 429, `Retry-After: 1`.
    pub fn throttle(&self, n: usize) {
        self.config.lock().unwrap().throttle.push(n);
    }

    pub fn replays(&self) -> Vec<String> {
        self.inner.lock().unwrap().replays.clone()
    }

    pub fn throttled(&self) -> usize {
        self.inner.lock().unwrap().throttled
    }

    /// Panics with what was wrong with hookbox's requests, if anything.
    pub fn assert_no_problems(&self) {
        let inner = self.inner.lock().unwrap();
        assert!(inner.problems.is_empty(), "{:#?}", inner.problems);
    }
}

fn error(status: StatusCode, code: &str, detail: &str) -> Response {
    let body = json!({
        "error": {
            "type": "request_error", "code": code, "detail": detail,
            "documentation_url": format!("https://developer.paddle.com/errors/shared/{code}"),
        },
        "meta": {"request_id": "00000000-0000-0000-0000-000000000000"},
    });
    (status, axum::Json(body)).into_response()
}

async fn handle(State(s): State<Shared>, method: Method, uri: Uri, headers: HeaderMap) -> Response {
    s.inner
        .lock()
        .unwrap()
        .requests
        .push(format!("{method} {uri}"));
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if auth != format!("Bearer {PADDLE_KEY}") {
        s.inner
            .lock()
            .unwrap()
            .problems
            .push(format!("{}: wrong API key", uri.path()));
        return error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "You aren't permitted to perform this request.",
        );
    }
    let path = uri.path();
    if method == Method::GET && path == "/notifications" {
        return list(&s, &query_pairs(&uri));
    }
    let id = path
        .strip_prefix("/notifications/")
        .and_then(|r| r.strip_suffix("/replay"));
    match id {
        Some(id) if method == Method::POST => replay(&s, id).await,
        _ => error(
            StatusCode::NOT_FOUND,
            "not_found",
            "Requested resource not found.",
        ),
    }
}

fn list(s: &Shared, query: &HashMap<String, String>) -> Response {
    let problem = |p: String| s.inner.lock().unwrap().problems.push(p);
    let setting = query.get("notification_setting_id").cloned();
    if setting.as_deref() != Some(SETTING) {
        problem(format!("listed without the destination: {setting:?}"));
    }
    let per_page: usize = query
        .get("per_page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
        .min(200);
    let from = query
        .get("from")
        .map(|f| f.replace("%3A", ":"))
        .and_then(|f| humantime::parse_rfc3339(&f).ok())
        .map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64);
    let size = per_page.min(s.config.lock().unwrap().page_size);
    let mut all: Vec<Notification> = s
        .inner
        .lock()
        .unwrap()
        .notifications
        .iter()
        .filter(|n| setting.as_deref().is_none_or(|id| n.setting == id))
        .filter(|n| from.is_none_or(|f| n.occurred_at >= f))
        .cloned()
        .collect();
    all.sort_by(|a, b| b.id.cmp(&a.id));
    let after = query.get("after");
    let begin = after.map_or(0, |a| {
        all.iter()
            .position(|n| &n.id == a)
            .map_or(all.len(), |i| i + 1)
    });
    let page: Vec<&Notification> = all.iter().skip(begin).take(size).collect();
    let has_more = begin + page.len() < all.len();
    let next = page.last().map(|last| {
        let mut q: Vec<String> = query
            .iter()
            .filter(|(k, _)| *k != "after")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        q.sort();
        q.push(format!("after={}", last.id));
        format!("http://{}/notifications?{}", s.addr, q.join("&"))
    });
    let body = json!({
        "data": page.iter().map(|n| n.listed()).collect::<Vec<_>>(),
        "meta": {
            "request_id": "6ff9e1c4-2d73-4b1e-8a16-5d9c0f3c7d11",
            "pagination": {
                "per_page": size, "next": next, "has_more": has_more,
                "estimated_total": all.len(),
            },
        },
    });
    axum::Json(body).into_response()
}

async fn replay(s: &Shared, id: &str) -> Response {
    let (throttle, target) = {
        let mut c = s.config.lock().unwrap();
        c.replay_requests += 1;
        (c.throttle.contains(&c.replay_requests), c.replay_to.clone())
    };
    if throttle {
        s.inner.lock().unwrap().throttled += 1;
        let mut response = error(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            "Too many requests. Try again later.",
        );
        response
            .headers_mut()
            .insert("retry-after", "1".parse().unwrap());
        return response;
    }
    let original = {
        let mut inner = s.inner.lock().unwrap();
        let Some(n) = inner.notifications.iter().find(|n| n.id == id).cloned() else {
            return error(
                StatusCode::NOT_FOUND,
                "not_found",
                "Requested resource not found.",
            );
        };
        if n.origin != "event" {
            return error(
                StatusCode::BAD_REQUEST,
                "notification_replay_invalid_origin_type",
                "Only notifications with the origin `event` can be replayed.",
            );
        }
        if !matches!(n.status.as_str(), "delivered" | "failed") {
            return error(
                StatusCode::BAD_REQUEST,
                "notification_cannot_replay",
                &format!(
                    "Notification {id} cannot be replayed because it's not `delivered` or `failed`."
                ),
            );
        }
        inner.replays.push(id.to_owned());
        inner.next += 1;
        let mut again = n.clone();
        again.id = ntf_id(inner.next);
        again.origin = "replay".to_owned();
        again.last_attempt = now_secs();
        again.status = "not_attempted".to_owned();
        inner.notifications.push(again.clone());
        (n, again)
    };
    let (n, again) = original;
    if let Some(url) = target {
        // Paddle sends the same event under the new notification's id.
        let mut sent = n.clone();
        sent.id = again.id.clone();
        let body = sent.body();
        let answer = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .header("user-agent", "Paddle")
            .header("paddle-signature", paddle_signature(PADDLE_SECRET, &body))
            .body(body)
            .send()
            .await;
        let ok = answer.is_ok_and(|r| r.status().is_success());
        let mut inner = s.inner.lock().unwrap();
        if let Some(listed) = inner.notifications.iter_mut().find(|x| x.id == again.id) {
            listed.status = if ok { "delivered" } else { "failed" }.to_owned();
        }
    }
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({
            "data": {"notification_id": again.id},
            "meta": {"request_id": "d1d0e1a4-5c3e-4a8b-9a52-0c7e1a6b2f90"},
        })),
    )
        .into_response()
}
