//! Routes as the operator sees them: each event's deliveries in the API,
//! the destination filter, replay per destination (also to one the event
//! never went to), per-destination stats and metrics, the dashboard, and
//! the CLI's `events --destination`, `replay --destination` and `check`.
//!
//! One source, `github`, with three url destinations on three recording
//! downstreams: `chat` (every event), `ci` (every event) and `deploy`
//! (only `release` events).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::redirect::Policy;
use serde_json::{Value, json};

use crate::helpers::*;

/// The three downstreams, by destination.
struct Downstreams {
    chat: Downstream,
    ci: Downstream,
    deploy: Downstream,
}

impl Downstreams {
    /// `chat` refuses for good (410) until told otherwise; the others take all.
    async fn start() -> Downstreams {
        Downstreams {
            chat: Downstream::start(|_, _| Reply::status(410)).await,
            ci: Downstream::start(|_, _| Reply::status(204)).await,
            deploy: Downstream::start(|_, _| Reply::status(204)).await,
        }
    }
}

/// One `[[sources.deliver]]` table; `extra` adds lines (a filter).
fn destination(name: &str, down: &Downstream, extra: &str) -> String {
    format!(
        r#"
[[sources.deliver]]
name = "{name}"
url = "{}"
signing_secret = "{SIGNING_SECRET}"
timeout = "5s"
max_attempts = 2
backoff_base = "50ms"
backoff_cap = "200ms"
{extra}
"#,
        down.url()
    )
}

/// The `github` source with the destinations given (`chat`, `ci`, `deploy`).
fn github_with(downs: &Downstreams, names: &[&str]) -> String {
    let mut text = format!(
        "[[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n"
    );
    for name in names {
        text.push_str(&match *name {
            "chat" => destination("chat", &downs.chat, ""),
            "ci" => destination("ci", &downs.ci, ""),
            "deploy" => destination("deploy", &downs.deploy, "events = [\"release\"]"),
            other => panic!("no destination {other}"),
        });
    }
    text
}

/// POSTs a signed GitHub delivery of type `event_type`; the 202's id.
async fn post(app: &TestApp, delivery: &str, event_type: &str) -> i64 {
    let body = format!(r#"{{"n":"{delivery}"}}"#);
    let r = app
        .client
        .post(app.url("/hooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", event_type)
        .header("x-github-delivery", delivery)
        .header(
            "x-hub-signature-256",
            github_signature(GITHUB_SECRET, body.as_bytes()),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "posting {delivery}");
    json(r).await["id"].as_i64().unwrap()
}

/// `GET /api/events/{id}`.
async fn event(app: &TestApp, id: i64) -> Value {
    let r = app.admin_get(&format!("/api/events/{id}")).await;
    assert_eq!(r.status(), 200);
    json(r).await
}

/// `(destination, state)` of each delivery of a shown event.
fn states(shown: &Value) -> Vec<(String, String)> {
    shown["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["destination"].as_str().unwrap().to_owned(),
                d["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Waits until event `id`'s deliveries are exactly `want`, as the API
/// shows them; returns the event.
async fn wait_for(app: &TestApp, id: i64, want: &[(&str, &str)]) -> Value {
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(d, s)| ((*d).to_owned(), (*s).to_owned()))
        .collect();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let shown = event(app, id).await;
        if states(&shown) == want {
            return shown;
        }
        assert!(
            Instant::now() < deadline,
            "event {id}: wanted {want:?}, last seen {shown:#}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The ids of `GET /api/events?{query}`.
async fn listed(app: &TestApp, query: &str) -> Vec<i64> {
    let r = app.admin_get(&format!("/api/events?{query}")).await;
    assert_eq!(r.status(), 200, "{query}");
    json(r).await["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect()
}

/// `POST path` with `body` as it is (no content type unless JSON is given).
async fn post_raw(app: &TestApp, path: &str, body: Option<&str>) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.admin_url(path))
        .bearer_auth(&app.admin_token);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_owned());
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn an_event_shows_each_destination_s_delivery_and_each_attempt_names_its_destination() {
    let downs = Downstreams::start().await;
    let app = TestApp::spawn(&github_with(&downs, &["chat", "ci", "deploy"])).await;
    let id = post(&app, "one", "push").await;
    let shown = wait_for(&app, id, &[("chat", "dead"), ("ci", "delivered")]).await;

    assert_eq!(shown["state"], "dead");
    let chat = &shown["deliveries"][0];
    assert_eq!(chat["attempts"], 1);
    assert!(
        chat["last_error"].as_str().unwrap().contains("410"),
        "{chat}"
    );
    assert_eq!(chat["next_attempt_at"], Value::Null);
    assert_eq!(chat["delivered_at"], Value::Null);
    assert_eq!(chat["configured"], true);
    let ci = &shown["deliveries"][1];
    assert_eq!(
        (ci["attempts"].as_i64(), ci["last_error"].as_str()),
        (Some(1), None)
    );
    assert!(ci["delivered_at"].as_i64().unwrap() > 0, "{ci}");
    // The event's figures sum up its deliveries.
    assert_eq!(shown["attempts"], 2);
    assert_eq!(shown["last_error"], chat["last_error"]);
    assert_eq!(shown["next_attempt_at"], Value::Null);
    let mut log: Vec<(String, String)> = shown["attempt_log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["destination"].as_str().unwrap().to_owned(),
                a["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    log.sort();
    assert_eq!(
        log,
        [
            ("chat".to_owned(), "dead".to_owned()),
            ("ci".to_owned(), "delivered".to_owned())
        ]
    );
    assert!(downs.deploy.hits().is_empty(), "deploy takes releases only");

    // What a version-8 database leaves in the event's own columns never
    // shows: the figures are the deliveries'.
    app.db()
        .execute(
            "UPDATE events SET attempts = 99, last_error = 'stale', next_attempt_at = 1 WHERE id = ?1",
            [id],
        )
        .unwrap();
    let shown = event(&app, id).await;
    assert_eq!(
        (&shown["attempts"], &shown["next_attempt_at"]),
        (&json!(2), &Value::Null)
    );
    assert_ne!(shown["last_error"], "stale");
    let listed = json(app.admin_get("/api/events").await).await;
    assert_eq!(listed["events"][0]["attempts"], 2);
    assert_ne!(listed["events"][0]["last_error"], "stale");
    app.shutdown().await;
}

#[tokio::test]
async fn the_event_list_filters_on_a_destination_and_on_the_state_of_the_delivery_there() {
    let downs = Downstreams::start().await;
    let app = TestApp::spawn(&github_with(&downs, &["chat", "ci", "deploy"])).await;
    let push = post(&app, "push-1", "push").await;
    let release = post(&app, "release-1", "release").await;
    let push2 = post(&app, "push-2", "push").await;
    for id in [push, push2] {
        wait_for(&app, id, &[("chat", "dead"), ("ci", "delivered")]).await;
    }
    wait_for(
        &app,
        release,
        &[
            ("chat", "dead"),
            ("ci", "delivered"),
            ("deploy", "delivered"),
        ],
    )
    .await;

    assert_eq!(listed(&app, "destination=deploy").await, [release]);
    assert_eq!(listed(&app, "destination=ci").await, [push2, release, push]);
    assert_eq!(
        listed(&app, "destination=chat&state=dead&source=github").await,
        [push2, release, push]
    );
    assert!(listed(&app, "destination=ci&state=dead").await.is_empty());
    assert!(listed(&app, "destination=nowhere").await.is_empty());
    // The event-level state: every event is dead (chat), none delivered.
    assert!(listed(&app, "state=delivered").await.is_empty());
    assert_eq!(
        listed(&app, "destination=ci&state=delivered&event_type=push").await,
        [push2, push]
    );

    // With a destination, each event carries its delivery there.
    let page = json(app.admin_get("/api/events?destination=ci&limit=1").await).await;
    assert_eq!(page["events"][0]["id"], push2);
    assert_eq!(page["events"][0]["state"], "dead");
    assert_eq!(page["events"][0]["delivery"]["destination"], "ci");
    assert_eq!(page["events"][0]["delivery"]["state"], "delivered");
    // Cursor paging keeps the filter.
    let before = page["next_before"].as_i64().unwrap();
    assert_eq!(
        listed(&app, &format!("destination=ci&limit=1&before={before}")).await,
        [release]
    );

    // A delivery is never `stored`.
    let r = app
        .admin_get("/api/events?destination=ci&state=stored")
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(json(r).await["error"], "invalid_filter");
    app.shutdown().await;
}

#[tokio::test]
async fn replay_of_one_event_names_a_destination_or_takes_every_dead_and_delivered_delivery() {
    let downs = Downstreams::start().await;
    let app = TestApp::spawn(&github_with(&downs, &["chat", "ci", "deploy"])).await;
    let id = post(&app, "one", "push").await;
    wait_for(&app, id, &[("chat", "dead"), ("ci", "delivered")]).await;
    let path = format!("/api/events/{id}/replay");

    // Unknown destination, bad body.
    let r = app.admin_post(&path, json!({"destination": "nope"})).await;
    assert_eq!(r.status(), 404);
    assert_eq!(json(r).await["error"], "unknown_destination");
    let r = app
        .admin_post(&path, json!({"destination": "chat", "x": 1}))
        .await;
    assert_eq!(r.status(), 400);
    let r = post_raw(&app, &path, Some("{not json")).await;
    assert_eq!(r.status(), 400);

    // Only chat's delivery moves; ci is not sent again.
    downs.chat.set_script(|_, _| Reply::status(204));
    let r = app.admin_post(&path, json!({"destination": "chat"})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await, json!({"replayed": 1}));
    wait_for(&app, id, &[("chat", "delivered"), ("ci", "delivered")]).await;
    assert_eq!(downs.chat.hits().len(), 2);
    assert_eq!(downs.ci.hits().len(), 1);

    // A destination the event never went to gets a delivery (no filter:
    // the operator named the event), held open to see a second refused.
    let gate = crate::helpers::Gate::new();
    let held = gate.clone();
    downs
        .deploy
        .set_script(move |_, _| Reply::status(204).until(held.clone()));
    let r = app
        .admin_post(&path, json!({"destination": "deploy"}))
        .await;
    assert_eq!(json(r).await, json!({"replayed": 1}));
    downs.deploy.wait_for_hits(1).await;
    let r = app
        .admin_post(&path, json!({"destination": "deploy"}))
        .await;
    assert_eq!(r.status(), 409);
    assert_eq!(json(r).await["error"], "already_pending");
    // No destination named: what is dead or delivered moves, the pending
    // one waits.
    let r = post_raw(&app, &path, None).await;
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await, json!({"replayed": 2}));
    gate.open();
    wait_for(
        &app,
        id,
        &[
            ("chat", "delivered"),
            ("ci", "delivered"),
            ("deploy", "delivered"),
        ],
    )
    .await;
    assert_eq!(downs.ci.hits().len(), 2);
    assert_eq!(downs.deploy.hits().len(), 1);
    assert_eq!(app.count("SELECT count(*) FROM events"), 1, "no new row");
    app.shutdown().await;
}

#[tokio::test]
async fn a_destination_added_later_gets_the_old_events_its_filter_takes() {
    let downs = Downstreams::start().await;
    let before = github_with(&downs, &["ci"]);
    let app = TestApp::spawn(&before).await;
    let old_push = post(&app, "old-push", "push").await;
    let old_release = post(&app, "old-release", "release").await;
    for id in [old_push, old_release] {
        wait_for(&app, id, &[("ci", "delivered")]).await;
    }
    let cut = hookbox::support::clock::now_ms() + 1;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let new_release = post(&app, "new-release", "release").await;
    wait_for(&app, new_release, &[("ci", "delivered")]).await;
    let dir = app.shutdown().await;

    // deploy joins the config: nothing is sent to it by itself.
    let app = TestApp::spawn_in(dir, &github_with(&downs, &["ci", "deploy"]), "").await;
    for bad in [
        json!({"destination": "deploy"}),
        json!({}),
        json!({"source": "github", "destination": "deploy", "state": "pending"}),
    ] {
        let r = app.admin_post("/api/replay", bad.clone()).await;
        assert_eq!(r.status(), 400, "{bad}");
    }
    let r = app
        .admin_post(
            "/api/replay",
            json!({"source": "github", "destination": "nope"}),
        )
        .await;
    assert_eq!(r.status(), 404);
    assert_eq!(json(r).await["error"], "unknown_destination");
    // Only what happened before the cut, and only releases (its filter).
    let r = app
        .admin_post(
            "/api/replay",
            json!({"source": "github", "destination": "deploy", "until": cut}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await, json!({"replayed": 1}));
    wait_for(
        &app,
        old_release,
        &[("ci", "delivered"), ("deploy", "delivered")],
    )
    .await;
    assert_eq!(
        states(&event(&app, old_push).await),
        [("ci".into(), "delivered".into())]
    );
    assert_eq!(states(&event(&app, new_release).await).len(), 1);
    assert_eq!(downs.deploy.hits().len(), 1);
    assert_eq!(downs.ci.hits().len(), 3, "ci is not sent anything again");

    // The same from the CLI, over the rest of the range; run again, it
    // puts the delivered one back (a replay) and creates nothing new.
    let config = cli_config(&app, &github_with(&downs, &["ci", "deploy"]));
    let since = cut.to_string();
    let out = cli(
        &config,
        &[
            "replay",
            "--source",
            "github",
            "--destination",
            "deploy",
            "--since",
            &since,
        ],
    )
    .await;
    assert!(
        out.contains("1 delivery put back to pending or created"),
        "{out}"
    );
    wait_for(
        &app,
        new_release,
        &[("ci", "delivered"), ("deploy", "delivered")],
    )
    .await;
    let out = cli(
        &config,
        &["replay", "--source", "github", "--destination", "deploy"],
    )
    .await;
    assert!(out.contains("2 deliveries put back"), "{out}");
    assert_eq!(
        app.count("SELECT count(*) FROM deliveries WHERE destination = 'deploy'"),
        2
    );
    app.shutdown().await;
}

#[tokio::test]
async fn bulk_replay_by_state_takes_each_configured_destination_or_the_one_named() {
    let downs = Downstreams::start().await;
    let app = TestApp::spawn(&github_with(&downs, &["chat", "ci"])).await;
    let one = post(&app, "one", "push").await;
    let two = post(&app, "two", "push").await;
    for id in [one, two] {
        wait_for(&app, id, &[("chat", "dead"), ("ci", "delivered")]).await;
    }
    downs.chat.set_script(|_, _| Reply::status(204));
    // Dead at ci: none.
    let r = app
        .admin_post(
            "/api/replay",
            json!({"source": "github", "destination": "ci", "state": "dead"}),
        )
        .await;
    assert_eq!(json(r).await, json!({"replayed": 0}));
    let r = app
        .admin_post("/api/replay", json!({"state": "dead", "source": "github"}))
        .await;
    assert_eq!(json(r).await, json!({"replayed": 2}));
    for id in [one, two] {
        wait_for(&app, id, &[("chat", "delivered"), ("ci", "delivered")]).await;
    }
    let r = app
        .admin_post(
            "/api/replay",
            json!({"source": "github", "destination": "ci", "state": "delivered"}),
        )
        .await;
    assert_eq!(json(r).await, json!({"replayed": 2}));
    for id in [one, two] {
        wait_for(&app, id, &[("chat", "delivered"), ("ci", "delivered")]).await;
    }
    assert_eq!(downs.ci.hits().len(), 4);
    assert_eq!(downs.chat.hits().len(), 4);
    app.shutdown().await;
}

/// A destination's breaker in `/api/stats` when it was never paused.
static OPEN: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(
    || json!({"state": "open", "paused_by": null, "paused_since": null, "next_probe_at": null, "held_until": null}),
);

#[tokio::test]
async fn stats_and_metrics_count_each_destination_and_name_those_gone_from_the_config() {
    let downs = Downstreams::start().await;
    let app = TestApp::spawn(&github_with(&downs, &["chat", "ci", "deploy"])).await;
    let one = post(&app, "one", "push").await;
    let two = post(&app, "two", "push").await;
    for id in [one, two] {
        wait_for(&app, id, &[("chat", "dead"), ("ci", "delivered")]).await;
    }
    let stats = json(app.admin_get("/api/stats").await).await;
    let github = &stats["sources"][0];
    assert_eq!(github["source"], "github");
    assert_eq!(github["counts"]["dead"], 2);
    let d = &github["destinations"];
    assert_eq!(
        d["chat"],
        json!({"pending": 0, "delivered": 0, "dead": 2, "skipped": 0, "oldest_pending_at": null, "configured": true,
               "status": OPEN.clone(), "kind": "url", "target": format!("http://{}/…", downs.chat.addr)})
    );
    assert_eq!(
        (&d["ci"]["delivered"], &d["ci"]["configured"]),
        (&json!(2), &json!(true))
    );
    // Configured and never used: listed at zero.
    assert_eq!(
        d["deploy"],
        json!({"pending": 0, "delivered": 0, "dead": 0, "skipped": 0, "oldest_pending_at": null, "configured": true,
               "status": OPEN.clone(), "kind": "url", "target": format!("http://{}/…", downs.deploy.addr)})
    );
    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    for line in [
        r#"hookbox_dead_events{source="github"} 2"#,
        r#"hookbox_dead_deliveries{source="github",destination="chat"} 2"#,
        r#"hookbox_dead_deliveries{source="github",destination="ci"} 0"#,
        r#"hookbox_pending_deliveries{source="github",destination="deploy"} 0"#,
        r#"hookbox_oldest_pending_delivery_age_seconds{source="github",destination="ci"} 0.0"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line} in\n{metrics}"
        );
    }
    let dir = app.shutdown().await;

    // chat leaves the config; its rows stay, shown as not configured.
    let app = TestApp::spawn_in(dir, &github_with(&downs, &["ci"]), "").await;
    let stats = json(app.admin_get("/api/stats").await).await;
    let d = &stats["sources"][0]["destinations"];
    assert_eq!(
        (&d["chat"]["dead"], &d["chat"]["configured"]),
        (&json!(2), &json!(false))
    );
    assert_eq!(d["deploy"], Value::Null);
    let shown = event(&app, one).await;
    assert_eq!(shown["deliveries"][0]["configured"], false);
    assert_eq!(shown["deliveries"][1]["configured"], true);
    // A replay of the event puts back only what would be dispatched.
    let r = app
        .admin_post(&format!("/api/events/{one}/replay"), json!({}))
        .await;
    assert_eq!(json(r).await, json!({"replayed": 1}));
    wait_for(&app, one, &[("chat", "dead"), ("ci", "delivered")]).await;
    let r = app
        .admin_post(
            &format!("/api/events/{one}/replay"),
            json!({"destination": "chat"}),
        )
        .await;
    assert_eq!(r.status(), 404);
    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"hookbox_dead_deliveries{source="github",destination="chat"} 2"#),
        "{metrics}"
    );
    app.shutdown().await;
}

// ------------------------------------------------------------ dashboard ---

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// Logs in; the session cookie and the page's CSRF token.
async fn login(app: &TestApp) -> (String, String) {
    let r = no_redirects()
        .post(app.admin_url("/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={ADMIN_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = page(app, "/", &cookie).await;
    let at = page.find("name=\"csrf\" value=\"").unwrap() + 19;
    let csrf = page[at..].split('"').next().unwrap().to_owned();
    (cookie, csrf)
}

async fn page(app: &TestApp, path: &str, cookie: &str) -> String {
    let r = no_redirects()
        .get(app.admin_url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path}");
    r.text().await.unwrap()
}

#[tokio::test]
async fn the_dashboard_shows_each_delivery_with_its_own_replay_and_counts_per_destination() {
    let downs = Downstreams::start().await;
    let app = TestApp::spawn(&github_with(&downs, &["chat", "ci", "deploy"])).await;
    let id = post(&app, "one", "push").await;
    wait_for(&app, id, &[("chat", "dead"), ("ci", "delivered")]).await;
    let (cookie, csrf) = login(&app).await;

    let shown = page(&app, &format!("/events/{id}"), &cookie).await;
    assert!(shown.contains("<h2>Deliveries</h2>"), "{shown}");
    for name in ["chat", "ci", "deploy"] {
        assert!(
            shown.contains(&format!(
                r#"<input type="hidden" name="destination" value="{name}">"#
            )),
            "no replay of {name}: {shown}"
        );
    }
    assert!(shown.contains("Deliver here"), "{shown}");
    assert!(shown.contains("<th>Destination</th><th>#</th>"), "{shown}");
    assert!(!shown.contains(SIGNING_SECRET), "{shown}");

    let overview = page(&app, "/", &cookie).await;
    assert!(
        overview.contains("/dead?source=github&amp;destination=chat"),
        "{overview}"
    );
    assert!(overview.contains("↳ "), "{overview}");
    let dead = page(&app, "/dead?destination=chat", &cookie).await;
    assert!(dead.contains(&format!("/events/{id}/replay")), "{dead}");
    assert!(dead.contains("Replay all dead at chat"), "{dead}");
    let dead_ci = page(&app, "/dead?destination=ci", &cookie).await;
    assert!(dead_ci.contains("No events."), "{dead_ci}");

    // chat's button: only chat is sent again.
    downs.chat.set_script(|_, _| Reply::status(204));
    let r = no_redirects()
        .post(app.admin_url(&format!("/events/{id}/replay")))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&destination=chat"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], format!("/events/{id}?replayed=1"));
    wait_for(&app, id, &[("chat", "delivered"), ("ci", "delivered")]).await;
    assert_eq!(downs.ci.hits().len(), 1);
    app.shutdown().await;
}

// ------------------------------------------------------------------ CLI ---

/// A config for the CLI on `app`'s database.
fn cli_config(app: &TestApp, sources: &str) -> PathBuf {
    let path = app.dir.path().join("routes-cli.toml");
    write_config(&path, &app.db_path, sources);
    path
}

fn write_config(path: &Path, db: &Path, sources: &str) {
    std::fs::write(
        path,
        format!(
            "[server]\ndatabase = {:?}\n{sources}",
            db.display().to_string()
        ),
    )
    .unwrap();
}

/// Runs the binary; it must succeed. Its stdout.
async fn cli(config: &Path, args: &[&str]) -> String {
    let out = run_cli(config, args).await;
    assert!(out.status.success(), "hookbox {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn run_cli(config: &Path, args: &[&str]) -> std::process::Output {
    tokio::process::Command::from(crate::helpers::hookbox())
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_cli_lists_and_replays_per_destination() {
    let downs = Downstreams::start().await;
    let sources = github_with(&downs, &["chat", "ci"]);
    let app = TestApp::spawn(&sources).await;
    let one = post(&app, "one", "push").await;
    wait_for(&app, one, &[("chat", "dead"), ("ci", "delivered")]).await;
    let config = cli_config(&app, &sources);

    let out = cli(
        &config,
        &[
            "events",
            "--destination",
            "chat",
            "--state",
            "dead",
            "--json",
        ],
    )
    .await;
    let row: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!((&row["id"], &row["state"]), (&json!(one), &json!("dead")));
    assert_eq!(row["destination"], "chat");
    let out = cli(
        &config,
        &["events", "--destination", "ci", "--state", "dead"],
    )
    .await;
    assert_eq!(out.lines().count(), 1, "the header only: {out}");
    let out = run_cli(
        &config,
        &["events", "--destination", "ci", "--state", "stored"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));

    let out = run_cli(
        &config,
        &["replay", &one.to_string(), "--destination", "nope"],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(r#"has no destination "nope""#),
        "{out:?}"
    );
    let out = run_cli(&config, &["replay", "--destination", "chat"]).await;
    assert!(
        !out.status.success(),
        "a new destination's replay needs --source"
    );
    downs.chat.set_script(|_, _| Reply::status(204));
    let out = cli(
        &config,
        &["replay", &one.to_string(), "--destination", "chat"],
    )
    .await;
    assert!(out.contains("1 delivery put back"), "{out}");
    // The running server finds it at its idle recheck.
    wait_for(&app, one, &[("chat", "delivered"), ("ci", "delivered")]).await;
    assert_eq!(downs.ci.hits().len(), 1);
    app.shutdown().await;
}

#[tokio::test]
async fn check_names_a_destination_gone_from_the_config_that_still_holds_deliveries() {
    let downs = Downstreams::start().await;
    let app = TestApp::spawn(&github_with(&downs, &["chat", "ci"])).await;
    for delivery in ["one", "two"] {
        let id = post(&app, delivery, "push").await;
        wait_for(&app, id, &[("chat", "dead"), ("ci", "delivered")]).await;
    }
    let dir = app.shutdown().await;
    let db = dir.path().join("hookbox.db");
    let config = dir.path().join("check.toml");
    write_config(&config, &db, &github_with(&downs, &["ci"]));

    let out = run_cli(&config, &["check"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stderr.contains(
            r#"sources[0] ("github"): destination "chat" is not in the config but holds 2 deliveries (0 pending); they are kept and not dispatched"#
        ),
        "{stderr}"
    );
    assert!(!stderr.contains(r#"destination "ci""#), "{stderr}");

    // No database: nothing more to say.
    write_config(
        &config,
        &dir.path().join("absent.db"),
        &github_with(&downs, &["ci"]),
    );
    let out = run_cli(&config, &["check"]).await;
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    assert!(!dir.path().join("absent.db").exists());
}
