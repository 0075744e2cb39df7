//! Upgrading: today's hookbox opens a database the previous release wrote
//! (`tests/fixtures/release-v6.db`, made by `make-release-db.py` with
//! the release's binary) and loses nothing: every event keeps its id,
//! body and state, the retry keeps its time and the event held behind it
//! stays held, attempts keep their log, and the server goes on receiving
//! and delivering.

use std::time::Duration;

use crate::deliver::*;
use crate::helpers::*;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/release-v6.db");

/// The secret the fixture's sources were signed with.
const SECRET: &str = "fixture-secret";

/// `(source, delivery_id, state, attempts)` of every event, in id order.
fn events(db: &std::path::Path) -> Vec<(String, String, String, i64)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.prepare("SELECT source, delivery_id, state, attempts FROM events ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn one<T: rusqlite::types::FromSql>(db: &std::path::Path, sql: &str) -> T {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_previous_release_wrote_opens_with_nothing_lost() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    std::fs::copy(FIXTURE, &db).unwrap();
    let before = events(&db);
    assert_eq!(one::<i64>(&db, "PRAGMA user_version"), 6);
    let retry_at: i64 = one(
        &db,
        "SELECT next_attempt_at FROM events WHERE delivery_id = 'retry'",
    );
    let bodies: String = one(
        &db,
        "SELECT group_concat(hex(body), ',') FROM events ORDER BY id",
    );
    let attempts: i64 = one(&db, "SELECT count(*) FROM attempts");

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
    assert_eq!(events(&db), before, "every event as it was");
    assert_eq!(
        one::<i64>(
            &db,
            "SELECT next_attempt_at FROM events WHERE delivery_id = 'retry'"
        ),
        retry_at,
        "the retry keeps its time"
    );
    assert_eq!(
        one::<Option<i64>>(
            &db,
            "SELECT next_attempt_at FROM events WHERE delivery_id = 'held'"
        ),
        None,
        "the event behind it stays held"
    );
    assert_eq!(
        one::<String>(
            &db,
            "SELECT group_concat(hex(body), ',') FROM events ORDER BY id"
        ),
        bodies
    );
    assert_eq!(one::<i64>(&db, "SELECT count(*) FROM attempts"), attempts);

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
    let hits = down.wait_for_hits(1).await;
    assert_eq!(hits[0].delivery(), "after-upgrade");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(down.hits().len(), 1, "{:?}", down.hits());

    let status = server.terminate(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
}
