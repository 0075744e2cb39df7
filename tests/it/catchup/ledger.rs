//! The completeness ledger: each pass's counts match what the fakes know;
//! a gap older than the provider keeps shows as missing with its reason in
//! the API, the dashboard's source page, `hookbox catch-up --report` and
//! the `hookbox_catchup_missing` gauge, and fires the `gap` alert; a
//! refused replay is missing as refused.

use serde_json::Value;

use super::paddle::{paddle_source, plain_source as paddle_plain, push as paddle_push};
use super::paddle_fake::PaddleFake;
use super::square::{plain_source, push, square_source};
use super::square_fake::{SquareFake, event};
use super::{ago, config_at, pass};
use crate::dashboard::{get, login};
use crate::helpers::*;

/// `(listed, held, recovered, pending, missing)` of the newest ledger row
/// of `source`.
fn newest(db: &std::path::Path, source: &str) -> (i64, i64, i64, i64, i64) {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT listed, held, recovered, pending, missing FROM catchup_ledger
             WHERE source = ?1 ORDER BY run_id DESC LIMIT 1",
            [source],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap()
}

#[tokio::test]
async fn each_pass_records_what_the_provider_listed_held_recovered_and_missed() {
    // Square: 8 of 25 missing.
    let (events, missing) = super::square::outage();
    let fake = SquareFake::start(events.clone()).await;
    let app = TestApp::spawn(&plain_source()).await;
    for (n, e) in (1..).zip(&events) {
        if !missing.contains(&n) {
            push(&app, e).await;
        }
    }
    let config = config_at(
        &app.db_path,
        &square_source(&fake.url(), "overlap = \"1h\"\n"),
    );
    pass(&config, "square", false).await;
    assert_eq!(newest(&app.db_path, "square"), (25, 17, 8, 0, 0));
    pass(&config, "square", false).await;
    assert_eq!(newest(&app.db_path, "square"), (25, 25, 0, 0, 0));
    pass(&config, "square", true).await;
    assert_eq!(
        app.count("SELECT count(*) FROM catchup_ledger"),
        2,
        "a dry run is not in the ledger"
    );
    app.shutdown().await;

    // Paddle: 7 of 30 missing, one of them refused (not retained), one
    // still retried by Paddle.
    let (mut notifications, missing) = super::paddle::outage();
    notifications[2].origin = "replay".into(); // event 3: Paddle refuses it
    notifications[3].status = "needs_retry".into(); // event 4
    let fake = PaddleFake::start(notifications.clone()).await;
    let app = TestApp::spawn(&paddle_plain()).await;
    for n in notifications
        .iter()
        .filter(|n| !missing.contains(&n.id_number()))
    {
        paddle_push(&app, n).await;
    }
    fake.replay_to(app.url("/hooks/paddle"));
    let config = config_at(&app.db_path, &paddle_source(&fake.url()));
    let report = pass(&config, "paddle", false).await;
    assert!(report.complete, "{report:?}");
    assert_eq!(fake.replays().len(), 5);
    // 30 listed: 23 held, 5 replayed, 1 left to Paddle, 1 refused.
    assert_eq!(newest(&app.db_path, "paddle"), (30, 23, 5, 1, 1));
    let refused: i64 = app.count("SELECT refused FROM catchup_ledger WHERE source = 'paddle'");
    assert_eq!(refused, 1);
    // The next pass lists the refused one again: still missing, not news.
    pass(&config, "paddle", false).await;
    assert_eq!(newest(&app.db_path, "paddle"), (30, 28, 0, 1, 1));
    let by: (i64, i64) = app
        .db()
        .query_row(
            "SELECT refused, refused_before FROM catchup_ledger WHERE source = 'paddle'
             ORDER BY run_id DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(by, (0, 1));
    assert_eq!(fake.replays().len(), 5, "nothing asked again");
    app.shutdown().await;
}

#[tokio::test]
async fn a_gap_older_than_square_keeps_is_missing_with_its_reason_sets_the_gauge_and_alerts() {
    // Before the outage: the newest event hookbox got is 40 days old.
    let app = TestApp::spawn(&plain_source()).await;
    let old = event(1, ago(40 * 86_400));
    assert_eq!(push(&app, &old).await, 202);
    let dir = app.shutdown().await;
    // Square kept what came in the last 28 days; what came 35 days ago
    // is gone.
    let kept: Vec<Value> = (3..=5).map(|n| event(n, ago(n as i64 * 3600))).collect();
    let mut all = kept.clone();
    all.push(event(2, ago(35 * 86_400)));
    let fake = SquareFake::start(all).await;

    let receiver = Downstream::start(|_, _| Reply::status(200)).await;
    let alert = format!(
        "\n[[alerts]]\nurl = \"{}\"\nformat = \"slack\"\non = [\"gap\"]\n",
        receiver.url()
    );
    let app = TestApp::spawn_in(
        dir,
        &format!("{}{alert}", square_source(&fake.url(), "")),
        "",
    )
    .await;
    // The start-up pass runs at once: no pass has succeeded yet.
    let hit = &receiver.wait_for_hits(1).await[0];
    let text = serde_json::from_slice::<Value>(&hit.body).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.starts_with("*hookbox: Catch-up could not recover 1: square (square_backfill)*"),
        "{text}"
    );
    assert!(text.contains("1 outside the provider's window"), "{text}");
    assert!(text.contains("hookbox catch-up square --report"), "{text}");
    assert_eq!(
        app.count("SELECT count(*) FROM events WHERE origin = 'fetched'"),
        3,
        "what Square kept is in"
    );

    let ledger = json(app.admin_get("/api/sources/square/completeness").await).await;
    assert_eq!(ledger["job"], "square_backfill", "{ledger}");
    let summary = &ledger["summary"];
    assert_eq!(summary["listed"], 3, "{ledger}");
    assert_eq!(summary["recovered"], 3);
    assert_eq!(summary["missing"], 1);
    assert_eq!(summary["missing_by"]["outside_window"], 1);
    assert_eq!(
        ledger["line"],
        "last 72 h: 3 listed, 0 held, 3 recovered, 1 missing (1 outside the provider's window)"
    );
    let uncovered = ledger["passes"][0]["uncovered_from"].as_i64().unwrap();
    let held_at = (ago(40 * 86_400) - 600) * 1000;
    assert!((uncovered - held_at).abs() < 5_000, "{ledger}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let narrow = json(
        app.admin_get("/api/sources/square/completeness?window=1s")
            .await,
    )
    .await;
    assert_eq!(narrow["summary"]["passes"], 0, "{narrow}");
    let bad = app
        .admin_get("/api/sources/square/completeness?window=soon")
        .await;
    assert_eq!(bad.status(), 400);
    assert_eq!(
        app.admin_get("/api/sources/nope/completeness")
            .await
            .status(),
        404
    );

    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("hookbox_catchup_missing{source=\"square\"} 1"),
        "{metrics}"
    );

    let session = login(&app).await;
    let page = get(&app, "/sources/square", &session.cookie).await;
    assert!(
        page.contains("last 72 h: 3 listed, 0 held, 3 recovered, 1 missing"),
        "{page}"
    );

    let cli_config = app.dir.path().join("cli.toml");
    let text = format!(
        "[server]\ndatabase = {:?}\n{}",
        app.db_path.display().to_string(),
        square_source(&fake.url(), "")
    );
    std::fs::write(&cli_config, text).unwrap();
    let out = hookbox()
        .args(["catch-up", "square", "--report", "--config"])
        .arg(&cli_config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "something is missing: {stdout}");
    assert!(
        stdout.contains("1 missing (1 outside the provider's window)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the provider no longer keeps what happened from"),
        "{stdout}"
    );

    // The next pass starts from this one: the account's newest event is
    // still 40 days old, but nothing went unchecked since, so no gap.
    let config = config_at(&app.db_path, &square_source(&fake.url(), ""));
    let again = pass(&config, "square", false).await;
    assert!(
        again.complete && again.uncovered_from.is_none(),
        "{again:?}"
    );
    // From the newest event held (3 h old) minus the overlap: one listed.
    assert_eq!(newest(&app.db_path, "square"), (1, 1, 0, 0, 0));
    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("hookbox_catchup_missing{source=\"square\"} 0"),
        "{metrics}"
    );
    app.shutdown().await;
}

#[tokio::test]
async fn a_quiet_account_is_no_gap_once_a_pass_has_run() {
    // The only event the account ever sent is 40 days old, and Square
    // has nothing newer.
    let app = TestApp::spawn(&plain_source()).await;
    assert_eq!(push(&app, &event(1, ago(40 * 86_400))).await, 202);
    let dir = app.shutdown().await;
    let db = dir.path().join("hookbox.db");
    let fake = SquareFake::start(Vec::new()).await;
    let config = config_at(&db, &square_source(&fake.url(), ""));
    let first = pass(&config, "square", false).await;
    assert!(first.uncovered_from.is_some(), "never checked: {first:?}");
    assert_eq!(newest(&db, "square").4, 1);
    let second = pass(&config, "square", false).await;
    assert!(second.complete, "{second:?}");
    assert_eq!(second.uncovered_from, None, "checked by the first pass");
    assert_eq!(newest(&db, "square"), (0, 0, 0, 0, 0));
}
