//! Pausing a destination by hand (planned maintenance), through the admin
//! API, the dashboard's form and `hookbox destination`; and pauses, by
//! hand or by a breaker, outliving a `kill -9`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::*;

/// The `default` destination's state in `/api/stats`.
async fn state_of(stats: Value) -> Value {
    stats["sources"][0]["destinations"]["default"]["status"].clone()
}

fn body(repo: &str) -> Vec<u8> {
    format!(r#"{{"repository":{{"full_name":"{repo}"}}}}"#).into_bytes()
}

/// Delivery ids in the order the downstream saw them.
fn seen(down: &Downstream) -> Vec<String> {
    down.hits()
        .iter()
        .map(|h| h.delivery().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_paused_by_hand_keeps_receiving_sends_nothing_and_flushes_in_order_on_resume()
{
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let app = TestApp::spawn(&deliver_source(
        "github",
        &url_destination(&down.url()),
        "5s",
        3,
    ))
    .await;
    let r = app
        .admin_post("/api/destinations/github/default/pause", json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let paused: Value = r.json().await.unwrap();
    assert_eq!(paused["state"]["state"], "paused", "{paused}");
    assert_eq!(paused["state"]["paused_by"], "manual", "{paused}");
    let since = paused["state"]["paused_since"].as_i64().unwrap();
    // Pausing again changes nothing, not even the time.
    let again: Value = app
        .admin_post("/api/destinations/github/default/pause", json!({}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["state"]["paused_since"], since);
    for i in 0..10 {
        let r = app.post_github(&format!("m-{i}"), &body("acme/one")).await;
        assert_eq!(r.status(), 202, "ingest goes on while paused");
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(
        down.hits().is_empty(),
        "sent while paused: {:?}",
        seen(&down)
    );
    let stats = app.admin_get("/api/stats").await.json().await.unwrap();
    assert_eq!(state_of(stats).await["paused_by"], "manual");
    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(r#"hookbox_destination_paused{source="github",destination="default"} 1"#),
        "{metrics}"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM deliveries WHERE state = 'pending' AND attempts = 0"),
        10
    );
    let r = app
        .admin_post("/api/destinations/github/default/resume", json!({}))
        .await;
    assert_eq!(r.status(), 200);
    let hits = down.wait_for_hits(10).await;
    let order: Vec<String> = hits.iter().map(|h| h.delivery().to_owned()).collect();
    let want: Vec<String> = (0..10).map(|i| format!("m-{i}")).collect();
    assert_eq!(order, want, "one key's backlog goes in order");
    let stats = app.admin_get("/api/stats").await.json().await.unwrap();
    assert_eq!(state_of(stats).await["state"], "open");
    // Unknown names are refused, saying which part is unknown.
    for (path, reason) in [
        ("/api/destinations/nope/default/pause", "unknown_source"),
        (
            "/api/destinations/github/nope/resume",
            "unknown_destination",
        ),
    ] {
        let r = app.admin_post(path, json!({})).await;
        assert_eq!(r.status(), 404, "{path}");
        assert_eq!(json(r).await["error"], reason, "{path}");
    }
}

/// `hookbox destination ...` against `config`, with its output.
fn cli(config: &std::path::Path, args: &[&str]) -> String {
    let out = hookbox()
        .arg("--config")
        .arg(config)
        .arg("destination")
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "hookbox destination {args:?}: {text}");
    text
}

async fn stats_state(server: &ChildServer) -> Value {
    let stats: Value = server.admin_get("/api/stats").await.json().await.unwrap();
    state_of(stats).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_pauses_a_running_server_and_the_pause_outlives_a_kill_9() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let source = deliver_source("github", &url_destination(&down.url()), "5s", 3);
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &source, "", 0).await;
    let config = dir.path().join("hookbox.toml");
    let said = cli(&config, &["pause", "github", "default"]);
    assert!(said.contains("github/default paused"), "{said}");
    // The running server reads it within its watch interval.
    let deadline = Instant::now() + Duration::from_secs(5);
    while stats_state(&server).await["paused_by"] != "manual" {
        assert!(Instant::now() < deadline, "the server never saw the pause");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 0..5 {
        post_event(
            server.addr,
            "github",
            &format!("k-{i}"),
            "application/json",
            &body("acme/one"),
        )
        .await;
    }
    server.kill9();
    let server = ChildServer::spawn_ready(dir.path(), &db, &source, "", 1).await;
    assert_eq!(stats_state(&server).await["paused_by"], "manual");
    let listed = cli(&config, &["list"]);
    assert!(
        listed.contains("github/default: paused by hand"),
        "{listed}"
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(
        down.hits().is_empty(),
        "sent while paused: {:?}",
        seen(&down)
    );
    cli(&config, &["resume", "github", "default"]);
    let hits = down.wait_for_hits(5).await;
    let order: Vec<String> = hits.iter().map(|h| h.delivery().to_owned()).collect();
    assert_eq!(order, ["k-0", "k-1", "k-2", "k-3", "k-4"]);
    assert!(cli(&config, &["list"]).contains("no destination is paused"));
    // Unknown names are refused before anything is written.
    let out = hookbox()
        .args(["--config"])
        .arg(&config)
        .args(["destination", "pause", "github", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no destination \"nope\""), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_pause_outlives_a_kill_9_and_probes_when_it_was_due() {
    let down = Downstream::start(|_, _| Reply::status(503)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let destination = format!(
        "{}\nconcurrency = 1\nbreaker_failures = 2\nbreaker_probe = \"4s\"",
        url_destination(&down.url())
    );
    let source =
        crate::helpers::deliver_source_backoff("github", &destination, "5s", 5, "50ms", "100ms");
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &source, "", 0).await;
    for i in 0..6 {
        post_event(
            server.addr,
            "github",
            &format!("b-{i}"),
            "application/json",
            &body(&format!("acme/r{i}")),
        )
        .await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let paused = loop {
        let state = stats_state(&server).await;
        if state["paused_by"] == "breaker" {
            break state;
        }
        assert!(Instant::now() < deadline, "never paused: {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let next_probe = paused["next_probe_at"].as_i64().unwrap();
    // The pause reaches the database without anyone waiting for it.
    eventually("the pause stored", || {
        let n: i64 = open(&db)
            .query_row(
                "SELECT count(*) FROM destination_pauses WHERE cause = 'breaker'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (n == 1).then_some(())
    })
    .await;
    server.kill9();
    let before = down.hits().len();
    down.set_script(|_, _| Reply::status(204));
    let server = ChildServer::spawn_ready(dir.path(), &db, &source, "", 1).await;
    let restored = stats_state(&server).await;
    assert_eq!(restored["paused_by"], "breaker", "{restored}");
    assert_eq!(restored["next_probe_at"], next_probe, "{restored}");
    // Nothing goes before the probe that was due; then the probe closes
    // the breaker and the backlog follows at once.
    let hits = down.wait_for_hits(before + 6).await;
    let first_after = &hits[before];
    let at_ms = hookbox::support::clock::now_ms()
        - i64::try_from(first_after.at.elapsed().as_millis()).unwrap();
    assert!(
        at_ms >= next_probe - 50,
        "an attempt went {} ms before the restored probe time",
        next_probe - at_ms
    );
    eventually("all delivered", || {
        let n: i64 = open(&db)
            .query_row(
                "SELECT count(*) FROM deliveries WHERE state = 'delivered'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (n == 6).then_some(())
    })
    .await;
    assert_eq!(stats_state(&server).await["state"], "open");
    let dead: i64 = open(&db)
        .query_row(
            "SELECT count(*) FROM deliveries WHERE state = 'dead'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(dead, 0, "the outage alone made a delivery dead");
}
