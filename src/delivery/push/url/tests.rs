//! Against a real HTTP server on 127.0.0.1, started per test.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{any, post};
use bytes::Bytes;

use super::*;
use crate::config::Secret;
use crate::ingress::receive::payload::Inbound;
use crate::ingress::receive::standard::Standard;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const PERMANENT: [u16; 6] = [400, 401, 403, 404, 410, 422];

#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
    redirect_target_hits: Arc<AtomicUsize>,
}

async fn record(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> StatusCode {
    seen.requests.lock().unwrap().push((headers, body));
    StatusCode::NO_CONTENT
}

async fn status(Path(code): Path<u16>) -> (StatusCode, &'static str) {
    (StatusCode::from_u16(code).unwrap(), "status body")
}

async fn busy() -> (StatusCode, [(HeaderName, &'static str); 1], &'static str) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(RETRY_AFTER, "7")],
        "busy",
    )
}

async fn slow() -> StatusCode {
    tokio::time::sleep(Duration::from_secs(10)).await;
    StatusCode::NO_CONTENT
}

async fn redirect() -> (StatusCode, [(HeaderName, &'static str); 1]) {
    (StatusCode::FOUND, [(LOCATION, "/target")])
}

async fn target(State(seen): State<Seen>) -> StatusCode {
    seen.redirect_target_hits.fetch_add(1, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

/// A 500 whose body is 1 GiB, sent in 64 KiB chunks.
async fn huge() -> (StatusCode, Body) {
    let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
    let chunks = std::iter::repeat_n(Ok::<_, std::convert::Infallible>(chunk), 16 * 1024);
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Body::from_stream(tokio_stream::iter(chunks)),
    )
}

/// Answers 400 with every request header in the body.
async fn echo(headers: HeaderMap) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, format!("{headers:?}"))
}

async fn serve() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/ok", post(record))
        .route("/status/{code}", post(status))
        .route("/busy", post(busy))
        .route("/slow", post(slow))
        .route("/redirect", post(redirect))
        .route("/target", any(target))
        .route("/huge", post(huge))
        .route("/echo", post(echo))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

fn destination(addr: SocketAddr, path: &str, timeout: Duration) -> UrlDestination {
    UrlDestination::new(
        client().unwrap(),
        Url::parse(&format!("http://{addr}{path}")).unwrap(),
        Secret::new(SECRET).standard_key(),
        timeout,
        PERMANENT.to_vec(),
    )
}

fn job(body: &'static [u8]) -> Job {
    let headers = serde_json::json!({
        "x-github-event": "push",
        "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "x-github-hook-id": "123",
        "user-agent": "GitHub-Hookshot/044aadd",
    });
    Job {
        event_id: 42,
        source: "github".into(),
        destination: "default".into(),
        delivery_id: "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
        received_at: 1_700_000_000_000,
        event_type: Some("push".into()),
        content_type: Some("application/x-www-form-urlencoded".into()),
        headers: headers.as_object().unwrap().clone(),
        body: Bytes::from_static(body),
        attempt: 3,
    }
}

const SECS: Duration = Duration::from_secs(5);
const RETRY: Outcome = Outcome::Retry { retry_after: None };

#[tokio::test]
async fn a_2xx_delivers_the_exact_body_event_headers_and_a_verifiable_signature() {
    let (addr, seen) = serve().await;
    let body: &[u8] = b"payload=%7B%22a%22%3A1%7D&\x00\xff raw bytes";
    let attempt = destination(addr, "/ok", SECS).deliver(&job(body)).await;
    assert_eq!(attempt.outcome, Outcome::Delivered);
    assert_eq!((attempt.status, attempt.error), (Some(204), None));

    let requests = seen.requests.lock().unwrap();
    let (h, got) = &requests[0];
    assert_eq!(&got[..], body);
    let header = |name: &str| h.get(name).map(|v| v.to_str().unwrap().to_owned());
    let expect =
        |name: &str, value: &str| assert_eq!(header(name).as_deref(), Some(value), "{name}");
    expect("content-type", "application/x-www-form-urlencoded");
    expect("x-github-event", "push");
    expect("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    expect("x-hookbox-source", "github");
    expect("x-hookbox-event-id", "42");
    expect("x-hookbox-attempt", "3");
    expect("x-hookbox-event-type", "push");
    let msg_id = sign::message_id("github", "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    expect("webhook-id", &msg_id);
    assert!(header("user-agent").unwrap().starts_with("hookbox/"));
    assert_eq!(
        header("x-github-hook-id"),
        None,
        "only event-naming headers"
    );

    let verifier = Standard::new(&[Secret::new(SECRET)], 300);
    let inbound = Inbound::new(h, got);
    assert_eq!(verifier.verify(&inbound, clock::now_secs()), Ok(()));
}

#[tokio::test]
async fn permanent_statuses_are_dead_and_other_failures_retry() {
    let (addr, _) = serve().await;
    for (code, outcome) in [
        (410, Outcome::Dead),
        (422, Outcome::Dead),
        (408, RETRY),
        (409, RETRY),
        (429, RETRY),
        (500, RETRY),
        (502, RETRY),
    ] {
        let d = destination(addr, &format!("/status/{code}"), SECS);
        let attempt = d.deliver(&job(b"{}")).await;
        assert_eq!(attempt.outcome, outcome, "{code}");
        assert_eq!(attempt.status, Some(code));
        assert_eq!(attempt.error, Some(format!("HTTP {code}: status body")));
    }
}

#[tokio::test]
async fn retry_after_from_a_503_is_passed_on() {
    let (addr, _) = serve().await;
    let attempt = destination(addr, "/busy", SECS).deliver(&job(b"{}")).await;
    let seven = Some(Duration::from_secs(7));
    assert_eq!(attempt.outcome, Outcome::Retry { retry_after: seven });
    assert_eq!(attempt.status, Some(503));
}

#[tokio::test]
async fn a_slow_endpoint_times_out_and_is_retried() {
    let (addr, _) = serve().await;
    let timeout = Duration::from_millis(300);
    let attempt = destination(addr, "/slow", timeout)
        .deliver(&job(b"{}"))
        .await;
    assert_eq!(attempt.outcome, RETRY);
    assert_eq!(attempt.status, None);
    assert_eq!(attempt.error.as_deref(), Some("timed out after 300ms"));
    assert!(attempt.duration < Duration::from_secs(3), "{attempt:?}");
}

#[tokio::test]
async fn a_refused_connection_is_retried() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let attempt = destination(addr, "/ok", SECS).deliver(&job(b"{}")).await;
    assert_eq!((attempt.outcome, attempt.status), (RETRY, None));
    let error = attempt.error.unwrap();
    assert!(error.starts_with("connection failed"), "{error}");
    assert!(!error.contains("127.0.0.1"), "no URL in errors: {error}");
}

#[tokio::test]
async fn redirects_are_not_followed_and_retried() {
    let (addr, seen) = serve().await;
    let attempt = destination(addr, "/redirect", SECS)
        .deliver(&job(b"{}"))
        .await;
    assert_eq!((attempt.outcome, attempt.status), (RETRY, Some(302)));
    let error = attempt.error.unwrap();
    assert_eq!(error, "HTTP 302: redirect not followed (to /target)");
    assert_eq!(seen.redirect_target_hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_huge_response_body_is_read_only_as_far_as_the_excerpt() {
    let (addr, _) = serve().await;
    let attempt = destination(addr, "/huge", Duration::from_secs(30))
        .deliver(&job(b"{}"))
        .await;
    assert_eq!((attempt.outcome, attempt.status), (RETRY, Some(500)));
    let error = attempt.error.unwrap();
    assert!(error.len() <= BYTES_MAX, "{}", error.len());
    assert!(error.starts_with("HTTP 500: xxxx") && error.ends_with('…'));
    assert!(
        attempt.duration < Duration::from_secs(5),
        "{:?}",
        attempt.duration
    );
}

#[tokio::test]
async fn an_echoed_signature_never_reaches_the_error() {
    let (addr, _) = serve().await;
    let attempt = destination(addr, "/echo", SECS).deliver(&job(b"{}")).await;
    assert_eq!(attempt.outcome, Outcome::Dead);
    let error = attempt.error.unwrap();
    assert!(error.contains("webhook-signature"), "{error}");
    assert!(error.contains("v1,[signature]"), "{error}");
}

#[test]
fn retry_after_takes_seconds_and_http_dates() {
    let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
    let parse = |v: &str| parse_retry_after(v.as_bytes(), now);
    assert_eq!(parse("7"), Some(Duration::from_secs(7)));
    assert_eq!(parse(" 120 "), Some(Duration::from_secs(120)));
    assert_eq!(
        parse("Wed, 21 Oct 2015 07:30:00 GMT"),
        Some(Duration::from_secs(120))
    );
    assert_eq!(parse("Wed, 21 Oct 2015 07:00:00 GMT"), Some(Duration::ZERO));
    assert_eq!(
        parse("99999999999999999999999"),
        Some(Duration::from_secs(u64::MAX))
    );
    for bad in ["", "-5", "1.5", "soon"] {
        assert_eq!(parse(bad), None, "{bad:?}");
    }
}
