//! One server per database: a second `hookbox serve` on a database a
//! server holds exits 1 at once, naming the holder, and changes nothing:
//! the running server's delivery in flight is not released and sent again.
//! The CLI verbs keep working beside the server.

use std::time::Duration;

use crate::helpers::*;

/// The downstream holds the first request this long: the delivery is in
/// flight, its lease held, while the second server tries to start.
const HOLD: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_the_same_database_exits_1_and_releases_nothing() {
    let down = Downstream::start(|_, nth| {
        if nth == 1 {
            Reply::status(204).after(HOLD)
        } else {
            Reply::status(204)
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let sources = deliver_source("github", &url_destination(&down.url()), "60s", 5);
    let first = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;
    let id = post_event(first.addr, "github", "held", "application/json", b"{}").await;
    down.wait_for_hits(1).await;
    let held = event_row(&db, id);
    assert!(held.lease_until.is_some(), "{held:?}");

    // The same config, on other ports, as a second start would be.
    let second_dir = tempfile::tempdir().unwrap();
    let config = second_dir.path().join("hookbox.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"{}\"\nadmin_listen = \"{}\"\ndatabase = {:?}\n\
             [admin]\ntoken = \"{ADMIN_TOKEN}\"\n{sources}",
            free_addr(),
            free_addr(),
            db.display().to_string()
        ),
    )
    .unwrap();
    let log = second_dir.path().join("second.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut second = hookbox()
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    // It must stop by itself, at once; one that starts serving is killed
    // (and fails the test) after the wait.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            second.kill().unwrap();
            second.wait().unwrap();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "the second serve exits 1 at once: {stderr}"
    );
    let holder = format!("pid {}", first.child.id());
    assert!(
        stderr.contains("in use by another hookbox serve") && stderr.contains(&holder),
        "names the holder ({holder}): {stderr}"
    );

    // Nothing changed: the lease is the first server's, and the downstream
    // saw no second request while the first is still in flight.
    let now = event_row(&db, id);
    assert_eq!(
        (&now.state, now.attempts, now.lease_until),
        (&held.state, held.attempts, held.lease_until),
        "the second start released nothing"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(down.hits().len(), 1, "no second, concurrent delivery");
    assert_eq!(down.max_in_flight(), 1);

    // The CLI works beside the running server.
    let events = hookbox()
        .args(["events", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        events.status.success(),
        "{}",
        String::from_utf8_lossy(&events.stderr)
    );
    assert!(String::from_utf8_lossy(&events.stdout).contains("held"));
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_is_free_again_once_its_server_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let mut first = ChildServer::spawn_ready(dir.path(), &db, GITHUB_SOURCE, "", 0).await;
    first.kill9();
    // The kernel dropped the lock with the process; the file stays.
    assert!(dir.path().join("hookbox.db.lock").exists());
    let mut second = ChildServer::spawn_ready(dir.path(), &db, GITHUB_SOURCE, "", 1).await;
    let status = second.terminate(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    ChildServer::spawn_ready(dir.path(), &db, GITHUB_SOURCE, "", 2).await;
}
