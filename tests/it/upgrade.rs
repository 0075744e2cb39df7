//! Upgrading: today's hookbox opens a database the previous release wrote
//! (`tests/fixtures/release-v6.db`, made by `make-release-db.py` with
//! the release's binary) and loses nothing: every event keeps its id,
//! body and state, attempts keep their log, the pending ones are delivered
//! in their key's order with their attempts counted, nothing settled is
//! sent again, and the server goes on receiving and delivering.

use std::time::Duration;

use crate::helpers::*;

/// Written by release ff52e21 (schema version 6).
const FIXTURE_V6: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-v6.db");

/// Written by release 7fd7534 (schema version 8), the last before routes.
const FIXTURE_V8: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-v8.db");
/// Written by a6d15bf (schema 9, routes), the release before destination
/// pauses were kept.
const FIXTURE_V9: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-v9.db");
/// Written by release 329aaad (schema version 10), the first with pauses.
const FIXTURE_V10: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-v10.db");
/// Written by 1721122 (schema version 19), the last to keep an event's
/// derived state in its own row.
const FIXTURE_V19: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-v19.db");

/// The secret the fixture's sources were signed with.
const SECRET: &str = "fixture-secret";

/// `(source, delivery_id, state, attempts)` of every event, in id order:
/// the attempts its one delivery made, once there are deliveries (version
/// 9), before that the event's own; the state its outcome's where it has
/// one (version 21).
fn events(db: &std::path::Path) -> Vec<(String, String, String, i64)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let state = if version >= 21 { E_STATE } else { "e.state" };
    let sql = if version >= 9 {
        format!(
            "SELECT e.source, e.delivery_id, {state}, coalesce(d.attempts, e.attempts)
             FROM events AS e LEFT JOIN deliveries AS d ON d.event_id = e.id ORDER BY e.id"
        )
    } else {
        "SELECT source, delivery_id, state, attempts FROM events ORDER BY id".to_owned()
    };
    conn.prepare(&sql)
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn id_of(db: &std::path::Path, delivery: &str) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT id FROM events WHERE delivery_id = ?1",
            [delivery],
            |r| r.get(0),
        )
        .unwrap()
}

fn one<T: rusqlite::types::FromSql>(db: &std::path::Path, sql: &str) -> T {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_release_v6_wrote_opens_with_nothing_lost() {
    opens_with_nothing_lost(FIXTURE_V6, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_release_before_routes_wrote_opens_with_nothing_lost() {
    opens_with_nothing_lost(FIXTURE_V8, 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_release_with_routes_wrote_opens_with_nothing_lost() {
    opens_with_nothing_lost(FIXTURE_V9, 9).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_release_with_pauses_wrote_opens_with_nothing_lost() {
    opens_with_nothing_lost(FIXTURE_V10, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_release_before_event_outcomes_wrote_opens_with_nothing_lost() {
    opens_with_nothing_lost(FIXTURE_V19, 19).await;
}

/// Opens a copy of `fixture` (at schema `version`) with today's hookbox:
/// settled events stay as they were and are never sent again, the two
/// pending ones are delivered once each in their key's order, and a new
/// event goes through.
async fn opens_with_nothing_lost(fixture: &str, version: i64) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    std::fs::copy(fixture, &db).unwrap();
    let before = events(&db);
    assert_eq!(one::<i64>(&db, "PRAGMA user_version"), version);
    let bodies_sql = "SELECT group_concat(hex(body), ',') FROM events ORDER BY id";
    let bodies: String = one(&db, bodies_sql);
    let attempts: i64 = one(&db, "SELECT count(*) FROM attempts");
    // The release scheduled the retry up to an hour after it wrote the
    // file; let that hour have passed, so the test does not depend on
    // when it runs.
    let due_now = if version >= 9 {
        "UPDATE deliveries SET next_attempt_at = 0
         WHERE event_id = (SELECT id FROM events WHERE delivery_id = 'retry')"
    } else {
        "UPDATE events SET next_attempt_at = 0 WHERE delivery_id = 'retry'"
    };
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute(due_now, [])
        .unwrap();

    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let sources = format!(
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["{SECRET}"]
order_key = ["/repository/full_name"]
[sources.deliver]
url = "{}"
signing_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
max_attempts = 3
backoff_base = "1h"
backoff_cap = "1h"
[[sources]]
name = "inbox"
kind = "github"
secrets = ["{SECRET}"]
[[sources]]
name = "cmd"
kind = "github"
secrets = ["{SECRET}"]
deliver = {{ command = ["/bin/true"] }}
"#,
        down.url()
    );
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;
    assert_eq!(
        one::<i64>(&db, "PRAGMA user_version"),
        hookbox::store::schema::SCHEMA_VERSION
    );
    // Version 16 rewrote the state CHECKs' text in place: the fixture's
    // text must have been the one it looks for.
    let in_lists: i64 = one(
        &db,
        "SELECT count(*) FROM sqlite_schema WHERE sql LIKE '%CHECK (state IN%'",
    );
    assert_eq!(in_lists, 0);
    // Version 21 moved each settled event's state into its outcome row,
    // as it was (the two pending ones may be on their way by now).
    let settled: Vec<(String, String)> = before
        .iter()
        .filter(|e| !["pending", "stored"].contains(&e.2.as_str()))
        .map(|e| (e.1.clone(), e.2.clone()))
        .collect();
    let moved: Vec<(String, String)> = rusqlite::Connection::open(&db)
        .unwrap()
        .prepare(
            "SELECT e.delivery_id, o.state FROM event_outcomes AS o
             JOIN events AS e ON e.id = o.event_id
             WHERE e.delivery_id NOT IN ('retry', 'held') ORDER BY e.id",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(moved, settled);

    // The two pending events go, in their key's order, once each; the
    // retry as its second attempt.
    let hits = down.wait_for_hits(2).await;
    let sent: Vec<&str> = hits.iter().map(|h| h.delivery()).collect();
    assert_eq!(sent, ["retry", "held"]);
    assert_eq!(hits[0].header("x-hookbox-attempt"), "2");
    assert_eq!(hits[1].header("x-hookbox-attempt"), "1");
    wait_for_state(&db, id_of(&db, "held"), "delivered").await;
    let after: Vec<_> = before
        .iter()
        .map(
            |(source, delivery, state, attempts)| match delivery.as_str() {
                "retry" => (source.clone(), delivery.clone(), "delivered".into(), 2),
                "held" => (source.clone(), delivery.clone(), "delivered".into(), 1),
                _ => (source.clone(), delivery.clone(), state.clone(), *attempts),
            },
        )
        .collect();
    assert_eq!(events(&db), after, "every other event as it was");
    assert_eq!(one::<String>(&db, bodies_sql), bodies);
    assert_eq!(
        one::<i64>(&db, "SELECT count(*) FROM attempts"),
        attempts + 2,
        "the release's attempt log, and the two new attempts"
    );

    // It goes on: a new event is received and delivered, and nothing the
    // release had settled is sent again.
    let body = br#"{"repository":{"full_name":"acme/a"}}"#;
    let response = reqwest::Client::new()
        .post(server.url("/hooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", "after-upgrade")
        .header("x-hub-signature-256", github_signature(SECRET, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let hits = down.wait_for_hits(3).await;
    assert_eq!(hits[2].delivery(), "after-upgrade");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(down.hits().len(), 3, "{:?}", down.hits());

    let status = server.terminate(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
}
