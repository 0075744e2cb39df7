//! The SDK-made vectors of `linear`, `discord`, `sendgrid`, `mailgun` and
//! `meta` (tests/vectors/*.json, made by tests/vectors/make-partB.mjs)
//! replayed through the real server: every valid case is 202 and then 200
//! on a resend, with the delivery id and event type the vector names; every
//! invalid one is refused with its reason; each handshake is answered as the
//! provider expects and stored nowhere. Each case also records what the
//! provider's SDK (or documented algorithm) decided, and hookbox must agree
//! with it except where the vector says why it differs.
//!
//! The vectors are signed at a fixed time, so the server's clock is moved
//! there: see `hookbox::support::clock::shift_this_thread`.

use serde_json::Value;

use crate::helpers::*;

/// The `[[sources]]` table the vectors were made for.
fn source_toml(kind: &str, source: &Value) -> String {
    let mut toml = format!("[[sources]]\nname = \"{kind}\"\nkind = \"{kind}\"\n");
    let secrets: Vec<String> = source["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{:?}", s.as_str().unwrap()))
        .collect();
    toml += &format!("secrets = [{}]\n", secrets.join(", "));
    for key in ["tolerance", "verify_token"] {
        if let Some(value) = source[key].as_str() {
            toml += &format!("{key} = {value:?}\n");
        }
    }
    toml
}

async fn send(app: &TestApp, kind: &str, case: &Value) -> reqwest::Response {
    let url = app.url(&format!("/hooks/{kind}"));
    let request = if case["method"] == "GET" {
        app.client
            .get(format!("{url}?{}", case["query"].as_str().unwrap()))
    } else {
        let mut request = app.client.post(url);
        for (name, value) in case["headers"].as_object().unwrap() {
            request = request.header(name, value.as_str().unwrap());
        }
        request.body(case["body"].as_str().unwrap().to_owned())
    };
    request.send().await.unwrap()
}

/// Replays every case of `tests/vectors/{kind}.json`.
async fn replay(kind: &str) {
    let doc = vector_file(kind);
    let app = TestApp::spawn(&source_toml(kind, &doc["source"])).await;
    let signed_at = doc["now_ms"].as_i64().unwrap();
    let mut stored = 0;
    for case in doc["cases"].as_array().unwrap() {
        // The server runs on this (current-thread) runtime: moving this
        // thread's clock moves the server's. Set before each case, so the
        // time the replay takes does not add up.
        set_thread_clock_to(signed_at);
        let name = format!("{kind}/{}", case["name"].as_str().unwrap());
        let expect = &case["expect"];
        let status = expect["status"].as_u64().unwrap() as u16;
        if case["sdk"] != "documented" && case.get("sdk_differs").is_none() {
            assert_eq!(
                case["sdk"] == "accept",
                status < 300,
                "{name}: the vector's expectation disagrees with the SDK's verdict"
            );
        }
        let before = app.count("SELECT count(*) FROM events");
        let r = send(&app, kind, case).await;
        assert_eq!(r.status().as_u16(), status, "{name}");
        match status {
            202 => {
                let id = json(r).await["id"].as_i64().unwrap();
                let (delivery_id, event_type): (String, Option<String>) = app
                    .db()
                    .query_row(
                        "SELECT delivery_id, event_type FROM events WHERE id = ?1",
                        [id],
                        |row| Ok((row.get(0)?, row.get(1)?)),
                    )
                    .unwrap();
                assert_eq!(
                    delivery_id,
                    expect["delivery_id"].as_str().unwrap(),
                    "{name}"
                );
                assert_eq!(
                    event_type.as_deref(),
                    expect["event_type"].as_str(),
                    "{name}"
                );
                let again = send(&app, kind, case).await;
                assert_eq!(again.status(), 200, "{name}: resend");
                let again = json(again).await;
                assert_eq!(again["status"], "duplicate", "{name}");
                assert_eq!(again["id"], id, "{name}");
                stored += 1;
            }
            200 | 204 => {
                if let Some(body) = expect.get("body_json") {
                    assert_eq!(&json(r).await, body, "{name}");
                } else if let Some(text) = expect["body_text"].as_str() {
                    let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
                    assert!(
                        content_type.starts_with("text/plain"),
                        "{name}: {content_type}"
                    );
                    assert_eq!(r.text().await.unwrap(), text, "{name}");
                } else {
                    assert!(
                        r.bytes().await.unwrap().is_empty(),
                        "{name}: a 204 has no body"
                    );
                }
                assert_eq!(expect["stored"], false, "{name}");
            }
            _ => {
                assert_eq!(json(r).await["error"], expect["error"], "{name}");
            }
        }
        if status != 202 {
            let after = app.count("SELECT count(*) FROM events");
            assert_eq!(after, before, "{name}: nothing is stored");
        }
    }
    assert_eq!(app.count("SELECT count(*) FROM events"), stored);
    hookbox::support::clock::shift_this_thread(0);
    app.shutdown().await;
}

#[tokio::test]
async fn linear_vectors_made_with_the_linear_sdk_replay_as_it_decides() {
    replay("linear").await;
}

#[tokio::test]
async fn discord_vectors_made_with_discord_interactions_replay_as_it_decides() {
    replay("discord").await;
}

#[tokio::test]
async fn sendgrid_vectors_made_with_the_sendgrid_sdk_replay_as_it_decides() {
    replay("sendgrid").await;
}

#[tokio::test]
async fn mailgun_vectors_made_by_the_documented_algorithm_replay_as_it_decides() {
    replay("mailgun").await;
}

#[tokio::test]
async fn meta_vectors_and_the_subscription_handshake_replay_as_documented() {
    replay("meta").await;
}

#[tokio::test]
async fn a_get_to_a_source_that_is_not_meta_is_405_and_an_unknown_one_404() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let r = app
        .client
        .get(app.url("/hooks/github?hub.mode=subscribe"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    assert_eq!(json(r).await["error"], "method_not_allowed");
    let r = app.client.get(app.url("/hooks/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(json(r).await["error"], "unknown_source");
    app.shutdown().await;
}

#[tokio::test]
async fn the_echoed_meta_challenge_is_plain_text_no_browser_may_sniff_as_html() {
    let app = TestApp::spawn(
        "[[sources]]\nname = \"meta\"\nkind = \"meta\"\nsecrets = [\"app-secret\"]\n\
         verify_token = \"the-verify-token\"\n",
    )
    .await;
    // Whoever sends the GET chooses the challenge.
    let r = app
        .client
        .get(app.url(
            "/hooks/meta?hub.mode=subscribe&hub.verify_token=the-verify-token\
             &hub.challenge=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert_eq!(r.text().await.unwrap(), "<script>alert(1)</script>");
    app.shutdown().await;
}

#[tokio::test]
async fn check_names_a_public_key_that_does_not_decode_and_a_meta_source_without_verify_token() {
    let text = r#"
[[sources]]
name = "discord"
kind = "discord"
secrets = ["not-a-key"]

[[sources]]
name = "sendgrid"
kind = "sendgrid"
secrets = ["MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE"]

[[sources]]
name = "meta"
kind = "meta"
secrets = ["app-secret"]

[[sources]]
name = "github"
kind = "github"
secrets = ["s"]
verify_token = "t"
"#;
    let err = hookbox::config::from_toml(
        text,
        "test".into(),
        &hookbox::ingress::receive::registry::PROVIDERS,
    )
    .unwrap_err();
    let problems = err.problems.join("\n");
    for expected in [
        "sources[0] (\"discord\").secrets[0]: a Discord public key is 64 hex characters",
        "sources[1] (\"sendgrid\").secrets[0]: this SendGrid verification key is not a P-256 public key",
        "sources[2] (\"meta\").verify_token: kind \"meta\" needs",
        "sources[3] (\"github\").verify_token: only for kind \"meta\"",
    ] {
        assert!(
            problems.contains(expected),
            "{expected}\nnot in:\n{problems}"
        );
    }
    assert!(!problems.contains("not-a-key"), "a secret is never echoed");
}
