//! The public contract of `POST /hooks/{source}` over real HTTP.

use std::time::Duration;

use base64::Engine as _;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::*;

#[tokio::test]
async fn a_new_delivery_is_accepted_and_a_repeat_is_a_duplicate_of_the_same_row() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let first = app.post_github("d-1", br#"{"zen":"hi"}"#).await;
    assert_eq!(first.status(), 202);
    let first = json(first).await;
    assert_eq!(first["status"], "accepted");

    let again = app.post_github("d-1", br#"{"zen":"hi"}"#).await;
    assert_eq!(again.status(), 200);
    let again = json(again).await;
    assert_eq!(again["status"], "duplicate");
    assert_eq!(again["id"], first["id"]);
    assert_eq!(app.count("SELECT count(*) FROM events"), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn one_hundred_concurrent_posts_of_one_id_store_one_row_and_answer_one_202() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let app = std::sync::Arc::new(app);
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            let r = app.post_github("same-id", b"{}").await;
            (r.status().as_u16(), json(r).await["id"].as_i64().unwrap())
        }));
    }
    let mut statuses = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let (status, id) = t.await.unwrap();
        statuses.push(status);
        ids.insert(id);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 202).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        99,
        "{statuses:?}"
    );
    assert_eq!(ids.len(), 1);
    assert_eq!(app.count("SELECT count(*) FROM events"), 1);
}

#[tokio::test]
async fn a_bad_signature_is_refused_with_401_and_nothing_is_stored() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let body = br#"{"a":1}"#;
    let r = app
        .client
        .post(app.url("/hooks/github"))
        .header("x-github-delivery", "d-bad")
        .header(
            "x-hub-signature-256",
            github_signature("wrong-secret", body),
        )
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let text = r.text().await.unwrap();
    assert_eq!(text, r#"{"error":"invalid_signature"}"#);
    // The expected signature must never be in the answer.
    let expected = github_signature(GITHUB_SECRET, body);
    assert!(!text.contains(&expected[7..]));

    let r = app
        .client
        .post(app.url("/hooks/github"))
        .header("x-github-delivery", "d-unsigned")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(json(r).await["error"], "missing_signature");
    assert_eq!(app.count("SELECT count(*) FROM events"), 0);
    app.shutdown().await;
}

#[tokio::test]
async fn a_signed_delivery_without_an_id_is_a_400() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let r = app
        .client
        .post(app.url("/hooks/github"))
        .header(
            "x-hub-signature-256",
            github_signature(GITHUB_SECRET, b"{}"),
        )
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(json(r).await["error"], "missing_delivery_id");
    assert_eq!(app.count("SELECT count(*) FROM events"), 0);
    app.shutdown().await;
}

#[tokio::test]
async fn an_unknown_source_is_a_404_and_other_paths_do_not_exist() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let r = app
        .client
        .post(app.url("/hooks/nope"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(json(r).await["error"], "unknown_source");
    // A name that is not UTF-8 once percent-decoded: the same JSON 404.
    for path in ["/hooks/%FF", "/hooks/git%C3hub"] {
        let r = app
            .client
            .post(app.url(path))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
        assert_eq!(json(r).await["error"], "unknown_source", "{path}");
    }
    let r = app.client.get(app.url("/api/events")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    app.shutdown().await;
}

#[tokio::test]
async fn an_oversized_body_is_a_413_with_or_without_content_length() {
    let sources = r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["test-secret"]
max_body_bytes = 1024
"#;
    let app = TestApp::spawn(sources).await;
    let big = vec![b'x'; 4096];
    let r = app.post_github("big", &big).await;
    assert_eq!(r.status(), 413);
    assert_eq!(json(r).await["error"], "body_too_large");

    // Chunked: no Content-Length, so the limit is enforced while reading.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..8).map(|_| Ok(vec![b'y'; 512])).collect();
    let r = app
        .client
        .post(app.url("/hooks/github"))
        .header("x-github-delivery", "big-chunked")
        .header("x-hub-signature-256", "sha256=00")
        .body(reqwest::Body::wrap_stream(futures_stream(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);

    // Exactly at the limit is fine.
    let r = app.post_github("at-limit", &vec![b'z'; 1024]).await;
    assert_eq!(r.status(), 202);
    assert_eq!(app.count("SELECT count(*) FROM events"), 1);
    app.shutdown().await;
}

fn futures_stream(
    items: Vec<Result<Vec<u8>, std::io::Error>>,
) -> impl futures_core::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send + Sync + 'static {
    tokio_stream::iter(items)
}

#[tokio::test]
async fn a_413_is_sent_before_the_body_when_content_length_is_over() {
    let sources = GITHUB_SOURCE.replace("secrets", "max_body_bytes = 1000\nsecrets");
    let app = TestApp::spawn(&sources).await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    // Announce 10 MB and send none of it: the answer must come anyway.
    stream
        .write_all(b"POST /hooks/github HTTP/1.1\r\nhost: x\r\ncontent-length: 10000000\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("answered without waiting for the body")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_form_encoded_github_body_is_stored_byte_for_byte() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let body = b"payload=%7B%22zen%22%3A%22Design+for+failure.%22%7D\r\n";
    let r = app
        .client
        .post(app.url("/hooks/github"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-github-event", "ping")
        .header("x-github-delivery", "form-1")
        .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let (stored, content_type, event_type, headers): (Vec<u8>, String, String, String) = app
        .db()
        .query_row(
            "SELECT body, content_type, event_type, headers FROM events WHERE delivery_id = 'form-1'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(stored, body);
    assert_eq!(content_type, "application/x-www-form-urlencoded");
    assert_eq!(event_type, "ping");
    let headers: serde_json::Value = serde_json::from_str(&headers).unwrap();
    assert_eq!(headers["x-github-delivery"], "form-1");
    assert!(
        headers.get("x-hub-signature-256").is_none(),
        "signatures are not kept"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn every_kind_accepts_a_correctly_signed_delivery() {
    let sw_key = b"0123456789abcdef0123456789abcdef";
    let sw_secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(sw_key)
    );
    let sources = format!(
        r#"
[[sources]]
name = "stripe"
kind = "stripe"
secrets = ["whsec_stripe"]
order_key = ["/data/object/customer"]
[[sources]]
name = "shopify"
kind = "shopify"
secrets = ["shpss"]
[[sources]]
name = "standard"
kind = "standard"
secrets = ["{sw_secret}"]
[[sources]]
name = "gitlab"
kind = "gitlab"
secrets = ["glpat"]
[[sources]]
name = "slack"
kind = "slack"
secrets = ["slack-signing"]
[[sources]]
name = "custom"
kind = "hmac"
secrets = ["custom-key"]
[sources.hmac]
header = "X-Signature"
prefix = "sha256="
timestamp_header = "X-Timestamp"
id_pointer = "/id"
event_type_header = "X-Event"
"#
    );
    let app = TestApp::spawn(&sources).await;
    let now = now_secs().to_string();
    let c = &app.client;

    let body = br#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"customer":"cus_9"}}}"#;
    let mut signed = format!("{now}.").into_bytes();
    signed.extend_from_slice(body);
    let sig = hex::encode(hmac_sha256(b"whsec_stripe", &signed));
    let r = c
        .post(app.url("/hooks/stripe"))
        .header("stripe-signature", format!("t={now},v1={sig}"))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "stripe");

    let body = br#"{"id":1}"#;
    let sig = base64::engine::general_purpose::STANDARD.encode(hmac_sha256(b"shpss", body));
    let r = c
        .post(app.url("/hooks/shopify"))
        .header("x-shopify-hmac-sha256", sig)
        .header("x-shopify-webhook-id", "shop-1")
        .header("x-shopify-topic", "orders/create")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "shopify");

    let body = br#"{"type":"user.created"}"#;
    for (prefix, id) in [("webhook", "msg_1"), ("svix", "msg_2")] {
        let mut signed = format!("{id}.{now}.").into_bytes();
        signed.extend_from_slice(body);
        let sig = base64::engine::general_purpose::STANDARD.encode(hmac_sha256(sw_key, &signed));
        let r = c
            .post(app.url("/hooks/standard"))
            .header(format!("{prefix}-id"), id)
            .header(format!("{prefix}-timestamp"), &now)
            .header(format!("{prefix}-signature"), format!("v1,{sig}"))
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202, "standard with {prefix}-* headers");
    }

    let r = c
        .post(app.url("/hooks/gitlab"))
        .header("x-gitlab-token", "glpat")
        .header("idempotency-key", "gl-1")
        .header("x-gitlab-event", "Push Hook")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "gitlab");

    let slack = |body: &'static str| {
        let sig = hex::encode(hmac_sha256(
            b"slack-signing",
            format!("v0:{now}:{body}").as_bytes(),
        ));
        c.post(app.url("/hooks/slack"))
            .header("x-slack-request-timestamp", &now)
            .header("x-slack-signature", format!("v0={sig}"))
            .body(body)
    };
    let r = slack(r#"{"type":"url_verification","challenge":"abc123"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "slack challenge");
    assert_eq!(json(r).await["challenge"], "abc123");
    let r = slack(r#"{"type":"event_callback","event_id":"Ev1","event":{"type":"message"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "slack event");

    let body = br#"{"id":"c-1"}"#;
    let mut signed = format!("{now}.").into_bytes();
    signed.extend_from_slice(body);
    let sig = hex::encode(hmac_sha256(b"custom-key", &signed));
    let r = c
        .post(app.url("/hooks/custom"))
        .header("x-signature", format!("sha256={sig}"))
        .header("x-timestamp", &now)
        .header("x-event", "thing.happened")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "custom hmac");

    let rows: Vec<(String, String, Option<String>, Option<String>)> = {
        let db = app.db();
        let mut stmt = db
            .prepare("SELECT source, delivery_id, event_type, order_key FROM events ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let s = |v: &str| Some(v.to_owned());
    assert_eq!(
        rows,
        vec![
            (
                "stripe".into(),
                "evt_1".into(),
                s("invoice.paid"),
                s("cus_9")
            ),
            ("shopify".into(), "shop-1".into(), s("orders/create"), None),
            ("standard".into(), "msg_1".into(), s("user.created"), None),
            ("standard".into(), "msg_2".into(), s("user.created"), None),
            ("gitlab".into(), "gl-1".into(), s("Push Hook"), None),
            ("slack".into(), "Ev1".into(), s("message"), None),
            ("custom".into(), "c-1".into(), s("thing.happened"), None),
        ]
    );
    // The GitLab token is a secret and must not be kept with the event.
    let headers: String = app
        .db()
        .query_row(
            "SELECT headers FROM events WHERE source = 'gitlab'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!headers.contains("glpat"), "{headers}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_stale_stripe_timestamp_is_refused_with_its_reason() {
    let app = TestApp::spawn(
        "[[sources]]\nname = \"stripe\"\nkind = \"stripe\"\nsecrets = [\"whsec_x\"]\n",
    )
    .await;
    let t = now_secs() - 301;
    let body = br#"{"id":"evt_old","type":"x"}"#;
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(body);
    let sig = hex::encode(hmac_sha256(b"whsec_x", &signed));
    let r = app
        .client
        .post(app.url("/hooks/stripe"))
        .header("stripe-signature", format!("t={t},v1={sig}"))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(json(r).await["error"], "timestamp_out_of_tolerance");
    assert_eq!(app.count("SELECT count(*) FROM events"), 0);
    app.shutdown().await;
}

#[tokio::test]
async fn health_and_readiness_answer_on_both_listeners() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    for addr in [app.addr, app.admin_addr] {
        for (path, status) in [("/healthz", "ok"), ("/readyz", "ready")] {
            let r = app
                .client
                .get(format!("http://{addr}{path}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{addr}{path}");
            assert_eq!(json(r).await["status"], status);
        }
    }
    // The admin listener does not receive webhooks.
    let r = app
        .client
        .post(format!("http://{}/hooks/github", app.admin_addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    app.shutdown().await;
}

#[tokio::test]
async fn a_client_that_trickles_its_body_is_cut_off_with_408() {
    let app = TestApp::spawn_with(GITHUB_SOURCE, "body_timeout = \"300ms\"").await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    stream
        .write_all(b"POST /hooks/github HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("the server answers a stalled body")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_disconnected() {
    let app = TestApp::spawn_with(GITHUB_SOURCE, "header_timeout = \"300ms\"").await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    stream
        .write_all(b"POST /hooks/github HTTP/1.1\r\nhost:")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let result = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("the server closes a stalled connection");
    // Closed (0 bytes), reset, or an error status: anything but waiting.
    if let Ok(n) = result {
        let head = String::from_utf8_lossy(&buf[..n]);
        assert!(n == 0 || head.starts_with("HTTP/1.1 408"), "{head}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn events_survive_a_restart_on_the_same_file() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    assert_eq!(app.post_github("persist-1", b"{}").await.status(), 202);
    let dir = app.shutdown().await;
    let app = TestApp::spawn_in(dir, GITHUB_SOURCE, "").await;
    assert_eq!(app.post_github("persist-1", b"{}").await.status(), 200);
    assert_eq!(
        json(
            app.post_github("persist-2", &json!({"n": 2}).to_string().into_bytes())
                .await
        )
        .await["status"],
        "accepted"
    );
    assert_eq!(app.count("SELECT count(*) FROM events"), 2);
    app.shutdown().await;
}

#[tokio::test]
async fn the_database_and_its_wal_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    assert_eq!(app.post_github("mode-1", b"{}").await.status(), 202);
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", app.db_path.display());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{path}: {mode:o}");
    }
    app.shutdown().await;
}
