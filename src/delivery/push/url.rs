//! `deliver.url`: POST (or PUT, `deliver.method`) the stored event to the
//! user's endpoint.
//!
//! The request carries the body byte for byte with its stored content type
//! (or a transform's output, `application/json` or `text/plain`), the
//! provider headers that name the event ([`FORWARD_HEADERS`]), hookbox's
//! own `x-hookbox-source`, `x-hookbox-event-id`, `x-hookbox-delivery-id`,
//! `x-hookbox-event-type` (when known) and `x-hookbox-attempt`, Standard
//! Webhooks headers (`webhook-id`, `webhook-timestamp` = now,
//! `webhook-signature`) signed with `deliver.signing_secret` (see
//! [`super::sign`]) when there is one, and the destination's own
//! `headers`, last. Outbound proxies follow reqwest's defaults
//! (`HTTPS_PROXY`, `NO_PROXY`, ... in the environment).
//!
//! How a response is judged:
//! * 2xx: delivered.
//! * a status in `deliver.permanent_statuses`: dead.
//! * 3xx: retried. Redirects are never followed (the signed request is not
//!   re-sent to wherever a response points), and a URL that redirects is
//!   most likely a configuration mistake the operator fixes, after which
//!   the retry delivers. List 3xx codes in `permanent_statuses` to park
//!   such events instead.
//! * 408, 429, 5xx, any other status, timeouts and connection errors:
//!   retried, honouring `Retry-After` in delta-seconds or HTTP-date form.
//!
//! At most [`BYTES_MAX`] bytes of a response body are read, chunk by
//! chunk, so an endless body costs neither memory nor time.

use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::{Client, Response, Url};

use super::sign;
use crate::config::{Method, TargetUrl, UrlOptions};
use crate::delivery::{Attempt, Destination, Job, Outcome};
use crate::support::clock;
use crate::support::excerpt::{self, BYTES_MAX};

/// Stored provider headers that say which event this is (its type, its
/// delivery id), forwarded as received. Signatures, timestamps and the
/// provider's own Standard Webhooks ids are not: hookbox signs anew.
pub const FORWARD_HEADERS: &[&str] = &[
    "x-github-event",
    "x-github-delivery",
    "x-shopify-topic",
    "x-shopify-sub-topic",
    "x-shopify-webhook-id",
    "x-shopify-event-id",
    "x-gitlab-event",
    "x-gitlab-event-uuid",
    "idempotency-key",
];

/// The HTTP client every url destination shares (it pools connections);
/// see [`crate::support::outbound`].
pub fn client() -> reqwest::Result<Client> {
    crate::support::outbound::build(crate::support::outbound::builder)
}

/// Bodies up to this size are signed on the runtime thread: hashing them
/// takes microseconds, less than a hop to the blocking pool.
const SIGN_INLINE_MAX: usize = 64 * 1024;

pub struct UrlDestination {
    client: Client,
    url: Url,
    /// `None`: requests go unsigned.
    signing_key: Option<Vec<u8>>,
    timeout: Duration,
    permanent_statuses: Vec<u16>,
    options: UrlOptions,
}

impl Destination for UrlDestination {
    fn deliver<'a>(&'a self, job: &'a Job) -> Pin<Box<dyn Future<Output = Attempt> + Send + 'a>> {
        Box::pin(UrlDestination::deliver(self, job))
    }
}

impl UrlDestination {
    /// `client` should be a clone of the one [`client`] built, shared.
    pub fn new(
        client: Client,
        url: Url,
        signing_key: Option<Vec<u8>>,
        timeout: Duration,
        permanent_statuses: Vec<u16>,
    ) -> Self {
        UrlDestination {
            client,
            url,
            signing_key,
            timeout,
            permanent_statuses,
            options: UrlOptions::default(),
        }
    }

    /// With the destination's `method` and `headers`.
    pub fn with_options(mut self, options: UrlOptions) -> Self {
        self.options = options;
        self
    }

    /// One attempt. Never fails: every problem is an [`Attempt`] to record.
    pub async fn deliver(&self, job: &Job) -> Attempt {
        let started = Instant::now();
        let msg_id = sign::message_id(&job.source, &job.delivery_id);
        let timestamp = clock::now_secs();
        let signature = match self.sign(&msg_id, timestamp, &job.body).await {
            Ok(signature) => signature,
            Err(e) => {
                return Attempt {
                    outcome: Outcome::Retry { retry_after: None },
                    status: None,
                    duration: started.elapsed(),
                    error: Some(format!("signing the request failed: {e}")),
                };
            }
        };
        let timestamp = timestamp.to_string();
        let signed = signature
            .as_deref()
            .map(|s| (msg_id.as_str(), timestamp.as_str(), s));
        let mut headers = request_headers(job, signed);
        for (name, value) in &self.options.headers {
            headers.insert(name.clone(), value.clone());
        }
        let method = match self.options.method {
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
        };
        let sent = self
            .client
            .request(method, self.url.clone())
            .headers(headers)
            .timeout(self.timeout)
            .body(job.body.clone())
            .send()
            .await;
        let (outcome, status, error) = match sent {
            Ok(response) => self.judge(response, signature.as_deref()).await,
            Err(e) => (
                Outcome::Retry { retry_after: None },
                None,
                Some(describe_error(e, self.timeout)),
            ),
        };
        Attempt {
            outcome,
            status,
            duration: started.elapsed(),
            error,
        }
    }

    /// The request's `webhook-signature`. A large body is hashed on the
    /// blocking pool: inline, it would hold a runtime thread, and the
    /// requests that thread serves, for as long as hashing takes
    /// (milliseconds per MiB).
    async fn sign(
        &self,
        msg_id: &str,
        timestamp: i64,
        body: &Bytes,
    ) -> Result<Option<String>, tokio::task::JoinError> {
        let Some(key) = &self.signing_key else {
            return Ok(None);
        };
        if body.len() <= SIGN_INLINE_MAX {
            return Ok(Some(sign::signature(key, msg_id, timestamp, body)));
        }
        let (key, msg_id, body) = (key.clone(), msg_id.to_owned(), body.clone());
        tokio::task::spawn_blocking(move || sign::signature(&key, &msg_id, timestamp, &body))
            .await
            .map(Some)
    }

    async fn judge(
        &self,
        mut response: Response,
        signature: Option<&str>,
    ) -> (Outcome, Option<u16>, Option<String>) {
        let status = response.status();
        let code = status.as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| parse_retry_after(v.as_bytes(), SystemTime::now()));
        let location = response.headers().get(LOCATION).cloned();
        // Read even after a 2xx (bounded) so a short body leaves the
        // connection reusable.
        let body = read_bounded(&mut response).await;
        if status.is_success() {
            return (Outcome::Delivered, Some(code), None);
        }
        let outcome = if self.permanent_statuses.contains(&code) {
            Outcome::Dead
        } else {
            Outcome::Retry { retry_after }
        };
        let mut text = format!("HTTP {code}");
        if status.is_redirection() {
            text.push_str(": redirect not followed");
            if let Some(to) = location {
                text.push_str(" (to ");
                text.push_str(&String::from_utf8_lossy(to.as_bytes()));
                text.push(')');
            }
        } else if !body.is_empty() {
            text.push_str(": ");
            text.push_str(&String::from_utf8_lossy(&body));
        }
        (outcome, Some(code), Some(self.scrubbed(&text, signature)))
    }

    /// The excerpt of `text` with our signature and the values of our
    /// own headers removed, in case the endpoint echoed the request back.
    fn scrubbed(&self, text: &str, signature: Option<&str>) -> String {
        let mut text = match signature {
            Some(signature) => text.replace(signature.trim_start_matches("v1,"), "[signature]"),
            None => text.to_owned(),
        };
        // A chat webhook's token is in the path (or query); a redirect's
        // Location or an echo may repeat it, whole or in part. Short
        // segments (`api`, `v1`) are no token and stay readable.
        let parts = self.url.path().split('/').chain(self.url.query());
        for part in parts.filter(|p| p.len() >= 12) {
            text = text.replace(part, "…");
        }
        for (_, value) in &self.options.headers {
            if let Ok(value) = value.to_str()
                && !value.is_empty()
            {
                text = text.replace(value, "[redacted]");
            }
        }
        excerpt::bytes(text.as_bytes())
    }
}

/// The outgoing headers: forwarded provider headers first, then hookbox's,
/// which win over any stored header of the same name.
/// `signed`: the `webhook-id`, `webhook-timestamp` and `webhook-signature`
/// of a signed request.
fn request_headers(job: &Job, signed: Option<(&str, &str, &str)>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for name in FORWARD_HEADERS {
        if let Some(value) = job.headers.get(*name).and_then(|v| v.as_str())
            && let Ok(value) = HeaderValue::from_str(value)
        {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    let mut set = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    };
    if let Some(ct) = &job.content_type {
        set(CONTENT_TYPE.as_str(), ct);
    }
    if let Some((msg_id, timestamp, signature)) = signed {
        set("webhook-id", msg_id);
        set("webhook-timestamp", timestamp);
        set("webhook-signature", signature);
    }
    set("x-hookbox-source", &job.source);
    set("x-hookbox-event-id", &job.event_id.to_string());
    set("x-hookbox-delivery-id", &job.delivery_id);
    set("x-hookbox-attempt", &job.attempt.to_string());
    if let Some(event_type) = &job.event_type {
        set("x-hookbox-event-type", event_type);
    }
    headers
}

/// The method, URL and headers a request of a destination to `url`
/// (signed or not, with `options`) carries for `job`, as `hookbox try`
/// shows them: built by the code that sends, with the signature and time
/// (made at sending) and the destination's own header values (secrets)
/// as placeholders, and the URL in its shown form (scheme, host, port).
pub fn preview(
    url: &TargetUrl,
    signed: bool,
    options: &UrlOptions,
    job: &Job,
) -> (&'static str, String, Vec<(String, String)>) {
    let msg_id = sign::message_id(&job.source, &job.delivery_id);
    let signed = signed.then_some((
        msg_id.as_str(),
        "[the time of sending]",
        "[signed when sent]",
    ));
    let mut headers = request_headers(job, signed);
    for (name, _) in &options.headers {
        headers.insert(name.clone(), HeaderValue::from_static("[redacted]"));
    }
    let headers = headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    (options.method.as_str(), url.shown().to_owned(), headers)
}

/// Up to [`BYTES_MAX`] bytes of the body; the rest is never read. A body
/// that fails half-way yields what arrived.
async fn read_bounded(response: &mut Response) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < BYTES_MAX {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = BYTES_MAX - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    body
}

/// `Retry-After` as a wait: delta-seconds, or an HTTP-date (a date in the
/// past means now). `None` when absent or unparseable.
pub fn parse_retry_after(value: &[u8], now: SystemTime) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(text.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A transport error as text: the cause chain, without the URL (it may hold
/// a password).
fn describe_error(e: reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("timed out after {}", humantime::format_duration(timeout));
    }
    let e = e.without_url();
    let mut text = if e.is_connect() {
        format!("connection failed: {e}")
    } else {
        e.to_string()
    };
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    excerpt::bytes(text.as_bytes())
}

#[cfg(test)]
mod tests;
