//! Search: `q=` on `/api/events`, `hookbox events --q`, the index kept in
//! step with inserts and retention, the upgrade backfill, search off, and
//! the dashboard's search box in Chromium.
//!
//! Events are indexed by a thread of their own into the file
//! `<database>.search` soon after they are stored (see
//! `src/store/search/indexer.rs`), so each test waits for the index's
//! mark to pass the last event it posted before it asks.

use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use serde_json::Value;

use crate::helpers::{GITHUB_SOURCE, TestApp, cli, github_event_request, json, run, text};

/// `github` with two pull destinations (so deliveries stay pending until
/// a test moves them): `a` takes every event, `b` only `issues`; and
/// `inbox`, a source without any (its events are `stored`).
const SOURCES: &str = r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["test-secret"]
[[sources.deliver]]
name = "a"
pull = { token = "pull-token-a-0123456789" }
[[sources.deliver]]
name = "b"
events = ["issues"]
pull = { token = "pull-token-b-0123456789" }

[[sources]]
name = "inbox"
kind = "github"
secrets = ["test-secret"]
"#;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// POSTs a signed GitHub delivery of `event` to `source`; the row id.
async fn post(app: &TestApp, source: &str, event: &str, delivery: &str, body: &[u8]) -> i64 {
    let url = app.url(&format!("/hooks/{source}"));
    let r = github_event_request(&app.client, &url, event, delivery, body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "posting {delivery}");
    json(r).await["id"].as_i64().unwrap()
}

/// The database of `app` with its search index attached; `None` while
/// there is no index file.
pub(crate) fn index_db(app: &TestApp) -> Option<Connection> {
    let mut file = app.db_path.as_os_str().to_owned();
    file.push(".search");
    if !std::path::Path::new(&file).exists() {
        return None;
    }
    let db = app.db();
    db.execute("ATTACH DATABASE ?1 AS search", [file.to_str().unwrap()])
        .unwrap();
    Some(db)
}

/// How far the index got (0 without one).
pub(crate) fn mark(app: &TestApp) -> i64 {
    index_db(app).map_or(0, |db| {
        db.query_row(
            "SELECT coalesce((SELECT value FROM search.state
                              WHERE key = 'indexed_through'), 0)",
            [],
            |r| r.get(0),
        )
        .unwrap()
    })
}

/// Waits until every event up to `id` has been through the indexer.
pub(crate) async fn wait_indexed(app: &TestApp, id: i64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while mark(app) < id {
        assert!(Instant::now() < deadline, "event {id} was never indexed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `GET /api/events` with `params` (URL-encoded here).
pub(crate) async fn list(app: &TestApp, params: &[(&str, &str)]) -> reqwest::Response {
    let url = reqwest::Url::parse_with_params(&app.admin_url("/api/events"), params).unwrap();
    app.client
        .get(url)
        .bearer_auth(&app.admin_token)
        .send()
        .await
        .unwrap()
}

/// The ids `GET /api/events` answers for `params`, newest first, and the
/// cursor.
async fn ids(app: &TestApp, params: &[(&str, &str)]) -> (Vec<i64>, Option<i64>) {
    let r = list(app, params).await;
    assert_eq!(r.status(), 200, "{params:?}");
    let page = json(r).await;
    let ids = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    (ids, page["next_before"].as_i64())
}

async fn found(app: &TestApp, q: &str) -> Vec<i64> {
    ids(app, &[("q", q)]).await.0
}

/// Index rows whose event is gone or has no body any more.
fn orphans(app: &TestApp) -> i64 {
    index_db(app).map_or(0, |db| {
        db.query_row(
            "SELECT count(*) FROM search.events_fts_docsize
             WHERE id NOT IN (SELECT id FROM events WHERE body IS NOT NULL)",
            [],
            |r| r.get(0),
        )
        .unwrap()
    })
}

/// Events with words in the index (0 without one).
fn indexed(app: &TestApp) -> i64 {
    index_db(app).map_or(0, |db| {
        db.query_row("SELECT count(*) FROM search.events_fts_docsize", [], |r| {
            r.get(0)
        })
        .unwrap()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_words_prefixes_and_dotted_names_and_misses_what_no_body_has() {
    let app = TestApp::spawn(SOURCES).await;
    let paid = post(
        &app,
        "inbox",
        "push",
        "s-1",
        br#"{"type":"invoice.paid","customer":{"email":"alice@example.com","name":"Zo\u00eb"}}"#,
    )
    .await;
    let apart = post(
        &app,
        "inbox",
        "push",
        "s-2",
        "the invoice was not paid by Zoë Müller".as_bytes(),
    )
    .await;
    let failed = post(
        &app,
        "github",
        "push",
        "s-3",
        br#"{"type":"charge.failed","amount":1250}"#,
    )
    .await;
    wait_indexed(&app, failed).await;

    assert_eq!(found(&app, "invoice").await, [apart, paid], "newest first");
    assert_eq!(found(&app, "invoice.paid").await, [paid]);
    assert_eq!(found(&app, "INVOICE Paid").await, [apart, paid]);
    assert_eq!(found(&app, "alice@example.com").await, [paid]);
    assert_eq!(found(&app, "alice").await, [paid]);
    assert_eq!(found(&app, "inv*").await, [apart, paid]);
    assert_eq!(found(&app, "invoice.pai*").await, [paid]);
    assert_eq!(found(&app, "muller").await, [apart], "diacritics folded");
    // The bytes are searched as sent: a JSON escape (`Zo\u00eb`) is not
    // decoded, so only the body that has the letter itself matches.
    assert_eq!(found(&app, "zoe").await, [apart]);
    assert_eq!(found(&app, "charge failed 1250").await, [failed]);
    assert_eq!(found(&app, "cha*").await, [failed]);
    // Misses: a word no body has, and words that never meet in one body.
    assert!(found(&app, "refund").await.is_empty());
    assert!(found(&app, "invoice failed").await.is_empty());
    assert!(found(&app, "alice@example.org").await.is_empty());
    assert!(found(&app, "zzz*").await.is_empty());
    // An empty box searches nothing.
    assert_eq!(found(&app, "  ").await.len(), 3);
    // The summary never carries the body.
    let page = json(list(&app, &[("q", "invoice")]).await).await;
    assert!(page["events"][0].get("body").is_none(), "{page}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q_combines_with_source_state_destination_and_event_type_and_pages_with_before() {
    let app = TestApp::spawn(SOURCES).await;
    // (source, event, delivery, body)
    let posted = [
        ("github", "push", "p-1", "deploy alpha"),
        ("github", "issues", "i-1", "deploy beta"),
        ("inbox", "push", "n-1", "deploy gamma"),
        ("github", "push", "p-2", "deploy delta"),
        ("github", "issues", "i-2", "other words"),
        ("github", "issues", "i-3", "deploy epsilon"),
        ("inbox", "push", "n-2", "deploy zeta"),
    ];
    let mut id = std::collections::HashMap::new();
    for (source, event, delivery, body) in posted {
        id.insert(
            delivery,
            post(&app, source, event, delivery, body.as_bytes()).await,
        );
    }
    wait_indexed(&app, id["n-2"]).await;
    // p-2 and i-3 went dead at `a` (as dispatch leaves a dead letter: the
    // delivery's state, and the event's derived from it).
    let db = app.db();
    for delivery in ["p-2", "i-3"] {
        db.execute(
            "UPDATE deliveries SET state = 'dead'
             WHERE destination = 'a' AND event_id = ?1",
            [id[delivery]],
        )
        .unwrap();
        db.execute(
            "INSERT INTO event_outcomes (event_id, source, state)
             SELECT id, source, 'dead' FROM events WHERE id = ?1
             ON CONFLICT (event_id) DO UPDATE SET state = 'dead'",
            [id[delivery]],
        )
        .unwrap();
    }
    let all: Vec<i64> = ["n-2", "i-3", "p-2", "n-1", "i-1", "p-1"]
        .map(|d| id[d])
        .to_vec();
    assert_eq!(found(&app, "deploy").await, all);

    let q = ("q", "deploy");
    let of = |ds: &[&str]| ds.iter().map(|d| id[d]).collect::<Vec<i64>>();
    assert_eq!(
        ids(&app, &[q, ("source", "github"), ("state", "dead")])
            .await
            .0,
        of(&["i-3", "p-2"])
    );
    assert_eq!(
        ids(&app, &[q, ("source", "github"), ("state", "pending")])
            .await
            .0,
        of(&["i-1", "p-1"])
    );
    assert_eq!(
        ids(&app, &[q, ("source", "inbox"), ("state", "stored")])
            .await
            .0,
        of(&["n-2", "n-1"])
    );
    assert_eq!(
        ids(&app, &[q, ("destination", "b")]).await.0,
        of(&["i-3", "i-1"]),
        "b takes issues only; i-2 has no 'deploy'"
    );
    // With a destination, state is the delivery's there: i-3 is dead at
    // `a` but pending at `b`.
    assert_eq!(
        ids(&app, &[q, ("destination", "b"), ("state", "pending")])
            .await
            .0,
        of(&["i-3", "i-1"])
    );
    assert_eq!(
        ids(&app, &[q, ("destination", "a"), ("state", "dead")])
            .await
            .0,
        of(&["i-3", "p-2"])
    );
    assert_eq!(
        ids(
            &app,
            &[
                ("q", "deploy beta"),
                ("destination", "a"),
                ("source", "github")
            ]
        )
        .await
        .0,
        of(&["i-1"])
    );
    assert_eq!(
        ids(&app, &[q, ("event_type", "issues")]).await.0,
        of(&["i-3", "i-1"])
    );

    // Paging: two at a time, with and without a destination, until the
    // cursor runs out; every match once, in order.
    for extra in [None, Some(("destination", "a"))] {
        let mut seen = Vec::new();
        let mut before: Option<i64> = None;
        loop {
            let before_text = before.map(|b| b.to_string());
            let mut params = vec![q, ("limit", "2")];
            params.extend(extra);
            if let Some(b) = &before_text {
                params.push(("before", b));
            }
            let (page, next) = ids(&app, &params).await;
            assert!(page.len() <= 2);
            seen.extend(page);
            match next {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        let expected: Vec<i64> = match extra {
            None => all.clone(),
            Some(_) => of(&["i-3", "p-2", "i-1", "p-1"]),
        };
        assert_eq!(seen, expected, "{extra:?}");
    }
    drop(db);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_query_is_answered_200_or_400_with_a_reason_never_500() {
    let app = TestApp::spawn(SOURCES).await;
    let id = post(
        &app,
        "inbox",
        "push",
        "g-1",
        br#"{"note":"NEAR or AND not \"quoted\" x:y (grouped) a-b"}"#,
    )
    .await;
    wait_indexed(&app, id).await;
    let garbage = [
        "\"",
        "\"\"",
        "\"unclosed",
        "a\"b",
        "(",
        ")",
        "a OR",
        "OR",
        "NOT",
        "AND b",
        "NEAR(a b, 2)",
        "note:quoted",
        "{note}:x",
        "^a",
        "a + b",
        "-a",
        "*",
        "**",
        "*a",
        "a**",
        "'; DROP TABLE events; --",
        "\\",
        "%",
        "_",
        "\u{0}",
        "\u{301}",
        "😀",
        "x\u{301}",
        "\u{ffff}",
        "NEAR/2",
        "a:b:c",
        "ab AND (cd OR ef)",
    ];
    for q in garbage {
        let r = list(&app, &[("q", q)]).await;
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap();
        match status {
            200 => assert!(body["events"].is_array(), "{q:?}: {body}"),
            400 => {
                assert_eq!(body["error"], "invalid_filter", "{q:?}: {body}");
                assert!(
                    body["detail"].as_str().unwrap().starts_with("q:"),
                    "{q:?}: {body}"
                );
            }
            other => panic!("{q:?} answered {other}: {body}"),
        }
    }
    // Operators and quotes are words like any other.
    assert_eq!(found(&app, "near OR and not").await, [id]);
    assert_eq!(found(&app, "\"quoted\"").await, [id]);
    assert_eq!(found(&app, "x:y").await, [id]);
    assert_eq!(found(&app, "(grouped)").await, [id]);
    // What is refused says why.
    for (q, says) in [
        ("* - ()", "no word"),
        (&"word ".repeat(17)[..], "more than 16 words"),
        (&"w".repeat(501)[..], "longer than 500"),
    ] {
        let r = list(&app, &[("q", q)]).await;
        assert_eq!(r.status(), 400, "{q:?}");
        let detail = json(r).await["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains(says), "{q:?}: {detail}");
    }
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_utf8_is_stored_and_listed_but_not_indexed() {
    let app = TestApp::spawn(SOURCES).await;
    let binary = post(&app, "inbox", "push", "b-1", b"\xff\xfe needle in binary").await;
    let text = post(&app, "inbox", "push", "b-2", b"needle in text").await;
    wait_indexed(&app, text).await;
    assert_eq!(found(&app, "needle").await, [text]);
    assert!(found(&app, "binary").await.is_empty());
    let (all, _) = ids(&app, &[]).await;
    assert_eq!(all, [text, binary], "listed all the same");
    assert_eq!(indexed(&app), 1);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_takes_out_of_the_index_what_it_deletes_or_strips() {
    let retention = "\n[retention]\nbody_days = 2\nkey_days = 5\ninterval = \"100ms\"\n";
    let app = TestApp::spawn_with(SOURCES, retention).await;
    let gone = post(&app, "inbox", "push", "r-gone", b"marker gone").await;
    let stripped = post(&app, "inbox", "push", "r-stripped", b"marker stripped").await;
    let kept = post(&app, "inbox", "push", "r-kept", b"marker kept").await;
    wait_indexed(&app, kept).await;
    assert_eq!(found(&app, "marker").await, [kept, stripped, gone]);
    assert_eq!(indexed(&app), 3);

    // Stored events as if received 6 and 3 days ago: past key_days (the
    // row goes) and past body_days (the body goes).
    let db = app.db();
    let now = hookbox::support::clock::now_ms();
    for (id, days) in [(gone, 6), (stripped, 3)] {
        db.execute(
            "UPDATE events SET received_at = ?2 WHERE id = ?1",
            params![id, now - days * DAY_MS],
        )
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (rows, bodies): (i64, i64) = db
            .query_row(
                "SELECT count(*), count(body) FROM events WHERE id IN (?1, ?2)",
                [gone, stripped],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        if (rows, bodies) == (1, 0) {
            break;
        }
        assert!(Instant::now() < deadline, "retention did not run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(found(&app, "marker").await, [kept]);
    assert!(found(&app, "gone").await.is_empty());
    assert!(found(&app, "stripped").await.is_empty());
    // The indexer sweeps their words out of the index file soon after.
    let deadline = Instant::now() + Duration::from_secs(15);
    while (orphans(&app), indexed(&app)) != (0, 1) {
        assert!(
            Instant::now() < deadline,
            "the index kept {} orphans",
            orphans(&app)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(db);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hookbox_events_q_lists_the_matches_with_or_without_the_server() {
    let app = TestApp::spawn(SOURCES).await;
    post(
        &app,
        "inbox",
        "push",
        "c-1",
        b"{\"greeting\":\"hello world\"}",
    )
    .await;
    post(
        &app,
        "github",
        "issues",
        "c-2",
        b"{\"greeting\":\"goodbye\"}",
    )
    .await;
    let last = post(
        &app,
        "github",
        "push",
        "c-3",
        b"{\"greeting\":\"hello again\"}",
    )
    .await;
    wait_indexed(&app, last).await;
    let db = app.db_path.clone();
    let delivery_ids = |out: &str| -> Vec<String> {
        out.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["delivery_id"].to_string())
            .collect()
    };
    let events = |args: &'static [&'static str]| {
        let mut cmd = cli(&db);
        cmd.arg("events").args(args);
        run(cmd)
    };
    let out = events(&["--q", "hello", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        delivery_ids(&String::from_utf8_lossy(&out.stdout)),
        ["\"c-3\"", "\"c-1\""]
    );
    let out = events(&["--q", "hel*", "--source", "github", "--json"]).await;
    assert_eq!(
        delivery_ids(&String::from_utf8_lossy(&out.stdout)),
        ["\"c-3\""]
    );
    let out = events(&["--q", "greeting", "--destination", "b", "--json"]).await;
    assert_eq!(
        delivery_ids(&String::from_utf8_lossy(&out.stdout)),
        ["\"c-2\""]
    );
    let out = events(&["--q", "nothing-like-it"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        1,
        "the header alone"
    );
    // A query that is no query: exit 2, saying why.
    let out = events(&["--q", "*"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--q: has no word"), "{}", text(&out));

    let _dir = app.shutdown().await;
    let out = events(&["--q", "goodbye", "--json"]).await;
    assert_eq!(
        delivery_ids(&String::from_utf8_lossy(&out.stdout)),
        ["\"c-2\""],
        "the server is down: read-only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_search_off_nothing_is_indexed_q_is_refused_and_turning_it_on_catches_up() {
    let off = format!("[search]\nenabled = false\n{GITHUB_SOURCE}");
    let app = TestApp::spawn(&off).await;
    let first = json(app.post_github("o-1", b"{\"word\":\"findme\"}").await).await["id"]
        .as_i64()
        .unwrap();
    let r = list(&app, &[("q", "findme")]).await;
    assert_eq!(r.status(), 400);
    let body = json(r).await;
    assert_eq!(body["error"], "search_disabled", "{body}");
    // Listing without q works as ever.
    assert_eq!(ids(&app, &[]).await.0, [first]);
    let mut cmd = cli(&app.db_path);
    cmd.args(["events", "--q", "findme"]);
    let out = run(cmd).await;
    // The CLI's config has search on, but there is no index file to read.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no search index beside the database"),
        "{}",
        text(&out)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(index_db(&app).is_none(), "no index file with search off");
    let dir = app.shutdown().await;

    // On: what arrived while it was off is indexed from the start.
    let app = TestApp::spawn_in(dir, GITHUB_SOURCE, "").await;
    let second = json(app.post_github("o-2", b"{\"word\":\"findme too\"}").await).await["id"]
        .as_i64()
        .unwrap();
    wait_indexed(&app, second).await;
    assert_eq!(found(&app, "findme").await, [second, first]);
    assert!(index_db(&app).is_some());
    let dir = app.shutdown().await;

    // Off again: the index file is removed at start-up.
    let app = TestApp::spawn_in(dir, &off, "").await;
    assert!(index_db(&app).is_none(), "the index file is gone");
    app.shutdown().await;
}

/// Written by release 329aaad (schema version 10), before search.
const FIXTURE_V10: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-v10.db");

/// The sources the release fixtures' events came from.
const FIXTURE_SOURCES: &str = r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["fixture-secret"]
[[sources]]
name = "inbox"
kind = "github"
secrets = ["fixture-secret"]
[[sources]]
name = "cmd"
kind = "github"
secrets = ["fixture-secret"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_database_has_its_old_events_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    std::fs::copy(FIXTURE_V10, &db).unwrap();
    let old: i64 = Connection::open(&db)
        .unwrap()
        .query_row("SELECT max(id) FROM events", [], |r| r.get(0))
        .unwrap();
    let app = TestApp::spawn_in(dir, FIXTURE_SOURCES, "").await;
    wait_indexed(&app, old).await;
    let zen: Vec<i64> = Connection::open(&app.db_path)
        .unwrap()
        .query_row(
            "SELECT id FROM events WHERE delivery_id = 'nokey'",
            [],
            |r| r.get(0),
        )
        .map(|id| vec![id])
        .unwrap();
    assert_eq!(found(&app, "zen").await, zen);
    let acme_b = ids(&app, &[("q", "acme/b")]).await.0;
    assert_eq!(acme_b.len(), 2, "the two pending acme/b events");
    assert_eq!(ids(&app, &[("q", "acme*")]).await.0.len(), 6);
    assert_eq!(orphans(&app), 0);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_says_how_far_the_index_got_while_it_lags_in_api_and_dashboard() {
    let app = TestApp::spawn(SOURCES).await;
    let first = post(&app, "inbox", "push", "l-1", b"lagging word").await;
    wait_indexed(&app, first).await;
    // Held by the test, the index file's write lock keeps the indexer from
    // writing: the events after it wait, as during a burst.
    let mut file = app.db_path.as_os_str().to_owned();
    file.push(".search");
    let holder = Connection::open(&file).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let second = post(&app, "inbox", "push", "l-2", b"lagging too").await;
    let third = post(&app, "inbox", "push", "l-3", b"lagging three").await;
    let page = json(list(&app, &[("q", "lagging")]).await).await;
    assert_eq!(page["events"][0]["id"], first, "{page}");
    assert_eq!(page["events"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["search"]["indexed_through"], first, "{page}");
    assert_eq!(page["search"]["not_yet_indexed"], 2, "{page}");
    // Without q, nothing about search.
    let plain = json(list(&app, &[]).await).await;
    assert!(plain.get("search").is_none(), "{plain}");
    let session = crate::dashboard::login(&app).await;
    let html = reqwest::Client::new()
        .get(app.admin_url("/events?q=lagging"))
        .header("cookie", &session.cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        html.contains(&format!(
            "events up to #{first}; the 2 stored after it were not searched yet"
        )),
        "{html}"
    );
    holder.execute_batch("ROLLBACK").unwrap();
    drop(holder);
    wait_indexed(&app, third).await;
    assert_eq!(found(&app, "lagging").await, [third, second, first]);
    let page = json(list(&app, &[("q", "lagging")]).await).await;
    assert_eq!(page["search"]["not_yet_indexed"], 0, "{page}");
    app.shutdown().await;
}

/// Written by 1721122 (schema version 19): the search index inside the
/// database, every event indexed.
const FIXTURE_V19: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-v19.db");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_in_the_database_moves_to_its_own_file_and_still_finds_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    std::fs::copy(FIXTURE_V19, &db).unwrap();
    let (old, in_db): (i64, i64) = Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT (SELECT max(id) FROM events), (SELECT count(*) FROM events_fts_docsize)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(in_db, old, "the fixture has every event indexed");
    let app = TestApp::spawn_in(dir, FIXTURE_SOURCES, "").await;
    let tables = app.count(
        "SELECT count(*) FROM sqlite_master WHERE name LIKE 'events_fts%'
         OR name IN ('events_fts_delete', 'events_fts_drop_body')",
    );
    assert_eq!(tables, 0, "the old index left the database");
    assert_eq!(
        app.count("SELECT count(*) FROM meta WHERE key = 'search_indexed_through'"),
        0
    );
    wait_indexed(&app, old).await;
    assert_eq!(indexed(&app), old);
    assert_eq!(ids(&app, &[("q", "acme*")]).await.0.len(), 6);
    assert_eq!(found(&app, "zen").await.len(), 1);
    let page = json(list(&app, &[("q", "acme/b")]).await).await;
    assert_eq!(page["events"].as_array().unwrap().len(), 2, "{page}");
    assert_eq!(page["search"]["indexed_through"], old, "{page}");
    assert_eq!(page["search"]["not_yet_indexed"], 0, "{page}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_search_box_finds_an_event_in_chromium() {
    use crate::dashboard::browser::*;
    use fantoccini::Locator;
    if !browser_available() {
        return;
    }
    let app = TestApp::spawn(SOURCES).await;
    let wanted = post(
        &app,
        "inbox",
        "push",
        "dash-wanted",
        br#"{"order":{"id":"ord_7731","customer":"grace@example.com"}}"#,
    )
    .await;
    let last = post(
        &app,
        "github",
        "issues",
        "dash-other",
        br#"{"order":{"id":"ord_1000"}}"#,
    )
    .await;
    wait_indexed(&app, last.max(wanted)).await;

    let driver = start_driver().await;
    let browser = connect(&driver).await;
    log_in(&browser, &app).await;
    browser.goto(&app.admin_url("/events")).await.unwrap();
    let field = browser
        .wait()
        .at_most(FIND_WAIT)
        .for_element(Locator::Css("form.search input[name=q]"))
        .await
        .unwrap();
    field.send_keys("grace@example.com").await.unwrap();
    click_and_wait(&browser, Locator::Css("form.search button[type=submit]")).await;
    let url = browser.current_url().await.unwrap();
    assert_eq!(url.path(), "/events");
    let table = text_of(&browser, "table").await;
    assert!(table.contains("dash-wanted"), "{table}");
    assert!(!table.contains("dash-other"), "{table}");
    assert!(
        text_of(&browser, "p.found")
            .await
            .contains("grace@example.com"),
        "the page says what it searched for"
    );
    screenshot(&browser, "search").await;

    // The box keeps the query, and the filters combine with it.
    let field = browser
        .find(Locator::Css("form.search input[name=q]"))
        .await
        .unwrap();
    assert_eq!(
        field.prop("value").await.unwrap().as_deref(),
        Some("grace@example.com")
    );
    field.clear().await.unwrap();
    field.send_keys("ord*").await.unwrap();
    click_and_wait(&browser, Locator::Css("form.search button[type=submit]")).await;
    let table = text_of(&browser, "table").await;
    assert!(
        table.contains("dash-wanted") && table.contains("dash-other"),
        "{table}"
    );
    browser
        .goto(&app.admin_url("/events?q=ord%2A&source=github"))
        .await
        .unwrap();
    let table = text_of(&browser, "table").await;
    assert!(
        table.contains("dash-other") && !table.contains("dash-wanted"),
        "{table}"
    );
    // Garbage is a page saying why, not a server error.
    browser
        .goto(&app.admin_url("/events?q=%28%29%2A"))
        .await
        .unwrap();
    let error = text_of(&browser, "p.error").await;
    assert!(error.contains("no word"), "{error}");
    screenshot(&browser, "search-refused").await;

    browser.close().await.unwrap();
    drop(driver);
    app.shutdown().await;
}
