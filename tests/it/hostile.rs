//! Hostile input against the real server: slowloris, bodies at and over
//! the limit, invalid UTF-8, header floods, JSON bombs and duplicate
//! storms. Each test checks that a valid client still gets its 202 during
//! and after the attack, that nothing the attack sent is stored, and that
//! the process still answers `/healthz` at the end. No test asserts a
//! timing: the bounds below only stop a broken server from hanging CI.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use reqwest::header::HeaderValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::*;

/// A generous bound on anything the server should answer promptly.
const PATIENCE: Duration = Duration::from_secs(20);

/// The process is still up and its store still takes a commit.
async fn assert_alive(app: &TestApp) {
    let r = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200, "healthz");
    let r = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200, "readyz");
}

/// Sends `request` on a fresh connection and returns what came back before
/// the server closed it or `PATIENCE` ran out: a status line, or empty when
/// the server just closed (or reset) the connection.
async fn raw(app: &TestApp, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    // The server may answer and close before it has read everything.
    let _ = stream.write_all(request).await;
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(PATIENCE, stream.read(&mut buf)).await {
        Err(_) => panic!("the server neither answered nor closed the connection"),
        Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        Ok(Err(_)) => String::new(),
    }
}

/// The status code of a raw answer, `None` when the connection was closed.
fn status_of(answer: &str) -> Option<u16> {
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
}

/// A signed GitHub request head and body for raw connections.
fn github_head(delivery: &str, body: &[u8], framing: &str) -> Vec<u8> {
    format!(
        "POST /hooks/github HTTP/1.1\r\nhost: x\r\nx-github-event: push\r\nx-github-delivery: {delivery}\r\nx-hub-signature-256: {}\r\n{framing}\r\n",
        github_signature(GITHUB_SECRET, body)
    )
    .into_bytes()
}

fn chunked(body: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in body.chunks(chunk) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_slowloris_connections_do_not_stop_valid_deliveries() {
    let app = Arc::new(TestApp::spawn_with(GITHUB_SOURCE, "header_timeout = \"1s\"").await);
    let stop = Arc::new(AtomicBool::new(false));
    let cut_off = Arc::new(AtomicUsize::new(0));
    let mut attackers = Vec::new();
    for i in 0..200 {
        let (addr, stop, cut_off) = (app.addr, stop.clone(), cut_off.clone());
        attackers.push(tokio::spawn(async move {
            let Ok(mut stream) = TcpStream::connect(addr).await else {
                return;
            };
            let head = format!("POST /hooks/github HTTP/1.1\r\nhost: x\r\nx-slow-{i}: ");
            let mut bytes = head.into_bytes().into_iter().chain(std::iter::repeat(b'a'));
            while !stop.load(Ordering::Relaxed) {
                let byte = bytes.next().expect("endless");
                if stream.write_all(&[byte]).await.is_err() {
                    cut_off.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    // While they trickle, and across several header timeouts, a provider
    // keeps delivering.
    for n in 0..30 {
        let r = app.post_github(&format!("valid-{n}"), b"{}").await;
        assert_eq!(r.status(), 202, "valid delivery {n} during slowloris");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every slow connection is cut off by the header timeout, not kept.
    let waited = tokio::time::timeout(PATIENCE, async {
        while cut_off.load(Ordering::Relaxed) < 200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.await.unwrap();
    }
    assert!(
        waited.is_ok(),
        "only {} of 200 slow connections were cut off",
        cut_off.load(Ordering::Relaxed)
    );
    assert_eq!(app.post_github("valid-after", b"{}").await.status(), 202);
    assert_eq!(app.count("SELECT count(*) FROM events"), 31);
    assert_alive(&app).await;
}

#[tokio::test]
async fn bodies_at_the_limit_are_stored_and_over_it_are_refused_however_framed() {
    let sources = GITHUB_SOURCE.replace("secrets", "max_body_bytes = 1024\nsecrets");
    let app = TestApp::spawn(&sources).await;
    let at = vec![b'a'; 1024];
    let over = vec![b'o'; 1025];

    // Content-Length, exactly at and one over the limit.
    let mut req = github_head("cl-at", &at, "content-length: 1024\r\n");
    req.extend_from_slice(&at);
    assert_eq!(status_of(&raw(&app, &req).await), Some(202));
    let mut req = github_head("cl-over", &over, "content-length: 1025\r\n");
    req.extend_from_slice(&over);
    assert_eq!(status_of(&raw(&app, &req).await), Some(413));

    // Chunked (no Content-Length), at and over, in small and large chunks.
    for (chunk, tag) in [(7, "small"), (4096, "large")] {
        let mut req = github_head(
            &format!("chunked-at-{tag}"),
            &at,
            "transfer-encoding: chunked\r\n",
        );
        req.extend_from_slice(&chunked(&at, chunk));
        assert_eq!(status_of(&raw(&app, &req).await), Some(202), "{tag}");
        let mut req = github_head(
            &format!("chunked-over-{tag}"),
            &over,
            "transfer-encoding: chunked\r\n",
        );
        req.extend_from_slice(&chunked(&over, chunk));
        assert_eq!(status_of(&raw(&app, &req).await), Some(413), "{tag}");
    }

    // Smuggling-shaped framing: both headers, or two Content-Lengths that
    // disagree. Whatever hyper makes of it, it is never stored.
    let mut req = github_head(
        "both-framings",
        &over,
        "content-length: 10\r\ntransfer-encoding: chunked\r\n",
    );
    req.extend_from_slice(&chunked(&over, 100));
    let answer = raw(&app, &req).await;
    assert!(
        status_of(&answer).is_none_or(|s| (400..500).contains(&s)),
        "{answer}"
    );
    let mut req = github_head(
        "two-lengths",
        &at,
        "content-length: 1024\r\ncontent-length: 5\r\n",
    );
    req.extend_from_slice(&at);
    let answer = raw(&app, &req).await;
    assert!(
        status_of(&answer).is_none_or(|s| (400..500).contains(&s)),
        "{answer}"
    );
    // A Content-Length that lies short: only its bytes are the body, the
    // signature (over the whole) fails, and the rest is not a request.
    let mut req = github_head("short-length", &at, "content-length: 10\r\n");
    req.extend_from_slice(&at);
    assert_eq!(status_of(&raw(&app, &req).await), Some(401));
    // An absurd Content-Length is refused before the body.
    let req = github_head(
        "huge-length",
        b"",
        "content-length: 99999999999999999999999\r\n",
    );
    let answer = raw(&app, &req).await;
    assert!(
        status_of(&answer).is_none_or(|s| (400..500).contains(&s)),
        "{answer}"
    );

    let stored: Vec<String> = {
        let db = app.db();
        let mut stmt = db
            .prepare("SELECT delivery_id FROM events ORDER BY delivery_id")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        stored,
        ["chunked-at-large", "chunked-at-small", "cl-at"],
        "only the bodies within the limit are stored"
    );
    let sizes = app.count("SELECT count(*) FROM events WHERE length(body) = 1024");
    assert_eq!(sizes, 3, "each stored whole");
    assert_eq!(app.post_github("after", b"{}").await.status(), 202);
    assert_alive(&app).await;
    app.shutdown().await;
}

#[tokio::test]
async fn invalid_utf8_in_headers_and_bodies_is_stored_as_sent_or_refused_never_a_panic() {
    let app = TestApp::spawn(&format!(
        "{GITHUB_SOURCE}\n[[sources]]\nname = \"stripe\"\nkind = \"stripe\"\nsecrets = [\"whsec_x\"]\n"
    ))
    .await;
    let bad = HeaderValue::from_bytes(b"\xff\xfe push \xc3\x28").unwrap();
    let post = |delivery: HeaderValue, event: HeaderValue, body: Vec<u8>| {
        app.client
            .post(app.url("/hooks/github"))
            .header("x-github-event", event)
            .header("x-github-delivery", delivery)
            .header(
                "user-agent",
                HeaderValue::from_bytes(b"agent \x80\xff").unwrap(),
            )
            .header(
                "x-hub-signature-256",
                github_signature(GITHUB_SECRET, &body),
            )
            .body(body)
            .send()
    };

    // An event type and a user agent that are not UTF-8, and a body that
    // is not either: stored, and shown back byte for byte.
    let body = b"not utf-8: \xff\xfe\x00\x80 end".to_vec();
    let r = post(
        HeaderValue::from_static("utf8-1"),
        bad.clone(),
        body.clone(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 202);
    let id = json(r).await["id"].as_i64().unwrap();
    let shown = json(app.admin_get(&format!("/api/events/{id}")).await).await;
    assert_eq!(shown["delivery_id"], "utf8-1");
    assert_eq!(shown["body"]["encoding"], "base64", "{shown}");
    let data = shown["body"]["data"].as_str().unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
        body
    );
    let agent = shown["headers"]["user-agent"].as_str().unwrap();
    assert!(agent.starts_with("agent "), "{shown}");
    // And it lists, filters and renders on the dashboard's API without harm.
    let list = app.admin_get("/api/events?source=github").await;
    assert_eq!(list.status(), 200);
    let list = app.admin_get("/api/events?event_type=%FF%FE").await;
    assert!(list.status().is_success() || list.status() == 400);

    // A delivery id that is not UTF-8 identifies nothing: 400, not stored.
    let r = post(
        bad.clone(),
        HeaderValue::from_static("push"),
        b"{}".to_vec(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(json(r).await["error"], "missing_delivery_id");

    // A Stripe body whose JSON strings are not UTF-8 is not JSON: 400.
    let t = now_secs();
    let body = b"{\"id\":\"evt_\xff\xfe\",\"type\":\"x\"}".to_vec();
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(&body);
    let sig = hex::encode(hmac_sha256(b"whsec_x", &signed));
    let r = app
        .client
        .post(app.url("/hooks/stripe"))
        .header("stripe-signature", format!("t={t},v1={sig}"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(json(r).await["error"], "invalid_json");
    // A signature header that is not UTF-8 is malformed, not a crash.
    let r = app
        .client
        .post(app.url("/hooks/stripe"))
        .header(
            "stripe-signature",
            HeaderValue::from_bytes(b"t=\xff,v1=\xfe").unwrap(),
        )
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // A source name that is not UTF-8 names nothing.
    let answer = raw(
        &app,
        b"POST /hooks/%FF%FE HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n",
    )
    .await;
    assert!(
        status_of(&answer).is_some_and(|s| (400..500).contains(&s)),
        "{answer}"
    );
    let answer = raw(
        &app,
        b"POST /hooks/gith\xffub HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n",
    )
    .await;
    assert!(
        status_of(&answer).is_none_or(|s| (400..500).contains(&s)),
        "{answer}"
    );

    assert_eq!(app.count("SELECT count(*) FROM events"), 1);
    assert_eq!(app.post_github("after", b"{}").await.status(), 202);
    assert_alive(&app).await;
    app.shutdown().await;
}

#[tokio::test]
async fn header_floods_are_refused_with_a_4xx_or_a_close_and_valid_traffic_goes_on() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    // Hundreds of headers.
    for count in [200, 1000, 5000] {
        let mut req = b"POST /hooks/github HTTP/1.1\r\nhost: x\r\n".to_vec();
        for i in 0..count {
            req.extend_from_slice(format!("x-flood-{i}: {i}\r\n").as_bytes());
        }
        req.extend_from_slice(b"content-length: 0\r\n\r\n");
        let answer = raw(&app, &req).await;
        assert!(
            status_of(&answer).is_none_or(|s| (400..500).contains(&s)),
            "{count} headers: {answer}"
        );
        assert_eq!(
            app.post_github(&format!("after-{count}"), b"{}")
                .await
                .status(),
            202
        );
    }
    // One huge header, and a huge request line.
    for size in [64 * 1024, 1024 * 1024, 8 * 1024 * 1024] {
        let mut req = b"POST /hooks/github HTTP/1.1\r\nhost: x\r\nx-huge: ".to_vec();
        req.resize(req.len() + size, b'h');
        req.extend_from_slice(b"\r\ncontent-length: 0\r\n\r\n");
        let answer = raw(&app, &req).await;
        assert!(
            status_of(&answer).is_none_or(|s| (400..500).contains(&s)),
            "{size}-byte header: {answer}"
        );
        let mut req = b"POST /hooks/".to_vec();
        req.resize(req.len() + size, b'p');
        req.extend_from_slice(b" HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n");
        let answer = raw(&app, &req).await;
        assert!(
            status_of(&answer).is_none_or(|s| (400..500).contains(&s)),
            "{size}-byte path: {answer}"
        );
        assert_eq!(
            app.post_github(&format!("after-huge-{size}"), b"{}")
                .await
                .status(),
            202
        );
    }
    // A signed delivery that also carries a header within limits but large
    // is fine: nothing about size alone refuses a provider.
    let body = b"{}";
    let r = app
        .client
        .post(app.url("/hooks/github"))
        .header("x-github-event", "push")
        .header("x-github-delivery", "big-header")
        .header("x-padding", "p".repeat(16 * 1024))
        .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(app.count("SELECT count(*) FROM events"), 7);
    assert_alive(&app).await;
    app.shutdown().await;
}

/// `depth` nested arrays: `[[[...]]]`.
fn nested_arrays(depth: usize) -> String {
    let mut s = String::with_capacity(depth * 2);
    s.extend(std::iter::repeat_n('[', depth));
    s.extend(std::iter::repeat_n(']', depth));
    s
}

fn stripe_post(app: &TestApp, body: Vec<u8>) -> reqwest::RequestBuilder {
    let t = now_secs();
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(&body);
    let sig = hex::encode(hmac_sha256(b"whsec_x", &signed));
    app.client
        .post(app.url("/hooks/stripe"))
        .header("stripe-signature", format!("t={t},v1={sig}"))
        .body(body)
}

#[tokio::test]
async fn json_bombs_with_valid_signatures_are_a_400_or_stored_opaque_never_a_stack_overflow() {
    let app = TestApp::spawn(
        "[[sources]]\nname = \"stripe\"\nkind = \"stripe\"\nsecrets = [\"whsec_x\"]\n\n\
         [[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"test-secret\"]\n\
         order_key = [\"/repository/full_name\"]\n",
    )
    .await;
    // 100k levels (inline verification) and 1M levels (2 MB: verified on
    // the blocking pool), as the whole body and inside a valid event.
    for depth in [100_000, 1_000_000] {
        let bomb = nested_arrays(depth);
        let r = stripe_post(&app, bomb.clone().into_bytes())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "bare bomb, depth {depth}");
        assert_eq!(json(r).await["error"], "invalid_json");
        let wrapped = format!(r#"{{"id":"evt_bomb_{depth}","type":"x","data":{bomb}}}"#);
        let r = stripe_post(&app, wrapped.into_bytes())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "wrapped bomb, depth {depth}");
        let objects = format!(
            "{}1{}",
            r#"{"a":"#.repeat(depth / 10),
            "}".repeat(depth / 10)
        );
        let r = stripe_post(&app, objects.into_bytes())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "nested objects, depth {}", depth / 10);

        // GitHub does not need the JSON, only its order key: the body is
        // parsed for it, fails, and the event is kept without one.
        let body = format!(r#"{{"repository":{{"full_name":{bomb}}}}}"#);
        let delivery = format!("gh-bomb-{depth}");
        let r = app.post_github(&delivery, body.as_bytes()).await;
        assert_eq!(r.status(), 202, "github bomb, depth {depth}");
        let order_key: Option<String> = app
            .db()
            .query_row(
                "SELECT order_key FROM events WHERE delivery_id = ?1",
                [&delivery],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(order_key, None);
        assert_eq!(
            app.post_github(
                &format!("valid-{depth}"),
                br#"{"repository":{"full_name":"a/b"}}"#
            )
            .await
            .status(),
            202
        );
    }
    // Just under serde_json's recursion limit still parses as an event.
    let shallow = format!(
        r#"{{"id":"evt_ok","type":"x","data":{}}}"#,
        nested_arrays(100)
    );
    let r = stripe_post(&app, shallow.into_bytes())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE source = 'stripe'"),
        1
    );
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE source = 'github'"),
        4
    );
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE order_key = 'a/b'"),
        2
    );
    assert_alive(&app).await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_two_thousand_copies_of_one_id_stores_one_row_and_answers_one_202() {
    let app = Arc::new(TestApp::spawn(GITHUB_SOURCE).await);
    const COPIES: usize = 2000;
    const TASKS: usize = 64;
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (app, next) = (app.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < COPIES {
                let r = app.post_github("storm", br#"{"storm":true}"#).await;
                let status = r.status().as_u16();
                answers.push((status, json(r).await["id"].as_i64()));
            }
            answers
        }));
    }
    // A valid, different delivery gets through during the storm.
    for n in 0..10 {
        let r = app.post_github(&format!("calm-{n}"), b"{}").await;
        assert_eq!(r.status(), 202, "valid delivery {n} during the storm");
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.extend(t.await.unwrap());
    }
    assert_eq!(answers.len(), COPIES);
    let accepted = answers.iter().filter(|(s, _)| *s == 202).count();
    let duplicates = answers.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(
        (accepted, duplicates),
        (1, COPIES - 1),
        "one 202, the rest duplicates"
    );
    let ids: std::collections::HashSet<_> = answers.iter().map(|(_, id)| *id).collect();
    assert_eq!(ids.len(), 1, "every answer names the same row: {ids:?}");
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE delivery_id = 'storm'"),
        1
    );
    assert_eq!(app.count("SELECT count(*) FROM events"), 11);
    assert_alive(&app).await;
}
