//! The hourly counters behind the overview's charts, through the real
//! server: what `received`, `delivered` and `failed` count, per source and
//! hour (across an hour boundary, by the test clock), pull acks and nacks,
//! retention trimming old hours, the upgrade from a release-v10 database
//! filling them from its history, and the charts on the overview.
//! `charts/browser.rs` looks at them in headless Chromium.

mod browser;

use std::path::Path;

use rusqlite::params;
use serde_json::{Value, json};

use crate::dashboard::{get, login};
use crate::helpers::*;

const HOUR_MS: i64 = 60 * 60 * 1000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// A github source with no destination: its events are `stored`.
fn inbox(name: &str) -> String {
    format!(
        "\n[[sources]]\nname = \"{name}\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n"
    )
}

/// `(source, hour, received, delivered, failed)`, every row in order.
type Row = (String, i64, i64, i64, i64);

fn counters(db: &Path) -> Vec<Row> {
    rusqlite::Connection::open(db)
        .unwrap()
        .prepare("SELECT source, hour, received, delivered, failed FROM hourly_counts ORDER BY source, hour")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// One source's counts summed over every hour: `[received, delivered, failed]`.
fn totals(db: &Path, source: &str) -> [i64; 3] {
    counters(db)
        .iter()
        .filter(|r| r.0 == source)
        .fold([0; 3], |t, r| [t[0] + r.2, t[1] + r.3, t[2] + r.4])
}

fn hour_of(ms: i64) -> i64 {
    ms - ms.rem_euclid(HOUR_MS)
}

/// The three bars `[received, delivered, failed]` the overview draws for
/// the bucket starting at `start` of chart `chart` (`chart-1-hours`); a
/// bar not drawn is zero. Panics when the bucket is not there.
pub fn bars(html: &str, chart: &str, start: i64) -> [i64; 3] {
    let svg_at = html
        .find(&format!("data-chart=\"{chart}\""))
        .unwrap_or_else(|| panic!("no chart {chart}"));
    let svg = &html[svg_at..svg_at + html[svg_at..].find("</svg>").unwrap()];
    let group_at = svg
        .find(&format!("<g class=\"bucket\" data-start=\"{start}\">"))
        .unwrap_or_else(|| panic!("no bucket {start} in {chart}"));
    let group = &svg[group_at..group_at + svg[group_at..].find("</g>").unwrap()];
    let mut out = [0; 3];
    for (i, name) in ["received", "delivered", "failed"].iter().enumerate() {
        if let Some(at) = group.find(&format!("class=\"bar {name}\"")) {
            let value_at = at + group[at..].find("data-value=\"").unwrap() + 12;
            let value = &group[value_at..value_at + group[value_at..].find('"').unwrap()];
            out[i] = value.parse().unwrap();
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_count_new_events_and_attempts_per_source_as_the_legend_says() {
    // flaky-*: refused once, then taken; gone-*: refused for good (410).
    let down = Downstream::start(|delivery, nth| match delivery {
        d if d.starts_with("gone") => Reply::status(410),
        d if d.starts_with("flaky") && nth == 1 => Reply::status(503),
        _ => Reply::status(204),
    })
    .await;
    let url = url_destination(&down.url());
    let two = format!(
        "\n[[sources]]\nname = \"two\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n\
         [[sources.deliver]]\nname = \"a\"\n{url}\n[[sources.deliver]]\nname = \"b\"\n{url}\n"
    );
    let sources = [
        deliver_source("shop", &url, "5s", 5),
        deliver_source("flaky", &url, "5s", 5),
        deliver_source("gone", &url, "5s", 5),
        two,
        inbox("inbox"),
    ]
    .concat();
    let app = TestApp::spawn(&sources).await;
    let started = hookbox::support::clock::now_ms();
    let body = br#"{"repository":{"full_name":"acme/shop"}}"#;
    let mut posted = Vec::new();
    for (source, n) in [
        ("shop", 3),
        ("flaky", 2),
        ("gone", 1),
        ("two", 1),
        ("inbox", 2),
    ] {
        for i in 0..n {
            let delivery = format!("{source}-{i}");
            posted.push((
                source,
                post_event(app.addr, source, &delivery, "application/json", body).await,
            ));
        }
    }
    // A duplicate is not a new event.
    let again = github_request(&app.client, &app.url("/hooks/shop"), "shop-0", body)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    for (source, id) in &posted {
        let state = match *source {
            "gone" => "dead",
            "inbox" => "stored",
            _ => "delivered",
        };
        wait_for_state(&app.db_path, *id, state).await;
    }
    let ended = hookbox::support::clock::now_ms();

    // received: new events; delivered: attempts that delivered (each
    // destination counts); failed: attempts that did not, the one that
    // went dead included.
    assert_eq!(totals(&app.db_path, "shop"), [3, 3, 0]);
    assert_eq!(totals(&app.db_path, "flaky"), [2, 2, 2]);
    assert_eq!(totals(&app.db_path, "gone"), [1, 0, 1]);
    assert_eq!(totals(&app.db_path, "two"), [1, 2, 0]);
    assert_eq!(totals(&app.db_path, "inbox"), [2, 0, 0]);
    // In the hours the test ran, and the same numbers as the attempt log.
    let rows = counters(&app.db_path);
    assert!(
        rows.iter()
            .all(|r| r.1 >= hour_of(started) && r.1 <= hour_of(ended)),
        "{rows:?}"
    );
    let attempts = app.count("SELECT count(*) FROM attempts");
    let counted: i64 = rows.iter().map(|r| r.3 + r.4).sum();
    assert_eq!(counted, attempts);
    app.shutdown().await;
}

#[tokio::test]
async fn an_hour_boundary_splits_the_counts_and_the_chart_shows_both_hours() {
    // The test clock moves this (current-thread) runtime's clock, and with
    // it the server's: an hour boundary three hours ago.
    let boundary = hour_of(hookbox::support::clock::now_ms()) - 3 * HOUR_MS;
    set_thread_clock_to(boundary - 10 * 60 * 1000);
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let sources = format!(
        "{}{}",
        deliver_source("shop", &url_destination(&down.url()), "5s", 3),
        inbox("inbox")
    );
    let app = TestApp::spawn(&sources).await;
    let session = login(&app).await;
    let body = br#"{"repository":{"full_name":"acme/shop"}}"#;

    set_thread_clock_to(boundary - 5_000);
    let before = post_event(app.addr, "shop", "before", "application/json", body).await;
    post_event(app.addr, "inbox", "before", "application/json", body).await;
    wait_for_state(&app.db_path, before, "delivered").await;
    assert!(
        hookbox::support::clock::now_ms() < boundary,
        "the first hour's events took over 5 s: rerun on a quieter machine"
    );
    set_thread_clock_to(boundary + 1_000);
    for n in 0..2 {
        let after = format!("after-{n}");
        let id = post_event(app.addr, "shop", &after, "application/json", body).await;
        wait_for_state(&app.db_path, id, "delivered").await;
    }
    post_event(app.addr, "inbox", "after", "application/json", body).await;

    let earlier = boundary - HOUR_MS;
    let expected = |source: &str, rows: &[(i64, [i64; 3])]| -> Vec<Row> {
        rows.iter()
            .map(|(h, n)| (source.to_owned(), *h, n[0], n[1], n[2]))
            .collect()
    };
    let want = [
        expected("inbox", &[(earlier, [1, 0, 0]), (boundary, [1, 0, 0])]),
        expected("shop", &[(earlier, [1, 1, 0]), (boundary, [2, 2, 0])]),
    ]
    .concat();
    eventually("both hours counted", || {
        (counters(&app.db_path) == want).then_some(())
    })
    .await;

    // The overview at that time: the last two hours of each 24-hour
    // chart, and today (or, just after midnight, yesterday too) in the
    // 30-day one. Sources are charted in config order.
    let page = get(&app, "/", &session.cookie).await;
    assert_eq!(bars(&page, "chart-0-hours", earlier), [1, 1, 0]);
    assert_eq!(bars(&page, "chart-0-hours", boundary), [2, 2, 0]);
    assert_eq!(bars(&page, "chart-1-hours", earlier), [1, 0, 0]);
    assert_eq!(bars(&page, "chart-1-hours", boundary), [1, 0, 0]);
    assert_eq!(
        bars(&page, "chart-1-hours", boundary - 5 * HOUR_MS),
        [0, 0, 0]
    );
    let day = |at: i64| at - at.rem_euclid(DAY_MS);
    let mut shop_days = bars(&page, "chart-0-days", day(boundary));
    if day(earlier) != day(boundary) {
        let yesterday = bars(&page, "chart-0-days", day(earlier));
        shop_days = [0, 1, 2].map(|i| shop_days[i] + yesterday[i]);
    }
    assert_eq!(shop_days, [3, 3, 0]);
    assert!(page.contains("<title id=\"chart-0-hours-title\">shop: received, delivered and failed per hour, last 24 hours</title>"));

    app.shutdown().await;
    hookbox::support::clock::shift_this_thread(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_acks_count_as_delivered_and_nacks_as_failed() {
    const TOKEN: &str = "pull-token-0123456789abcdef";
    let sources = format!(
        "{GITHUB_SOURCE}[[sources.deliver]]\nname = \"laptop\"\npull = {{ token = \"{TOKEN}\" }}\n\
         timeout = \"5s\"\nbackoff_base = \"50ms\"\nbackoff_cap = \"100ms\"\n"
    );
    let app = TestApp::spawn(&sources).await;
    let body = br#"{"n":1}"#;
    for delivery in ["p-1", "p-2"] {
        post_event(app.addr, "github", delivery, "application/json", body).await;
    }
    let pull = |path: &str, payload: Value| {
        app.client
            .post(app.url(&format!("/pull/github/laptop{path}")))
            .bearer_auth(TOKEN)
            .json(&payload)
            .send()
    };
    let taken: Value = pull("?max=10&wait=5s", json!({}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let events = taken["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{taken}");
    let r = pull("/ack", json!({ "leases": [events[0]["lease"]] }))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = pull("/nack", json!({ "leases": [events[1]["lease"]] }))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(totals(&app.db_path, "github"), [2, 1, 1]);
    // The nacked one comes back after its backoff; its ack is counted too.
    let again = loop {
        let taken: Value = pull("?max=10&wait=5s", json!({}))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(e) = taken["events"].as_array().unwrap().first() {
            break e.clone();
        }
    };
    assert_eq!(again["delivery_id"], "p-2");
    pull("/ack", json!({ "leases": [again["lease"]] }))
        .await
        .unwrap();
    assert_eq!(totals(&app.db_path, "github"), [2, 2, 1]);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_trims_counters_older_than_32_days_and_keeps_the_rest() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let dir = app.shutdown().await;
    let now = hookbox::support::clock::now_ms();
    let (old, kept) = (hour_of(now - 33 * DAY_MS), hour_of(now - 31 * DAY_MS));
    {
        let conn = rusqlite::Connection::open(dir.path().join("hookbox.db")).unwrap();
        for (hour, n) in [(old, 5), (kept, 7)] {
            conn.execute(
                "INSERT INTO hourly_counts (source, hour, received, delivered, failed)
                 VALUES ('github', ?1, ?2, ?2, 1)",
                params![hour, n],
            )
            .unwrap();
        }
    }
    let app = TestApp::spawn_in(dir, GITHUB_SOURCE, "\n[retention]\ninterval = \"100ms\"\n").await;
    eventually("the 33-day-old hour trimmed", || {
        let rows = counters(&app.db_path);
        (rows.len() == 1).then_some(rows)
    })
    .await;
    assert_eq!(
        counters(&app.db_path),
        [("github".to_owned(), kept, 7, 7, 1)]
    );
    // Trimming goes on while events come in, and counts stay right.
    post_event(app.addr, "github", "new", "application/json", b"{}").await;
    assert_eq!(totals(&app.db_path, "github"), [8, 7, 1]);
    app.shutdown().await;
}

/// Written by release 329aaad (schema version 10).
const FIXTURE_V10: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-v10.db");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_inbox_shows_its_last_30_days_in_the_counters_and_the_charts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    std::fs::copy(FIXTURE_V10, &db).unwrap();
    {
        // The release wrote the file on one day; move its times to a
        // minute ago, so the test does not depend on when it runs, and add
        // an event (with its attempt) from 40 days ago, which is not
        // counted.
        let conn = rusqlite::Connection::open(&db).unwrap();
        let newest: i64 = conn
            .query_row("SELECT max(received_at) FROM events", [], |r| r.get(0))
            .unwrap();
        let shift = hookbox::support::clock::now_ms() - 60_000 - newest;
        conn.execute_batch(&format!(
            "UPDATE events SET received_at = received_at + {shift};
             UPDATE attempts SET started_at = started_at + {shift};"
        ))
        .unwrap();
        let ancient = hookbox::support::clock::now_ms() - 40 * DAY_MS;
        conn.execute(
            "INSERT INTO events (source, delivery_id, received_at, body, state)
             VALUES ('github', 'ancient', ?1, x'7b7d', 'delivered')",
            [ancient],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome)
             VALUES (last_insert_rowid(), 1, ?1, 5, 'delivered')",
            [ancient],
        )
        .unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 10);
    }
    // Its sources, without destinations: the counts are the history alone.
    let sources = [inbox("github"), inbox("inbox"), inbox("cmd")].concat();
    let app = TestApp::spawn_in(dir, &sources, "").await;
    assert_eq!(
        app.count("PRAGMA user_version"),
        hookbox::store::schema::SCHEMA_VERSION
    );
    // github: 7 events; attempts: 4 delivered, a 410 (dead) and a 503.
    assert_eq!(totals(&app.db_path, "github"), [7, 4, 2]);
    assert_eq!(totals(&app.db_path, "inbox"), [2, 0, 0]);
    assert_eq!(totals(&app.db_path, "cmd"), [2, 2, 0]);

    // And the overview draws them: today in the 30-day chart.
    let session = login(&app).await;
    let page = get(&app, "/", &session.cookie).await;
    let rows = counters(&app.db_path);
    let days: Vec<i64> = rows
        .iter()
        .filter(|r| r.0 == "github")
        .map(|r| r.1 - r.1.rem_euclid(DAY_MS))
        .collect();
    let mut drawn = [0; 3];
    for day in days.iter().collect::<std::collections::BTreeSet<_>>() {
        let b = bars(&page, "chart-0-days", *day);
        drawn = [0, 1, 2].map(|i| drawn[i] + b[i]);
    }
    assert_eq!(drawn, [7, 4, 2]);
    app.shutdown().await;
}
