//! Alerts end to end: the real server on loopback, a real database, and
//! local HTTP receivers (`helpers::Downstream`) standing in for Slack,
//! Discord, ntfy and a JSON webhook. The JSON one is verified with the
//! official Standard Webhooks Python library (`standardwebhooks`, which
//! `.ci/run` installs; without it the two tests that need it are skipped,
//! or fail under `CI`). Deliveries go dead at once here: the destination
//! answers 400, a permanent status.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::helpers::*;

/// A GitHub source whose destination refuses everything for good.
fn source(dead_end: &Downstream) -> String {
    format!(
        r#"{GITHUB_SOURCE}
[sources.deliver]
url = "{}"
signing_secret = "{SIGNING_SECRET}"
"#,
        dead_end.url()
    )
}

fn alert(url: &str, format: &str, extra: &str) -> String {
    let secret = if format == "json" {
        format!("signing_secret = \"{SIGNING_SECRET}\"\n")
    } else {
        String::new()
    };
    format!("\n[[alerts]]\nurl = \"{url}\"\nformat = \"{format}\"\n{secret}{extra}\n")
}

fn receiver_ok() -> impl Fn(&str, usize) -> Reply + Send + Sync + 'static {
    |_, _| Reply::status(200)
}

async fn post_event(app: &TestApp, delivery: &str) -> reqwest::Response {
    let body = format!(r#"{{"delivery":"{delivery}"}}"#);
    app.post_github(delivery, body.as_bytes()).await
}

fn json_body(hit: &Hit) -> serde_json::Value {
    serde_json::from_slice(&hit.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", hit.body))
}

/// Whether Python's `standardwebhooks` imports; see [`outside_tool`].
fn standard_webhooks_library() -> bool {
    let imports = std::process::Command::new("python3")
        .args(["-c", "import standardwebhooks"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    outside_tool(
        "the standardwebhooks Python library",
        imports,
        "python3 -m pip install standardwebhooks",
    )
}

/// Runs the official library's verifier on `hit`; returns the payload it
/// parsed, or its complaint.
async fn standard_webhooks_verify(hit: &Hit, body: &[u8]) -> Result<serde_json::Value, String> {
    let dir = tempfile::tempdir().unwrap();
    let body_path = dir.path().join("body");
    std::fs::write(&body_path, body).unwrap();
    let headers: serde_json::Map<String, serde_json::Value> =
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
            .iter()
            .map(|h| ((*h).to_owned(), hit.header(h).into()))
            .collect();
    let script = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
secret, body_path, headers = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
body = open(body_path, "rb").read()
try:
    payload = Webhook(secret).verify(body, headers)
except Exception as e:
    print(type(e).__name__, e, file=sys.stderr)
    sys.exit(1)
print(json.dumps(payload))
"#;
    let out = tokio::process::Command::new("python3")
        .args(["-c", script, SIGNING_SECRET])
        .arg(&body_path)
        .arg(serde_json::Value::Object(headers).to_string())
        .output()
        .await
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    } else {
        Err(stderr)
    }
}

#[tokio::test]
async fn each_format_gets_a_dead_delivery_in_the_shape_its_receiver_accepts() {
    if !standard_webhooks_library() {
        return;
    }
    let dead_end = Downstream::start(|_, _| Reply::status(400)).await;
    let slack = Downstream::start(receiver_ok()).await;
    let discord = Downstream::start(receiver_ok()).await;
    let ntfy = Downstream::start(receiver_ok()).await;
    let json = Downstream::start(receiver_ok()).await;
    let alerts = [
        alert(&slack.url(), "slack", ""),
        alert(&discord.url(), "discord", ""),
        alert(&ntfy.url(), "ntfy", ""),
        alert(&json.url(), "json", ""),
    ]
    .concat();
    let app = TestApp::spawn(&format!("{}{alerts}", source(&dead_end))).await;
    assert_eq!(post_event(&app, "d-1").await.status(), 202);

    let hit = &slack.wait_for_hits(1).await[0];
    let body = json_body(hit);
    let text = body["text"].as_str().expect("Slack takes {\"text\": ...}");
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    assert!(
        text.starts_with("*hookbox: A delivery went dead: github/default*\n"),
        "{text}"
    );
    assert!(text.contains("HTTP 400") || text.contains("400"), "{text}");
    assert!(
        text.contains("hookbox replay --dead --source github"),
        "{text}"
    );

    let hit = &discord.wait_for_hits(1).await[0];
    let body = json_body(hit);
    let content = body["content"]
        .as_str()
        .expect("Discord takes {\"content\": ...}");
    assert!(
        content.starts_with("**hookbox: A delivery went dead: github/default**\n"),
        "{content}"
    );
    assert_eq!(body["allowed_mentions"], serde_json::json!({ "parse": [] }));
    assert!(content.chars().count() <= 2000);

    let hit = &ntfy.wait_for_hits(1).await[0];
    assert_eq!(
        hit.header("title"),
        "hookbox: A delivery went dead: github/default"
    );
    assert_eq!(hit.header("priority"), "4");
    assert_eq!(hit.header("tags"), "warning,hookbox,dead");
    assert!(hit.header("content-type").starts_with("text/plain"));
    let text = std::str::from_utf8(&hit.body).unwrap();
    assert!(
        text.starts_with("Event "),
        "ntfy's body is the plain text: {text}"
    );

    let hit = &json.wait_for_hits(1).await[0];
    let payload = standard_webhooks_verify(hit, &hit.body)
        .await
        .expect("the official library verifies hookbox's JSON alert");
    assert_eq!(payload["type"], "hookbox.alert.dead");
    assert_eq!(payload["data"]["condition"], "dead");
    assert_eq!(payload["data"]["count"], 1);
    assert_eq!(payload["data"]["details"]["source"], "github");
    assert_eq!(payload["data"]["details"]["destination"], "default");
    assert!(payload["data"]["details"]["event_id"].is_i64());
    // The verifier is real: one changed byte fails it.
    let mut tampered = hit.body.to_vec();
    let at = tampered.len() / 2;
    tampered[at] ^= 1;
    assert!(standard_webhooks_verify(hit, &tampered).await.is_err());

    // One message each: nothing else went wrong.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for r in [&slack, &discord, &ntfy, &json] {
        assert_eq!(r.hits().len(), 1);
    }
    app.shutdown().await;
}

/// What a handler wrote on stderr, quoting a payload: a Slack mention and
/// disguised link, a Discord masked link and mentions.
const HOSTILE: &str = "<!channel> & <https://evil.example/|click here> [click here](https://evil.example/) @everyone <@123>";

#[tokio::test]
async fn quoted_text_is_escaped_for_each_format_so_it_can_neither_ping_nor_disguise_a_link() {
    let slack = Downstream::start(receiver_ok()).await;
    let discord = Downstream::start(receiver_ok()).await;
    let ntfy = Downstream::start(receiver_ok()).await;
    let alerts = [
        alert(&slack.url(), "slack", ""),
        alert(&discord.url(), "discord", ""),
        alert(&ntfy.url(), "ntfy", ""),
    ]
    .concat();
    // One attempt, which fails with HOSTILE on stderr: the event is dead.
    let command = format!(
        "command = [\"/bin/sh\", \"-c\", \"printf '%s\\\\n' \\\"$0\\\" >&2; exit 1\", {HOSTILE:?}]"
    );
    let sources = deliver_source("github", &command, "5s", 1);
    let app = TestApp::spawn(&format!("{sources}{alerts}")).await;
    let r = post_event(&app, "d-hostile").await;
    assert_eq!(r.status(), 202);
    let id = json(r).await["id"].as_i64().unwrap();
    let replay = "hookbox replay --dead --source github --destination default";

    let hit = &slack.wait_for_hits(1).await[0];
    assert_eq!(
        json_body(hit),
        serde_json::json!({
            "text": format!(
                "*hookbox: A delivery went dead: github/default*\n\
                 Event {id} of source github will not be retried at destination default.\n\
                 Last error: exit status 1: &lt;!channel&gt; &amp; &lt;https://evil.example/|click here&gt; \
                 [click here](https://evil.example/) @everyone &lt;@123&gt;\n\
                 Fix the destination, then: {replay}"
            )
        })
    );

    let hit = &discord.wait_for_hits(1).await[0];
    assert_eq!(
        json_body(hit),
        serde_json::json!({
            "content": format!(
                "**hookbox: A delivery went dead: github/default**\n\
                 Event {id} of source github will not be retried at destination default.\n\
                 Last error: exit status 1: \\<!channel\\> & \\<https://evil.example/\\|click here\\> \
                 \\[click here\\]\\(https://evil.example/\\) \\@everyone \\<\\@123\\>\n\
                 Fix the destination, then: hookbox replay \\-\\-dead \\-\\-source github \\-\\-destination default"
            ),
            "allowed_mentions": { "parse": [] },
        })
    );

    // ntfy shows plain text as written: nothing to escape, and nothing
    // asks it to read the text as markdown, a template or an action.
    let hit = &ntfy.wait_for_hits(1).await[0];
    assert_eq!(hit.header("content-type"), "text/plain; charset=utf-8");
    let mut names: Vec<&str> = hit.headers.keys().map(|k| k.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "accept",
            "content-length",
            "content-type",
            "host",
            "priority",
            "tags",
            "title",
            "user-agent"
        ],
        "only these headers: none of ntfy's markdown, template, click, actions or attach"
    );
    assert_eq!(
        std::str::from_utf8(&hit.body).unwrap(),
        format!(
            "Event {id} of source github will not be retried at destination default.\n\
             Last error: exit status 1: {HOSTILE}\n\
             Fix the destination, then: {replay}"
        )
    );
    app.shutdown().await;
}

#[tokio::test]
async fn repeats_within_min_interval_fold_into_one_message_with_their_count() {
    let dead_end = Downstream::start(|_, _| Reply::status(400)).await;
    let json = Downstream::start(receiver_ok()).await;
    let alerts = alert(
        &json.url(),
        "json",
        "on = [\"dead\"]\nmin_interval = \"2s\"",
    );
    let app = TestApp::spawn(&format!("{}{alerts}", source(&dead_end))).await;
    let started = Instant::now();
    for i in 0..5 {
        assert_eq!(post_event(&app, &format!("fold-{i}")).await.status(), 202);
    }
    eventually("five dead deliveries", || {
        (app.count("SELECT count(*) FROM deliveries WHERE state = 'dead'") == 5).then_some(())
    })
    .await;
    let first = json.wait_for_hits(1).await;
    assert_eq!(json_body(&first[0])["data"]["count"], 1);
    // The other four wait for the interval's end, then go as one.
    if started.elapsed() < Duration::from_millis(1500) {
        assert_eq!(
            json.hits().len(),
            1,
            "a repeat went out within min_interval"
        );
    }
    let both = json.wait_for_hits(2).await;
    let folded = json_body(&both[1]);
    assert_eq!(folded["data"]["count"], 4, "{folded}");
    let text = folded["data"]["text"].as_str().unwrap();
    assert!(text.starts_with("4 times in the last 2s"), "{text}");
    assert!(
        both[1].at.duration_since(both[0].at) >= Duration::from_millis(1900),
        "the folded message came before min_interval was over"
    );
    // Nothing more to say: no third message.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(json.hits().len(), 2);
    // And a new one after a quiet interval goes at once.
    assert_eq!(post_event(&app, "fold-late").await.status(), 202);
    let third = json.wait_for_hits(3).await;
    assert_eq!(json_body(&third[2])["data"]["count"], 1);
    app.shutdown().await;
}

#[tokio::test]
async fn receivers_that_are_down_or_hang_slow_neither_ingest_nor_dispatch() {
    let dead_end = Downstream::start(|_, _| Reply::status(400)).await;
    // Connection refused: a port bound, then let go.
    let refused = free_addr();
    // Answers after the alert client's own timeout.
    let hanging = Downstream::start(|_, _| Reply::status(200).after(Duration::from_secs(60))).await;
    let extra = "on = [\"dead\", \"rejections\"]\nrejections_threshold = 1\nmin_interval = \"1s\"";
    let alerts = [
        alert(&format!("http://{refused}/hook"), "slack", extra),
        alert(&hanging.url(), "ntfy", extra),
    ]
    .concat();
    let app = TestApp::spawn(&format!("{}{alerts}", source(&dead_end))).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    // A refused signature: the rejections alert goes to both receivers.
    let forged = client
        .post(app.url("/hooks/github"))
        .header("x-github-event", "push")
        .header("x-github-delivery", "forged")
        .header("x-hub-signature-256", "sha256=00")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    hanging.wait_for_hits(1).await;

    // While both receivers fail, events keep being taken and dispatched
    // (each goes dead, so each makes an alert).
    let mut slowest = Duration::ZERO;
    for i in 0..100 {
        let body = format!(r#"{{"n":{i}}}"#);
        let started = Instant::now();
        let sent = github_request(
            &client,
            &app.url("/hooks/github"),
            &format!("n-{i}"),
            body.as_bytes(),
        )
        .send()
        .await
        .expect("every request is answered within 5 s");
        slowest = slowest.max(started.elapsed());
        assert_eq!(sent.status(), 202);
    }
    assert!(
        slowest < Duration::from_secs(5),
        "an answer took {slowest:?} while the alert receivers failed"
    );
    eventually("100 deliveries dead", || {
        (app.count("SELECT count(*) FROM deliveries WHERE state = 'dead'") == 100).then_some(())
    })
    .await;
    assert!(hanging.hits().len() >= 2, "the dead alert went out too");

    // The refused receiver's message is given up after its retries (2 s +
    // 10 s of pauses), logged and counted.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = app.admin_get("/metrics").await.text().await.unwrap();
        let failed = metrics.lines().any(|l| {
            l.starts_with(
                r#"hookbox_alert_messages_total{alert="0",format="slack",outcome="failed"}"#,
            )
        });
        if failed {
            break;
        }
        assert!(Instant::now() < deadline, "no failure counted:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    app.shutdown().await;
}

#[tokio::test]
async fn pausing_a_destination_and_a_backlog_each_alert_once() {
    // Retries far apart: the delivery stays pending.
    let down = Downstream::start(|_, _| Reply::status(500)).await;
    let slack = Downstream::start(receiver_ok()).await;
    let sources = format!(
        r#"{GITHUB_SOURCE}
[sources.deliver]
url = "{}"
signing_secret = "{SIGNING_SECRET}"
backoff_base = "1h"
backoff_cap = "1h"
"#,
        down.url()
    );
    let alerts = alert(
        &slack.url(),
        "slack",
        "on = [\"paused\", \"backlog\"]\nbacklog_age = \"1s\"",
    );
    let app = TestApp::spawn(&format!("{sources}{alerts}")).await;
    assert_eq!(post_event(&app, "slow-1").await.status(), 202);
    let hits = slack.wait_for_hits(1).await;
    let text = json_body(&hits[0])["text"].as_str().unwrap().to_owned();
    assert!(text.contains("Deliveries are backing up"), "{text}");
    assert!(text.contains("github → default"), "{text}");

    let paused = app
        .admin_post(
            "/api/destinations/github/default/pause",
            serde_json::json!({}),
        )
        .await;
    assert!(paused.status().is_success(), "{}", paused.status());
    let hits = slack.wait_for_hits(2).await;
    let text = json_body(&hits[1])["text"].as_str().unwrap().to_owned();
    assert!(
        text.starts_with("*hookbox: Destination paused: github/default*"),
        "{text}"
    );
    assert!(text.contains("by hand"), "{text}");
    // The backlog goes on, but it alerted when it began: no repeat.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(slack.hits().len(), 2);
    app.shutdown().await;
}

/// `hookbox alerts test` as the real binary, with `config` written to a file.
async fn alerts_test(config: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookbox.toml");
    let database = dir.path().join("hookbox.db");
    std::fs::write(
        &path,
        format!(
            "[server]\ndatabase = {:?}\n{config}",
            database.display().to_string()
        ),
    )
    .unwrap();
    let out = tokio::process::Command::from(hookbox())
        .args(["alerts", "test", "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn hookbox_alerts_test_reports_each_alert_and_exits_1_when_one_fails() {
    if !standard_webhooks_library() {
        return;
    }
    let ntfy = Downstream::start(receiver_ok()).await;
    let json = Downstream::start(receiver_ok()).await;
    let refused = free_addr();
    let refused_url = format!("http://{refused}/secret-path-token");
    let config = [
        alert(&ntfy.url(), "ntfy", ""),
        alert(&refused_url, "slack", ""),
        alert(&json.url(), "json", ""),
    ]
    .concat();
    let started = Instant::now();
    let (ok, stdout, stderr) = alerts_test(&config).await;
    assert!(!ok, "one receiver is down: exit 1\n{stdout}{stderr}");
    assert!(started.elapsed() < PATIENCE);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert_eq!(lines[0], "alerts[0] (ntfy): sent");
    assert!(
        lines[1].starts_with("alerts[1] (slack): FAILED: cannot connect"),
        "{stdout}"
    );
    assert_eq!(lines[2], "alerts[2] (json): sent");
    assert!(
        !stdout.contains("secret-path-token") && !stderr.contains("secret-path-token"),
        "the URL leaked:\n{stdout}{stderr}"
    );
    let hit = &ntfy.hits()[0];
    assert_eq!(hit.header("title"), "hookbox: Test alert from hookbox");
    assert_eq!(hit.header("tags"), "white_check_mark,hookbox,test");
    let hit = &json.hits()[0];
    let payload = standard_webhooks_verify(hit, &hit.body).await.unwrap();
    assert_eq!(payload["type"], "hookbox.alert.test");

    // All up: exit 0.
    let config = [
        alert(&ntfy.url(), "ntfy", ""),
        alert(&json.url(), "json", ""),
    ]
    .concat();
    let (ok, stdout, stderr) = alerts_test(&config).await;
    assert!(ok, "{stdout}{stderr}");
    assert_eq!(ntfy.hits().len(), 2);
}

#[test]
fn check_hides_alert_urls_and_commands_without_secrets_skip_alerts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookbox.toml");
    let database = dir.path().join("hookbox.db");
    std::fs::write(
        &path,
        format!(
            "[server]\ndatabase = {:?}\n{}{}",
            database.display().to_string(),
            alert(
                "https://hooks.slack.com/services/T0/B0/literal-token",
                "slack",
                ""
            ),
            alert("env:HOOKBOX_TEST_ALERT_URL_UNSET", "json", ""),
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        hookbox()
            .args(args)
            .arg("--config")
            .arg(&path)
            .env_remove("HOOKBOX_TEST_ALERT_URL_UNSET")
            .output()
            .unwrap()
    };
    let out = run(&["check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "alerts[1].url (env:HOOKBOX_TEST_ALERT_URL_UNSET): environment variable HOOKBOX_TEST_ALERT_URL_UNSET is not set"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("literal-token"), "{stderr}");

    // `events` reads the database only: alerts' secrets are not needed,
    // so it gets past the config (to find no database here).
    let out = run(&["events"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no database") && !stderr.contains("alerts["),
        "{stderr}"
    );

    std::fs::write(
        &path,
        alert(
            "https://hooks.slack.com/services/T0/B0/literal-token",
            "slack",
            "",
        ),
    )
    .unwrap();
    let out = run(&["check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("[[alerts]]") && stdout.contains("url = \"[redacted]\""),
        "{stdout}"
    );
    assert!(!stdout.contains("literal-token"), "{stdout}");
}
