//! Paddle replay against the fake Paddle API (`paddle_fake.rs`): after an
//! outage, exactly the failed events the inbox lacks are replayed, once
//! each, through a 429; the replays arrive signed through hookbox's public
//! route and are stored as pushed; a second pass asks for nothing.

use super::paddle_fake::{
    Notification, PADDLE_KEY, PADDLE_SECRET, PaddleFake, SETTING, evt_id, ntf_id, paddle_signature,
};
use super::{ago, config_at, pass, query_i64};
use crate::helpers::*;

/// A `paddle` source without catch-up.
pub fn plain_source() -> String {
    format!("[[sources]]\nname = \"paddle\"\nkind = \"paddle\"\nsecrets = [\"{PADDLE_SECRET}\"]\n")
}

/// The `paddle` source with a replay job against `api_url`.
pub fn paddle_source(api_url: &str) -> String {
    format!(
        "{}[sources.paddle_replay]\napi_key = \"{PADDLE_KEY}\"\nnotification_setting_id = \"{SETTING}\"\napi_url = \"{api_url}\"\n",
        plain_source()
    )
}

/// POSTs `n`'s event to hookbox as Paddle does.
pub async fn push(app: &TestApp, n: &Notification) -> u16 {
    let body = n.body();
    app.client
        .post(app.url("/hooks/paddle"))
        .header("content-type", "application/json")
        .header("paddle-signature", paddle_signature(PADDLE_SECRET, &body))
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The outage: 30 events over five hours; 22 delivered, one failed at
/// Paddle though hookbox stored it (its answer got lost), 7 failed.
/// Returns the notifications and the 7 that are missing.
pub fn outage() -> (Vec<Notification>, Vec<u64>) {
    let missing: Vec<u64> = vec![3, 4, 5, 6, 7, 8, 20];
    let list = (1..=30)
        .map(|n| {
            let failed = missing.contains(&n) || n == 12;
            let status = if failed { "failed" } else { "delivered" };
            Notification::new(n, ago(5 * 3600 - n as i64 * 600), status)
        })
        .collect();
    (list, missing)
}

#[tokio::test]
async fn seven_of_thirty_missing_paddle_events_are_replayed_once_and_arrive_signed() {
    let (notifications, missing) = outage();
    let fake = PaddleFake::start(notifications.clone()).await;
    let app = TestApp::spawn(&plain_source()).await;
    for n in notifications
        .iter()
        .filter(|n| !missing.contains(&n.id_number()))
    {
        assert_eq!(push(&app, n).await, 202);
    }
    fake.replay_to(app.url("/hooks/paddle"));
    fake.throttle(3);
    let config = config_at(&app.db_path, &paddle_source(&fake.url()));

    let report = pass(&config, "paddle", false).await;
    assert!(report.complete, "{report:?}");
    let want: Vec<String> = missing.iter().map(|n| ntf_id(*n)).collect();
    assert_eq!(fake.replays(), want, "the 7, oldest first, once each");
    assert_eq!(fake.throttled(), 1, "one 429, waited out");
    let asked: Vec<&str> = report.requests.iter().map(|r| r.guid.as_str()).collect();
    let events: Vec<String> = missing.iter().map(|n| evt_id(*n)).collect();
    assert_eq!(asked, events);
    assert_eq!(report.skipped.delivered, 22);
    assert_eq!(report.skipped.held, 1);
    assert_eq!(report.seen, 30);
    assert!(report.pages >= 5, "paged: {}", report.pages);
    fake.assert_no_problems();

    // The replays came in through /hooks/paddle, verified: stored as pushed.
    for id in &events {
        let sql = format!(
            "SELECT count(*) FROM events WHERE source = 'paddle' AND delivery_id = '{id}' AND origin = 'push'"
        );
        assert_eq!(query_i64(&app.db_path, &sql), 1, "{id}");
    }
    assert_eq!(
        query_i64(
            &app.db_path,
            "SELECT count(*) FROM events WHERE source = 'paddle'"
        ),
        30
    );

    let again = pass(&config, "paddle", false).await;
    assert!(again.complete, "{again:?}");
    assert!(again.requests.is_empty(), "{again:?}");
    assert_eq!(fake.replays().len(), 7, "nothing asked twice");
}

#[tokio::test]
async fn a_dry_run_asks_nothing_and_a_retrying_notification_is_left_to_paddle() {
    let mut notifications = vec![
        Notification::new(1, ago(3600), "failed"),
        Notification::new(2, ago(3000), "needs_retry"),
        Notification::new(3, ago(2000), "delivered"),
    ];
    // Another destination's failure: not this source's.
    let mut other = Notification::new(4, ago(1000), "failed");
    other.setting = "ntfset_01otherdestination".into();
    notifications.push(other);
    let fake = PaddleFake::start(notifications).await;
    let dir = tempfile::tempdir().unwrap();
    let db = super::new_db(dir.path());
    let config = config_at(&db, &paddle_source(&fake.url()));
    let report = pass(&config, "paddle", true).await;
    assert!(report.complete, "{report:?}");
    let would: Vec<(&str, &str)> = report
        .requests
        .iter()
        .map(|r| (r.guid.as_str(), r.outcome))
        .collect();
    assert_eq!(would, [(evt_id(1).as_str(), "would_ask")]);
    assert_eq!(
        report.requests[0].target.as_deref(),
        Some(ntf_id(1).as_str())
    );
    let printed = report.to_string();
    assert!(
        printed.contains(&format!("would ask: {} via {}", evt_id(1), ntf_id(1))),
        "{printed}"
    );
    assert!(
        printed.contains("1 still retried by the provider"),
        "{printed}"
    );
    assert_eq!(report.skipped.in_flight, 1);
    assert!(fake.replays().is_empty());
    fake.assert_no_problems();
}

impl Notification {
    /// The number `Notification::new` was given.
    pub fn id_number(&self) -> u64 {
        self.id[4..].parse().unwrap()
    }
}
