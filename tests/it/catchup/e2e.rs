//! The simulated outage, through the real binary: while hookbox was down,
//! GitHub's deliveries failed and Stripe's events went unanswered. Started
//! again, hookbox's start-up catch-up asks the fake GitHub to redeliver
//! (which it does, to hookbox) and fetches from the fake Stripe; every
//! missed event ends in the inbox once. Then `hookbox catch-up --dry-run`
//! runs beside the server, prints what it would ask for, and asks nothing.
//! The same for all five kinds at once (GitHub, Stripe, GitLab, Paddle,
//! Square), with the ledger of each source saying nothing is missing.

use std::time::Duration;

use super::fake::{Attempt, BASE_ID, Fake, HOOK_ID, STRIPE_KEY, TOKEN};
use super::stripe::{STRIPE_SECRET, event};
use super::{ago, query_i64, wait_for_count};
use crate::helpers::{ChildServer, GITHUB_SECRET, hookbox};

/// The GitHub source, with a redelivery job, and the Stripe source, with a
/// backfill, both asking the fake at `fake`.
fn sources(fake: &str) -> String {
    format!(
        r#"[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB_SECRET}"]

[sources.github_redelivery]
repo = "acme/shop"
hook_id = {HOOK_ID}
token = "{TOKEN}"
api_url = "{fake}"
pace = "10ms"

[[sources]]
name = "stripe"
kind = "stripe"
secrets = ["{STRIPE_SECRET}"]
stripe_backfill = {{ api_key = "{STRIPE_KEY}", api_url = "{fake}" }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_one_catch_up_pass_brings_every_missed_event_into_the_inbox() {
    let dir = tempfile::tempdir().unwrap();
    // What happened while hookbox was down.
    let missed: Vec<String> = (0..6).map(|n| format!("missed-{n}")).collect();
    let mut attempts: Vec<Attempt> = missed
        .iter()
        .enumerate()
        .map(|(n, g)| Attempt::new(BASE_ID + n as i64, g, ago(7200 - n as i64 * 600), false))
        .collect();
    attempts.push(Attempt::new(BASE_ID + 99, "before-outage", ago(9000), true));
    let fake = Fake::start(attempts).await;
    let stripe_missed = ["evt_a", "evt_b", "evt_c"];
    for (n, id) in stripe_missed.iter().enumerate() {
        fake.add_stripe_event(event(id, ago(3600 * (n as i64 + 1))));
    }

    let db = dir.path().join("hookbox.db");
    let mut server =
        ChildServer::spawn_ready_with(dir.path(), &db, &sources(&fake.url()), "", 0, &[], |addr| {
            fake.redeliver_to(format!("http://{addr}/hooks/github"), GITHUB_SECRET)
        })
        .await;
    let config = dir.path().join("hookbox.toml");
    wait_for_count(
        &db,
        "SELECT count(*) FROM events WHERE source = 'github'",
        6,
    )
    .await;
    wait_for_count(
        &db,
        "SELECT count(*) FROM events WHERE source = 'stripe' AND origin = 'fetched'",
        3,
    )
    .await;
    for guid in &missed {
        let sql =
            format!("SELECT count(*) FROM events WHERE delivery_id = '{guid}' AND origin = 'push'");
        assert_eq!(query_i64(&db, &sql), 1, "{guid}");
    }
    for id in stripe_missed {
        let sql = format!("SELECT count(*) FROM events WHERE delivery_id = '{id}'");
        assert_eq!(query_i64(&db, &sql), 1, "{id}");
    }
    assert_eq!(
        fake.posts(),
        (0..6).map(|n| BASE_ID + n).collect::<Vec<_>>(),
        "one redelivery per missed event, oldest first"
    );
    fake.assert_no_problems();
    wait_for_count(
        &db,
        "SELECT count(*) FROM catchup_state WHERE job IN ('github_redelivery', 'stripe_backfill')",
        2,
    )
    .await;

    // A new failure; the CLI's dry run beside the running server shows it
    // and asks nothing.
    fake.add(Attempt::new(BASE_ID + 500, "late-failure", ago(10), false));
    let out = hookbox()
        .args(["catch-up", "github", "--dry-run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("github github_redelivery (dry run)"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "would ask: late-failure attempt {}",
            BASE_ID + 500
        )),
        "{stdout}"
    );
    assert!(stdout.contains("result: complete"), "{stdout}");
    assert_eq!(fake.posts().len(), 6, "a dry run asks nothing");

    // SIGTERM stops the server cleanly with the scheduler in it.
    let exit = server.terminate(Duration::from_secs(15)).await;
    assert_eq!(exit.code(), Some(0));
}

/// One source of each catch-up kind, each asking its fake.
fn five_sources(github: &str, gitlab: &str, paddle: &str, square: &str) -> String {
    use super::gitlab_fake::{GITLAB_HOOK_ID, GITLAB_TOKEN, WEBHOOK_TOKEN};
    format!(
        "{}\n{}{}\
         [[sources]]\nname = \"gitlab\"\nkind = \"gitlab\"\nsecrets = [\"{WEBHOOK_TOKEN}\"]\n\
         gitlab_redelivery = {{ project = \"acme/shop\", hook_id = {GITLAB_HOOK_ID}, token = \"{GITLAB_TOKEN}\", api_url = \"{gitlab}\" }}\n",
        sources(github),
        super::paddle::paddle_source(paddle),
        super::square::square_source(square, "overlap = \"1h\"\n"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_one_pass_per_source_of_all_five_kinds_leaves_nothing_missing() {
    use super::gitlab_fake::{Event, GitlabFake};
    use super::paddle_fake::PaddleFake;
    use super::square_fake::SquareFake;
    use crate::helpers::TestApp;

    // Before the outage, with the plain sources: some events got through.
    let (paddle_events, paddle_missing) = super::paddle::outage();
    let (square_events, square_missing) = super::square::outage();
    let app = TestApp::spawn(&format!(
        "{}{}",
        super::paddle::plain_source(),
        super::square::plain_source()
    ))
    .await;
    for n in paddle_events
        .iter()
        .filter(|n| !paddle_missing.contains(&n.id_number()))
    {
        assert_eq!(super::paddle::push(&app, n).await, 202);
    }
    for (n, e) in (1..).zip(&square_events) {
        if !square_missing.contains(&n) {
            assert_eq!(super::square::push(&app, e).await, 202);
        }
    }
    let dir = app.shutdown().await;
    let db = dir.path().join("hookbox.db");

    // What the providers know: GitHub 4 failed, Stripe 3 unanswered,
    // GitLab 2 failed, Paddle 7 of 30 failed, Square 8 of 25 unanswered.
    let github = Fake::start(
        (0..4)
            .map(|n| Attempt::new(BASE_ID + n, &format!("gh-{n}"), ago(3600 - n * 60), false))
            .collect(),
    )
    .await;
    for (n, id) in ["evt_x", "evt_y", "evt_z"].iter().enumerate() {
        github.add_stripe_event(event(id, ago(600 * (n as i64 + 1))));
    }
    let gitlab = GitlabFake::start(vec![
        Event::new(1, "gl-a", ago(5000), "500"),
        Event::new(2, "gl-b", ago(4000), "internal error"),
    ])
    .await;
    let paddle = PaddleFake::start(paddle_events.clone()).await;
    let square = SquareFake::start(square_events.clone()).await;

    let sources = five_sources(&github.url(), &gitlab.url(), &paddle.url(), &square.url());
    let mut server = ChildServer::spawn_ready_with(dir.path(), &db, &sources, "", 1, &[], |addr| {
        github.redeliver_to(format!("http://{addr}/hooks/github"), GITHUB_SECRET);
        gitlab.resend_to(format!("http://{addr}/hooks/gitlab"));
        paddle.replay_to(format!("http://{addr}/hooks/paddle"));
    })
    .await;
    // The start-up passes, one per source.
    wait_for_count(&db, "SELECT count(DISTINCT source) FROM catchup_ledger", 5).await;
    for (source, n) in [
        ("github", 4),
        ("stripe", 3),
        ("gitlab", 2),
        ("paddle", 30),
        ("square", 25),
    ] {
        let sql = format!("SELECT count(*) FROM events WHERE source = '{source}'");
        wait_for_count(&db, &sql, n).await;
        assert_eq!(query_i64(&db, &sql), n, "{source}: every event once");
    }
    for (source, listed, recovered) in [
        ("github", 4, 4),
        ("stripe", 3, 3),
        ("gitlab", 2, 2),
        ("paddle", 30, 7),
        ("square", 25, 8),
    ] {
        let r = server
            .admin_get(&format!("/api/sources/{source}/completeness"))
            .await;
        let ledger: serde_json::Value = r.json().await.unwrap();
        let summary = &ledger["summary"];
        assert_eq!(summary["missing"], 0, "{source}: {ledger}");
        assert_eq!(summary["listed"], listed, "{source}: {ledger}");
        assert_eq!(summary["recovered"], recovered, "{source}: {ledger}");
        assert_eq!(summary["passes"], 1, "{source}: {ledger}");
    }
    let metrics = server.metrics().await;
    for source in ["github", "stripe", "gitlab", "paddle", "square"] {
        let line = format!("hookbox_catchup_missing{{source=\"{source}\"}} 0");
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    github.assert_no_problems();
    gitlab.assert_no_problems();
    paddle.assert_no_problems();
    square.assert_no_problems();
    let exit = server.terminate(Duration::from_secs(15)).await;
    assert_eq!(exit.code(), Some(0));
}
