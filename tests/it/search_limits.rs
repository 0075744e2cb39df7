//! What a search may cost: a prefix needs three letters or digits, a
//! search past its deadline is stopped and answered 503 with the reason,
//! and searches run on connections of their own, so a pull take or a
//! `/metrics` scrape never waits for them.
//!
//! The slow searches need an index where a valid query is expensive: every
//! body here holds words that all start with `zzz` and are all different,
//! so `zzz*` makes FTS5 merge the lists of every one of them, and sixteen
//! of it do that sixteen times. The rows are written straight into a
//! stopped server's database, then the server indexes them as it would
//! an upgraded database's.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::params;
use serde_json::Value;

use crate::dashboard::login;
use crate::helpers::*;
use crate::search::{list, mark};

const PULL_TOKEN: &str = "pull-token-0123456789abcdef";

/// `github` with a pull destination, for the take; `inbox`, which holds
/// the seeded events (no destination: they are `stored`).
fn sources(extra: &str) -> String {
    format!(
        r#"{extra}
{GITHUB_SOURCE}
[[sources.deliver]]
name = "laptop"
pull = {{ token = "{PULL_TOKEN}" }}

[[sources]]
name = "inbox"
kind = "github"
secrets = ["test-secret"]
"#
    )
}

/// The query that merges every `zzz` word, sixteen times over.
fn slow_query() -> String {
    "zzz* ".repeat(16)
}

const EVENTS: usize = 20_000;
const WORDS: usize = 20;

/// A server on a database of [`EVENTS`] bodies of [`WORDS`] distinct
/// `zzz` words each (and the word `common`), all indexed; `extra` goes
/// before the sources (a `[search]` table).
async fn seeded(extra: &str) -> TestApp {
    let app = TestApp::spawn(&sources(extra)).await;
    let dir = app.shutdown().await;
    let mut db = rusqlite::Connection::open(dir.path().join("hookbox.db")).unwrap();
    let now_ms = now_secs() * 1000;
    let tx = db.transaction().unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO events (source, delivery_id, received_at, body, state)
                 VALUES ('inbox', ?1, ?2, ?3, 'stored')",
            )
            .unwrap();
        for i in 0..EVENTS {
            let words: Vec<String> = (0..WORDS).map(|w| format!("zzz{i}x{w}")).collect();
            let body = format!("{} common", words.join(" "));
            insert
                .execute(params![format!("seed-{i}"), now_ms, body.as_bytes()])
                .unwrap();
        }
    }
    tx.commit().unwrap();
    drop(db);
    let app = TestApp::spawn_in(dir, &sources(extra), "").await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while mark(&app) < EVENTS as i64 {
        assert!(
            Instant::now() < deadline,
            "the seeded events were never indexed: {}",
            mark(&app)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app
}

async fn status_and_body(r: reqwest::Response) -> (u16, Value) {
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_shorter_than_three_is_refused_with_the_reason_in_api_dashboard_and_cli() {
    let app = TestApp::spawn(&sources("")).await;
    let id = json(app.post_github("p-1", br#"{"ref":"invoice.paid"}"#).await).await["id"]
        .as_i64()
        .unwrap();
    crate::search::wait_indexed(&app, id).await;
    for q in ["i*", "in*", "invoice.p*", "paid i*"] {
        let (status, body) = status_and_body(list(&app, &[("q", q)]).await).await;
        assert_eq!(status, 400, "{q:?}: {body}");
        assert_eq!(body["error"], "invalid_filter", "{q:?}: {body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("q:") && detail.contains("at least 3 letters or digits"),
            "{q:?}: {detail}"
        );
    }
    // Three will do, and a short word searched whole is fine.
    for q in ["inv*", "invoice.pai*", "invoice paid"] {
        let (status, body) = status_and_body(list(&app, &[("q", q)]).await).await;
        assert_eq!(status, 200, "{q:?}: {body}");
        assert_eq!(body["events"][0]["id"], id, "{q:?}");
    }

    // The dashboard's inbox says why on its error page.
    let session = login(&app).await;
    let r = reqwest::Client::new()
        .get(app.admin_url("/events?q=i%2A"))
        .header("cookie", &session.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let page = r.text().await.unwrap();
    assert!(page.contains("at least 3 letters or digits"), "{page}");

    // So does `hookbox events`, exiting 2.
    let mut cmd = cli(&app.db_path);
    cmd.args(["events", "--q", "in*"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("at least 3 letters or digits"),
        "{}",
        text(&out)
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_past_its_deadline_is_a_503_with_the_reason_and_the_next_search_works() {
    let app = seeded("[search]\ntimeout = \"300ms\"\n").await;
    let slow = slow_query();
    // Two at once: both search connections meet the deadline.
    let started = Instant::now();
    let params = [("q", slow.as_str())];
    let (a, b) = tokio::join!(list(&app, &params), list(&app, &params));
    for r in [a, b] {
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key("retry-after"));
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "search_timeout", "{body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("ran longer than 300ms"), "{detail}");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // Each connection lost its deadline with its search: quick searches
    // after it answer, however many, on the same two connections.
    for _ in 0..4 {
        let (status, body) =
            status_and_body(list(&app, &[("q", "common"), ("limit", "3")]).await).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["events"].as_array().unwrap().len(), 3);
    }
    let (status, body) = status_and_body(list(&app, &[("q", "zzz7x3")]).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["events"].as_array().unwrap().len(), 1);

    // The dashboard's inbox shows the reason.
    let session = login(&app).await;
    let url = reqwest::Url::parse_with_params(&app.admin_url("/events"), &params).unwrap();
    let r = reqwest::Client::new()
        .get(url)
        .header("cookie", &session.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let page = r.text().await.unwrap();
    assert!(page.contains("ran longer than 300ms"), "{page}");

    // `hookbox events` stops at its config's deadline too, saying so.
    let config = app.dir.path().join("cli-timeout.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndatabase = {:?}\n[search]\ntimeout = \"300ms\"\n",
            app.db_path.display().to_string()
        ),
    )
    .unwrap();
    let mut cmd = hookbox();
    cmd.arg("--config")
        .arg(&config)
        .args(["events", "--q", &slow]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("ran longer than 300ms"),
        "{}",
        text(&out)
    );

    // With room, the same query runs to its end: what was cut was the
    // deadline, not the query.
    let dir = app.shutdown().await;
    let app = TestApp::spawn_in(dir, &sources("[search]\ntimeout = \"60s\"\n"), "").await;
    let started = Instant::now();
    let (status, body) = status_and_body(list(&app, &params).await).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["events"].as_array().unwrap().len(), 50);
    let whole = started.elapsed();
    assert!(
        whole > Duration::from_millis(300),
        "the whole search took {whole:?}, under the deadline it was cut at"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_searches_never_hold_up_a_pull_take_or_a_metrics_scrape() {
    // The default deadline (2 s).
    let app = Arc::new(seeded("").await);
    assert_eq!(app.post_github("pull-1", b"{}").await.status(), 202);

    // What finished, in order.
    let done: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut searches = Vec::new();
    for i in 0..6 {
        let (app, done) = (app.clone(), done.clone());
        searches.push(tokio::spawn(async move {
            let r = list(&app, &[("q", &slow_query())]).await;
            let status = r.status().as_u16();
            done.lock().unwrap().push(format!("search {i}: {status}"));
            status
        }));
    }
    // Every search has been sent and the first ones run.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        done.lock().unwrap().is_empty(),
        "{:?}",
        done.lock().unwrap()
    );

    let take = {
        let (app, done) = (app.clone(), done.clone());
        tokio::spawn(async move {
            let r = app
                .client
                .post(app.url("/pull/github/laptop"))
                .bearer_auth(PULL_TOKEN)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap();
            done.lock().unwrap().push(format!("take: {status}"));
            body
        })
    };
    let scrape = {
        let (app, done) = (app.clone(), done.clone());
        tokio::spawn(async move {
            let r = app.admin_get("/metrics").await;
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            done.lock().unwrap().push(format!("metrics: {status}"));
            text
        })
    };
    let taken = take.await.unwrap();
    let metrics = scrape.await.unwrap();
    assert_eq!(taken["events"][0]["delivery_id"], "pull-1", "{taken}");
    assert!(metrics.contains("hookbox_"), "{metrics}");
    for search in searches {
        // Past the deadline, or cut short by waiting for a connection:
        // either way nothing else waited for it.
        assert!([200, 503].contains(&search.await.unwrap()));
    }
    let order = done.lock().unwrap().clone();
    let first_two: Vec<&str> = order[..2].iter().map(String::as_str).collect();
    assert!(
        first_two.contains(&"take: 200") && first_two.contains(&"metrics: 200"),
        "the take and the scrape finished before any search: {order:?}"
    );
    drop(order);
    let app = Arc::into_inner(app).expect("every task is done");
    app.shutdown().await;
}
