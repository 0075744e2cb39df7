//! Square backfill against the fake Events API (`square_fake.rs`): after
//! an outage, exactly the missing events are inserted, byte for byte as
//! Square would have pushed them, marked fetched, through a 429; a second
//! pass inserts none; a pushed copy and a fetched one are the same row.

use serde_json::Value;

use super::square_fake::{SQUARE_TOKEN, SQUARE_URL, SquareFake, body, event, square_signature};
use super::{ago, config_at, pass, query_i64};
use crate::helpers::*;

/// A `square` source without catch-up.
pub fn plain_source() -> String {
    format!(
        "[[sources]]\nname = \"square\"\nkind = \"square\"\nsecrets = [\"{}\"]\npublic_url = \"{SQUARE_URL}\"\n",
        super::square_fake::SQUARE_KEY
    )
}

/// The `square` source with a backfill against `api_url`; `extra` adds keys.
pub fn square_source(api_url: &str, extra: &str) -> String {
    format!(
        "{}[sources.square_backfill]\naccess_token = \"{SQUARE_TOKEN}\"\napi_url = \"{api_url}\"\n{extra}",
        plain_source()
    )
}

/// POSTs `event` to hookbox as Square does.
pub async fn push(app: &TestApp, event: &Value) -> u16 {
    let body = body(event);
    app.client
        .post(app.url("/hooks/square"))
        .header("content-type", "application/json")
        .header("square-version", "2024-12-18")
        .header("x-square-hmacsha256-signature", square_signature(&body))
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// 25 events two minutes apart, the last a minute ago; the 8 missing were
/// sent while hookbox was down (the 13th to the 20th).
pub fn outage() -> (Vec<Value>, Vec<u32>) {
    let events = (1..=25)
        .map(|n| event(n, ago(60 + (25 - n as i64) * 120)))
        .collect();
    (events, (13..=20).collect())
}

fn stored(db: &std::path::Path, id: &str) -> Option<(String, Vec<u8>)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(
        "SELECT origin, body FROM events WHERE source = 'square' AND delivery_id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .ok()
}

#[tokio::test]
async fn eight_of_twenty_five_missing_square_events_are_inserted_byte_stable_once() {
    let (events, missing) = outage();
    let fake = SquareFake::start(events.clone()).await;
    fake.throttle(2);
    let app = TestApp::spawn(&plain_source()).await;
    for (n, e) in (1..).zip(&events) {
        if !missing.contains(&n) {
            assert_eq!(push(&app, e).await, 202, "{n}");
        }
    }
    let dir = app.shutdown().await;
    let db = dir.path().join("hookbox.db");
    let config = config_at(&db, &square_source(&fake.url(), "overlap = \"1h\"\n"));

    let report = pass(&config, "square", false).await;
    assert!(report.complete, "{report:?}");
    let ids: Vec<String> = missing
        .iter()
        .map(|n| {
            events[*n as usize - 1]["event_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(report.inserted, ids, "exactly the 8, oldest first");
    assert_eq!(report.seen, 25);
    assert_eq!(report.skipped.held, 17);
    assert_eq!(fake.throttled(), 1, "one 429, waited out");
    fake.assert_no_problems();
    let searches = fake.searches();
    assert!(
        searches.len() >= 8,
        "25 events, 4 a page: {}",
        searches.len()
    );
    assert!(searches.iter().skip(2).all(|s| s["cursor"].is_string()));
    assert!(searches.iter().all(|s| s["query"] == searches[0]["query"]));
    for (n, id) in missing.iter().zip(&ids) {
        let (origin, stored_body) = stored(&db, id).unwrap();
        assert_eq!(origin, "fetched");
        assert_eq!(
            stored_body,
            body(&events[*n as usize - 1]),
            "{id}: the body Square would have sent"
        );
    }
    assert_eq!(
        query_i64(
            &db,
            "SELECT count(*) FROM events WHERE source = 'square' AND origin = 'push'"
        ),
        17
    );

    let again = pass(&config, "square", false).await;
    assert!(again.complete, "{again:?}");
    assert!(again.inserted.is_empty(), "{again:?}");
    assert_eq!(query_i64(&db, "SELECT count(*) FROM events"), 25);

    // Square's own retry of a fetched event is the same row: a duplicate.
    let app = TestApp::spawn_in(dir, &plain_source(), "").await;
    assert_eq!(push(&app, &events[12]).await, 200);
    assert_eq!(app.count("SELECT count(*) FROM events"), 25);
}

#[tokio::test]
async fn types_narrow_the_search_and_a_bad_token_stops_the_pass_saying_why() {
    let (events, _) = outage();
    let fake = SquareFake::start(events).await;
    let dir = tempfile::tempdir().unwrap();
    let db = super::new_db(dir.path());
    let config = config_at(
        &db,
        &square_source(&fake.url(), "types = [\"order.updated\"]\n"),
    );
    let report = pass(&config, "square", false).await;
    assert!(report.complete, "{report:?}");
    assert_eq!(report.inserted.len(), 8, "every third of 25: {report:?}");
    assert_eq!(
        fake.searches()[0]["query"]["filter"]["event_types"],
        serde_json::json!(["order.updated"])
    );

    let wrong = square_source(&fake.url(), "").replace(SQUARE_TOKEN, "EAAAl-revoked");
    let report = pass(&config_at(&db, &wrong), "square", false).await;
    assert!(!report.complete);
    let error = report.error.unwrap();
    assert!(
        error.contains("401") && error.contains("UNAUTHORIZED"),
        "{error}"
    );
    assert!(!error.contains("EAAAl-revoked"), "{error}");
}
