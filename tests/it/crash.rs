//! `kill -9` the real binary under load, restart it on the same file, and
//! check the promise behind every 2xx: the event is there, exactly once,
//! in a database that passes `integrity_check`. Then SIGTERM under load
//! must end in exit status 0 with every acknowledged event committed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use crate::helpers::{ChildServer, GITHUB_SOURCE, github_request};
use crate::load::{Load, Traffic};

/// Concurrent clients, each with its own connection pool.
const CLIENTS: usize = 32;
/// Acknowledgements after which each cycle pulls the plug, or the time
/// after which it does so anyway (a slow machine still gets its crashes).
const KILL_AFTER: [(usize, Duration); 3] = [
    (1500, Duration::from_secs(3)),
    (400, Duration::from_secs(2)),
    (2500, Duration::from_secs(4)),
];
/// How long a graceful stop may take.
const TERM_TIMEOUT: Duration = Duration::from_secs(10);

/// A delivery the server answered 2xx (its id the key), with the row id
/// it gave (`None` when the kill cut the body after the status line).
type Acked = crate::load::Acked<String>;

/// Distinct GitHub deliveries, the row id of each answer kept.
const DELIVERIES: Traffic<String> = Traffic {
    request: delivery,
    read_row: true,
};

/// The `n`-th delivery of the client `prefix`: sizes from tiny to several
/// pages, so commits span overflow pages.
fn delivery(
    client: &reqwest::Client,
    addr: SocketAddr,
    prefix: &str,
    n: usize,
) -> (String, reqwest::RequestBuilder) {
    let delivery = format!("{prefix}-{n}");
    let body = format!(
        r#"{{"delivery":"{delivery}","pad":"{}"}}"#,
        "x".repeat((n * 1237) % 6000)
    );
    let request = github_request(
        client,
        &format!("http://{addr}/hooks/github"),
        &delivery,
        body.as_bytes(),
    );
    (delivery, request)
}

/// hookbox on the database in `dir`, every commit durable.
async fn spawn(dir: &Path, run: usize) -> ChildServer {
    let db = dir.join("hookbox.db");
    ChildServer::spawn_ready(dir, &db, GITHUB_SOURCE, "durability = \"full\"", run).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_delivery_survives_kill_9_exactly_once_and_sigterm_exits_0() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let mut acked: Vec<Acked> = Vec::new();

    for (cycle, (after, at_most)) in KILL_AFTER.into_iter().enumerate() {
        let mut server = spawn(dir.path(), cycle).await;
        if cycle > 0 {
            check_database(&db, &acked, true);
            check_duplicates_answer_with_the_original_row(&server, &acked).await;
        }
        let load = Load::start(server.addr, &format!("c{cycle}"), CLIENTS, DELIVERIES);
        load.wait_for(after, at_most).await;
        let status = server.kill9();
        assert_eq!(
            status.signal(),
            Some(libc_sigkill()),
            "Child::kill sends SIGKILL: {status:?}"
        );
        let report = load.stop().await;
        eprintln!(
            "cycle {cycle}: killed after {} acknowledgements ({} client errors) at {:?}",
            report.acked.len(),
            report.errors,
            started.elapsed()
        );
        report.assert_only_expected_statuses();
        acked.extend(report.acked);
    }

    // The last restart: everything is there, then a graceful stop under load.
    let mut server = spawn(dir.path(), KILL_AFTER.len()).await;
    check_database(&db, &acked, true);
    check_duplicates_answer_with_the_original_row(&server, &acked).await;
    let load = Load::start(server.addr, "term", 8, DELIVERIES);
    load.wait_for(200, Duration::from_secs(2)).await;
    let status = server.terminate(TERM_TIMEOUT).await;
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM must end in a clean exit: {status:?}"
    );
    let report = load.stop().await;
    report.assert_only_expected_statuses();
    eprintln!(
        "graceful stop: {} acknowledgements during the last run, {} client errors",
        report.acked.len(),
        report.errors
    );
    let answered_last_run = report.acked.len();
    acked.extend(report.acked);
    drop(server);

    // Stopped cleanly: the WAL is checkpointed away and every 2xx is there.
    let wal = dir.path().join("hookbox.db-wal");
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(
        wal_len, 0,
        "a graceful stop checkpoints and truncates the WAL"
    );
    check_database(&db, &acked, false);
    // A graceful stop finishes what it took in: every event it committed
    // during the last run also got its answer out. (Clients may still see
    // errors: refused connections, and a request racing the close of an
    // idle keep-alive connection; neither was stored.)
    let stored_last_run: i64 = Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM events WHERE delivery_id LIKE 'term-%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        stored_last_run as usize, answered_last_run,
        "events committed during the graceful stop without their answer"
    );
    eprintln!(
        "{} acknowledged deliveries checked in {:?}",
        acked.len(),
        started.elapsed()
    );
}

/// SIGKILL's number, without a libc dependency (Linux and the BSDs agree).
fn libc_sigkill() -> i32 {
    9
}

/// Every acknowledged delivery is stored exactly once (with the row id it
/// was given), nothing is stored twice, and the file is sound.
fn check_database(db: &Path, acked: &[Acked], server_running: bool) {
    let conn = if server_running {
        Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
    } else {
        Connection::open(db).unwrap()
    };
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");

    let mut stmt = conn
        .prepare("SELECT delivery_id, min(id), count(*) FROM events WHERE source = 'github' GROUP BY delivery_id")
        .unwrap();
    let stored: HashMap<String, (i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut lost = Vec::new();
    let mut wrong = Vec::new();
    for a in acked {
        match stored.get(&a.key) {
            None => lost.push(a.key.clone()),
            Some(&(row, count)) if count != 1 || a.row.is_some_and(|r| r != row) => {
                wrong.push(format!(
                    "{} stored {count}x as row {row}, answered {:?}",
                    a.key, a.row
                ));
            }
            Some(_) => {}
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged deliveries are missing, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
    assert!(wrong.is_empty(), "{wrong:?}");

    let duplicated: i64 = conn
        .query_row(
            "SELECT count(*) FROM (SELECT 1 FROM events GROUP BY source, delivery_id HAVING count(*) > 1)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(duplicated, 0, "no (source, delivery_id) is stored twice");
    let total: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert!(
        total as usize >= acked.len(),
        "{total} rows for {} acknowledgements",
        acked.len()
    );
    eprintln!(
        "database: {total} rows, {} acknowledged, {} stored but cut off before their answer",
        acked.len(),
        total as usize - acked.len()
    );
}

/// Sends again the deliveries acknowledged last before the crash (the ones
/// most at risk) and a spread of older ones: each is a 200 duplicate of
/// the row it was first given.
async fn check_duplicates_answer_with_the_original_row(server: &ChildServer, acked: &[Acked]) {
    let mut with_row: Vec<&Acked> = acked.iter().filter(|a| a.row.is_some()).collect();
    with_row.sort_by_key(|a| a.row);
    let n = with_row.len();
    assert!(n > 0, "nothing was acknowledged with a row id");
    let mut picks: Vec<&Acked> = with_row[n.saturating_sub(10)..].to_vec();
    picks.extend((0..10).map(|i| with_row[i * n / 10]));
    let client = reqwest::Client::new();
    for a in picks {
        let url = server.url("/hooks/github");
        let r = github_request(&client, &url, &a.key, b"{\"again\":true}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{} sent again", a.key);
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["status"], "duplicate");
        assert_eq!(body["id"].as_i64(), a.row, "{} keeps its row", a.key);
    }
}

/// `durability = "normal"` gives up only power cuts: every 2xx still
/// survives a crash of hookbox itself, since what it wrote is the kernel's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_durability_normal_every_acknowledged_delivery_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let mut server =
        ChildServer::spawn_ready(dir.path(), &db, GITHUB_SOURCE, "durability = \"normal\"", 0)
            .await;
    let load = Load::start(server.addr, "normal", CLIENTS, DELIVERIES);
    load.wait_for(1500, Duration::from_secs(3)).await;
    server.kill9();
    let report = load.stop().await;
    report.assert_only_expected_statuses();
    assert!(!report.acked.is_empty());
    eprintln!(
        "durability normal: {} acknowledgements before kill -9",
        report.acked.len()
    );
    check_database(&db, &report.acked, false);
}
