//! `hookbox events`: the inbox from the command line, read-only, with or
//! without the server running.

use rusqlite::params;

use crate::helpers::{GITHUB_SOURCE, TestApp, cli, github_event_request, run, text};

async fn post(app: &TestApp, delivery: &str, event: &str) {
    let url = app.url("/hooks/github");
    let r = github_event_request(&app.client, &url, event, delivery, b"{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
}

async fn events(app_db: &std::path::Path, args: &[&str]) -> String {
    let mut cmd = cli(app_db);
    cmd.arg("events").args(args);
    let out = run(cmd).await;
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_lists_newest_first_with_filters_as_a_table_or_json_lines() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    post(&app, "first", "push").await;
    post(&app, "second", "issues").await;
    post(&app, "third", "push").await;
    // As dispatch leaves a dead letter: the state of its delivery, and the
    // event's derived from it.
    let db = app.db();
    db.execute(
        "INSERT INTO event_outcomes (event_id, source, state)
         SELECT id, source, 'dead' FROM events WHERE delivery_id = 'second'",
        [],
    )
    .unwrap();
    db.execute(
        "INSERT INTO deliveries (event_id, source, destination, state, attempts, last_error)
         SELECT id, source, 'default', 'dead', 12, ?1 FROM events WHERE delivery_id = 'second'",
        params!["HTTP 503 from the destination\nwith a second line"],
    )
    .unwrap();
    drop(db);

    let table = events(&app.db_path, &[]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    for column in [
        "ID",
        "RECEIVED",
        "SOURCE",
        "STATE",
        "ATTEMPTS",
        "EVENT TYPE",
        "DELIVERY ID",
        "LAST ERROR",
    ] {
        assert!(lines[0].contains(column), "{table}");
    }
    assert!(
        lines[1].contains("third") && lines[3].contains("first"),
        "{table}"
    );
    assert!(
        lines[2].contains("dead")
            && lines[2].contains("12")
            && lines[2].contains("HTTP 503 from the destination with a second line"),
        "{table}"
    );

    let dead = events(&app.db_path, &["--state", "dead"]).await;
    assert_eq!(dead.lines().count(), 2, "{dead}");
    assert!(dead.contains("second"), "{dead}");

    let pushes = events(
        &app.db_path,
        &["--json", "--source", "github", "--event-type", "push"],
    )
    .await;
    let rows: Vec<serde_json::Value> = pushes
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let deliveries: Vec<&str> = rows
        .iter()
        .map(|r| r["delivery_id"].as_str().unwrap())
        .collect();
    assert_eq!(deliveries, ["third", "first"]);
    assert_eq!(rows[0]["state"], "stored");
    assert_eq!(rows[0]["event_type"], "push");
    assert!(rows[0]["received_at"].as_str().unwrap().ends_with('Z'));

    let one = events(&app.db_path, &["--json", "--limit", "1"]).await;
    assert_eq!(one.lines().count(), 1);
    let other = events(&app.db_path, &["--source", "stripe"]).await;
    assert_eq!(other.lines().count(), 1, "only the header: {other}");

    // With the server stopped, it reads the same file.
    let db = app.db_path.clone();
    let _dir = app.shutdown().await;
    let after = events(&db, &["--json"]).await;
    assert_eq!(after.lines().count(), 3);

    let mut bad = cli(&db);
    bad.args(["events", "--state", "lost"]);
    let out = run(bad).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
