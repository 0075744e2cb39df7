//! A url destination's URL as a credential (a chat webhook carries its
//! token in the path): given as `env:NAME` it delivers where it names, and
//! neither it nor a literal URL's path shows anywhere, through the real
//! binary at debug level: `check`, `try`, the dashboard, the API, the log,
//! an error that echoes the path back.

use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, Uri};

use crate::helpers::*;

/// The token in the URL given by reference.
const TOKEN: &str = "wh-token-3b8e1c6d97f2a054";
/// The token in a literal URL's path and query.
const LITERAL_TOKEN: &str = "lit-token-9d02e7c4a1b6f385";

/// `(state, last_error)` of event `id`'s delivery to `name`.
fn delivery(db: &std::path::Path, id: i64, name: &str) -> (String, Option<String>) {
    open(db)
        .query_row(
            "SELECT state, last_error FROM deliveries WHERE event_id = ?1 AND destination = ?2",
            rusqlite::params![id, name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_url_from_env_delivers_and_no_output_shows_a_url_path() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    // A receiver that answers 404 naming the path it was asked for.
    let (echo, _echo) = serve_loopback(|_| {
        Router::new().fallback(|uri: Uri| async move {
            (StatusCode::NOT_FOUND, format!("no webhook at {uri}"))
        })
    })
    .await;
    let secret_url = format!("http://{}/api/webhooks/1234/{TOKEN}", down.addr);
    let sources = format!(
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB_SECRET}"]
[[sources.deliver]]
name = "discord"
url = "env:DISCORD_WEBHOOK_URL"
transform = '{{content: "pushed \(.ref)"}}'
[[sources.deliver]]
name = "literal"
url = "http://{echo}/api/webhooks/99/{LITERAL_TOKEN}?thread={LITERAL_TOKEN}"
permanent_statuses = [404]
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let env = [
        ("DISCORD_WEBHOOK_URL", secret_url.as_str()),
        ("RUST_LOG", "debug"),
    ];
    let mut server =
        ChildServer::spawn_ready_with(dir.path(), &db, &sources, "", 0, &env, |_| {}).await;
    let body = br#"{"ref": "refs/heads/main"}"#;
    let r = reqwest::Client::new()
        .post(server.url("/hooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", "guid-1")
        .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let id = json(r).await["id"].as_i64().unwrap();
    eventually("both deliveries to settle", || {
        (delivery(&db, id, "discord").0 == "delivered" && delivery(&db, id, "literal").0 == "dead")
            .then_some(())
    })
    .await;

    // The reference named the right place, path and all.
    let hits = down.hits();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].uri.path(), format!("/api/webhooks/1234/{TOKEN}"));
    assert_eq!(
        &hits[0].body[..],
        br#"{"content":"pushed refs/heads/main"}"#
    );
    // The receiver's answer is kept, but not the path it echoed.
    let error = delivery(&db, id, "literal").1.unwrap();
    assert!(
        error.starts_with("HTTP 404: no webhook at /api/"),
        "{error}"
    );

    let mut shown = vec![("the literal's error", error)];
    let stats = json(server.admin_get("/api/stats").await).await;
    let targets = &stats["sources"][0]["destinations"];
    assert_eq!(
        (&targets["discord"]["target"], &targets["literal"]["target"]),
        (
            &serde_json::json!(format!("http://{}/…", down.addr)),
            &serde_json::json!(format!("http://{echo}/…"))
        ),
        "{stats}"
    );
    shown.push(("/api/stats", stats.to_string()));
    let event = json(server.admin_get(&format!("/api/events/{id}")).await).await;
    shown.push(("/api/events/{id}", event.to_string()));
    for destination in ["discord", "literal"] {
        let tried = json(
            server
                .admin_post(
                    "/api/try",
                    serde_json::json!({"source": "github", "destination": destination, "event": id}),
                )
                .await,
        )
        .await;
        assert!(tried["trials"][0]["request"]["url"].is_string(), "{tried}");
        shown.push(("/api/try", tried.to_string()));
    }

    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let cookie = dashboard_cookie(server.admin_url("/login")).await;
    for path in [
        "/".to_owned(),
        format!("/events/{id}"),
        "/sources/github".to_owned(),
        "/destinations/github/discord/try?last=1".to_owned(),
        "/destinations/github/literal/try?last=1".to_owned(),
    ] {
        let page = browser
            .get(server.admin_url(&path))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200, "{path}");
        let page = page.text().await.unwrap();
        if path.contains("discord/try") {
            assert!(
                page.contains(&format!("POST http://{}/…", down.addr)),
                "{page}"
            );
        }
        shown.push(("the dashboard", page));
    }

    let config = dir.path().join("hookbox.toml");
    let check = hookbox()
        .env("DISCORD_WEBHOOK_URL", &secret_url)
        .arg("check")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let check = text(&check);
    assert!(
        check.contains(r#"url = "env:DISCORD_WEBHOOK_URL""#)
            && check.contains(&format!(r#"url = "http://{echo}/…""#)),
        "{check}"
    );
    shown.push(("hookbox check", check));
    for destination in ["discord", "literal"] {
        let tried = hookbox()
            .env("DISCORD_WEBHOOK_URL", &secret_url)
            .args(["try", "github", destination, "--last", "1", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let tried = text(&tried);
        assert!(tried.contains("would send\n  POST http://"), "{tried}");
        shown.push(("hookbox try", tried));
    }
    // Without the variable `try` still shows the body, and no URL.
    let tried = hookbox()
        .args(["try", "github", "discord", "--last", "1", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let tried = text(&tried);
    assert!(
        tried.contains(r#"{"content":"pushed refs/heads/main"}"#),
        "{tried}"
    );
    shown.push(("hookbox try without the variable", tried));

    server.terminate(Duration::from_secs(10)).await;
    let log = server.output();
    assert!(log.contains("DEBUG"), "the log is at debug level:\n{log}");
    shown.push(("the server's log", log));

    for (place, text) in shown {
        for part in [TOKEN, LITERAL_TOKEN, "webhooks/1234"] {
            assert!(!text.contains(part), "{place} shows {part}:\n{text}");
        }
    }
}
