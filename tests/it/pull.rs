//! The pull API through the real router: take, ack, nack, leases,
//! long-polls, auth and per-key order.

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::helpers::*;

const TOKEN: &str = "pull-token-0123456789abcdef";

/// A github source with a `laptop` pull destination, with the settings in
/// `extra`.
fn source(extra: &str) -> String {
    source_pull("", extra)
}

/// [`source`], with more keys in its `pull` table.
fn source_pull(pull: &str, extra: &str) -> String {
    format!(
        r#"{GITHUB_SOURCE}order_key = ["/repository/full_name"]
[[sources.deliver]]
name = "laptop"
pull = {{ token = "{TOKEN}"{pull} }}
timeout = "2s"
backoff_base = "100ms"
backoff_cap = "200ms"
{extra}
"#
    )
}

async fn take(app: &TestApp, query: &str) -> reqwest::Response {
    app.client
        .post(app.url(&format!("/pull/github/laptop{query}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
}

async fn events(app: &TestApp, query: &str) -> Vec<Value> {
    let r = take(app, query).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    body["events"].as_array().unwrap().clone()
}

async fn settle(app: &TestApp, verb: &str, leases: &[&Value]) -> Value {
    let r = app
        .client
        .post(app.url(&format!("/pull/github/laptop/{verb}")))
        .bearer_auth(TOKEN)
        .json(&json!({ "leases": leases }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn delivery_ids(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["delivery_id"].as_str().unwrap())
        .collect()
}

fn state_of(app: &TestApp, delivery: &str) -> (String, String, i64) {
    app.db()
        .query_row(
            &format!(
                "SELECT {E_STATE}, d.state, d.attempts FROM events AS e
                 JOIN deliveries AS d ON d.event_id = e.id WHERE e.delivery_id = ?1"
            ),
            [delivery],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
}

fn repo(name: &str) -> Vec<u8> {
    format!(r#"{{"repository":{{"full_name":"{name}"}}}}"#).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_event_carries_its_body_and_an_ack_delivers_it_once() {
    let app = TestApp::spawn(&source("")).await;
    let body = repo("acme/a");
    assert_eq!(app.post_github("one", &body).await.status(), 202);
    let got = events(&app, "").await;
    assert_eq!(delivery_ids(&got), ["one"]);
    let e = &got[0];
    assert_eq!(e["event_type"], "push");
    assert_eq!(e["attempt"], 1);
    assert_eq!(e["content_type"], "application/json");
    let sent = base64::engine::general_purpose::STANDARD
        .decode(e["body_base64"].as_str().unwrap())
        .unwrap();
    assert_eq!(sent, body);
    // Leased: a second take gets nothing.
    assert!(events(&app, "").await.is_empty());
    let acked = settle(&app, "ack", &[&e["lease"]]).await;
    assert_eq!(acked, json!({ "acked": 1, "stale": [] }));
    assert_eq!(
        state_of(&app, "one"),
        ("delivered".into(), "delivered".into(), 1)
    );
    // Acked twice: the second is stale and changes nothing.
    let again = settle(&app, "ack", &[&e["lease"]]).await;
    assert_eq!(again, json!({ "acked": 0, "stale": [e["lease"]] }));
    assert!(events(&app, "").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nack_retries_after_backoff_and_the_last_attempt_is_dead() {
    let app = TestApp::spawn(&source("max_attempts = 2")).await;
    assert_eq!(app.post_github("n", &repo("acme/a")).await.status(), 202);
    let first = events(&app, "").await;
    let nacked = settle(&app, "nack", &[&first[0]["lease"]]).await;
    assert_eq!(nacked["nacked"], 1);
    assert_eq!(state_of(&app, "n"), ("pending".into(), "pending".into(), 1));
    // Due again within the backoff cap: a long-poll gets it as attempt 2.
    let second = events(&app, "?wait=5s").await;
    assert_eq!(second[0]["attempt"], 2);
    settle(&app, "nack", &[&second[0]["lease"]]).await;
    assert_eq!(state_of(&app, "n"), ("dead".into(), "dead".into(), 2));
    let error: String = app
        .db()
        .query_row(
            "SELECT error FROM attempts ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(error, "nacked by the consumer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_comes_back_and_its_late_ack_is_stale() {
    let app = TestApp::spawn(&source("")).await;
    app.post_github("slow", &repo("acme/a")).await;
    let first = events(&app, "").await;
    // The lease lasts the destination's timeout (2 s).
    let again = events(&app, "?wait=5s").await;
    assert_eq!(delivery_ids(&again), ["slow"]);
    assert_eq!(again[0]["attempt"], 2, "the lost attempt counts");
    let late = settle(&app, "ack", &[&first[0]["lease"]]).await;
    assert_eq!(late["acked"], 0);
    assert_eq!(late["stale"], json!([first[0]["lease"]]));
    assert_eq!(state_of(&app, "slow").1, "pending");
    settle(&app, "ack", &[&again[0]["lease"]]).await;
    assert_eq!(state_of(&app, "slow").1, "delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_is_woken_by_the_insert_and_times_out_empty() {
    let app = TestApp::spawn(&source("")).await;
    // Nothing arrives: the poll ends empty after its wait.
    let started = Instant::now();
    assert!(events(&app, "?wait=1s").await.is_empty());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(950), "{waited:?}");
    // An event arriving while the poll waits is handed out at once, not
    // at the end of the wait.
    let poll = {
        let client = app.client.clone();
        let url = app.url("/pull/github/laptop?wait=20s");
        tokio::spawn(async move {
            let r = client.post(url).bearer_auth(TOKEN).send().await.unwrap();
            (Instant::now(), r.json::<Value>().await.unwrap())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.post_github("woke", &repo("acme/a")).await.status(), 202);
    let stored = Instant::now();
    let (answered, body) = poll.await.unwrap();
    assert_eq!(body["events"][0]["delivery_id"], "woke");
    let lag = answered.saturating_duration_since(stored);
    assert!(
        lag < Duration::from_secs(5),
        "{lag:?}: woken, not timed out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_one_key_are_handed_out_one_at_a_time_in_order() {
    let app = TestApp::spawn(&source("")).await;
    for (d, r) in [
        ("a1", "acme/a"),
        ("a2", "acme/a"),
        ("b1", "acme/b"),
        ("a3", "acme/a"),
    ] {
        assert_eq!(app.post_github(d, &repo(r)).await.status(), 202);
    }
    let first = events(&app, "?max=10").await;
    assert_eq!(delivery_ids(&first), ["a1", "b1"]);
    // a1 nacked: it still holds a2 back.
    settle(&app, "nack", &[&first[0]["lease"]]).await;
    settle(&app, "ack", &[&first[1]["lease"]]).await;
    let retried = events(&app, "?max=10&wait=5s").await;
    assert_eq!(delivery_ids(&retried), ["a1"]);
    settle(&app, "ack", &[&retried[0]["lease"]]).await;
    let mut order = Vec::new();
    while order.len() < 2 {
        let got = events(&app, "?max=10&wait=5s").await;
        assert_eq!(got.len(), 1, "one of the key at a time");
        order.push(got[0]["delivery_id"].as_str().unwrap().to_owned());
        settle(&app, "ack", &[&got[0]["lease"]]).await;
    }
    assert_eq!(order, ["a2", "a3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_401_until_the_failure_limit_makes_it_429_and_unknown_lanes_are_404() {
    let app = TestApp::spawn_with(
        &format!(
            "{}\n[[sources.deliver]]\nname = \"push\"\ncommand = [\"/bin/true\"]\n",
            source("")
        ),
        "\n[edge]\nmax_failures = 3\n",
    )
    .await;
    for path in [
        "/pull/github/nope",
        "/pull/nope/laptop",
        "/pull/github/push",
    ] {
        let r = app
            .client
            .post(app.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    let wrong = || {
        app.client
            .post(app.url("/pull/github/laptop"))
            .bearer_auth("not-the-token-at-all")
            .send()
    };
    for _ in 0..3 {
        let r = wrong().await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
    }
    assert_eq!(wrong().await.unwrap().status(), 429);
    // The same address is blocked with the right token too.
    assert_eq!(take(&app, "").await.status(), 429);
    // The admin listener's route takes the admin token instead.
    let r = app
        .client
        .post(app.admin_url("/api/pull/github/laptop"))
        .bearer_auth(&app.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = app
        .client
        .post(app.admin_url("/api/pull/github/laptop"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_holds_a_bounded_number_of_long_polls_and_bodies_are_capped() {
    let app = TestApp::spawn_with(
        &source_pull(", max_bytes = 10", ""),
        "\n[edge]\nmax_client_long_polls = 2\n",
    )
    .await;
    let polls: Vec<_> = (0..2)
        .map(|_| {
            let client = app.client.clone();
            let url = app.url("/pull/github/laptop?wait=3s");
            tokio::spawn(async move { client.post(url).bearer_auth(TOKEN).send().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let third = take(&app, "?wait=3s").await;
    assert_eq!(third.status(), 429);
    assert_eq!(
        third.json::<Value>().await.unwrap()["error"],
        "too_many_long_polls"
    );
    // Without a wait it is not a long-poll.
    assert_eq!(take(&app, "").await.status(), 200);
    for p in polls {
        assert_eq!(p.await.unwrap().unwrap().status(), 200);
    }
    // Each body is over 10 bytes: one event per answer, the rest given back.
    for d in ["c1", "c2"] {
        app.post_github(d, &repo(&format!("acme/{d}"))).await;
    }
    let got = events(&app, "?max=10").await;
    assert_eq!(got.len(), 1, "at least one always fits, no more");
    let next = events(&app, "?max=10").await;
    assert_eq!(next.len(), 1, "the other was given back at once");
    assert_ne!(got[0]["delivery_id"], next[0]["delivery_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_a_waiting_take_at_once_instead_of_holding_the_drain() {
    let app = TestApp::spawn(&source("")).await;
    let poll = {
        let client = app.client.clone();
        let url = app.url("/pull/github/laptop?wait=30s");
        tokio::spawn(async move { client.post(url).bearer_auth(TOKEN).send().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    app.shutdown().await;
    let took = started.elapsed();
    let answer = poll.await.unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(
        answer.json::<Value>().await.unwrap(),
        json!({ "events": [], "lease_ms": 2000 })
    );
    assert!(
        took < Duration::from_secs(5),
        "shutdown took {took:?} with a take waiting"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_pull_destination_hands_out_nothing_until_resumed() {
    let app = TestApp::spawn(&source("")).await;
    let r = app
        .admin_post("/api/destinations/github/laptop/pause", json!({}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.post_github("p", &repo("acme/a")).await.status(), 202);
    assert!(events(&app, "").await.is_empty(), "handed out while paused");
    // A long-poll waiting through the pause gets the event at the resume.
    let poll = {
        let client = app.client.clone();
        let url = app.url("/pull/github/laptop?wait=20s");
        tokio::spawn(async move {
            let r = client.post(url).bearer_auth(TOKEN).send().await.unwrap();
            r.json::<Value>().await.unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "a paused take answered");
    let resumed = Instant::now();
    app.admin_post("/api/destinations/github/laptop/resume", json!({}))
        .await;
    let body = poll.await.unwrap();
    assert_eq!(body["events"][0]["delivery_id"], "p");
    assert!(resumed.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_bounds_what_takes_hand_out_whatever_max_they_ask() {
    let app = TestApp::spawn(&source("rate = \"20/s\"")).await;
    for i in 0..60 {
        let r = app
            .post_github(&format!("r-{i}"), &repo(&format!("acme/r{i}")))
            .await;
        assert_eq!(r.status(), 202);
    }
    // A tenth of a second's worth at once: two of the sixty due.
    let first = events(&app, "?max=100").await;
    assert_eq!(first.len(), 2, "{}", first.len());
    // Takes in a loop for 1.5 s get about 20 a second, not the backlog.
    let started = Instant::now();
    let mut handed = 0;
    while started.elapsed() < Duration::from_millis(1_500) {
        handed += events(&app, "?max=100&wait=1s").await.len();
    }
    let took = started.elapsed().as_secs_f64();
    assert!(
        handed as f64 <= 20.0 * took + 2.0,
        "{handed} handed out in {took:.2} s at 20/s"
    );
    assert!(handed >= 20, "only {handed} in {took:.2} s at 20/s");
}
