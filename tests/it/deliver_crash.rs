//! Dispatch across a crash and a graceful stop: a delivery interrupted by
//! `kill -9` of the real binary, or abandoned at the end of the shutdown
//! grace period, is delivered again after the restart, under the same
//! `webhook-id`.

use std::time::{Duration, Instant};

use crate::helpers::*;

/// The downstream holds the first request of each event this long.
const HOLD: Duration = Duration::from_secs(30);

/// Holds the first request of each event, answers the rest 204 at once.
fn hold_first(_: &str, nth: usize) -> Reply {
    if nth == 1 {
        Reply::status(204).after(HOLD)
    } else {
        Reply::status(204)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_cut_by_kill_9_is_delivered_again_after_restart_with_the_same_webhook_id() {
    let down = Downstream::start(hold_first).await;
    let dir = tempfile::tempdir().unwrap();
    // The attempt timeout outlives the hold, so only the kill ends it.
    let sources = deliver_source("github", &url_destination(&down.url()), "60s", 5);
    let db = dir.path().join("hookbox.db");
    let mut server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;
    let body = repo_body("acme/widgets", 1);
    let id = post_event(server.addr, "github", "held", "application/json", &body).await;

    let first = down.wait_for_hits(1).await;
    server.kill9();
    let row = event_row(&db, id);
    assert_eq!(row.state, "pending", "{row:?}");
    assert!(
        row.lease_until.is_some(),
        "the killed process held a lease: {row:?}"
    );

    // The lease runs for a minute; the restart must not wait for it.
    let server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 1).await;
    wait_for_state(&db, id, "delivered").await;
    let hits = down.hits();
    assert_eq!(hits.len(), 2, "delivered again, once");
    assert_eq!(hits[1].header("webhook-id"), first[0].header("webhook-id"));
    assert_eq!(hits[1].body, first[0].body);
    assert_eq!(&hits[1].body[..], &body[..]);
    assert_eq!(
        hits[1].header("x-hookbox-attempt"),
        "2",
        "the interrupted attempt counts"
    );
    assert_eq!(
        outcomes(&db, id),
        [
            (1, "retry".into(), None),
            (2, "delivered".into(), Some(204))
        ],
        "the killed attempt is in the log"
    );
    let why: String = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT error FROM attempts WHERE event_id = ?1 AND attempt = 1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(why, "interrupted: hookbox stopped during the attempt");
    let row = event_row(&db, id);
    assert_eq!((row.attempts, row.lease_until), (2, None));
    let events: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(events, 1);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_a_held_delivery_ends_after_the_grace_and_the_restart_delivers_it() {
    let down = Downstream::start(hold_first).await;
    let sources = deliver_source("github", &url_destination(&down.url()), "60s", 5);
    let app = TestApp::spawn(&sources).await;
    let db = app.db_path.clone();
    let id = post_event(app.addr, "github", "held", "application/json", b"{}").await;
    let first = down.wait_for_hits(1).await;

    let started = Instant::now();
    let dir = tokio::time::timeout(Duration::from_secs(30), app.shutdown())
        .await
        .expect("shutdown ends within the grace period and a margin");
    let took = started.elapsed();
    eprintln!("shutdown with a held delivery took {took:?}");
    assert!(
        took >= Duration::from_secs(9),
        "the grace was not given: {took:?}"
    );
    let row = event_row(&db, id);
    assert_eq!(row.state, "pending", "{row:?}");
    assert_eq!(row.lease_until, None, "the lease was released: {row:?}");
    assert_eq!(row.attempts, 0, "the abandoned attempt does not count");

    let app = TestApp::spawn_in(dir, &sources, "").await;
    wait_for_state(&db, id, "delivered").await;
    let hits = down.hits();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[1].header("webhook-id"), first[0].header("webhook-id"));
    assert_eq!(hits[1].header("x-hookbox-attempt"), "1");
    assert_eq!(outcomes(&db, id), [(1, "delivered".into(), Some(204))]);
    app.shutdown().await;
}
