//! Stripe backfill against the fake events API: missing events inserted
//! once, marked fetched; present ones untouched; a second pass inserts
//! nothing.

use serde_json::{Value, json};

use super::fake::{Fake, STRIPE_KEY};
use super::{ago, config_at, new_db, pass, query_i64};
use crate::helpers::*;

pub const STRIPE_SECRET: &str = "whsec_stripe_test_secret";

pub fn stripe_source(api_url: &str) -> String {
    format!(
        "[[sources]]\nname = \"stripe\"\nkind = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         stripe_backfill = {{ api_key = \"{STRIPE_KEY}\", api_url = \"{api_url}\" }}\n"
    )
}

pub fn event(id: &str, created: i64) -> Value {
    json!({"id": id, "object": "event", "type": "invoice.paid", "created": created,
           "data": {"object": {"id": format!("in_{id}")}}, "livemode": false})
}

/// POSTs `body` to the stripe source signed as Stripe does.
async fn push(app: &TestApp, body: &[u8]) -> u16 {
    let t = now_secs();
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(body);
    let sig = hex::encode(hmac_sha256(STRIPE_SECRET.as_bytes(), &signed));
    app.client
        .post(app.url("/hooks/stripe"))
        .header("content-type", "application/json")
        .header("stripe-signature", format!("t={t},v1={sig}"))
        .body(body.to_vec())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn missing_stripe_events_are_inserted_once_as_fetched_and_present_ones_untouched() {
    let fake = Fake::start(Vec::new()).await;
    // Pushed and stored before the outage: the newest the inbox holds.
    let held = event("evt_held", ago(5 * 3600));
    // Older than what the inbox holds minus the overlap: not listed.
    fake.add_stripe_event(event("evt_before", ago(6 * 3600)));
    fake.add_stripe_event(held.clone());
    let mut connect = event("evt_connect", ago(3 * 3600));
    connect["account"] = json!("acct_1");
    fake.add_stripe_event(connect);
    for (n, age) in [(1, 4 * 3600), (2, 2 * 3600), (3, 3600), (4, 600), (5, 60)] {
        fake.add_stripe_event(event(&format!("evt_missed_{n}"), ago(age)));
    }

    // A first run, without the job, stores the held event as pushed.
    let app = TestApp::spawn(&format!(
        "[[sources]]\nname = \"stripe\"\nkind = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n"
    ))
    .await;
    let held_body = serde_json::to_vec(&held).unwrap();
    assert_eq!(push(&app, &held_body).await, 202);
    let dir = app.shutdown().await;
    let db = dir.path().join("hookbox.db");

    let config = config_at(&db, &stripe_source(&fake.url()));
    let report = pass(&config, "stripe", false).await;
    assert!(report.complete, "{report:?}");
    let mut inserted = report.inserted.clone();
    inserted.sort();
    assert_eq!(
        inserted,
        [
            "acct_1/evt_connect",
            "evt_missed_1",
            "evt_missed_2",
            "evt_missed_3",
            "evt_missed_4",
            "evt_missed_5"
        ]
    );
    assert_eq!(report.inserted[0], "evt_missed_1", "oldest first");
    assert_eq!(report.skipped.held, 1);
    let queries = fake.inner.lock().unwrap().stripe_queries.clone();
    assert!(queries.len() >= 3, "paged: {queries:?}");
    assert!(
        queries
            .iter()
            .skip(1)
            .all(|q| q.contains_key("starting_after"))
    );
    let gte: i64 = queries[0]["created[gte]"].parse().unwrap();
    assert_eq!(
        gte,
        held["created"].as_i64().unwrap() - 600,
        "newest held minus the overlap"
    );

    let conn = rusqlite::Connection::open(&db).unwrap();
    let fetched: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE source = 'stripe' AND origin = 'fetched'
               AND content_type = 'application/json' AND state = 'stored'
               AND json_extract(CAST(body AS TEXT), '$.type') = 'invoice.paid'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(fetched, 6);
    let (origin, body): (String, Vec<u8>) = conn
        .query_row(
            "SELECT origin, body FROM events WHERE delivery_id = 'evt_held'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((origin.as_str(), body), ("push", held_body), "untouched");
    assert_eq!(
        query_i64(
            &db,
            "SELECT count(*) FROM events WHERE delivery_id = 'evt_before'"
        ),
        0
    );

    let again = pass(&config, "stripe", false).await;
    assert!(again.complete);
    assert!(again.inserted.is_empty(), "{again:?}");
    assert_eq!(query_i64(&db, "SELECT count(*) FROM events"), 7);
    drop(dir);
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_and_the_pass_goes_on() {
    let fake = Fake::start(Vec::new()).await;
    for n in 0..5 {
        fake.add_stripe_event(event(&format!("evt_{n}"), ago(600 * (n + 1))));
    }
    fake.inner.lock().unwrap().stripe_throttle = vec![2];
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let report = pass(
        &config_at(&db, &stripe_source(&fake.url())),
        "stripe",
        false,
    )
    .await;
    assert!(report.complete, "{report:?}");
    assert_eq!(report.inserted.len(), 5, "{report:?}");
    assert_eq!(fake.inner.lock().unwrap().stripe_throttled, 1);
}

#[tokio::test]
async fn fetched_events_follow_the_destination_filter() {
    let fake = Fake::start(Vec::new()).await;
    let mut refund = event("evt_refund", ago(120));
    refund["type"] = json!("charge.refunded");
    fake.add_stripe_event(event("evt_invoice", ago(60)));
    fake.add_stripe_event(refund);
    let dir = tempfile::tempdir().unwrap();
    let db = new_db(dir.path());
    let sources = format!(
        "{}deliver = {{ command = [\"/bin/true\"], events = [\"invoice.*\"] }}\n",
        stripe_source(&fake.url())
    );
    let config = config_at(&db, &sources);
    let report = pass(&config, "stripe", false).await;
    assert!(report.complete, "{report:?}");
    let state = |id: &str| -> String {
        rusqlite::Connection::open(&db)
            .unwrap()
            .query_row(
                &format!("SELECT {STATE} FROM events WHERE delivery_id = ?1"),
                [id],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert_eq!(state("evt_invoice"), "pending", "the filter takes it");
    assert_eq!(state("evt_refund"), "stored", "the filter leaves it");
}
