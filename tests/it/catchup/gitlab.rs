//! GitLab resend against the fake GitLab API (`gitlab_fake.rs`): which
//! events hookbox asks GitLab to resend, and that they land in the inbox;
//! GitLab's resend rate limit, paced and waited out, or left for the next
//! pass; dry runs; group hooks on a self-managed `api_url`; the admin API
//! and the dashboard; and a failing pass raising a `catchup_failed` alert.

use std::time::Duration;

use serde_json::Value;

use super::gitlab_fake::{Event, GITLAB_HOOK_ID, GITLAB_TOKEN, GitlabFake, Mode, WEBHOOK_TOKEN};
use super::{FINISHED_RUNS, ago, config_at, new_db, pass, query_i64, wait_for_count};
use crate::helpers::*;

/// A `gitlab` source without catch-up.
fn plain_source() -> String {
    format!("[[sources]]\nname = \"gitlab\"\nkind = \"gitlab\"\nsecrets = [\"{WEBHOOK_TOKEN}\"]\n")
}

/// The `gitlab` source with a resend job on `api_url`; `extra` adds keys.
fn gitlab_source(api_url: &str, extra: &str) -> String {
    format!(
        "{}\n[sources.gitlab_redelivery]\nproject = \"acme/shop\"\nhook_id = {GITLAB_HOOK_ID}\ntoken = \"{GITLAB_TOKEN}\"\napi_url = \"{api_url}\"\n{extra}",
        plain_source()
    )
}

/// POSTs a delivery to hookbox as GitLab sends it.
async fn push(app: &TestApp, key: &str) -> u16 {
    app.client
        .post(app.url("/hooks/gitlab"))
        .header("content-type", "application/json")
        .header("x-gitlab-token", WEBHOOK_TOKEN)
        .header("x-gitlab-event", "Push Hook")
        .header("idempotency-key", key)
        .header("x-gitlab-webhook-uuid", format!("first-{key}"))
        .body(r#"{"object_kind":"push"}"#)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn count_key(app: &TestApp, key: &str) -> i64 {
    app.count(&format!(
        "SELECT count(*) FROM events WHERE source = 'gitlab' AND delivery_id = '{key}'"
    ))
}

/// Failed events that each need one resend, `n` of them, a minute apart.
fn missing(n: i64) -> Vec<Event> {
    (0..n)
        .map(|i| Event::new(100 + i, &format!("missing-{i}"), ago(3600 - i * 60), "500"))
        .collect()
}

#[tokio::test]
async fn only_the_missing_failed_events_are_resent_once_each_and_land_in_the_inbox() {
    let fake = GitlabFake::start(vec![
        Event::new(1, "ok-once", ago(7200), "200"),
        // Failed, then GitLab's own retry went through: leave alone.
        Event::new(2, "failed-then-ok", ago(7000), "500"),
        Event::new(3, "failed-then-ok", ago(6900), "201"),
        // Failed at GitLab, but hookbox stored it (the answer got lost).
        Event::new(4, "already-held", ago(6000), "502"),
        Event::new(5, "missing-a", ago(5000), "500"),
        // Several failed attempts of one event: the newest is resent.
        Event::new(6, "missing-b", ago(4000), "internal error"),
        Event::new(7, "missing-b", ago(3000), "internal error"),
        Event::new(8, "missing-c", ago(2500), "404").kind("Merge Request Hook"),
        Event::new(9, "missing-d", ago(2000), "301"),
        // Older than GitLab lists (7 days): never resent.
        Event::new(10, "too-old", ago(8 * 86_400), "500"),
    ])
    .await;
    let app = TestApp::spawn(&plain_source()).await;
    assert_eq!(push(&app, "already-held").await, 202);
    fake.resend_to(app.url("/hooks/gitlab"));
    let config = config_at(&app.db_path, &gitlab_source(&fake.url(), ""));

    // A dry run says what it would resend, and resends nothing.
    let dry = pass(&config, "gitlab", true).await;
    assert!(dry.complete && dry.error.is_none(), "{dry:?}");
    assert!(fake.resent().is_empty());
    let would: Vec<(&str, i64)> = dry
        .requests
        .iter()
        .map(|r| (r.guid.as_str(), r.attempt_id))
        .collect();
    assert_eq!(
        would,
        [
            ("missing-a", 5),
            ("missing-b", 7),
            ("missing-c", 8),
            ("missing-d", 9)
        ]
    );
    assert!(dry.requests.iter().all(|r| r.outcome == "would_ask"));
    let printed = dry.to_string();
    assert!(
        printed.contains("gitlab gitlab_redelivery (dry run)"),
        "{printed}"
    );
    assert!(
        printed.contains("would ask: missing-c attempt 8 [Merge Request Hook]"),
        "{printed}"
    );
    assert_eq!(
        query_i64(&app.db_path, "SELECT count(*) FROM catchup_state"),
        0
    );

    let report = pass(&config, "gitlab", false).await;
    assert!(report.complete, "{report:?}");
    fake.assert_no_problems();
    assert_eq!(fake.resent(), vec![5, 7, 8, 9], "oldest first, each once");
    assert_eq!(
        report.seen, 7,
        "every event in the window, by Idempotency-Key"
    );
    assert_eq!(report.skipped.delivered, 2);
    assert_eq!(report.skipped.held, 1);
    assert!(report.pages >= 4, "read every page: {report:?}");
    for key in [
        "missing-a",
        "missing-b",
        "missing-c",
        "missing-d",
        "already-held",
    ] {
        assert_eq!(count_key(&app, key), 1, "{key}");
    }
    assert_eq!(app.count("SELECT count(*) FROM events"), 5);
    let kinds = app.count(
        "SELECT count(*) FROM events WHERE delivery_id = 'missing-c' AND event_type = 'Merge Request Hook'",
    );
    assert_eq!(kinds, 1);
    let requests = fake.requests();
    assert_eq!(
        requests[0],
        format!("GET /projects/acme%2Fshop/hooks/{GITLAB_HOOK_ID}/events?per_page=20&page=1")
    );
    assert!(requests.contains(&format!(
        "POST /projects/acme%2Fshop/hooks/{GITLAB_HOOK_ID}/events/7/resend"
    )));
    let db = app.db_path.clone();
    assert_eq!(
        query_i64(
            &db,
            "SELECT count(*) FROM redelivery_requests WHERE outcome = 'asked' AND source = 'gitlab'"
        ),
        4
    );
    assert_eq!(
        query_i64(
            &db,
            "SELECT asked * 100 + seen * 10 + complete FROM catchup_runs WHERE dry_run = 0"
        ),
        4 * 100 + 7 * 10 + 1
    );
    let errors: String = app
        .db()
        .query_row(
            "SELECT group_concat(coalesce(error, '')) FROM redelivery_requests",
            [],
            |r| r.get::<_, Option<String>>(0),
        )
        .unwrap()
        .unwrap_or_default();
    assert!(!errors.contains("payload-body-marker"), "{errors}");

    // The resends went through: the next pass finds nothing to do.
    let again = pass(&config, "gitlab", false).await;
    assert!(again.complete, "{again:?}");
    assert!(again.requests.is_empty(), "{again:?}");
    assert_eq!(fake.resent().len(), 4, "nothing resent twice");
    app.shutdown().await;
}

#[tokio::test]
async fn resends_are_paced_to_gitlabs_limit_and_a_429_is_waited_out() {
    let window = Duration::from_secs(1);
    let fake = GitlabFake::start(missing(5)).await;
    fake.set_limit(2, window, None);
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());

    // Configured as GitLab allows: paced, never refused.
    let paced = gitlab_source(&fake.url(), "resend_limit = 2\nresend_window = \"1s\"\n");
    let report = pass(&config_at(&db, &paced), "gitlab", false).await;
    assert!(report.complete, "{report:?}");
    assert_eq!(fake.resent(), vec![100, 101, 102, 103, 104]);
    assert_eq!(fake.throttled(), 0, "paced, so never over the limit");
    assert!(fake.most_in_any(window) <= 2);

    // Configured looser than the instance allows: GitLab answers 429
    // (without Retry-After, as its resend endpoint does), hookbox waits a
    // window and carries on.
    // Failed since the first pass (which moved the mark).
    for i in 5..10 {
        fake.add(Event::new(
            100 + i,
            &format!("missing-{i}"),
            ago(60 - i),
            "500",
        ));
    }
    let loose = gitlab_source(&fake.url(), "resend_limit = 5\nresend_window = \"1s\"\n");
    let report = pass(&config_at(&db, &loose), "gitlab", false).await;
    assert!(report.complete && report.error.is_none(), "{report:?}");
    assert!(fake.throttled() > 0, "the fake's limit was reached");
    assert_eq!(
        fake.resent(),
        (100..110).collect::<Vec<_>>(),
        "each resent once, in order, none skipped by the 429s"
    );
    assert!(fake.most_in_any(window) <= 2);
    fake.assert_no_problems();
}

#[tokio::test]
async fn a_long_retry_after_stops_the_pass_and_the_next_pass_resends_the_rest() {
    let fake = GitlabFake::start(missing(4)).await;
    fake.set_limit(2, Duration::from_secs(3600), Some(3600));
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let config = config_at(&db, &gitlab_source(&fake.url(), ""));

    let first = pass(&config, "gitlab", false).await;
    assert!(first.rate_limited && !first.complete, "{first:?}");
    assert!(first.error.as_deref().unwrap().contains("rate limit"));
    assert_eq!(fake.resent(), vec![100, 101]);
    let deferred: Vec<i64> = first
        .requests
        .iter()
        .filter(|r| r.outcome == "deferred")
        .map(|r| r.attempt_id)
        .collect();
    assert_eq!(deferred, [102, 103], "what it did not resend is reported");
    let printed = first.to_string();
    assert!(
        printed.contains("left for the next pass: missing-2 attempt 102"),
        "{printed}"
    );
    assert_eq!(query_i64(&db, "SELECT count(*) FROM catchup_state"), 0);

    fake.set_limit(5, Duration::from_secs(60), None);
    let second = pass(&config, "gitlab", false).await;
    assert!(second.complete, "{second:?}");
    assert_eq!(fake.resent(), vec![100, 101, 102, 103], "each once");
    assert_eq!(query_i64(&db, "SELECT count(*) FROM catchup_state"), 1);
}

#[tokio::test]
async fn a_group_hook_on_a_self_managed_instance_uses_group_paths_under_api_url() {
    let fake = GitlabFake::start(missing(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let sources = format!(
        "{}\n[sources.gitlab_redelivery]\ngroup = \"acme/platform\"\nhook_id = {GITLAB_HOOK_ID}\ntoken = \"{GITLAB_TOKEN}\"\napi_url = \"{}/api/v4/\"\n",
        plain_source(),
        fake.url()
    );
    let report = pass(&config_at(&db, &sources), "gitlab", false).await;
    assert!(report.complete, "{report:?}");
    fake.assert_no_problems();
    let group = format!("/api/v4/groups/acme%2Fplatform/hooks/{GITLAB_HOOK_ID}/events");
    let requests = fake.requests();
    assert_eq!(requests[0], format!("GET {group}?per_page=20&page=1"));
    assert_eq!(
        &requests[1..],
        [
            format!("POST {group}/100/resend"),
            format!("POST {group}/101/resend")
        ]
    );
}

#[tokio::test]
async fn the_admin_api_runs_a_gitlab_pass_and_the_dashboard_lists_it() {
    let fake = GitlabFake::start(vec![Event::new(1, "before", ago(600), "200")]).await;
    let app = TestApp::spawn(&gitlab_source(&fake.url(), "")).await;
    // The start-up pass: nothing failed yet. It records its run, then
    // lets go of its lock in a write of its own: until then a pass by
    // hand is refused as one already running.
    wait_for_count(&app.db_path, FINISHED_RUNS, 1).await;
    wait_for_count(&app.db_path, "SELECT 1 - count(*) FROM job_locks", 1).await;
    fake.add(Event::new(2, "during-outage", ago(5), "internal error"));
    fake.resend_to(app.url("/hooks/gitlab"));

    let dry = app
        .admin_post("/api/sources/gitlab/catch-up?dry_run=true", Value::Null)
        .await;
    assert_eq!(dry.status(), 200);
    let dry = json(dry).await;
    assert_eq!(dry["job"], "gitlab_redelivery");
    assert_eq!(dry["requests"][0]["outcome"], "would_ask");
    assert!(fake.resent().is_empty());

    let run = json(
        app.admin_post("/api/sources/gitlab/catch-up", Value::Null)
            .await,
    )
    .await;
    assert_eq!(run["complete"], true, "{run}");
    assert_eq!(run["requests"][0]["guid"], "during-outage");
    assert_eq!(run["requests"][0]["outcome"], "asked");
    assert_eq!(fake.resent(), vec![2]);
    assert_eq!(count_key(&app, "during-outage"), 1);

    let runs = json(app.admin_get("/api/catch-up?source=gitlab").await).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 3, "{runs}");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let cookie = dashboard_cookie(app.admin_url("/login")).await;
    let page = client
        .get(app.admin_url("/catch-up"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("gitlab_redelivery"), "{page}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_429_while_listing_is_waited_out_and_the_pass_goes_on() {
    let fake = GitlabFake::start(missing(4)).await;
    fake.throttle_list(2);
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let report = pass(
        &config_at(&db, &gitlab_source(&fake.url(), "")),
        "gitlab",
        false,
    )
    .await;
    assert!(report.complete, "{report:?}");
    assert_eq!(fake.throttled(), 1);
    assert_eq!(fake.resent(), vec![100, 101, 102, 103]);
}

#[tokio::test]
async fn a_failing_gitlab_pass_raises_a_catchup_failed_alert() {
    let fake = GitlabFake::start(missing(1)).await;
    fake.set_mode(Mode::Unauthorized);
    let receiver = Downstream::start(|_, _| Reply::status(200)).await;
    let alert = format!(
        "\n[[alerts]]\nurl = \"{}\"\nformat = \"slack\"\non = [\"catchup_failed\"]\n",
        receiver.url()
    );
    let app = TestApp::spawn(&format!("{}{alert}", gitlab_source(&fake.url(), ""))).await;
    let hit = &receiver.wait_for_hits(1).await[0];
    let body: Value = serde_json::from_slice(&hit.body).unwrap();
    let text = body["text"].as_str().unwrap();
    assert!(
        text.starts_with("*hookbox: Catch-up failed: gitlab (gitlab_redelivery)*"),
        "{text}"
    );
    assert!(text.contains("401"), "{text}");
    assert!(
        text.contains("gitlab_redelivery.token"),
        "says what to fix: {text}"
    );
    assert!(!text.contains(GITLAB_TOKEN), "the token leaked: {text}");
    assert!(fake.resent().is_empty());
    app.shutdown().await;

    // A GitLab that answers 500 fails the pass the same way.
    fake.set_mode(Mode::Broken);
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let report = pass(
        &config_at(&db, &gitlab_source(&fake.url(), "")),
        "gitlab",
        false,
    )
    .await;
    let error = report.error.unwrap();
    assert!(error.contains("500"), "{error}");
    assert_eq!(
        query_i64(
            &db,
            "SELECT count(*) FROM catchup_runs WHERE complete = 0 AND error LIKE '%500%'"
        ),
        1
    );
}
