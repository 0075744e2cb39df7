//! Retention in the running server, and `hookbox purge --dead`.
//!
//! Rows are stored through the public endpoint (so the server's cache of
//! recent keys knows them), then backdated directly in the database file,
//! as if they had been delivered or received days ago.

use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

use serde_json::json;

use crate::helpers::{
    Downstream, GITHUB_SOURCE, Reply, STATE, TestApp, cli, deliver_source, hookbox, json,
    post_event, run, text, url_destination, wait_for_state,
};

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// body_days = 2, key_days = 5, checked every 100 ms.
const RETENTION: &str = "\n[retention]\nbody_days = 2\nkey_days = 5\ninterval = \"100ms\"\n";

/// Sets a row's state and times as if it were `days` old.
fn backdate(conn: &Connection, delivery: &str, state: &str, days: f64) {
    let at = hookbox::support::clock::now_ms() - (days * DAY_MS as f64) as i64;
    let changed = conn
        .execute(
            "UPDATE events SET state = ?2, received_at = ?3,
                    delivered_at = CASE ?2 WHEN 'delivered' THEN ?3 END,
                    next_attempt_at = CASE ?2 WHEN 'pending' THEN ?3 + 1000 * ?4 END
             WHERE delivery_id = ?1",
            params![delivery, state, at, DAY_MS],
        )
        .unwrap();
    assert_eq!(changed, 1, "{delivery}");
    // The state as dispatch keeps it once derived: in the event's outcome.
    conn.execute(
        "INSERT INTO event_outcomes (event_id, source, state, delivered_at)
         SELECT id, source, state, delivered_at FROM events WHERE delivery_id = ?1
         ON CONFLICT (event_id) DO UPDATE SET state = excluded.state,
                                              delivered_at = excluded.delivered_at",
        [delivery],
    )
    .unwrap();
}

/// (has a body, exists) for a delivery.
fn row(conn: &Connection, delivery: &str) -> (bool, bool) {
    conn.query_row(
        "SELECT count(body), count(*) FROM events WHERE delivery_id = ?1",
        [delivery],
        |r| Ok((r.get::<_, i64>(0)? > 0, r.get::<_, i64>(1)? > 0)),
    )
    .unwrap()
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_old_bodies_then_old_rows_and_a_resend_of_a_deleted_key_is_new() {
    let app = TestApp::spawn_with(GITHUB_SOURCE, RETENTION).await;
    // (delivery, state, age in days, body kept, row kept)
    let cases = [
        ("delivered-new", "delivered", 0.5, true, true),
        ("delivered-mid", "delivered", 3.0, false, true),
        ("delivered-old", "delivered", 6.0, false, false),
        ("stored-new", "stored", 0.5, true, true),
        ("stored-mid", "stored", 3.0, false, true),
        ("stored-old", "stored", 6.0, false, false),
        ("dead-old", "dead", 60.0, true, true),
        ("pending-old", "pending", 60.0, true, true),
    ];
    let mut ids = std::collections::HashMap::new();
    for (delivery, ..) in cases {
        let r = app.post_github(delivery, b"{\"hello\":1}").await;
        assert_eq!(r.status(), 202);
        ids.insert(delivery, json(r).await["id"].as_i64().unwrap());
    }
    let conn = app.db();
    for (delivery, state, days, ..) in cases {
        backdate(&conn, delivery, state, days);
    }
    // Attempts of a deleted row go with it.
    conn.execute(
        "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome)
         VALUES (?1, 1, 0, 1, 'delivered')",
        [ids["delivered-old"]],
    )
    .unwrap();
    // More old rows than one batch holds, straight into the file.
    let old = hookbox::support::clock::now_ms() - 10 * DAY_MS;
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1234)
         INSERT INTO events (source, delivery_id, received_at, body, state, delivered_at)
         SELECT 'github', 'bulk-' || i, ?1, x'7b7d', 'delivered', ?1 FROM n",
        [old],
    )
    .unwrap();

    wait_until("retention to run", || {
        app.count("SELECT count(*) FROM events WHERE delivery_id LIKE 'bulk-%'") == 0
            && !row(&conn, "delivered-old").1
            && !row(&conn, "stored-old").1
            && !row(&conn, "stored-mid").0
            && !row(&conn, "delivered-mid").0
    })
    .await;
    for (delivery, _, _, body, kept) in cases {
        assert_eq!(
            row(&conn, delivery),
            (body, kept),
            "{delivery}: (has body, exists)"
        );
    }
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) FROM attempts WHERE event_id = {}",
            ids["delivered-old"]
        )),
        0
    );

    // A deleted key is forgotten: its resend is a new event.
    for delivery in ["delivered-old", "stored-old"] {
        let r = app.post_github(delivery, b"{\"again\":1}").await;
        assert_eq!(r.status(), 202, "{delivery} sent again");
        let id = json(r).await["id"].as_i64().unwrap();
        assert_ne!(id, ids[delivery]);
    }
    // A kept key still answers duplicate, with or without its body.
    for delivery in ["delivered-mid", "dead-old", "pending-old"] {
        let r = app.post_github(delivery, b"{\"again\":1}").await;
        assert_eq!(r.status(), 200, "{delivery} sent again");
        assert_eq!(json(r).await["id"].as_i64(), Some(ids[delivery]));
    }
    drop(conn);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_only_dead_events_idle_longer_than_asked_while_the_server_runs() {
    // The server's own retention must not take the backdated delivered
    // row first: keep it out of the way.
    let keep_all = "[retention]\nbody_days = 36500\nkey_days = 36500\n";
    let app = TestApp::spawn_with(GITHUB_SOURCE, keep_all).await;
    for delivery in ["dead-40d", "dead-10d", "delivered-40d", "dead-40d-other"] {
        assert_eq!(app.post_github(delivery, b"{}").await.status(), 202);
    }
    let conn = app.db();
    backdate(&conn, "dead-40d", "dead", 40.0);
    backdate(&conn, "dead-10d", "dead", 10.0);
    backdate(&conn, "delivered-40d", "delivered", 40.0);
    backdate(&conn, "dead-40d-other", "dead", 40.0);
    conn.execute(
        "UPDATE events SET source = 'other' WHERE delivery_id = 'dead-40d-other'",
        [],
    )
    .unwrap();

    let mut cmd = cli(&app.db_path);
    cmd.args([
        "purge",
        "--dead",
        "--older-than",
        "30d",
        "--source",
        "github",
    ]);
    let out = run(cmd).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("1 dead event(s) purged"),
        "{}",
        text(&out)
    );
    assert!(!row(&conn, "dead-40d").1);
    assert!(row(&conn, "dead-10d").1);
    assert!(row(&conn, "delivered-40d").1);
    assert!(row(&conn, "dead-40d-other").1);

    let mut cmd = cli(&app.db_path);
    cmd.args(["purge", "--dead", "--older-than", "30d"]);
    let out = run(cmd).await;
    assert!(
        text(&out).contains("1 dead event(s) purged"),
        "{}",
        text(&out)
    );
    assert!(!row(&conn, "dead-40d-other").1);
    assert!(row(&conn, "dead-10d").1);

    // --dead is required: purge removes nothing else.
    let mut cmd = cli(&app.db_path);
    cmd.args(["purge", "--older-than", "30d"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(row(&conn, "delivered-40d").1);
    drop(conn);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_whose_body_retention_dropped_is_refused_by_replay_with_the_reason() {
    let downstream = Downstream::start(|_, _| Reply::status(200)).await;
    let sources = deliver_source("github", &url_destination(&downstream.url()), "5s", 3);
    let app = TestApp::spawn_with(&sources, RETENTION).await;
    let kept = post_event(app.addr, "github", "kept", "application/json", b"{}").await;
    let emptied = post_event(app.addr, "github", "emptied", "application/json", b"{}").await;
    for id in [kept, emptied] {
        wait_for_state(&app.db_path, id, "delivered").await;
    }
    let conn = app.db();
    backdate(&conn, "emptied", "delivered", 3.0);
    wait_until("retention to drop the body", || {
        row(&conn, "emptied") == (false, true)
    })
    .await;

    let r = app
        .admin_post(&format!("/api/events/{emptied}/replay"), json!({}))
        .await;
    assert_eq!(r.status(), 409);
    let refused = json(r).await;
    assert_eq!(refused["error"], "body_dropped", "{refused}");
    assert!(
        refused.to_string().contains("retention.body_days"),
        "{refused}"
    );
    // A bulk replay passes over it.
    let r = app
        .admin_post("/api/replay", json!({"state": "delivered"}))
        .await;
    assert_eq!(json(r).await, json!({"replayed": 1}));
    wait_for_state(&app.db_path, kept, "delivered").await;
    assert_eq!(downstream.hits_for("kept").len(), 2);

    // So does the CLI, saying why.
    let config = app.db_path.with_file_name("replay.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndatabase = {:?}\n{sources}",
            app.db_path.display().to_string()
        ),
    )
    .unwrap();
    let mut cmd = hookbox();
    cmd.arg("--config")
        .arg(&config)
        .args(["replay", &emptied.to_string()]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no longer has its body"),
        "{}",
        text(&out)
    );
    assert_eq!(downstream.hits_for("emptied").len(), 1);
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) FROM events WHERE id = {emptied} AND {STATE} = 'delivered'"
        )),
        1
    );
    drop(conn);
    app.shutdown().await;
}
