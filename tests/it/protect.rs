//! Protecting the destination: a rate limit per destination, measured at a
//! local downstream.

use std::time::Duration;

use crate::helpers::*;

/// The most requests that arrived within any `window`, from sorted times.
fn most_within(times: &[std::time::Instant], window: Duration) -> usize {
    let mut most = 0;
    let mut first = 0;
    for (last, t) in times.iter().enumerate() {
        while t.duration_since(times[first]) >= window {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_spaces_attempts_whatever_the_backlog_and_the_concurrency() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let destination = format!(
        "{}\nrate = \"20/s\"\nconcurrency = 8",
        url_destination(&down.url())
    );
    let app = TestApp::spawn(&deliver_source("github", &destination, "5s", 3)).await;
    // Forty at once, each of its own key: nothing but the rate holds them.
    for i in 0..40 {
        let body = format!(r#"{{"repository":{{"full_name":"acme/r{i}"}}}}"#);
        assert_eq!(
            app.post_github(&format!("r-{i}"), body.as_bytes())
                .await
                .status(),
            202
        );
    }
    let hits = down.wait_for_hits(40).await;
    let mut times: Vec<_> = hits.iter().map(|h| h.at).collect();
    times.sort();
    let spread = times[39].duration_since(times[0]);
    // 39 gaps of 50 ms; timers and the network may shift a start a little.
    assert!(
        spread >= Duration::from_millis(1_800),
        "40 attempts within {spread:?}"
    );
    let busiest = most_within(&times, Duration::from_secs(1));
    assert!(
        busiest <= 21,
        "{busiest} attempts within one second at 20/s"
    );
}

/// The value of `series` (with exactly `labels`) in the admin's /metrics.
async fn metric(app: &TestApp, series: &str) -> Option<String> {
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
}

const PAUSED: &str = r#"hookbox_destination_paused{source="github",destination="default"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_pauses_a_failing_destination_probes_it_and_flushes_the_backlog_when_back() {
    let down = Downstream::start(|_, _| Reply::status(503)).await;
    // Long backoffs: without the breaker's flush, the backlog would wait
    // them out once the destination is back.
    let destination = format!(
        "{}\nconcurrency = 2\nbreaker_failures = 3\nbreaker_probe = \"200ms\"",
        url_destination(&down.url())
    );
    let source =
        crate::helpers::deliver_source_backoff("github", &destination, "5s", 4, "20s", "60s");
    let app = TestApp::spawn(&source).await;
    for i in 0..20 {
        let body = format!(r#"{{"repository":{{"full_name":"acme/r{i}"}}}}"#);
        assert_eq!(
            app.post_github(&format!("b-{i}"), body.as_bytes())
                .await
                .status(),
            202
        );
    }
    // Down for 2.5 s: three failures pause it, then only probes go (at
    // 200 ms, then 400 ms, 800 ms, 1.6 s apart).
    crate::helpers::eventually("the pause", || (down.hits().len() >= 3).then_some(())).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(metric(&app, PAUSED).await.as_deref(), Some("1"));
    let breaker = || async {
        let stats: serde_json::Value = app.admin_get("/api/stats").await.json().await.unwrap();
        stats["sources"][0]["destinations"]["default"]["status"].clone()
    };
    let paused = breaker().await;
    assert_eq!(paused["state"], "paused", "{paused}");
    assert!(
        paused["paused_since"].is_i64() && paused["next_probe_at"].is_i64(),
        "{paused}"
    );
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let while_down = down.hits().len();
    assert!(
        while_down <= 10,
        "{while_down} attempts reached a destination that was down (20 events)"
    );
    down.set_script(|_, _| Reply::status(204));
    let back = std::time::Instant::now();
    let deadline = back + Duration::from_secs(20);
    while app.count("SELECT count(*) FROM deliveries WHERE state = 'delivered'") < 20 {
        if std::time::Instant::now() > deadline {
            let rows: Vec<String> = app
                .db()
                .prepare("SELECT id, state, attempts, next_attempt_at - (strftime('%s','now') * 1000) FROM deliveries")
                .unwrap()
                .query_map([], |r| Ok(format!("{:?}", (r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?, r.get::<_, Option<i64>>(3)?))))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let hits: Vec<String> = down
                .hits()
                .iter()
                .map(|h| format!("{} {}", h.delivery(), h.status))
                .collect();
            panic!(
                "not delivered: {rows:#?}\nhits {hits:?}\nleases {}",
                app.count("SELECT count(*) FROM leases")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = back.elapsed();
    // The next probe is at most 3.2 s away (probes double from 200 ms);
    // without the flush the backlog would wait out 20-60 s backoffs.
    assert!(
        took < Duration::from_secs(15),
        "the backlog took {took:?} after the destination came back"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM deliveries WHERE state = 'dead'"),
        0
    );
    // Probes were not counted: no delivery spent more than its own
    // attempts before the pause and the one that went through.
    let most: i64 = app.count("SELECT max(attempts) FROM deliveries");
    assert!(most <= 2, "a delivery spent {most} attempts");
    assert_eq!(metric(&app, PAUSED).await.as_deref(), Some("0"));
    assert_eq!(breaker().await["state"], "open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_on_a_503_pauses_the_whole_destination_that_long() {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let seen = std::sync::atomic::AtomicUsize::new(0);
    down.set_script(move |_, _| {
        if seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
            Reply::status(503).retry_after("2")
        } else {
            Reply::status(204)
        }
    });
    let destination = format!(
        "{}\nconcurrency = 1\nbreaker_failures = 100",
        url_destination(&down.url())
    );
    let source =
        crate::helpers::deliver_source_backoff("github", &destination, "5s", 5, "10ms", "5s");
    let app = TestApp::spawn(&source).await;
    for i in 0..5 {
        let body = format!(r#"{{"repository":{{"full_name":"acme/r{i}"}}}}"#);
        assert_eq!(
            app.post_github(&format!("ra-{i}"), body.as_bytes())
                .await
                .status(),
            202
        );
    }
    let hits = down.wait_for_hits(6).await;
    assert_eq!(hits[0].status, 503);
    let paused = hits[1].at.duration_since(hits[0].at);
    assert!(
        paused >= Duration::from_millis(1_800),
        "the next attempt went {paused:?} after a Retry-After of 2 s"
    );
    crate::helpers::eventually("all delivered", || {
        (app.count("SELECT count(*) FROM deliveries WHERE state = 'delivered'") == 5).then_some(())
    })
    .await;
}

/// Under a rate, the time of the next start can pass between the look
/// that found the lane held and the dispatcher going to sleep; it must then
/// wake at once, not at its 5 s idle recheck (the outage benchmark saw
/// the backlog stop for exactly 5 s, several times a run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_held_backlog_never_stops_for_the_idle_recheck() {
    let down = Downstream::start(|_, _| Reply::status(503)).await;
    let destination = format!(
        "{}\nrate = \"200/s\"\nbreaker_failures = 3\nbreaker_probe = \"500ms\"",
        url_destination(&down.url())
    );
    let source =
        crate::helpers::deliver_source_backoff("github", &destination, "5s", 10, "30s", "1h");
    let app = TestApp::spawn(&source).await;
    for i in 0..1_200 {
        let body = format!(r#"{{"repository":{{"full_name":"acme/r{}"}}}}"#, i % 50);
        let r = app.post_github(&format!("s-{i}"), body.as_bytes()).await;
        assert_eq!(r.status(), 202);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    down.set_script(|_, _| Reply::status(204));
    let before = down.hits().len();
    // 1,200 at 200/s: six seconds of starts once a probe goes through,
    // which may be seconds away (probes double from 500 ms).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while down.hits().len() < before + 1_200 {
        assert!(std::time::Instant::now() < deadline, "not all delivered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let hits = down.hits();
    let mut times: Vec<_> = hits[before..].iter().map(|h| h.at).collect();
    times.sort();
    let worst = times
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap();
    assert!(
        worst < Duration::from_millis(2_500),
        "the backlog stopped for {worst:?} between two deliveries"
    );
}
