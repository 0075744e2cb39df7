//! The overview's charts and the event page's body in headless Chromium
//! (the driver of `dashboard/browser.rs`): a chart pair per source, the
//! bars of the hour the events came in as the counters say, their numbers
//! in the hover titles, an empty source drawn as zeros, a JSON body
//! indented with the raw bytes one click away. Screenshots go to
//! `target/dashboard-charts*.png` and `target/dashboard-event-body.png`.

use fantoccini::{Client, Locator};
use rusqlite::params;
use serde_json::{Value, json};

use super::{DAY_MS, HOUR_MS, counters, hour_of, inbox};
use crate::dashboard::browser::{
    FIND_WAIT, browser_available, click_and_wait, connect, screenshot, start_driver, text_of,
};
use crate::helpers::*;

/// Runs `script` in the page and returns what it returns.
async fn eval(browser: &Client, script: &str) -> Value {
    browser.execute(script, vec![]).await.unwrap()
}

/// `[class, value, hover title, height]` of each bar of the bucket that
/// starts at `start` in chart `chart`.
async fn bars(browser: &Client, chart: &str, start: i64) -> Value {
    eval(
        browser,
        &format!(
            "return [...document.querySelectorAll('svg[data-chart=\"{chart}\"] g.bucket[data-start=\"{start}\"] rect.bar')]
               .map(r => [r.classList[1], Number(r.dataset.value), r.querySelector('title').textContent,
                          r.getBBox().height]);"
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_the_overview_charts_each_source_and_the_event_page_indents_json() {
    if !browser_available() {
        return;
    }
    let down = Downstream::start(|delivery, nth| match delivery {
        d if d.starts_with("flaky") && nth == 1 => Reply::status(503),
        _ => Reply::status(204),
    })
    .await;
    let url = url_destination(&down.url());
    let sources = [
        deliver_source("shop", &url, "5s", 5),
        deliver_source("flaky", &url, "5s", 5),
        inbox("inbox"),
        inbox("quiet"),
        inbox("burst"),
    ]
    .concat();
    let app = TestApp::spawn(&sources).await;
    let body = br#"{"repository":{"full_name":"acme/shop","topics":["a","b"]},"amount":12.50,"note":"<b>bold</b>"}"#;
    let mut ids = Vec::new();
    for (source, n) in [("shop", 3), ("flaky", 2), ("inbox", 1)] {
        for i in 0..n {
            let id = post_event(
                app.addr,
                source,
                &format!("{source}-{i}"),
                "application/json",
                body,
            )
            .await;
            ids.push((source, id));
        }
    }
    for (source, id) in &ids {
        let state = if *source == "inbox" {
            "stored"
        } else {
            "delivered"
        };
        wait_for_state(&app.db_path, *id, state).await;
    }
    // What the counters say of the events just posted, before any history.
    let first = hour_of(app.count("SELECT min(received_at) FROM events"));
    let real = counters(&app.db_path);
    // History before that: shop busy for a month, with a few failures now
    // and then; burst quiet but for one hour of 100,000 events five hours
    // back and one event the hour before.
    {
        let conn = app.db();
        let mut add = conn
            .prepare(
                "INSERT INTO hourly_counts (source, hour, received, delivered, failed)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .unwrap();
        for h in 1..24 * 31i64 {
            let received = 40 + (h % 24 - 12).abs() * 6 + (h / 24) % 5 * 10;
            let failed = if h % 17 == 0 { 9 } else { 0 };
            add.execute(params![
                "shop",
                first - h * HOUR_MS,
                received,
                received - failed / 3,
                failed
            ])
            .unwrap();
        }
        add.execute(params!["burst", first - 5 * HOUR_MS, 100_000, 99_990, 10])
            .unwrap();
        add.execute(params!["burst", first - 6 * HOUR_MS, 1, 1, 0])
            .unwrap();
    }

    let driver = start_driver().await;
    let browser = connect(&driver).await;
    browser.goto(&app.admin_url("/login")).await.unwrap();
    browser
        .wait()
        .at_most(FIND_WAIT)
        .for_element(Locator::Css("input[name=token]"))
        .await
        .unwrap()
        .send_keys(ADMIN_TOKEN)
        .await
        .unwrap();
    click_and_wait(&browser, Locator::Css("button[type=submit]")).await;
    assert_eq!(text_of(&browser, "h1").await, "Overview");

    // A section per source, in config order, each with its two charts.
    let titles = eval(
        &browser,
        "return [...document.querySelectorAll('section.traffic')].map(s =>
           [s.querySelector('h3').textContent, s.querySelectorAll('svg[role=img]').length,
            ...[...s.querySelectorAll('svg')].map(v => v.querySelector('title').textContent)]);",
    )
    .await;
    let expected: Vec<Value> = [
        ("shop", "shop"),
        ("flaky", "flaky"),
        ("inbox", "inbox"),
        ("quiet", "quiet — no traffic in the last 30 days"),
        ("burst", "burst"),
    ]
    .iter()
    .map(|(name, heading)| {
        json!([
            heading,
            2,
            format!("{name}: received, delivered and failed per hour, last 24 hours"),
            format!("{name}: received, delivered and failed per day, last 30 days"),
        ])
    })
    .collect();
    assert_eq!(titles, json!(expected));

    // Each hour the events came in, as the counters say: flaky got 2,
    // delivered 2 after 2 failed attempts; shop 3 and 3, no failed bar.
    // Each bar has its number on hover.
    for (source, chart) in [("shop", "chart-0-hours"), ("flaky", "chart-1-hours")] {
        let rows: Vec<_> = real.iter().filter(|r| r.0 == source).collect();
        let mut sum = [0; 3];
        for (_, hour, received, delivered, failed) in &rows {
            let drawn = bars(&browser, chart, *hour).await;
            let mut want = Vec::new();
            for (class, n) in [
                ("received", received),
                ("delivered", delivered),
                ("failed", failed),
            ] {
                if *n > 0 {
                    want.push((class.to_owned(), *n, format!(": {n} {class}")));
                }
            }
            let drawn = drawn.as_array().unwrap();
            assert_eq!(drawn.len(), want.len(), "{source} {hour}: {drawn:?}");
            for (bar, (class, n, title)) in drawn.iter().zip(&want) {
                assert_eq!(bar[0], json!(class));
                assert_eq!(bar[1], json!(n));
                assert!(bar[2].as_str().unwrap().ends_with(title), "{bar}");
                assert!(bar[3].as_f64().unwrap() >= 1.0, "{bar}");
            }
            sum = [sum[0] + received, sum[1] + delivered, sum[2] + failed];
        }
        let expected = if source == "shop" {
            [3, 3, 0]
        } else {
            [2, 2, 2]
        };
        assert_eq!(sum, expected, "{source}");
    }
    if let [(_, hour, ..)] = real.iter().filter(|r| r.0 == "flaky").collect::<Vec<_>>()[..] {
        // One hour of 2, 2 and 2 on an axis up to 2: three full bars.
        let drawn = bars(&browser, "chart-1-hours", *hour).await;
        let heights: Vec<f64> = drawn
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b[3].as_f64().unwrap())
            .collect();
        assert!(
            heights[0] > 100.0 && heights.iter().all(|h| *h == heights[0]),
            "{heights:?}"
        );
    }
    // burst: an axis up to 100k, and its one event the hour before still
    // a bar of a pixel.
    let labels = eval(
        &browser,
        "return [...document.querySelectorAll('svg[data-chart=\"chart-4-hours\"] > text')].map(t => t.textContent);",
    )
    .await;
    for label in [
        "0",
        "25k",
        "100k",
        "received",
        "delivered",
        "failed",
        "hour (UTC)",
        "per hour",
    ] {
        assert!(
            labels.as_array().unwrap().contains(&json!(label)),
            "{label}: {labels}"
        );
    }
    let one = bars(&browser, "chart-4-hours", first - 6 * HOUR_MS).await;
    assert_eq!(one[0][1], 1, "{one}");
    assert_eq!(one[0][3], 1.0, "{one}");
    let peak = bars(&browser, "chart-4-hours", first - 5 * HOUR_MS).await;
    assert_eq!(peak[0][3], 146.0, "the tallest bar fills the plot: {peak}");
    // quiet: nothing, drawn as 24 empty hours whose titles say zero.
    let quiet = eval(
        &browser,
        "const g = [...document.querySelectorAll('svg[data-chart=\"chart-3-hours\"] g.bucket')];
         return [g.length, g.filter(b => b.querySelector('rect.bar')).length,
                 g[23].querySelector('title').textContent];",
    )
    .await;
    assert_eq!(quiet[0], 24);
    assert_eq!(quiet[1], 0);
    assert!(
        quiet[2]
            .as_str()
            .unwrap()
            .ends_with(": 0 received, 0 delivered, 0 failed"),
        "{quiet}"
    );
    // The 30-day chart of shop ends today, with the history in it.
    let now = hookbox::support::clock::now_ms();
    let today = now - now.rem_euclid(DAY_MS);
    let days = eval(
        &browser,
        "return [...document.querySelectorAll('svg[data-chart=\"chart-0-days\"] g.bucket')].map(g => Number(g.dataset.start));",
    )
    .await;
    assert_eq!(days.as_array().unwrap().len(), 30);
    assert_eq!(days[29], today);

    eval(
        &browser,
        "document.querySelector('h2 + p').scrollIntoView(); return 0;",
    )
    .await;
    screenshot(&browser, "charts").await;
    eval(
        &browser,
        "document.querySelectorAll('section.traffic')[3].scrollIntoView(); return 0;",
    )
    .await;
    screenshot(&browser, "charts-quiet-and-burst").await;

    // The event page: the JSON body indented, the raw bytes one click away.
    let id = ids[0].1;
    browser
        .goto(&app.admin_url(&format!("/events/{id}")))
        .await
        .unwrap();
    let shown = text_of(&browser, "pre.body").await;
    assert_eq!(
        shown,
        "{\n  \"repository\": {\n    \"full_name\": \"acme/shop\",\n    \"topics\": [\n      \"a\",\n      \"b\"\n    ]\n  },\n  \"amount\": 12.50,\n  \"note\": \"<b>bold</b>\"\n}"
    );
    eval(
        &browser,
        "document.querySelector('pre.body').scrollIntoView(); return 0;",
    )
    .await;
    screenshot(&browser, "event-body").await;
    click_and_wait(&browser, Locator::Css("a.raw")).await;
    assert_eq!(
        browser.current_url().await.unwrap().path(),
        format!("/events/{id}/raw")
    );
    let raw = eval(&browser, "return document.body.innerText;").await;
    assert_eq!(raw.as_str().unwrap(), std::str::from_utf8(body).unwrap());
    let scripts = eval(&browser, "return document.querySelectorAll('b').length;").await;
    assert_eq!(scripts, json!(0), "the raw body is text, not markup");

    browser.close().await.unwrap();
    drop(driver);
    app.shutdown().await;
}
