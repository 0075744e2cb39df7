//! Upgrading a database the previous schema (version 6) wrote, with the
//! server itself: migration 7 keeps every row, and the upgraded server
//! delivers what was pending, the event a crash left leased included,
//! with its interrupted attempt counted as version 6 counted it.

use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};

use crate::helpers::*;

/// Version 1 and the steps to version 6: the schema the previous release
/// wrote (`store::schema`'s own test proves version 1 and every step is
/// `schema.sql`).
const TO_VERSION_6: &[&str] = &[
    include_str!("../../src/store/migrations/0001_schema_v1.sql"),
    include_str!("../../src/store/migrations/0002_catchup.sql"),
    include_str!("../../src/store/migrations/0003_ip_sets.sql"),
    include_str!("../../src/store/migrations/0004_dead_index.sql"),
    include_str!("../../src/store/migrations/0005_leased_index.sql"),
    include_str!("../../src/store/migrations/0006_hold_behind_key.sql"),
];

/// What a version 6 server left behind when it was killed: delivered,
/// dead, waiting and stored events, a key's backlog held behind its
/// oldest, and one event leased by the attempt the kill cut off (counted
/// at its claim, as version 6 did).
fn version_6_database(path: &Path, now: i64) {
    let conn = Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    for sql in TO_VERSION_6 {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", 6).unwrap();
    let headers = r#"{"x-github-event":"push","x-github-delivery":"d"}"#;
    let mut insert = conn
        .prepare(
            "INSERT INTO events (source, delivery_id, event_type, order_key, received_at,
                                 content_type, headers, body, state, attempts, next_attempt_at,
                                 lease_until, last_error, delivered_at)
             VALUES (?1, ?2, 'push', ?3, ?4, 'application/json', ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        )
        .unwrap();
    // (source, delivery id, order key, state, attempts, due, lease, error)
    type Row = (
        &'static str,
        &'static str,
        Option<&'static str>,
        &'static str,
        i64,
    );
    type Times = (Option<i64>, Option<i64>, Option<&'static str>);
    let rows: &[(Row, Times)] = &[
        (
            ("github", "delivered", None, "delivered", 1),
            (None, None, None),
        ),
        (
            ("github", "dead", None, "dead", 12),
            (None, None, Some("HTTP 410")),
        ),
        (
            ("github", "waiting", None, "pending", 1),
            (Some(now), None, Some("HTTP 503")),
        ),
        (
            ("github", "leased", None, "pending", 1),
            (Some(now), Some(now + 600_000), None),
        ),
        (
            ("github", "k1", Some("acme/shop"), "pending", 0),
            (Some(now), None, None),
        ),
        (
            ("github", "k2", Some("acme/shop"), "pending", 0),
            (None, None, None),
        ),
        (("archive", "kept", None, "stored", 0), (None, None, None)),
    ];
    for (n, ((source, delivery, key, state, attempts), (next, lease, error))) in
        rows.iter().enumerate()
    {
        let body = format!(r#"{{"repository":{{"full_name":"acme/shop"}},"n":{n}}}"#);
        let delivered_at = (*state == "delivered").then_some(now - 1_000);
        insert
            .execute(params![
                source,
                delivery,
                key,
                now - 10_000 + n as i64,
                headers,
                body.as_bytes(),
                state,
                attempts,
                next,
                lease,
                error,
                delivered_at
            ])
            .unwrap();
    }
    conn.execute_batch(
        "INSERT INTO attempts (event_id, attempt, started_at, duration_ms, outcome, status_code, error)
         SELECT id, 1, received_at, 5, CASE state WHEN 'delivered' THEN 'delivered'
                                                   WHEN 'dead' THEN 'dead' ELSE 'retry' END,
                CASE state WHEN 'delivered' THEN 204 WHEN 'dead' THEN 410 ELSE 503 END, last_error
         FROM events WHERE delivery_id IN ('delivered', 'dead', 'waiting');
         INSERT INTO catchup_state (source, job, last_success_at) VALUES ('github', 'github_redelivery', 5);
         INSERT INTO meta (key, value) VALUES ('heartbeat', '1');",
    )
    .unwrap();
}

/// What no dispatch changes, table by table: every event's identity and
/// content, every attempt, the catch-up marks and the meta facts.
fn lasting_rows(conn: &Connection) -> Vec<Vec<String>> {
    let tables = [
        "SELECT id, source, delivery_id, event_type, order_key, received_at, origin,
                content_type, headers, hex(body) FROM events ORDER BY id",
        "SELECT id, event_id, attempt, started_at, duration_ms, outcome, status_code, error
         FROM attempts ORDER BY id",
        "SELECT source, job, last_success_at FROM catchup_state",
        // The heartbeat moves; the search index's mark is new since
        // schema 11 (it says how far indexing got, not a kept fact).
        "SELECT key, value FROM meta WHERE key NOT IN ('heartbeat', 'search_indexed_through')",
    ];
    tables
        .iter()
        .map(|sql| {
            let mut stmt = conn.prepare(sql).unwrap();
            let columns = stmt.column_count();
            stmt.query_map([], |r| {
                let cells: Vec<String> = (0..columns)
                    .map(|i| match r.get_ref(i).unwrap() {
                        ValueRef::Null => "NULL".to_owned(),
                        ValueRef::Integer(n) => n.to_string(),
                        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                        other => format!("{other:?}"),
                    })
                    .collect();
                Ok(cells.join("|"))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_6_database_keeps_every_row_and_its_pending_events_are_delivered_after_the_upgrade()
 {
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    version_6_database(&db, hookbox::support::clock::now_ms());
    let before = lasting_rows(&Connection::open(&db).unwrap());

    let sources = format!(
        "{}\n[[sources]]\nname = \"archive\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n",
        deliver_source("github", &url_destination(&down.url()), "5s", 5)
    );
    let app = TestApp::spawn_in(dir, &sources, "").await;
    let version: i64 = app
        .db()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, hookbox::store::schema::SCHEMA_VERSION);
    let id = |delivery: &str| -> i64 {
        app.db()
            .query_row(
                "SELECT id FROM events WHERE delivery_id = ?1",
                [delivery],
                |r| r.get(0),
            )
            .unwrap()
    };
    for delivery in ["waiting", "leased", "k1", "k2"] {
        wait_for_state(&app.db_path, id(delivery), "delivered").await;
    }

    let mut after = lasting_rows(&app.db());
    // Every row is there as it was; the attempts just made come after.
    let made = after[1].split_off(before[1].len());
    assert_eq!(after, before);
    assert_eq!(made.len(), 4, "{made:#?}");
    let attempt_of = |delivery: &str| {
        let hits = down.hits_for(delivery);
        assert_eq!(hits.len(), 1, "{delivery} delivered once");
        hits[0].header("x-hookbox-attempt").to_owned()
    };
    assert_eq!(attempt_of("waiting"), "2");
    assert_eq!(
        attempt_of("leased"),
        "2",
        "the attempt the crash cut off counts"
    );
    assert_eq!(
        (attempt_of("k1"), attempt_of("k2")),
        ("1".into(), "1".into())
    );
    let order: Vec<String> = down
        .hits()
        .iter()
        .map(|h| h.delivery().to_owned())
        .filter(|d| d.starts_with('k'))
        .collect();
    assert_eq!(order, ["k1", "k2"]);
    for (delivery, state) in [
        ("delivered", "delivered"),
        ("dead", "dead"),
        ("kept", "stored"),
    ] {
        assert_eq!(event_row(&app.db_path, id(delivery)).state, state);
    }
    assert!(down.hits_for("delivered").is_empty() && down.hits_for("dead").is_empty());
    let leases: i64 = app.count("SELECT count(*) FROM leases");
    assert_eq!(leases, 0);
    app.shutdown().await;
}
