//! The committed provider vectors of the kinds `paddle`, `twilio`,
//! `square`, `zoom` and `twitch` (tests/vectors/<kind>.json, made by
//! tests/vectors/make-partA.mjs with the providers' SDKs or documented
//! algorithms) through the real router: every valid case is 202 and then
//! 200 on resend with the expected delivery id and type, every invalid one
//! is 401 with its reason, and each handshake is answered as its provider
//! expects and not stored. Twilio's and Square's files sign a public URL
//! (`https://hooks.example.com/...`) that is not the address the test
//! posts to, which is the reverse-proxy case `public_url` exists for.
//!
//! The vectors are signed at a fixed time, so the server's clock is moved
//! there: see `hookbox::support::clock::shift_this_thread`.

use serde_json::Value;

use crate::helpers::*;

const KINDS: [&str; 5] = ["paddle", "twilio", "square", "zoom", "twitch"];

/// A `[[sources]]` table for the file's kind, named after it.
fn source(kind: &str, file: &Value) -> String {
    let secrets = file["secrets"].to_string(); // a JSON array of strings is a TOML array
    let mut toml =
        format!("[[sources]]\nname = \"{kind}\"\nkind = \"{kind}\"\nsecrets = {secrets}\n");
    if let Some(url) = file.get("public_url").and_then(Value::as_str) {
        toml.push_str(&format!("public_url = {}\n", Value::from(url)));
    }
    toml
}

async fn post(app: &TestApp, kind: &str, case: &Value) -> reqwest::Response {
    let mut url = app.url(&format!("/hooks/{kind}"));
    if let Some(query) = case["query"].as_str() {
        url = format!("{url}?{query}");
    }
    let mut request = app.client.post(url);
    for (name, value) in case["headers"].as_object().unwrap() {
        request = request.header(name, value.as_str().unwrap());
    }
    let body = case["body"].as_str().unwrap().as_bytes().to_vec();
    request.body(body).send().await.unwrap()
}

fn stored(app: &TestApp, kind: &str, id: i64) -> (String, Option<String>) {
    app.db()
        .query_row(
            "SELECT delivery_id, event_type FROM events WHERE id = ?1 AND source = ?2",
            rusqlite::params![id, kind],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

/// Posts every case of `kind`'s file and checks each answer.
async fn check_kind(kind: &str) {
    let file = vector_file(kind);
    let signed_at_ms = file["now"].as_i64().unwrap() * 1000;
    let app = TestApp::spawn(&source(kind, &file)).await;
    let cases = file["cases"].as_array().unwrap();
    assert!(cases.len() >= 8, "{kind}: too few cases");
    for case in cases {
        // The server runs on this (current-thread) runtime: moving this
        // thread's clock moves the server's. Set before each case, so the
        // time the replay takes does not add up.
        set_thread_clock_to(signed_at_ms);
        let name = format!("{kind}/{}", case["name"].as_str().unwrap());
        let expect = &case["expect"];
        let before = app.count("SELECT count(*) FROM events");
        let r = post(&app, kind, case).await;
        let status = r.status().as_u16();
        assert_eq!(
            u64::from(status),
            expect["status"].as_u64().unwrap(),
            "{name}"
        );
        match status {
            401 => {
                assert_eq!(json(r).await["error"], expect["error"], "{name}");
                assert_eq!(app.count("SELECT count(*) FROM events"), before, "{name}");
            }
            202 => {
                let id = json(r).await["id"].as_i64().unwrap();
                let (delivery_id, event_type) = stored(&app, kind, id);
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
                if case["resend"].as_bool() == Some(true) {
                    let again = post(&app, kind, case).await;
                    assert_eq!(again.status(), 200, "{name}: resend");
                    let again = json(again).await;
                    assert_eq!(again["status"], "duplicate", "{name}");
                    assert_eq!(again["id"].as_i64(), Some(id), "{name}");
                }
            }
            200 => {
                let handshake = &expect["handshake"];
                let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
                let wanted = handshake["content_type"].as_str().unwrap();
                assert!(content_type.starts_with(wanted), "{name}: {content_type}");
                let text = r.text().await.unwrap();
                match handshake.get("json") {
                    Some(answer) => {
                        assert_eq!(
                            &serde_json::from_str::<Value>(&text).unwrap(),
                            answer,
                            "{name}"
                        )
                    }
                    None => assert_eq!(text, handshake["text"].as_str().unwrap(), "{name}"),
                }
                assert_eq!(
                    app.count("SELECT count(*) FROM events"),
                    before,
                    "{name}: stored"
                );
            }
            other => panic!("{name}: unexpected {other}"),
        }
    }
    hookbox::support::clock::shift_this_thread(0);
    app.shutdown().await;
}

#[tokio::test]
async fn paddle_vectors_from_the_paddle_node_sdk_pass_through_the_router() {
    check_kind("paddle").await;
}

#[tokio::test]
async fn twilio_vectors_from_twilio_node_pass_through_the_router_behind_a_proxy() {
    check_kind("twilio").await;
}

#[tokio::test]
async fn square_vectors_from_the_square_sdk_pass_through_the_router_behind_a_proxy() {
    check_kind("square").await;
}

#[tokio::test]
async fn zoom_vectors_and_its_url_validation_pass_through_the_router() {
    check_kind("zoom").await;
}

#[tokio::test]
async fn twitch_vectors_and_its_callback_verification_pass_through_the_router() {
    check_kind("twitch").await;
}

#[test]
fn every_vector_file_names_its_sdk_versions_and_covers_each_kind_of_failure() {
    for kind in KINDS {
        let file = vector_file(kind);
        assert!(file["sdk"].is_object(), "{kind}: no sdk versions");
        assert!(file["made_by"].is_string(), "{kind}: no made_by");
        let cases = file["cases"].as_array().unwrap();
        let errors: Vec<&str> = cases
            .iter()
            .filter_map(|c| c["expect"]["error"].as_str())
            .collect();
        for needed in [
            "invalid_signature",
            "malformed_signature",
            "missing_signature",
        ] {
            assert!(errors.contains(&needed), "{kind}: no {needed} case");
        }
        let timestamped = !file["not_applicable"]["expired"].is_string();
        if timestamped && kind != "zoom" {
            assert!(
                errors.contains(&"timestamp_out_of_tolerance"),
                "{kind}: no expired case"
            );
        }
        // SDK-backed files: each case carries the SDK's own verdict, and
        // any difference from hookbox's is explained.
        if !file["sdk"].as_object().unwrap().is_empty() {
            for case in cases {
                let sdk = case["sdk_valid"].as_bool().expect("sdk_valid");
                let ours = case["expect"]["status"].as_u64().unwrap() < 300;
                assert!(
                    sdk == ours || case["differs"].is_string(),
                    "{kind}: {}",
                    case["name"]
                );
            }
        }
    }
}

#[test]
fn hookbox_check_refuses_a_url_signing_kind_without_public_url() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookbox.toml");
    std::fs::write(
        &config,
        "[[sources]]\nname = \"sms\"\nkind = \"twilio\"\nsecrets = [\"token\"]\n\n\
         [[sources]]\nname = \"pay\"\nkind = \"square\"\nsecrets = [\"key\"]\n\
         public_url = \"https://hooks.example.com/hooks/pay?x=1\"\n\n\
         [[sources]]\nname = \"gh\"\nkind = \"github\"\nsecrets = [\"s\"]\n\
         public_url = \"https://hooks.example.com/hooks/gh\"\n",
    )
    .unwrap();
    let out = hookbox()
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sources[0] (\"sms\").public_url: kind \"twilio\" signs the URL it calls"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sources[1] (\"pay\").public_url:")
            && stderr.contains("leave out the query"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sources[2] (\"gh\").public_url: only for kinds that sign the URL"),
        "{stderr}"
    );
}
