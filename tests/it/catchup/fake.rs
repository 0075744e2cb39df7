//! A fake GitHub and Stripe API on 127.0.0.1, following
//! shared/catchup-apis.md: deliveries newest first, `per_page` pages linked
//! by opaque `Link: rel="next"` URLs on another path
//! (`/repositories/{id}/…`, as GitHub does), 64-bit attempt ids, `202` for a
//! redelivery; App endpoints that check the JWT; rate limits on demand; and
//! `GET /v1/events` with `created[gte]`, `starting_after` and `has_more`.
//! When told where hookbox is, a redelivery POSTs the signed delivery there,
//! twice (GitHub may deliver one event more than once).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::helpers::{github_signature, query_pairs, serve_loopback};

pub const TOKEN: &str = "ghp_test_token";
pub const STRIPE_KEY: &str = "rk_test_events_read";
pub const HOOK_ID: i64 = 4_294_967_311;
/// Attempt ids start past 2^32, as real ones are.
pub const BASE_ID: i64 = 90_000_000_000;

#[derive(Debug, Clone)]
pub struct Attempt {
    pub id: i64,
    pub guid: String,
    /// Unix seconds.
    pub at: i64,
    pub status: String,
    pub event: String,
}

impl Attempt {
    pub fn new(id: i64, guid: &str, at: i64, ok: bool) -> Attempt {
        Attempt {
            id,
            guid: guid.to_owned(),
            at,
            status: if ok {
                "OK"
            } else {
                "Invalid HTTP Response: 503"
            }
            .to_owned(),
            event: "push".to_owned(),
        }
    }

    pub fn event(mut self, event: &str) -> Attempt {
        self.event = event.to_owned();
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// Every request gets 401 Bad credentials.
    Unauthorized,
    /// Redeliveries past this many accepted get 403 with
    /// `x-ratelimit-remaining: 0`.
    RateLimitAfter(usize),
    /// The redelivery asked after this many were accepted gets one 403
    /// with `retry-after: 1` (a secondary limit), once.
    RetryAfterOnce(usize),
}

#[derive(Default)]
pub struct Inner {
    pub attempts: Vec<Attempt>,
    /// Attempt ids of every accepted redelivery, in order.
    pub posts: Vec<i64>,
    /// Every request: method and path with query.
    pub requests: Vec<String>,
    /// What the fake found wrong with hookbox's requests.
    pub problems: Vec<String>,
    pub jwt_checks: usize,
    /// `Mode::RetryAfterOnce` answered its 403.
    pub retried: bool,
    /// Delivery list requests (counted from 1) answered 403 with the
    /// primary limit spent until the next second.
    pub list_throttle: Vec<usize>,
    pub list_requests: usize,
    pub stripe_events: Vec<Value>,
    pub stripe_queries: Vec<HashMap<String, String>>,
    /// Stripe list requests (counted from 1) answered 429, `Retry-After: 1`.
    pub stripe_throttle: Vec<usize>,
    pub stripe_throttled: usize,
    next_id: i64,
}

pub struct Fake {
    pub addr: SocketAddr,
    pub inner: Arc<Mutex<Inner>>,
    config: Arc<Mutex<Config>>,
}

struct Config {
    mode: Mode,
    per_page: usize,
    /// hookbox's `/hooks/github` URL and the webhook secret.
    redeliver_to: Option<(String, String)>,
    /// PEM public key and expected `iss` for App JWTs.
    jwt: Option<(Vec<u8>, i64)>,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    config: Arc<Mutex<Config>>,
    addr: SocketAddr,
}

impl Fake {
    pub async fn start(attempts: Vec<Attempt>) -> Fake {
        let next_id = attempts.iter().map(|a| a.id).max().unwrap_or(BASE_ID) + 1000;
        let inner = Arc::new(Mutex::new(Inner {
            attempts,
            next_id,
            ..Inner::default()
        }));
        let config = Arc::new(Mutex::new(Config {
            mode: Mode::Normal,
            per_page: 2,
            redeliver_to: None,
            jwt: None,
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
        Fake {
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

    /// How many deliveries a page of the list holds (2 unless set).
    pub fn set_per_page(&self, per_page: usize) {
        self.config.lock().unwrap().per_page = per_page;
    }

    pub fn redeliver_to(&self, url: String, secret: &str) {
        self.config.lock().unwrap().redeliver_to = Some((url, secret.to_owned()));
    }

    pub fn check_jwt(&self, public_pem: Vec<u8>, iss: i64) {
        self.config.lock().unwrap().jwt = Some((public_pem, iss));
    }

    pub fn posts(&self) -> Vec<i64> {
        self.inner.lock().unwrap().posts.clone()
    }

    pub fn add(&self, attempt: Attempt) {
        self.inner.lock().unwrap().attempts.push(attempt);
    }

    pub fn add_stripe_event(&self, event: Value) {
        self.inner.lock().unwrap().stripe_events.push(event);
    }

    /// Panics with what was wrong with hookbox's requests, if anything.
    pub fn assert_no_problems(&self) {
        let inner = self.inner.lock().unwrap();
        assert!(inner.problems.is_empty(), "{:#?}", inner.problems);
    }
}

async fn handle(State(s): State<Shared>, method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri.path().to_owned();
    let query = query_pairs(&uri);
    s.inner
        .lock()
        .unwrap()
        .requests
        .push(format!("{method} {uri}"));
    if path == "/v1/events" {
        return stripe_events(&s, &headers, query);
    }
    if let Err(problem) = check_github_headers(&s, &path, &headers) {
        s.inner.lock().unwrap().problems.push(problem);
    }
    let mode = s.config.lock().unwrap().mode;
    if mode == Mode::Unauthorized {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"message": "Bad credentials"})),
        )
            .into_response();
    }
    if method == Method::GET && path.ends_with("/deliveries") {
        return list(&s, &path, &query);
    }
    if method == Method::POST && path.ends_with("/attempts") {
        let id: i64 = path
            .rsplit('/')
            .nth(1)
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        return redeliver(&s, id, mode).await;
    }
    (StatusCode::NOT_FOUND, "not found").into_response()
}

fn check_github_headers(s: &Shared, path: &str, h: &HeaderMap) -> Result<(), String> {
    let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    if get("accept") != "application/vnd.github+json" {
        return Err(format!("{path}: accept {:?}", get("accept")));
    }
    if get("x-github-api-version") != "2022-11-28" {
        return Err(format!("{path}: no api version"));
    }
    if !get("user-agent").starts_with("hookbox/") {
        return Err(format!("{path}: user-agent {:?}", get("user-agent")));
    }
    let auth = get("authorization").strip_prefix("Bearer ").unwrap_or("");
    if path.starts_with("/app/") {
        let jwt = s.config.lock().unwrap().jwt.clone();
        let Some((pem, iss)) = jwt else {
            return Err("an App request, but no key to check it".into());
        };
        s.inner.lock().unwrap().jwt_checks += 1;
        check_jwt(auth, &pem, iss)
    } else if auth == TOKEN {
        Ok(())
    } else {
        Err(format!("{path}: wrong token"))
    }
}

/// alg RS256, signed by the App's key, `iss` the App id, issued about 60 s
/// ago, expiring at most 10 minutes from now.
fn check_jwt(token: &str, pem: &[u8], iss: i64) -> Result<(), String> {
    use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
    let header = decode_header(token).map_err(|e| format!("jwt header: {e}"))?;
    if header.alg != Algorithm::RS256 {
        return Err(format!("jwt alg {:?}", header.alg));
    }
    let key = DecodingKey::from_rsa_pem(pem).map_err(|e| e.to_string())?;
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_required_spec_claims(&["exp", "iat", "iss"]);
    let data = decode::<Value>(token, &key, &validation).map_err(|e| format!("jwt: {e}"))?;
    let claims = data.claims;
    let now = hookbox::support::clock::now_secs();
    let iat = claims["iat"].as_i64().ok_or("no iat")?;
    let exp = claims["exp"].as_i64().ok_or("no exp")?;
    if claims["iss"] != json!(iss.to_string()) {
        return Err(format!("jwt iss {}", claims["iss"]));
    }
    if !(now - 75..=now - 45).contains(&iat) {
        return Err(format!("jwt iat {} s from now", iat - now));
    }
    if exp <= now || exp > now + 600 || exp - iat > 660 {
        return Err(format!("jwt exp {} s from now", exp - now));
    }
    Ok(())
}

fn list(s: &Shared, path: &str, query: &HashMap<String, String>) -> Response {
    let throttled = {
        let mut inner = s.inner.lock().unwrap();
        inner.list_requests += 1;
        inner.list_throttle.contains(&inner.list_requests)
    };
    if throttled {
        let reset = (hookbox::support::clock::now_secs() + 1).to_string();
        return (
            StatusCode::FORBIDDEN,
            [
                ("x-ratelimit-remaining", "0".to_owned()),
                ("x-ratelimit-reset", reset),
            ],
            axum::Json(json!({"message": "API rate limit exceeded"})),
        )
            .into_response();
    }
    let per_page = s.config.lock().unwrap().per_page;
    let offset: usize = query
        .get("cursor")
        .and_then(|c| c.strip_prefix("v1_"))
        .and_then(|c| usize::from_str_radix(c, 16).ok())
        .map(|c| c ^ 0x5a5a)
        .unwrap_or(0);
    let mut all = s.inner.lock().unwrap().attempts.clone();
    all.sort_by_key(|a| std::cmp::Reverse((a.at, a.id)));
    let page: Vec<Value> = all
        .iter()
        .skip(offset)
        .take(per_page)
        .map(|a| {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(a.at as u64);
            json!({
                "id": a.id, "guid": a.guid,
                "delivered_at": humantime::format_rfc3339_seconds(t).to_string(),
                "redelivery": false, "duration": 0.1, "status": a.status,
                "status_code": if a.status == "OK" { 200 } else { 503 },
                "event": a.event, "action": null, "installation_id": null,
                "repository_id": 424242, "throttled_at": null
            })
        })
        .collect();
    let mut response = axum::Json(page).into_response();
    let next = offset + per_page;
    if next < all.len() {
        let next_path = if path.starts_with("/app/") {
            "/app/hook/deliveries".to_owned()
        } else {
            format!("/repositories/424242/hooks/{HOOK_ID}/deliveries")
        };
        let link = format!(
            "<http://{}{next_path}?per_page={per_page}&cursor=v1_{:x}>; rel=\"next\", <http://{}/prev>; rel=\"prev\"",
            s.addr,
            next ^ 0x5a5a,
            s.addr
        );
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    response
}

async fn redeliver(s: &Shared, id: i64, mode: Mode) -> Response {
    let (attempt, accepted) = {
        let inner = s.inner.lock().unwrap();
        (
            inner.attempts.iter().find(|a| a.id == id).cloned(),
            inner.posts.len(),
        )
    };
    if let Mode::RetryAfterOnce(n) = mode
        && accepted == n
        && !s.inner.lock().unwrap().retried
    {
        s.inner.lock().unwrap().retried = true;
        return (
            StatusCode::FORBIDDEN,
            [("retry-after", "1")],
            axum::Json(json!({"message": "You have exceeded a secondary rate limit."})),
        )
            .into_response();
    }
    if let Mode::RateLimitAfter(n) = mode
        && accepted >= n
    {
        return (
            StatusCode::FORBIDDEN,
            [
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1900000000"),
            ],
            axum::Json(json!({"message": "API rate limit exceeded"})),
        )
            .into_response();
    }
    let Some(attempt) = attempt else {
        return (StatusCode::NOT_FOUND, "no such delivery").into_response();
    };
    s.inner.lock().unwrap().posts.push(id);
    let target = s.config.lock().unwrap().redeliver_to.clone();
    if let Some((url, secret)) = target {
        let body = format!(r#"{{"guid":"{}","zen":"redelivered"}}"#, attempt.guid).into_bytes();
        let client = reqwest::Client::new();
        let mut ok = false;
        for _ in 0..2 {
            let answer = client
                .post(&url)
                .header("content-type", "application/json")
                .header("x-github-event", &attempt.event)
                .header("x-github-delivery", &attempt.guid)
                .header("x-hub-signature-256", github_signature(&secret, &body))
                .body(body.clone())
                .send()
                .await;
            ok |= answer.is_ok_and(|r| r.status().is_success());
        }
        let mut inner = s.inner.lock().unwrap();
        let new_id = inner.next_id;
        inner.next_id += 1;
        let mut again = Attempt::new(
            new_id,
            &attempt.guid,
            hookbox::support::clock::now_secs(),
            ok,
        );
        again.event = attempt.event.clone();
        inner.attempts.push(again);
    }
    (StatusCode::ACCEPTED, axum::Json(json!({}))).into_response()
}

fn stripe_events(s: &Shared, headers: &HeaderMap, query: HashMap<String, String>) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if auth != format!("Bearer {STRIPE_KEY}") {
        return (StatusCode::UNAUTHORIZED, "bad key").into_response();
    }
    let mut inner = s.inner.lock().unwrap();
    inner.stripe_queries.push(query.clone());
    if inner.stripe_throttle.contains(&inner.stripe_queries.len()) {
        inner.stripe_throttled += 1;
        let body = json!({"error": {"code": "rate_limit", "type": "invalid_request_error",
            "message": "Request rate limit exceeded. Retry after a short wait."}});
        let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
        response
            .headers_mut()
            .insert("retry-after", "1".parse().unwrap());
        return response;
    }
    let gte: i64 = query
        .get("created[gte]")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let limit: usize = query
        .get("limit")
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let per_page = limit.min(s.config.lock().unwrap().per_page + 1);
    let mut events: Vec<Value> = inner
        .stripe_events
        .iter()
        .filter(|e| e["created"].as_i64().unwrap_or(0) >= gte)
        .cloned()
        .collect();
    events.sort_by_key(|e| std::cmp::Reverse(e["created"].as_i64()));
    let skip = match query.get("starting_after") {
        Some(id) => events
            .iter()
            .position(|e| e["id"] == json!(id))
            .map_or(events.len(), |p| p + 1),
        None => 0,
    };
    let page: Vec<Value> = events.iter().skip(skip).take(per_page).cloned().collect();
    let has_more = skip + page.len() < events.len();
    axum::Json(json!({"object": "list", "url": "/v1/events", "has_more": has_more, "data": page}))
        .into_response()
}
