//! The admin listener: token auth, the JSON API, and that none of it is
//! reachable on the public port. Replay runs against the recording
//! downstream of `helpers::Downstream`; the generated token is checked through the
//! real binary, whose log must name the file and never hold the token.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

/// A github source without a destination: events are `stored`.
const INBOX: &str = r#"
[[sources]]
name = "inbox"
kind = "github"
secrets = ["test-secret"]
"#;

#[tokio::test]
async fn every_admin_route_needs_the_bearer_token_but_the_health_checks_do_not() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let client = &app.client;
    for path in ["/api/events", "/api/events/1", "/api/stats", "/metrics"] {
        let url = app.admin_url(path);
        let attempts = [
            client.get(&url),
            client.get(&url).bearer_auth("wrong-token-wrong-token"),
            client.get(&url).bearer_auth(format!("{ADMIN_TOKEN}x")),
            client.get(&url).basic_auth("admin", Some(ADMIN_TOKEN)),
            client.get(&url).header("authorization", ADMIN_TOKEN),
        ];
        for request in attempts {
            let r = request.send().await.unwrap();
            assert_eq!(r.status(), 401, "{path}");
            assert_eq!(r.headers()["www-authenticate"], "Bearer");
            assert_eq!(json(r).await, json!({"error": "unauthorized"}));
        }
    }
    let r = client
        .post(app.admin_url("/api/replay"))
        .json(&json!({"state": "dead"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    for path in ["/api/events", "/api/stats", "/api/catch-up", "/metrics"] {
        assert_eq!(app.admin_get(path).await.status(), 200, "{path}");
    }
    // The scheme is case-insensitive.
    let r = client
        .get(app.admin_url("/api/stats"))
        .header("authorization", format!("bearer {ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // No route, no secret to guard: 404 either way.
    let r = app.admin_get("/no/such/route").await;
    assert_eq!(r.status(), 404);
    assert_eq!(json(r).await, json!({"error": "not_found"}));
    let r = client
        .get(app.admin_url("/no/such/route"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    for path in ["/healthz", "/readyz"] {
        let r = client.get(app.admin_url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn nothing_admin_is_reachable_on_the_public_listener() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    for path in [
        "/api/events",
        "/api/events/1",
        "/api/stats",
        "/api/catch-up",
        "/metrics",
        "/",
    ] {
        let r = app
            .client
            .get(app.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    for path in [
        "/api/replay",
        "/api/events/1/replay",
        "/api/sources/github/catch-up",
    ] {
        let r = app
            .client
            .post(app.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({"state": "dead"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    app.shutdown().await;
}

/// Pages through `/api/events` with `limit`, returning every id seen.
async fn page_through(app: &TestApp, query: &str, limit: usize) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let cursor = before.map(|b| format!("&before={b}")).unwrap_or_default();
        let r = app
            .admin_get(&format!("/api/events?limit={limit}{query}{cursor}"))
            .await;
        assert_eq!(r.status(), 200);
        let page = json(r).await;
        let events = page["events"].as_array().unwrap();
        assert!(events.len() <= limit);
        ids.extend(events.iter().map(|e| e["id"].as_i64().unwrap()));
        match page["next_before"].as_i64() {
            Some(next) => before = Some(next),
            None => return ids,
        }
        // Let the inserts interleave with the pages.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn paging_never_skips_or_repeats_a_row_while_events_arrive() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    for i in 0..60 {
        assert_eq!(
            app.post_github(&format!("before-{i}"), b"{}")
                .await
                .status(),
            202
        );
    }
    let addr = app.addr;
    let inserting = tokio::spawn(async move {
        for i in 0..150 {
            post_event(
                addr,
                "github",
                &format!("during-{i}"),
                "application/json",
                b"{}",
            )
            .await;
        }
    });
    let ids = page_through(&app, "", 7).await;
    let still_running = !inserting.is_finished();
    inserting.await.unwrap();
    assert!(still_running, "the inserts ended before the paging did");

    let unique: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "a row was repeated");
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "not newest first");
    // Every row that existed when the first page was read is there.
    let first = ids[0];
    let expected: Vec<i64> = app
        .db()
        .prepare("SELECT id FROM events WHERE id <= ?1 ORDER BY id DESC")
        .unwrap()
        .query_map([first], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ids, expected, "a row was skipped");
    assert!(ids.len() >= 60);
    assert!(app.count("SELECT count(*) FROM events") as usize > ids.len());
    app.shutdown().await;
}

#[tokio::test]
async fn bad_filters_are_refused_with_a_reason_and_good_ones_filter() {
    let app = TestApp::spawn(&format!("{GITHUB_SOURCE}{INBOX}")).await;
    for (query, names) in [
        ("state=lost", "state"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("before=abc", "before"),
        ("before=-3", "before"),
        ("since=yesterday", "since"),
        ("until=12h", "until"),
        ("colour=red", "colour"),
    ] {
        let r = app.admin_get(&format!("/api/events?{query}")).await;
        assert_eq!(r.status(), 400, "{query}");
        let body = json(r).await;
        assert_eq!(body["error"], "invalid_filter", "{query}: {body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains(names), "{query}: {detail}");
    }
    let r = app.admin_get("/api/catch-up?limit=9999").await;
    assert_eq!(r.status(), 400);

    assert_eq!(app.post_github("g-1", b"{}").await.status(), 202);
    let r = app
        .client
        .post(app.url("/hooks/inbox"))
        .header("x-github-event", "issues")
        .header("x-github-delivery", "i-1")
        .header(
            "x-hub-signature-256",
            github_signature(GITHUB_SECRET, b"{}"),
        )
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let listed = |q: &'static str| {
        let app = &app;
        async move {
            let page = json(app.admin_get(&format!("/api/events?{q}")).await).await;
            page["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["delivery_id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed("source=inbox").await, ["i-1"]);
    assert_eq!(listed("event_type=push").await, ["g-1"]);
    assert_eq!(listed("state=stored").await, ["i-1", "g-1"]);
    assert!(listed("state=dead").await.is_empty());
    assert!(listed("since=2999-01-01T00:00:00Z").await.is_empty());
    assert_eq!(listed("until=2999-01-01T00:00:00Z&limit=1").await, ["i-1"]);
    app.shutdown().await;
}

#[tokio::test]
async fn an_event_shows_its_headers_its_body_as_text_or_base64_and_its_attempts() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let text = "{\"msg\":\"héllo\"}";
    let text_id = json(app.post_github("utf8", text.as_bytes()).await).await["id"]
        .as_i64()
        .unwrap();
    let binary = [0xffu8, 0xfe, 0x00, 0x80];
    let binary_id = post_event(
        app.addr,
        "github",
        "bin",
        "application/octet-stream",
        &binary,
    )
    .await;

    let shown = json(app.admin_get(&format!("/api/events/{text_id}")).await).await;
    assert_eq!(shown["id"], text_id);
    assert_eq!(shown["source"], "github");
    assert_eq!(shown["delivery_id"], "utf8");
    assert_eq!(shown["event_type"], "push");
    assert_eq!(shown["state"], "stored");
    assert_eq!(shown["content_type"], "application/json");
    assert_eq!(shown["headers"]["x-github-event"], "push");
    assert_eq!(shown["headers"]["x-github-delivery"], "utf8");
    assert_eq!(shown["body"], json!({"encoding": "utf8", "text": text}));
    assert_eq!(shown["body_size"], text.len());
    assert_eq!(shown["attempt_log"], json!([]));

    let shown = json(app.admin_get(&format!("/api/events/{binary_id}")).await).await;
    assert_eq!(
        shown["body"],
        json!({"encoding": "base64", "data": "//4AgA=="})
    );

    // Retention dropped the body: it is null, the rest stays.
    app.db()
        .execute("UPDATE events SET body = NULL WHERE id = ?1", [binary_id])
        .unwrap();
    let shown = json(app.admin_get(&format!("/api/events/{binary_id}")).await).await;
    assert_eq!(shown["body"], Value::Null);
    assert_eq!(shown["body_size"], Value::Null);

    for missing in ["999999", "abc", "0"] {
        let r = app.admin_get(&format!("/api/events/{missing}")).await;
        assert_eq!(r.status(), 404, "{missing}");
        assert_eq!(json(r).await["error"], "unknown_event");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn replay_through_the_api_ends_in_delivery_of_the_same_row() {
    // Every delivery is refused for good (410) until the script changes.
    let downstream = Downstream::start(|_, _| Reply::status(410)).await;
    let sources = format!(
        "{}{INBOX}",
        deliver_source("github", &url_destination(&downstream.url()), "5s", 3)
    );
    let app = TestApp::spawn(&sources).await;
    let body = br#"{"repository":{"full_name":"acme/a"}}"#;
    let one = post_event(app.addr, "github", "one", "application/json", body).await;
    let two = post_event(app.addr, "github", "two", "application/json", b"{}").await;
    let three = post_event(app.addr, "github", "three", "application/json", b"{}").await;
    for id in [one, two, three] {
        wait_for_state(&app.db_path, id, "dead").await;
    }
    let shown = json(app.admin_get(&format!("/api/events/{one}")).await).await;
    assert_eq!(shown["attempt_log"][0]["outcome"], "dead");
    assert_eq!(shown["attempt_log"][0]["status_code"], 410);

    // The downstream is fixed, but slow for "one", so it stays pending
    // long enough to see a second replay refused.
    downstream.set_script(|delivery, _| {
        let reply = Reply::status(200);
        if delivery == "one" {
            reply.after(Duration::from_millis(800))
        } else {
            reply
        }
    });
    let r = app
        .admin_post(&format!("/api/events/{one}/replay"), json!({}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await, json!({"replayed": 1}));
    let r = app
        .admin_post(&format!("/api/events/{one}/replay"), json!({}))
        .await;
    assert_eq!(r.status(), 409);
    assert_eq!(json(r).await["error"], "already_pending");
    wait_for_state(&app.db_path, one, "delivered").await;
    assert_eq!(downstream.hits_for("one").len(), 2);
    // Delivered events can be replayed too, and no row is added.
    let r = app
        .admin_post(&format!("/api/events/{one}/replay"), json!({}))
        .await;
    assert_eq!(json(r).await, json!({"replayed": 1}));
    wait_for_state(&app.db_path, one, "delivered").await;

    // Bulk replay by filter: the two dead ones.
    for bad in [
        json!({}),
        json!({"state": "pending"}),
        json!({"state": "dead", "colour": 1}),
    ] {
        let r = app.admin_post("/api/replay", bad.clone()).await;
        assert_eq!(r.status(), 400, "{bad}");
    }
    let r = app
        .admin_post("/api/replay", json!({"state": "dead", "source": "nope"}))
        .await;
    assert_eq!(r.status(), 404);
    let r = app
        .admin_post(
            "/api/replay",
            json!({"state": "dead", "source": "github", "since": 0, "until": "2999-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await, json!({"replayed": 2}));
    for id in [two, three] {
        wait_for_state(&app.db_path, id, "delivered").await;
    }
    assert_eq!(app.count("SELECT count(*) FROM events"), 3);

    // A source without a destination refuses, and unknown ids are 404.
    let stored = post_event(app.addr, "inbox", "kept", "application/json", b"{}").await;
    let r = app
        .admin_post(&format!("/api/events/{stored}/replay"), json!({}))
        .await;
    assert_eq!(r.status(), 409);
    assert_eq!(json(r).await["error"], "no_destination");
    let r = app
        .admin_post("/api/replay", json!({"state": "dead", "source": "inbox"}))
        .await;
    assert_eq!(r.status(), 409);
    let r = app.admin_post("/api/events/424242/replay", json!({})).await;
    assert_eq!(r.status(), 404);
    app.shutdown().await;
}

#[tokio::test]
async fn stats_count_per_source_and_state_and_catch_up_runs_are_listed() {
    let app = TestApp::spawn(&format!("{GITHUB_SOURCE}{INBOX}")).await;
    for i in 0..3 {
        assert_eq!(
            app.post_github(&format!("s-{i}"), b"{}").await.status(),
            202
        );
    }
    app.db()
        .execute(
            "INSERT INTO catchup_runs (source, job, started_at, finished_at, seen, asked, complete)
             VALUES ('github', 'github_redelivery', 1000, 2000, 5, 1, 1)",
            [],
        )
        .unwrap();
    let stats = json(app.admin_get("/api/stats").await).await;
    let sources = stats["sources"].as_array().unwrap();
    let github = sources.iter().find(|s| s["source"] == "github").unwrap();
    assert_eq!(github["counts"]["stored"], 3);
    assert_eq!(github["counts"]["dead"], 0);
    let inbox = sources.iter().find(|s| s["source"] == "inbox").unwrap();
    assert_eq!(inbox["counts"]["stored"], 0);
    assert_eq!(stats["totals"]["stored"], 3);
    assert_eq!(stats["oldest_pending_age_seconds"], Value::Null);
    assert_eq!(stats["last_catch_up"][0]["job"], "github_redelivery");
    assert_eq!(stats["last_catch_up"][0]["asked"], 1);

    let runs = json(app.admin_get("/api/catch-up?source=github").await).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1);
    assert_eq!(runs["runs"][0]["complete"], true);
    let none = json(app.admin_get("/api/catch-up?source=inbox").await).await;
    assert_eq!(none["runs"], json!([]));

    let r = app
        .admin_post("/api/sources/nope/catch-up", json!({}))
        .await;
    assert_eq!(r.status(), 404);
    assert_eq!(json(r).await["error"], "unknown_source");
    let r = app
        .admin_post("/api/sources/github/catch-up", json!({}))
        .await;
    assert_eq!(r.status(), 409);
    assert_eq!(json(r).await["error"], "no_catch_up");
    app.shutdown().await;
}

/// A GitHub API whose hook has no deliveries at all.
async fn empty_github() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let router = axum::Router::new().fallback(|| async { axum::Json(json!([])) });
    serve_loopback(|_| router).await
}

#[tokio::test]
async fn a_catch_up_pass_runs_on_demand_and_is_listed() {
    let (github, fake) = empty_github().await;
    let sources = format!(
        "{GITHUB_SOURCE}[sources.github_redelivery]\nrepo = \"acme/shop\"\nhook_id = 1\ntoken = \"ghp_test\"\napi_url = \"http://{github}\"\n"
    );
    let app = TestApp::spawn(&sources).await;
    // The start-up pass may hold the job's lock for a moment: 409 busy.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let report = loop {
        let r = app
            .admin_post("/api/sources/github/catch-up?dry_run=true", json!({}))
            .await;
        match r.status().as_u16() {
            200 => break json(r).await,
            409 => assert_eq!(json(r).await["error"], "busy"),
            other => panic!("{other}: {}", r.text().await.unwrap()),
        }
        assert!(std::time::Instant::now() < deadline, "always busy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(report["source"], "github");
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["complete"], true, "{report}");
    let run_id = report["run_id"].as_i64().unwrap();
    let runs = json(app.admin_get("/api/catch-up").await).await;
    let listed = runs["runs"].as_array().unwrap();
    assert!(listed.iter().any(|r| r["id"] == run_id), "{runs}");
    let r = app
        .admin_post("/api/sources/github/catch-up?dry_run=maybe", json!({}))
        .await;
    assert_eq!(r.status(), 400);
    app.shutdown().await;
    fake.abort();
}

// ------------------------------------------------- generated token ---

/// Runs `hookbox serve` until it answers on the admin port, then checks
/// `token` is accepted, stops it with SIGTERM and returns its log.
async fn serve_once(
    config: &std::path::Path,
    admin_port: u16,
    token_file: &std::path::Path,
) -> (String, String) {
    let child = tokio::process::Command::from(hookbox())
        .args(["serve", "--config"])
        .arg(config)
        .env("RUST_LOG", "hookbox=debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{admin_port}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await
            && r.status() == 200
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "hookbox did not come up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let token = std::fs::read_to_string(token_file)
        .unwrap()
        .trim()
        .to_owned();
    let ok = client
        .get(format!("{base}/api/stats"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let wrong = client
        .get(format!("{base}/api/stats"))
        .bearer_auth(format!("{token}0"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (token, log)
}

#[tokio::test]
async fn without_a_configured_token_one_is_generated_0600_reused_and_never_logged() {
    let dir = tempfile::tempdir().unwrap();
    let admin_port = free_port();
    let config = dir.path().join("hookbox.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{admin_port}\"\ndatabase = {:?}\n",
            free_port(),
            dir.path().join("hookbox.db").display().to_string()
        ),
    )
    .unwrap();
    let token_file = dir.path().join("admin-token");

    let (first, log) = serve_once(&config, admin_port, &token_file).await;
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    assert_eq!(first.len(), 64, "32 random bytes, hex");
    assert!(
        log.contains(&token_file.display().to_string()),
        "the path is not logged:\n{log}"
    );
    assert!(!log.contains(&first), "the token leaked into the log");

    let (second, log) = serve_once(&config, admin_port, &token_file).await;
    assert_eq!(first, second, "the token changed across restarts");
    assert!(log.contains("admin token read"), "{log}");
    assert!(!log.contains(&second), "the token leaked into the log");
}
