//! The edge: trusted proxies, per-source allowlists (CIDRs and the named
//! sets fetched from a fake GitHub `/meta` and Stripe IP list), the failure
//! limit and the connection cap.
//!
//! TestApp listens on 127.0.0.1, so "clients" are simulated by trusting the
//! loopback peer as a proxy and naming them in `X-Forwarded-For`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::{GITHUB_SECRET, TestApp, github_signature, json, serve_loopback};

const BODY: &[u8] = br#"{"zen":"Keep it logically awesome."}"#;
const TRUST_LOOPBACK: &str = "trusted_proxies = [\"127.0.0.1/32\"]";
/// A guard against a hang, never a measurement.
const GUARD: Duration = Duration::from_secs(30);

fn github_source(name: &str, allow_ips: &str) -> String {
    format!(
        "[[sources]]\nname = \"{name}\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\nallow_ips = {allow_ips}\n"
    )
}

/// POSTs a GitHub delivery to `/hooks/{source}`, signed with the right
/// secret or a wrong one, from `client` (an `X-Forwarded-For` value).
async fn post(
    app: &TestApp,
    source: &str,
    delivery: &str,
    client: Option<&str>,
    valid: bool,
) -> reqwest::Response {
    let secret = if valid { GITHUB_SECRET } else { "forged" };
    let mut request = app
        .client
        .post(app.url(&format!("/hooks/{source}")))
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", github_signature(secret, BODY))
        .body(BODY.to_vec());
    if let Some(client) = client {
        request = request.header("x-forwarded-for", client);
    }
    request.send().await.unwrap()
}

fn stored(app: &TestApp, delivery: &str) -> i64 {
    app.count(&format!(
        "SELECT count(*) FROM events WHERE delivery_id = '{delivery}'"
    ))
}

// ------------------------------------------------------ trusted proxies ---

#[tokio::test]
async fn a_forwarded_address_is_believed_only_from_a_trusted_peer() {
    let sources = github_source("github", "[\"203.0.113.0/24\"]");
    let trusting = TestApp::spawn_with(&sources, TRUST_LOOPBACK).await;
    let r = post(&trusting, "github", "t-1", Some("203.0.113.7"), true).await;
    assert_eq!(r.status(), 202);
    // The client wrote the left entry itself; the proxy appended the
    // address it really saw, which is the one that counts.
    let r = post(
        &trusting,
        "github",
        "t-2",
        Some("203.0.113.7, 198.51.100.1"),
        true,
    )
    .await;
    assert_eq!(r.status(), 403);
    assert_eq!(json(r).await, json!({"error": "forbidden_address"}));
    assert_eq!(stored(&trusting, "t-2"), 0);
    trusting.shutdown().await;

    let direct = TestApp::spawn(&sources).await;
    let r = post(&direct, "github", "d-1", Some("203.0.113.7"), true).await;
    assert_eq!(
        r.status(),
        403,
        "an untrusted peer's X-Forwarded-For is ignored"
    );
    assert_eq!(stored(&direct, "d-1"), 0);
    direct.shutdown().await;
}

#[tokio::test]
async fn a_forwarding_header_is_read_up_to_the_first_untrusted_hop_and_refused_when_unreadable() {
    // The proxy's own address is allowed on one source: an unreadable
    // header must never make the client that address.
    let sources = format!(
        "{}{}",
        github_source("github", "[\"127.0.0.1\"]"),
        github_source("remote", "[\"203.0.113.0/24\"]"),
    );
    let app = TestApp::spawn_with(&sources, TRUST_LOOPBACK).await;
    // Junk left of the first untrusted hop was written by the client
    // itself: it is not read, and that hop is the client.
    let r = post(&app, "remote", "j-1", Some("junk, 203.0.113.9"), true).await;
    assert_eq!(r.status(), 202);
    let r = post(&app, "github", "j-2", Some("junk, 203.0.113.9"), true).await;
    assert_eq!(r.status(), 403, "the client is 203.0.113.9, not the proxy");
    // Junk where a trusted proxy wrote is refused, never the proxy itself.
    for (i, value) in [
        "junk",
        "203.0.113.9, junk",
        "203.0.113.9,",
        "junk, 127.0.0.1",
    ]
    .into_iter()
    .enumerate()
    {
        let delivery = format!("j-bad-{i}");
        let r = post(&app, "github", &delivery, Some(value), true).await;
        assert_eq!(r.status(), 400, "{value:?}");
        assert_eq!(
            json(r).await,
            json!({"error": "malformed_forwarding_header"}),
            "{value:?}"
        );
        assert_eq!(stored(&app, &delivery), 0, "{value:?}");
    }
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    let line =
        r#"hookbox_edge_refused_total{source="github",reason="malformed_forwarding_header"} 4"#;
    assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    app.shutdown().await;
}

// ----------------------------------------------------------- allowlists ---

/// A fake GitHub `/meta` and Stripe webhook IP list, which can go down.
struct FakeIps {
    url: String,
    up: Arc<AtomicBool>,
}

impl FakeIps {
    async fn start() -> FakeIps {
        let up = Arc::new(AtomicBool::new(true));
        let app = Router::new()
            .route("/meta", get(meta))
            .route("/files/ips/ips_webhooks.json", get(stripe_ips))
            .with_state(up.clone());
        let (addr, _server) = serve_loopback(|_| app).await;
        FakeIps {
            url: format!("http://{addr}"),
            up,
        }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }

    /// The `[edge]` table pointing hookbox at this fake.
    fn edge_table(&self) -> String {
        format!(
            "[edge]\ngithub_meta_url = \"{0}/meta\"\nstripe_ips_url = \"{0}/files/ips/ips_webhooks.json\"\n",
            self.url
        )
    }
}

async fn meta(State(up): State<Arc<AtomicBool>>) -> Response {
    if !up.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    axum::Json(json!({
        "verifiable_password_authentication": false,
        "hooks": ["192.30.252.0/22", "185.199.108.0/22", "2606:50c0::/32"],
        "web": ["10.0.0.0/8"],
    }))
    .into_response()
}

async fn stripe_ips(State(up): State<Arc<AtomicBool>>) -> Response {
    if !up.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    axum::Json(json!({"WEBHOOKS": ["3.18.12.63", "3.130.192.231", "13.235.14.237"]}))
        .into_response()
}

fn named_set_sources(fake: &FakeIps) -> String {
    format!(
        "{}{}{}",
        fake.edge_table(),
        github_source("github", "[\"github\"]"),
        github_source("viastripe", "[\"stripe\", \"198.51.100.0/24\"]"),
    )
}

#[tokio::test]
async fn named_sets_admit_their_ranges_and_refuse_the_rest_unstored() {
    let fake = FakeIps::start().await;
    let app = TestApp::spawn_with(&named_set_sources(&fake), TRUST_LOOPBACK).await;
    for (source, client, delivery, status) in [
        ("github", "192.30.252.9", "n-1", 202),
        ("github", "2606:50c0::17", "n-2", 202),
        ("github", "10.1.1.1", "n-3", 403), // GitHub's "web" range, not "hooks"
        ("github", "3.18.12.63", "n-4", 403),
        ("viastripe", "3.18.12.63", "n-5", 202),
        ("viastripe", "198.51.100.77", "n-6", 202), // its own CIDR
        ("viastripe", "3.18.12.64", "n-7", 403),
    ] {
        let r = post(&app, source, delivery, Some(client), true).await;
        assert_eq!(r.status(), status, "{source} from {client}");
        assert_eq!(
            stored(&app, delivery),
            i64::from(status == 202),
            "{delivery}"
        );
    }
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    for line in [
        r#"hookbox_edge_refused_total{source="github",reason="not_allowed"} 2"#,
        r#"hookbox_edge_refused_total{source="viastripe",reason="not_allowed"} 1"#,
        r#"hookbox_received_total{source="github",outcome="rejected",reason="forbidden_address"} 2"#,
        r#"hookbox_edge_ip_set_ranges{set="github"} 3"#,
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn a_refused_address_gets_403_before_its_body_is_sent() {
    let fake = FakeIps::start().await;
    // A long body timeout: had hookbox waited for the body, the guard fires.
    let server = format!("{TRUST_LOOPBACK}\nbody_timeout = \"1h\"");
    let app = TestApp::spawn_with(&named_set_sources(&fake), &server).await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    stream
        .write_all(
            b"POST /hooks/github HTTP/1.1\r\nhost: x\r\nx-forwarded-for: 10.9.9.9\r\n\
              x-github-event: push\r\nx-github-delivery: early-1\r\n\
              content-length: 10000000\r\n\r\n",
        )
        .await
        .unwrap();
    let mut buf = vec![0u8; 2048];
    let n = tokio::time::timeout(GUARD, stream.read(&mut buf))
        .await
        .expect("answered without the body")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(head.contains("forbidden_address"), "{head}");
    assert_eq!(stored(&app, "early-1"), 0);
    app.shutdown().await;
}

#[tokio::test]
async fn the_cached_list_is_used_when_the_api_is_down_at_start() {
    let fake = FakeIps::start().await;
    let sources = named_set_sources(&fake);
    let app = TestApp::spawn_with(&sources, TRUST_LOOPBACK).await;
    let r = post(&app, "github", "c-1", Some("192.30.252.9"), true).await;
    assert_eq!(r.status(), 202);
    let dir = app.shutdown().await;

    fake.set_up(false);
    let app = TestApp::spawn_in(dir, &sources, TRUST_LOOPBACK).await;
    let r = post(&app, "github", "c-2", Some("192.30.252.9"), true).await;
    assert_eq!(
        r.status(),
        202,
        "the cached GitHub list still admits its ranges"
    );
    let r = post(&app, "viastripe", "c-3", Some("3.18.12.63"), true).await;
    assert_eq!(r.status(), 202, "the cached Stripe list too");
    let r = post(&app, "github", "c-4", Some("10.1.1.1"), true).await;
    assert_eq!(r.status(), 403);
    app.shutdown().await;
}

#[tokio::test]
async fn without_network_or_cache_a_named_set_admits_nobody_but_the_server_runs() {
    let fake = FakeIps::start().await;
    fake.set_up(false);
    let app = TestApp::spawn_with(&named_set_sources(&fake), TRUST_LOOPBACK).await;
    let r = post(&app, "github", "u-1", Some("192.30.252.9"), true).await;
    assert_eq!(r.status(), 403);
    // The source's own CIDRs still work.
    let r = post(&app, "viastripe", "u-2", Some("198.51.100.7"), true).await;
    assert_eq!(r.status(), 202);
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    let line = r#"hookbox_edge_refused_total{source="github",reason="set_unavailable"} 1"#;
    assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    app.shutdown().await;
}

// --------------------------------------------------------- abuse limits ---

const LIMITS: &str = "[edge]\nmax_failures = 5\nfailure_window = \"1h\"\nblock_for = \"1h\"\n";

#[tokio::test]
async fn a_client_forging_signatures_gets_429_while_others_keep_getting_202() {
    let sources = format!("{LIMITS}{}", github_source("github", "[]"));
    let app = TestApp::spawn_with(&sources, TRUST_LOOPBACK).await;
    let attacker = Some("198.51.100.66");
    let honest = Some("203.0.113.9");
    for i in 0..12 {
        let r = post(&app, "github", &format!("forged-{i}"), attacker, false).await;
        if i < 5 {
            assert_eq!(r.status(), 401, "failure {i}");
        } else {
            assert_eq!(r.status(), 429, "request {i} after the threshold");
            let wait: u64 = r.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=3600).contains(&wait), "{wait}");
            assert_eq!(json(r).await, json!({"error": "too_many_failures"}));
        }
        let r = post(&app, "github", &format!("honest-{i}"), honest, true).await;
        assert_eq!(r.status(), 202, "the honest client's delivery {i}");
    }
    // Blocked means blocked: even a valid delivery from that address waits.
    let r = post(&app, "github", "attacker-valid", attacker, true).await;
    assert_eq!(r.status(), 429);
    assert_eq!(stored(&app, "attacker-valid"), 0);
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE delivery_id LIKE 'honest-%'"),
        12
    );
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    let line = r#"hookbox_edge_refused_total{source="github",reason="too_many_failures"} 8"#;
    assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_block_expires() {
    let limits = "[edge]\nmax_failures = 2\nfailure_window = \"1h\"\nblock_for = \"300ms\"\n";
    let sources = format!("{limits}{}", github_source("github", "[]"));
    let app = TestApp::spawn_with(&sources, TRUST_LOOPBACK).await;
    let client = Some("198.51.100.66");
    assert_eq!(
        post(&app, "github", "f-1", client, false).await.status(),
        401
    );
    assert_eq!(
        post(&app, "github", "f-2", client, false).await.status(),
        401
    );
    assert_eq!(
        post(&app, "github", "f-3", client, true).await.status(),
        429
    );
    // Poll until the block is over; no assertion on how long that took.
    let mut status = 429;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = post(&app, "github", "f-4", client, true)
            .await
            .status()
            .as_u16();
        if status != 429 {
            break;
        }
    }
    assert_eq!(
        status, 202,
        "the block expired and a valid delivery is stored"
    );
    app.shutdown().await;
}

// ------------------------------------------------------- connection cap ---

/// Sends `GET /healthz` on a kept-alive connection and reads the answer.
async fn healthz_on(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
        let n = tokio::time::timeout(GUARD, stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn at_max_connections_the_longest_idle_connection_makes_room_for_a_new_one() {
    let app = TestApp::spawn_with(&github_source("github", "[]"), "max_connections = 4").await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        // Served once, then left idle on keep-alive: it holds its slot.
        assert!(healthz_on(&mut stream).await.starts_with("HTTP/1.1 200"));
        held.push(stream);
        // Distinct moments of last activity (they are kept in ms).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let url = app.url("/healthz");
    // Without eviction this would wait for header_timeout (10 s) at least.
    let r = tokio::time::timeout(GUARD, client.get(&url).send())
        .await
        .expect("served at the cap")
        .unwrap();
    assert_eq!(r.status(), 200);
    // The one idle longest, the first, was closed to make room.
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(GUARD, held[0].read(&mut buf))
        .await
        .expect("the oldest idle connection is closed")
        .unwrap_or(0);
    assert_eq!(n, 0, "the oldest idle connection was closed");
    assert!(healthz_on(&mut held[3]).await.starts_with("HTTP/1.1 200"));
    app.shutdown().await;
}

#[tokio::test]
async fn at_max_connections_a_stalled_upload_makes_room_for_a_new_connection() {
    // A long body timeout: had hookbox waited for a stalled upload to time
    // out, the guard fires first.
    let app = TestApp::spawn_with(
        &github_source("github", "[]"),
        "max_connections = 4\nbody_timeout = \"1h\"",
    )
    .await;
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(app.addr).await.unwrap();
        // Headers in, one byte of the body, then nothing.
        stream
            .write_all(b"POST /hooks/github HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
            .await
            .unwrap();
        stalled.push(stream);
        // Distinct moments of last activity (they are kept in ms).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let r = tokio::time::timeout(GUARD, client.get(app.url("/healthz")).send())
        .await
        .expect("served at the cap")
        .unwrap();
    assert_eq!(r.status(), 200);
    // A stalled upload was closed to make room: the one the server saw
    // active longest ago, which is normally the first, but under load the
    // server may read the four heads in another order than they were sent.
    let mut reads = tokio::task::JoinSet::new();
    for mut stream in stalled {
        reads.spawn(async move {
            let mut buf = [0u8; 64];
            stream.read(&mut buf).await.unwrap_or(0)
        });
    }
    let n = tokio::time::timeout(GUARD, reads.join_next())
        .await
        .expect("a stalled upload is closed")
        .unwrap()
        .unwrap();
    assert_eq!(n, 0, "closed without an answer");
    reads.abort_all();
    app.shutdown().await;
}

#[tokio::test]
async fn at_max_connections_with_every_connection_busy_a_new_one_waits_for_a_slot() {
    let app = TestApp::spawn_with(&github_source("github", "[]"), "max_connections = 4").await;
    // Another writer holds the database: each delivery below has its whole
    // body in and waits for its commit, which is running a request.
    let db = app.db();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let url = app.url("/hooks/github");
    let busy: Vec<_> = (0..4)
        .map(|i| {
            let request = crate::helpers::github_request(&client, &url, &format!("busy-{i}"), BODY);
            tokio::spawn(async move { request.send().await.map(|r| r.status().as_u16()) })
        })
        .collect();
    // Let all four reach the writer before the fifth arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fifth = tokio::spawn({
        let client = client.clone();
        let url = app.url("/healthz");
        async move { client.get(url).send().await.map(|r| r.status().as_u16()) }
    });
    // Give it every chance to be (wrongly) served by closing a busy one.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !fifth.is_finished(),
        "a running request was cut off for a new connection"
    );
    db.execute_batch("COMMIT").unwrap();
    for b in busy {
        let status = tokio::time::timeout(GUARD, b)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(status, 202, "no running request was cut off");
    }
    // Answered, their connections close (the client keeps none): a slot
    // frees.
    let status = tokio::time::timeout(GUARD, fifth)
        .await
        .expect("served once a slot freed")
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    app.shutdown().await;
}

#[tokio::test]
async fn a_set_never_fetched_is_retried_soon_and_admits_its_ranges_once_fetched() {
    let fake = FakeIps::start().await;
    fake.set_up(false);
    // refresh = 1m: the first retry of a set with no list comes after a
    // 48th of it (1.25 s), doubling; the daily default gives 30 s.
    let sources = named_set_sources(&fake).replacen("[edge]\n", "[edge]\nrefresh = \"1m\"\n", 1);
    let app = TestApp::spawn_with(&sources, TRUST_LOOPBACK).await;
    let r = post(&app, "github", "r-1", Some("192.30.252.9"), true).await;
    assert_eq!(r.status(), 403, "no list yet");
    fake.set_up(true);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = post(&app, "github", "r-2", Some("192.30.252.9"), true).await;
        if r.status() == 202 {
            break;
        }
        assert_eq!(r.status(), 403);
        assert!(
            std::time::Instant::now() < deadline,
            "the set was not fetched again within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(stored(&app, "r-2"), 1);
    app.shutdown().await;
}
