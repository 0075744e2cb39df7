//! A fake GitLab webhook-events API on 127.0.0.1, after GitLab's
//! "Project webhooks" / "Group webhooks" API pages and its
//! `lib/api/hooks/{events,resend_hook}.rb`: `GET …/hooks/:id/events`
//! newest first, paged by `page` (`X-Next-Page`, `Link: rel="next"`), at
//! most 20 a page (400 past that); `POST …/events/:id/resend` answering 201
//! with the endpoint's status, and 429 past `limit` resends in any
//! `window`. Any prefix (`/api/v4`) and `projects` or `groups` are served,
//! every request is logged. When told where hookbox is, a resend POSTs the
//! event again as GitLab does: `X-Gitlab-Token`, `X-Gitlab-Event`, the same
//! `Idempotency-Key`, a new `X-Gitlab-Webhook-UUID`; and lists the new
//! attempt with its outcome.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::helpers::{query_pairs, serve_loopback};

pub const GITLAB_TOKEN: &str = "glpat-test-api-token";
pub const GITLAB_HOOK_ID: i64 = 77;
/// The source's secret: the hook's secret token.
pub const WEBHOOK_TOKEN: &str = "gitlab-webhook-secret-token";

#[derive(Debug, Clone)]
pub struct Event {
    pub id: i64,
    /// `Idempotency-Key`: one per event, shared by its attempts.
    pub key: String,
    /// Unix seconds.
    pub at: i64,
    /// `response_status` as GitLab lists it: "200", "500", "internal error".
    pub status: String,
    pub kind: String,
}

impl Event {
    pub fn new(id: i64, key: &str, at: i64, status: &str) -> Event {
        Event {
            id,
            key: key.to_owned(),
            at,
            status: status.to_owned(),
            kind: "Push Hook".to_owned(),
        }
    }

    pub fn kind(mut self, kind: &str) -> Event {
        self.kind = kind.to_owned();
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// Every request gets 401.
    Unauthorized,
    /// Every request gets 500.
    Broken,
}

#[derive(Default)]
pub struct Inner {
    pub events: Vec<Event>,
    /// Event ids of every resend GitLab accepted, in order, and when.
    pub resends: Vec<(i64, Instant)>,
    /// Resends answered 429.
    pub throttled: usize,
    /// Every request: method and path with query.
    pub requests: Vec<String>,
    /// What the fake found wrong with hookbox's requests.
    pub problems: Vec<String>,
    next_id: i64,
}

struct Config {
    mode: Mode,
    page_size: usize,
    limit: usize,
    window: Duration,
    retry_after: Option<u64>,
    /// hookbox's `/hooks/gitlab` URL.
    resend_to: Option<String>,
    /// List requests (counted from 1) answered 429 with `Retry-After: 1`.
    list_throttle: Vec<usize>,
    list_requests: usize,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    config: Arc<Mutex<Config>>,
    addr: SocketAddr,
}

pub struct GitlabFake {
    pub addr: SocketAddr,
    pub inner: Arc<Mutex<Inner>>,
    config: Arc<Mutex<Config>>,
}

impl GitlabFake {
    pub async fn start(events: Vec<Event>) -> GitlabFake {
        let next_id = events.iter().map(|e| e.id).max().unwrap_or(0) + 1000;
        let inner = Arc::new(Mutex::new(Inner {
            events,
            next_id,
            ..Inner::default()
        }));
        let config = Arc::new(Mutex::new(Config {
            mode: Mode::Normal,
            page_size: 3,
            limit: 5,
            window: Duration::from_secs(60),
            retry_after: None,
            resend_to: None,
            list_throttle: Vec::new(),
            list_requests: 0,
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
        GitlabFake {
            addr,
            inner,
            config,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_mode(&self, mode: Mode) {
        self.config.lock().unwrap().mode = mode;
    }

    /// At most `limit` resends in any `window`; past it, 429 with
    /// `Retry-After: retry_after` if given.
    pub fn set_limit(&self, limit: usize, window: Duration, retry_after: Option<u64>) {
        let mut c = self.config.lock().unwrap();
        (c.limit, c.window, c.retry_after) = (limit, window, retry_after);
    }

    /// Answers the `n`th list request (from 1) with 429, `Retry-After: 1`.
    pub fn throttle_list(&self, n: usize) {
        self.config.lock().unwrap().list_throttle.push(n);
    }

    pub fn resend_to(&self, url: String) {
        self.config.lock().unwrap().resend_to = Some(url);
    }

    pub fn add(&self, event: Event) {
        self.inner.lock().unwrap().events.push(event);
    }

    /// Event ids resent, in order.
    pub fn resent(&self) -> Vec<i64> {
        let inner = self.inner.lock().unwrap();
        inner.resends.iter().map(|(id, _)| *id).collect()
    }

    pub fn throttled(&self) -> usize {
        self.inner.lock().unwrap().throttled
    }

    pub fn requests(&self) -> Vec<String> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// The most resends accepted within any `window`.
    pub fn most_in_any(&self, window: Duration) -> usize {
        let inner = self.inner.lock().unwrap();
        let times: Vec<Instant> = inner.resends.iter().map(|(_, t)| *t).collect();
        times
            .iter()
            .map(|start| {
                times
                    .iter()
                    .filter(|t| **t >= *start && **t < *start + window)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// Panics with what was wrong with hookbox's requests, if anything.
    pub fn assert_no_problems(&self) {
        let inner = self.inner.lock().unwrap();
        assert!(inner.problems.is_empty(), "{:#?}", inner.problems);
    }
}

async fn handle(State(s): State<Shared>, method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path().to_owned();
    s.inner
        .lock()
        .unwrap()
        .requests
        .push(format!("{method} {uri}"));
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if auth != format!("Bearer {GITLAB_TOKEN}") {
        s.inner
            .lock()
            .unwrap()
            .problems
            .push(format!("{path}: wrong token"));
        return (StatusCode::UNAUTHORIZED, "401 Unauthorized").into_response();
    }
    match s.config.lock().unwrap().mode {
        Mode::Normal => {}
        Mode::Unauthorized => {
            let body = axum::Json(json!({"message": "401 Unauthorized"}));
            return (StatusCode::UNAUTHORIZED, body).into_response();
        }
        Mode::Broken => {
            let body = axum::Json(json!({"message": "500 Internal Server Error"}));
            return (StatusCode::INTERNAL_SERVER_ERROR, body).into_response();
        }
    }
    let hook = format!("/hooks/{GITLAB_HOOK_ID}/events");
    let Some((_, rest)) = path.split_once(&hook) else {
        return (StatusCode::NOT_FOUND, "404 Not Found").into_response();
    };
    let query = query_pairs(&uri);
    if method == Method::GET && rest.is_empty() {
        return list(&s, &path, &query);
    }
    let id = rest
        .strip_prefix('/')
        .and_then(|r| r.strip_suffix("/resend"))
        .and_then(|id| id.parse::<i64>().ok());
    match id {
        Some(id) if method == Method::POST => resend(&s, id).await,
        _ => (StatusCode::NOT_FOUND, "404 Not Found").into_response(),
    }
}

fn list(s: &Shared, path: &str, query: &HashMap<String, String>) -> Response {
    let throttle = {
        let mut c = s.config.lock().unwrap();
        c.list_requests += 1;
        c.list_throttle.contains(&c.list_requests)
    };
    {
        if throttle {
            s.inner.lock().unwrap().throttled += 1;
            let body = axum::Json(json!({"message": {"error":
                "This endpoint has been requested too many times. Try again later."}}));
            let mut response = (StatusCode::TOO_MANY_REQUESTS, body).into_response();
            response
                .headers_mut()
                .insert("retry-after", "1".parse().unwrap());
            return response;
        }
    }
    let per_page: usize = query
        .get("per_page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    if !(1..=20).contains(&per_page) {
        let body = axum::Json(json!({"error": "per_page does not have a valid value"}));
        return (StatusCode::BAD_REQUEST, body).into_response();
    }
    let page: usize = query.get("page").and_then(|v| v.parse().ok()).unwrap_or(1);
    let size = per_page.min(s.config.lock().unwrap().page_size);
    let mut all = s.inner.lock().unwrap().events.clone();
    all.sort_by_key(|e| std::cmp::Reverse((e.at, e.id)));
    let items: Vec<Value> = all
        .iter()
        .skip((page - 1) * size)
        .take(size)
        .map(|e| {
            let t = std::time::UNIX_EPOCH + Duration::from_secs(e.at as u64);
            json!({
                "id": e.id,
                "url": "https://hookbox.example/hooks/gitlab",
                "trigger": "push_hooks",
                "request_headers": {
                    "Content-Type": "application/json",
                    "User-Agent": "GitLab/17.6.0",
                    "Idempotency-Key": e.key,
                    "X-Gitlab-Event": e.kind,
                    "X-Gitlab-Webhook-UUID": format!("webhook-uuid-{}", e.id),
                    "X-Gitlab-Instance": "https://gitlab.example.com",
                    "X-Gitlab-Event-UUID": format!("event-uuid-{}", e.key),
                    "X-Gitlab-Token": "[REDACTED]"
                },
                "request_data": {"object_kind": "push", "secret_looking": "payload-body-marker"},
                "response_headers": {},
                "response_body": "",
                "execution_duration": 0.12,
                "response_status": e.status,
                "created_at": humantime::format_rfc3339_seconds(t).to_string(),
            })
        })
        .collect();
    let mut response = axum::Json(items).into_response();
    let h = response.headers_mut();
    let more = page * size < all.len();
    let next = if more {
        (page + 1).to_string()
    } else {
        String::new()
    };
    h.insert("x-page", page.to_string().parse().unwrap());
    h.insert("x-per-page", size.to_string().parse().unwrap());
    h.insert("x-next-page", next.parse().unwrap());
    if more {
        let link = format!(
            "<http://{}{path}?page={}&per_page={size}>; rel=\"next\"",
            s.addr,
            page + 1
        );
        h.insert("link", link.parse().unwrap());
    }
    response
}

async fn resend(s: &Shared, id: i64) -> Response {
    let (limit, window, retry_after, target) = {
        let c = s.config.lock().unwrap();
        (c.limit, c.window, c.retry_after, c.resend_to.clone())
    };
    let now = Instant::now();
    let event = {
        let mut inner = s.inner.lock().unwrap();
        let recent = inner
            .resends
            .iter()
            .filter(|(_, t)| now.duration_since(*t) < window)
            .count();
        if recent >= limit {
            inner.throttled += 1;
            drop(inner);
            let body = axum::Json(json!({"message": {"error":
                "This endpoint has been requested too many times. Try again later."}}));
            let mut response = (StatusCode::TOO_MANY_REQUESTS, body).into_response();
            if let Some(secs) = retry_after {
                let value = secs.to_string().parse().unwrap();
                response.headers_mut().insert("retry-after", value);
            }
            return response;
        }
        let Some(event) = inner.events.iter().find(|e| e.id == id).cloned() else {
            let body = axum::Json(json!({"message": "404 Not found"}));
            return (StatusCode::NOT_FOUND, body).into_response();
        };
        inner.resends.push((id, now));
        event
    };
    let mut status = 200;
    if let Some(url) = target {
        let body = format!(
            r#"{{"object_kind":"push","idempotency":"{}","resent":true}}"#,
            event.key
        );
        let answer = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .header("user-agent", "GitLab/17.6.0")
            .header("x-gitlab-token", WEBHOOK_TOKEN)
            .header("x-gitlab-event", &event.kind)
            .header("idempotency-key", &event.key)
            .header("x-gitlab-webhook-uuid", format!("resent-{id}"))
            .header("x-gitlab-event-uuid", format!("event-uuid-{}", event.key))
            .header("x-gitlab-instance", "https://gitlab.example.com")
            .body(body)
            .send()
            .await;
        status = answer.map(|r| r.status().as_u16()).unwrap_or(0);
        let mut inner = s.inner.lock().unwrap();
        let new_id = inner.next_id;
        inner.next_id += 1;
        let shown = if status == 0 {
            "internal error".to_owned()
        } else {
            status.to_string()
        };
        let mut again = Event::new(
            new_id,
            &event.key,
            hookbox::support::clock::now_secs(),
            &shown,
        );
        again.kind = event.kind.clone();
        inner.events.push(again);
    }
    (
        StatusCode::CREATED,
        axum::Json(json!({ "response_status": status })),
    )
        .into_response()
}
