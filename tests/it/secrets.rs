//! The promise that secrets never reach a log line: the real binary runs
//! with debug logging, is sent valid and forged traffic for every kind of
//! secret it holds, delivers to a downstream, answers the admin API, and
//! then its whole output is searched for every configured secret.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;

use crate::helpers::{STATE, free_port, github_signature, hmac_sha256, hookbox, now_secs};

const GITHUB: &str = "gh-secret-0f9a7c1e";
const STRIPE: &str = "whsec_stripe-secret-3b8d";
const GITLAB: &str = "glpat-secret-token-77aa";
const SLACK: &str = "slack-signing-secret-5c2e";
const HMAC: &str = "generic-hmac-secret-9d41";
const ADMIN: &str = "admin-token-secret-c3f0b2a9e1";
const SW_KEY: &[u8] = b"standard-webhooks-key-bytes-1234";
const DOWNSTREAM_KEY: &[u8] = b"downstream-signing-key-bytes-987";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_configured_secret_appears_in_the_output_even_at_debug_level() {
    let dir = tempfile::tempdir().unwrap();
    let downstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let downstream_addr = downstream.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async { axum::http::StatusCode::NO_CONTENT }),
    );
    tokio::spawn(async move { axum::serve(downstream, app).await.unwrap() });

    let (public, admin) = (free_port(), free_port());
    let sw_secret = format!("whsec_{}", b64(SW_KEY));
    let downstream_secret = format!("whsec_{}", b64(DOWNSTREAM_KEY));
    let config = format!(
        r#"
[server]
listen = "127.0.0.1:{public}"
admin_listen = "127.0.0.1:{admin}"
database = {db:?}

[admin]
token = "{ADMIN}"

[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB}"]
[sources.deliver]
url = "http://{downstream_addr}/hook"
signing_secret = "{downstream_secret}"

[[sources]]
name = "stripe"
kind = "stripe"
secrets = ["{STRIPE}"]

[[sources]]
name = "standard"
kind = "standard"
secrets = ["{sw_secret}"]

[[sources]]
name = "gitlab"
kind = "gitlab"
secrets = ["{GITLAB}"]

[[sources]]
name = "slack"
kind = "slack"
secrets = ["{SLACK}"]

[[sources]]
name = "custom"
kind = "hmac"
secrets = ["{HMAC}"]
[sources.hmac]
header = "X-Signature"
"#,
        db = dir.path().join("hookbox.db").display().to_string(),
    );
    let config_path = dir.path().join("hookbox.toml");
    std::fs::write(&config_path, config).unwrap();
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = hookbox()
        .args(["serve", "--config"])
        .arg(&config_path)
        .env("RUST_LOG", "debug")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();

    let public: SocketAddr = format!("127.0.0.1:{public}").parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{admin}").parse().unwrap();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client
        .get(format!("http://{public}/readyz"))
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "hookbox did not become ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let hook = |name: &str| format!("http://{public}/hooks/{name}");
    let now = now_secs().to_string();
    let body = br#"{"id":"evt_1","type":"x","event_id":"Ev1","event":{"type":"message"}}"#.to_vec();
    let mut statuses = Vec::new();
    for secret in [GITHUB, "wrong"] {
        let r = client
            .post(hook("github"))
            .header("x-github-delivery", format!("gh-{secret}"))
            .header("x-hub-signature-256", github_signature(secret, &body))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    for key in [STRIPE.as_bytes(), b"wrong"] {
        let sig = hex::encode(hmac_sha256(key, &[now.as_bytes(), b".", &body].concat()));
        let r = client
            .post(hook("stripe"))
            .header("stripe-signature", format!("t={now},v1={sig}"))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    for key in [SW_KEY, b"wrong"] {
        let sig = b64(&hmac_sha256(
            key,
            &[b"msg_1.", now.as_bytes(), b".", &body].concat(),
        ));
        let r = client
            .post(hook("standard"))
            .header("webhook-id", "msg_1")
            .header("webhook-timestamp", &now)
            .header("webhook-signature", format!("v1,{sig}"))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    for token in [GITLAB, "wrong"] {
        let r = client
            .post(hook("gitlab"))
            .header("x-gitlab-token", token)
            .header("idempotency-key", "gl-1")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    for key in [SLACK.as_bytes(), b"wrong"] {
        let sig = hex::encode(hmac_sha256(
            key,
            &[b"v0:", now.as_bytes(), b":", &body].concat(),
        ));
        let r = client
            .post(hook("slack"))
            .header("x-slack-request-timestamp", &now)
            .header("x-slack-signature", format!("v0={sig}"))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    for key in [HMAC.as_bytes(), b"wrong"] {
        let r = client
            .post(hook("custom"))
            .header("x-signature", hex::encode(hmac_sha256(key, &body)))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    for token in [ADMIN, "wrong"] {
        let r = client
            .get(format!("http://{admin}/api/events"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(
        statuses,
        [
            202, 401, 202, 401, 202, 401, 202, 401, 202, 401, 202, 401, 200, 401
        ]
    );

    // Let the github event be delivered (signed with the downstream key).
    let db = rusqlite::Connection::open(dir.path().join("hookbox.db")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state: String = db
            .query_row(
                &format!("SELECT {STATE} FROM events WHERE source = 'github'"),
                [],
                |r| r.get(0),
            )
            .unwrap();
        if state == "delivered" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the github event was not delivered: {state}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
    let output = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        output.contains("DEBUG"),
        "debug logging was not on:\n{output}"
    );
    let forbidden = [
        GITHUB.to_owned(),
        STRIPE.to_owned(),
        GITLAB.to_owned(),
        SLACK.to_owned(),
        HMAC.to_owned(),
        ADMIN.to_owned(),
        sw_secret.clone(),
        b64(SW_KEY),
        downstream_secret.clone(),
        b64(DOWNSTREAM_KEY),
    ];
    for secret in &forbidden {
        assert!(
            !output.contains(secret.as_str()),
            "a secret reached the log:\n{output}"
        );
    }
    // Bodies are not logged either.
    assert!(
        !output.contains("evt_1"),
        "a body reached the log:\n{output}"
    );
}

/// The command destination runs the user's program with hookbox's
/// environment, less what only hookbox should hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_destination_does_not_inherit_the_secrets_environment() {
    use crate::helpers::ChildServer;

    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("creds");
    std::fs::create_dir(&creds).unwrap();
    std::fs::write(creds.join("stripe"), STRIPE).unwrap();
    let dump = dir.path().join("env.txt");
    let sources = format!(
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["env:HOOKBOX_TEST_GITHUB_SECRET"]
[sources.deliver]
command = ["sh", "-c", "env > {dump}.tmp && mv {dump}.tmp {dump}"]

[[sources]]
name = "stripe"
kind = "stripe"
secrets = ["cred:stripe"]

[[sources]]
name = "off"
kind = "gitlab"
enabled = false
secrets = ["env:HOOKBOX_TEST_OFF_SECRET"]
"#,
        dump = dump.display()
    );
    let server = ChildServer::spawn_ready_with(
        dir.path(),
        &dir.path().join("hookbox.db"),
        &sources,
        "",
        0,
        &[
            ("HOOKBOX_TEST_GITHUB_SECRET", GITHUB),
            ("HOOKBOX_TEST_OFF_SECRET", GITLAB),
            // The embedded default's variable, though a config file is used.
            ("STRIPE_WEBHOOK_SECRET", STRIPE),
            ("CREDENTIALS_DIRECTORY", creds.to_str().unwrap()),
            ("HOOKBOX_TEST_PLAIN", "passed-on"),
        ],
        |_| {},
    )
    .await;
    let client = reqwest::Client::new();
    let body = b"{}";
    let r = client
        .post(server.url("/hooks/github"))
        .header("x-github-delivery", "env-check")
        .header("x-github-event", "ping")
        .header("x-hub-signature-256", github_signature(GITHUB, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    let env = loop {
        if let Ok(env) = std::fs::read_to_string(&dump) {
            break env;
        }
        assert!(Instant::now() < deadline, "the command never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(env.contains("HOOKBOX_DELIVERY_ID=env-check"), "{env}");
    assert!(env.contains("HOOKBOX_TEST_PLAIN=passed-on"), "{env}");
    for secret in [GITHUB, GITLAB, STRIPE] {
        assert!(!env.contains(secret), "a secret reached the command");
    }
    for name in [
        "HOOKBOX_TEST_GITHUB_SECRET",
        "HOOKBOX_TEST_OFF_SECRET",
        "STRIPE_WEBHOOK_SECRET",
        "CREDENTIALS_DIRECTORY",
    ] {
        assert!(!env.contains(name), "{name} reached the command: {env}");
    }
    drop(server);
}
