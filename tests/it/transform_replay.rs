//! Skipped deliveries replayed after their transform is fixed, through the
//! real binary: a program that drops every push, then the config changed
//! to one that sends, then `hookbox replay --skipped`, the event replay
//! and the bulk replay of the admin API put them back, and each goes out
//! with the new program's output.

use std::time::Duration;

use crate::helpers::*;

/// The GitHub source with one url destination `chat` running `program`.
fn config(url: &str, program: &str) -> String {
    format!(
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB_SECRET}"]
[[sources.deliver]]
name = "chat"
url = "{url}"
transform = '{program}'
"#
    )
}

/// The state of event `id`'s delivery to `chat`.
fn state(db: &std::path::Path, id: i64) -> String {
    open(db)
        .query_row(
            "SELECT state FROM deliveries WHERE event_id = ?1 AND destination = 'chat'",
            [id],
            |r| r.get(0),
        )
        .unwrap()
}

async fn all_in(db: &std::path::Path, ids: &[i64], wanted: &str) {
    eventually(&format!("{ids:?} to be {wanted}"), || {
        ids.iter().all(|id| state(db, *id) == wanted).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_deliveries_replay_through_the_fixed_transform() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    // Meant to pass pushes to main, but compares with the wrong ref.
    let broken = config(&down.url(), r#"select(.ref == "main") | {v: 1}"#);
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &broken, "", 0).await;
    let mut ids = Vec::new();
    for n in 1..=3 {
        let body = format!(r#"{{"ref": "refs/heads/main", "n": {n}}}"#);
        let r = reqwest::Client::new()
            .post(server.url("/hooks/github"))
            .header("content-type", "application/json")
            .header("x-github-event", "push")
            .header("x-github-delivery", format!("guid-{n}"))
            .header(
                "x-hub-signature-256",
                github_signature(GITHUB_SECRET, body.as_bytes()),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        ids.push(json(r).await["id"].as_i64().unwrap());
        // Apart in time, for the CLI's --until below.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    all_in(&db, &ids, "skipped").await;
    server.terminate(Duration::from_secs(10)).await;
    assert!(down.hits().is_empty());

    // The program fixed; the first event replayed by the CLI while no
    // server runs (`--until` the second's arrival).
    let fixed = config(
        &down.url(),
        r#"select(.ref == "refs/heads/main") | {v: 2, n: .n}"#,
    );
    let second_at: i64 = open(&db)
        .query_row(
            "SELECT received_at FROM events WHERE id = ?1",
            [ids[1]],
            |r| r.get(0),
        )
        .unwrap();
    let config_path = dir.path().join("cli.toml");
    std::fs::write(
        &config_path,
        format!(
            "[server]\ndatabase = {:?}\n{fixed}",
            db.display().to_string()
        ),
    )
    .unwrap();
    let out = hookbox()
        .args([
            "replay",
            "--skipped",
            "--source",
            "github",
            "--destination",
            "chat",
        ])
        .arg("--until")
        .arg(second_at.to_string())
        .arg("--config")
        .arg(&config_path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("1 delivery put back to pending"),
        "{}",
        text(&out)
    );
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &fixed, "", 2).await;
    all_in(&db, &ids[..1], "delivered").await;
    assert_eq!(state(&db, ids[1]), "skipped");

    // One event by the API's event replay, the rest by its bulk replay.
    let r = server
        .admin_post(
            &format!("/api/events/{}/replay", ids[1]),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await["replayed"], 1);
    all_in(&db, &ids[..2], "delivered").await;
    let r = server
        .admin_post(
            "/api/replay",
            serde_json::json!({"state": "skipped", "source": "github", "destination": "chat"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await["replayed"], 1);
    all_in(&db, &ids, "delivered").await;

    let mut bodies: Vec<String> = down
        .hits()
        .iter()
        .map(|h| String::from_utf8(h.body.to_vec()).unwrap())
        .collect();
    bodies.sort();
    assert_eq!(
        bodies,
        [r#"{"v":2,"n":1}"#, r#"{"v":2,"n":2}"#, r#"{"v":2,"n":3}"#]
    );
    server.terminate(Duration::from_secs(10)).await;
}
