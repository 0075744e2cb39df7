//! Pull leases as an attacker and a slow consumer meet them: a lease
//! belongs to its lane and cannot be guessed, one that runs out is a
//! failed attempt, a consumer can extend what it still works on, a take
//! reads no more bodies than it hands out, and a waiting take leaves the
//! writer alone.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;

const TOKEN: &str = "pull-token-0123456789abcdef";
const OTHER_TOKEN: &str = "other-token-0123456789abcdef";

/// A github source with the `laptop` pull destination (2 s leases, two
/// attempts, quick retries) and the lines in `extra` after it.
fn source(extra: &str) -> String {
    format!(
        r#"{GITHUB_SOURCE}
[[sources.deliver]]
name = "laptop"
pull = {{ token = "{TOKEN}" }}
timeout = "2s"
max_attempts = 2
backoff_base = "100ms"
backoff_cap = "200ms"
{extra}
"#
    )
}

async fn call(app: &TestApp, path: &str, token: &str, body: Option<Value>) -> reqwest::Response {
    let request = app.client.post(app.url(path)).bearer_auth(token);
    match body {
        Some(body) => request.json(&body),
        None => request,
    }
    .send()
    .await
    .unwrap()
}

async fn ok_json(app: &TestApp, path: &str, token: &str, body: Option<Value>) -> Value {
    let r = call(app, path, token, body).await;
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.unwrap()
}

/// The pull destinations' leases, as `"<delivery>.<secret>"`, read from
/// the database as one who knew every secret would name them.
fn lease_in_db(app: &TestApp, destination: &str) -> Option<String> {
    app.db()
        .query_row(
            "SELECT delivery || '.' || lower(hex(secret)) FROM leases WHERE destination = ?1",
            [destination],
            |r| r.get(0),
        )
        .ok()
}

fn attempts_log(app: &TestApp, destination: &str) -> Vec<(i64, String, Option<String>)> {
    app.db()
        .prepare("SELECT attempt, outcome, error FROM attempts WHERE destination = ?1 ORDER BY id")
        .unwrap()
        .query_map([destination], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_of_another_lane_is_stale_and_changes_nothing() {
    let extra = format!(
        r#"
[[sources.deliver]]
name = "other"
pull = {{ token = "{OTHER_TOKEN}" }}
timeout = "30s"

[[sources.deliver]]
name = "slow"
command = ["/bin/sleep", "3"]
timeout = "30s"
"#
    );
    let app = TestApp::spawn(&source(&extra)).await;
    assert_eq!(app.post_github("one", b"{}").await.status(), 202);
    let taken = ok_json(&app, "/pull/github/other", OTHER_TOKEN, None).await;
    let other = taken["events"][0]["lease"].as_str().unwrap().to_owned();
    assert_eq!(taken["lease_ms"], 30_000);
    // The command is running under its lease.
    let deadline = Instant::now() + Duration::from_secs(10);
    let command = loop {
        if let Some(lease) = lease_in_db(&app, "slow") {
            break lease;
        }
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let leases = || json!({ "leases": [&other, &command] });
    let before = app.count("SELECT count(*) FROM leases");
    for (verb, key) in [
        ("ack", "acked"),
        ("nack", "nacked"),
        ("release", "released"),
        ("extend", "extended"),
    ] {
        let path = format!("/pull/github/laptop/{verb}");
        let answer = ok_json(&app, &path, TOKEN, Some(leases())).await;
        assert_eq!(answer[key], 0, "{verb}");
        assert_eq!(answer["stale"], json!([&other, &command]), "{verb}");
        // The admin route is held to the lane of its URL as well.
        let r = app
            .client
            .post(app.admin_url(&format!("/api/pull/github/laptop/{verb}")))
            .bearer_auth(&app.admin_token)
            .json(&leases())
            .send()
            .await
            .unwrap();
        assert_eq!(r.json::<Value>().await.unwrap()[key], 0, "admin {verb}");
    }
    assert_eq!(app.count("SELECT count(*) FROM leases"), before);
    assert_eq!(app.count("SELECT count(*) FROM attempts"), 0);
    assert_eq!(
        app.count("SELECT count(*) FROM deliveries WHERE state = 'pending'"),
        3
    );
    // A token counted up from another lease, as leases were once named,
    // is not a lease at all.
    let (delivery, _) = other.split_once('.').unwrap();
    let r = call(
        &app,
        "/pull/github/laptop/ack",
        TOKEN,
        Some(json!({ "leases": [format!("{delivery}.1")] })),
    )
    .await;
    assert_eq!(r.status(), 400);
    // In its own lane, the lease does what it says.
    let acked = ok_json(
        &app,
        "/pull/github/other/ack",
        OTHER_TOKEN,
        Some(json!({ "leases": [&other] })),
    )
    .await;
    assert_eq!(acked["acked"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_named_of_no_delivery_of_the_lane_count_toward_the_failure_limit() {
    let app = TestApp::spawn_with(&source(""), "\n[edge]\nmax_failures = 3\n").await;
    assert_eq!(app.post_github("one", b"{}").await.status(), 202);
    let taken = ok_json(&app, "/pull/github/laptop", TOKEN, None).await;
    let mine = taken["events"][0]["lease"].as_str().unwrap().to_owned();
    // A lease of the lane with a wrong secret is only stale: a consumer
    // whose lease was taken over sends those.
    let (delivery, _) = mine.split_once('.').unwrap();
    let wrong_secret = format!("{delivery}.{}", "00".repeat(16));
    for _ in 0..5 {
        let answer = ok_json(
            &app,
            "/pull/github/laptop/ack",
            TOKEN,
            Some(json!({ "leases": [&wrong_secret] })),
        )
        .await;
        assert_eq!(answer["acked"], 0);
    }
    // Guessing at other deliveries is a failed verification.
    let guesses: Vec<String> = (1000..1400)
        .map(|d| format!("{d}.{}", "11".repeat(16)))
        .collect();
    for _ in 0..3 {
        let answer = ok_json(
            &app,
            "/pull/github/laptop/ack",
            TOKEN,
            Some(json!({ "leases": &guesses })),
        )
        .await;
        assert_eq!(answer["stale"].as_array().unwrap().len(), guesses.len());
    }
    let r = call(
        &app,
        "/pull/github/laptop/ack",
        TOKEN,
        Some(json!({ "leases": [&mine] })),
    )
    .await;
    assert_eq!(r.status(), 429);
    assert_eq!(
        app.count("SELECT count(*) FROM deliveries WHERE state = 'pending'"),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_never_settles_ends_dead_with_each_lease_an_attempt() {
    let app = TestApp::spawn(&source("")).await;
    assert_eq!(app.post_github("one", b"{}").await.status(), 202);
    let first = ok_json(&app, "/pull/github/laptop", TOKEN, None).await;
    assert_eq!(first["events"][0]["attempt"], 1);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    // The lease ran out: a failed attempt, retried after the backoff.
    let second = ok_json(&app, "/pull/github/laptop?wait=2s", TOKEN, None).await;
    assert_eq!(second["events"][0]["attempt"], 2);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let third = ok_json(&app, "/pull/github/laptop?wait=1s", TOKEN, None).await;
    assert_eq!(third["events"], json!([]));
    let expired = Some("lease expired".to_owned());
    assert_eq!(
        attempts_log(&app, "laptop"),
        [
            (1, "retry".to_owned(), expired.clone()),
            (2, "dead".to_owned(), expired)
        ]
    );
    let (state, attempts): (String, i64) = app
        .db()
        .query_row("SELECT state, attempts FROM deliveries", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((state.as_str(), attempts), ("dead", 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_lease_outlives_its_first_term_and_acks() {
    let app = TestApp::spawn(&source("")).await;
    assert_eq!(app.post_github("one", b"{}").await.status(), 202);
    let taken = ok_json(&app, "/pull/github/laptop", TOKEN, None).await;
    assert_eq!(taken["lease_ms"], 2000);
    let lease = taken["events"][0]["lease"].as_str().unwrap().to_owned();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let extended = ok_json(
            &app,
            "/pull/github/laptop/extend",
            TOKEN,
            Some(json!({ "leases": [&lease] })),
        )
        .await;
        assert_eq!(extended["extended"], 1);
        assert_eq!(extended["stale"], json!([]));
    }
    // 3.6 s after the take: a lease of 2 s held, and nobody else got it.
    let none = ok_json(&app, "/pull/github/laptop", TOKEN, None).await;
    assert_eq!(none["events"], json!([]));
    let acked = ok_json(
        &app,
        "/pull/github/laptop/ack",
        TOKEN,
        Some(json!({ "leases": [&lease] })),
    )
    .await;
    assert_eq!(acked["acked"], 1);
    assert_eq!(
        attempts_log(&app, "laptop"),
        [(1, "delivered".to_owned(), None)]
    );
}

/// The writer's groups so far, from `/metrics`.
async fn writer_groups(app: &TestApp) -> f64 {
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("hookbox_writer_batch_size_count "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no writer batch count in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_take_does_not_spin_the_writer_on_a_lease_that_ran_out() {
    let app = TestApp::spawn(&source("")).await;
    assert_eq!(app.post_github("one", b"{}").await.status(), 202);
    let taken = ok_json(&app, "/pull/github/laptop", TOKEN, None).await;
    let lease = taken["events"][0]["lease"].as_str().unwrap().to_owned();
    ok_json(
        &app,
        "/pull/github/laptop/ack",
        TOKEN,
        Some(json!({ "leases": [&lease] })),
    )
    .await;
    // A lease that ran out on a delivery nothing will claim again (left
    // behind by some path that settled it): a time in the past to look
    // again at, for a take that counts it.
    app.db()
        .execute(
            "INSERT INTO leases (delivery, source, destination, attempt, lease_until, secret)
             SELECT id, source, destination, 1, 1, randomblob(16) FROM deliveries",
            [],
        )
        .unwrap();
    let before = writer_groups(&app).await;
    let waited = ok_json(&app, "/pull/github/laptop?wait=3s", TOKEN, None).await;
    assert_eq!(waited["events"], json!([]));
    let groups = writer_groups(&app).await - before;
    // A claim when the take starts, and one at most every 100 ms after.
    assert!(groups <= 40.0, "{groups} writer groups for one idle take");
    assert_eq!(app.count("SELECT count(*) FROM leases"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_reads_no_more_bodies_than_it_hands_out() {
    const EVENTS: usize = 24;
    const BODY: usize = 4 << 20;
    let dir = tempfile::tempdir().unwrap();
    let sources = format!(
        r#"{GITHUB_SOURCE}max_body_bytes = {}
[[sources.deliver]]
name = "laptop"
pull = {{ token = "{TOKEN}", max_bytes = 1048576 }}
"#,
        BODY * 2
    );
    let server =
        ChildServer::spawn_ready(dir.path(), &dir.path().join("h.db"), &sources, "", 0).await;
    let client = reqwest::Client::new();
    let filler = format!(r#"{{"pad":"{}"}}"#, "x".repeat(BODY - 10));
    for i in 0..EVENTS {
        let r = github_request(
            &client,
            &server.url("/hooks/github"),
            &format!("big-{i}"),
            filler.as_bytes(),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(r.status(), 202);
    }
    let peak = || peak_rss_mib(server.pid());
    let before = peak();
    let r = client
        .post(server.url("/pull/github/laptop?max=100"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["events"].as_array().unwrap().len(), 1);
    let grew = peak() - before;
    // One body, its base64 and the JSON around it: about 16 MiB. Reading
    // every claimed body first took 24 × 4 MiB.
    assert!(
        grew < 48,
        "the peak resident size grew by {grew} MiB for a one-event answer"
    );
}

/// A process's peak resident set (`VmHWM`), in MiB.
fn peak_rss_mib(pid: u32) -> i64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024
}
