//! A backlog of large events for a destination that is down, through the
//! real binary: the server's memory stays bounded while it retries them
//! (a claim carries only bodies of 64 KiB or less, within a budget per
//! destination; an attempt reads a larger one when it starts),
//! and ingest keeps answering quickly meanwhile (leasing and settling
//! events do not rewrite their bodies in the writer).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

use crate::helpers::*;

/// Events in the backlog, and each one's size.
const BACKLOG: usize = 300;
const BIG: usize = 1024 * 1024;
/// The most the server may ever hold (VmHWM). Claims that carried bodies
/// held up to concurrency × 16 of them: 185 MiB and more here.
const MAX_RSS_KIB: u64 = 150 * 1024;
/// Small events posted while the backlog is retried, at least, by this
/// many clients.
const SMALL: usize = 300;
const CLIENTS: usize = 8;
/// Each small event is answered within this, half GitHub's timeout. A
/// writer busy rewriting the backlog's bodies let requests time out (it
/// managed about 4 a second, where several hundred is normal here even in
/// a debug build; the test prints the rate, it does not assert one).
const INGEST_WITHIN: Duration = Duration::from_secs(5);

/// Writes a database holding `BACKLOG` pending events of `BIG` bytes each,
/// all due now, as a stopped server (or one whose destination went down)
/// leaves them.
fn backlog_database(path: &std::path::Path) {
    let mut conn = Connection::open(path).unwrap();
    hookbox::store::schema::apply(&mut conn).unwrap();
    let now = hookbox::support::clock::now_ms();
    let tx = conn.transaction().unwrap();
    let mut body = vec![b'x'; BIG];
    for n in 0..BACKLOG {
        body[..16].copy_from_slice(format!("{n:016}").as_bytes());
        tx.execute(
            "INSERT INTO events (source, delivery_id, event_type, received_at, content_type,
                                 headers, body, state)
             VALUES ('github', ?1, 'push', ?2, 'application/octet-stream', '{}', ?3, 'pending')",
            params![format!("big-{n}"), now, body],
        )
        .unwrap();
        tx.execute(
            "INSERT INTO deliveries (event_id, source, destination, state, next_attempt_at)
             VALUES (last_insert_rowid(), 'github', 'default', 'pending', ?1)",
            [now],
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

/// A field of `/proc/{pid}/status`, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Retries of the backlog that must happen while small events are posted.
const RETRIES: i64 = 20;

/// How many attempts the backlog's events have had.
fn backlog_attempts(conn: &Connection) -> i64 {
    conn.query_row(
        "SELECT count(*) FROM attempts AS a JOIN events AS e ON e.id = a.event_id
         WHERE e.delivery_id LIKE 'big-%'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// Posts small signed deliveries from [`CLIENTS`] concurrent clients, each
/// answered 202 within [`INGEST_WITHIN`], until at least [`SMALL`] were
/// posted and the backlog had [`RETRIES`] more attempts meanwhile; returns
/// how many were posted, in how long, and the retries.
async fn post_small_while_retrying(url: &str, db: &std::path::Path) -> (usize, Duration, i64) {
    let conn = Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let before = backlog_attempts(&conn);
    let started = Instant::now();
    let posted = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (url, posted, stop) = (url.to_owned(), posted.clone(), stop.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::builder()
                    .timeout(INGEST_WITHIN)
                    .build()
                    .unwrap();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let delivery = format!("small-{c}-{n}");
                    let body = format!(r#"{{"n":{n}}}"#);
                    n += 1;
                    let r = github_request(&client, &url, &delivery, body.as_bytes())
                        .send()
                        .await
                        .unwrap_or_else(|e| panic!("{delivery}: {e}"));
                    assert_eq!(r.status(), 202, "{delivery}");
                    posted.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let deadline = started + Duration::from_secs(60);
    let retries = loop {
        let retries = backlog_attempts(&conn) - before;
        if posted.load(Ordering::Relaxed) >= SMALL && retries >= RETRIES {
            break retries;
        }
        // A client that stopped has failed: its panic says why.
        if tasks.iter().any(tokio::task::JoinHandle::is_finished) {
            break retries;
        }
        assert!(
            Instant::now() < deadline,
            "after 60 s: {} posted, {retries} retries",
            posted.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    (posted.load(Ordering::Relaxed), started.elapsed(), retries)
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_large_events_for_a_destination_that_is_down_keeps_memory_bounded_and_ingest_quick()
 {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    backlog_database(&db);
    // Nothing listens there: every attempt fails at once, and each event is
    // retried within five seconds, so the backlog is retried all along
    // (about a hundred attempts a second).
    let down = free_addr();
    let sources = format!(
        r#"
[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB_SECRET}"]
[sources.deliver]
url = "http://{down}/hook"
signing_secret = "{}"
timeout = "2s"
max_attempts = 1000
backoff_base = "5s"
backoff_cap = "5s"
concurrency = 16
breaker_failures = 0
"#,
        crate::helpers::SIGNING_SECRET
    );
    let server = ChildServer::spawn_ready(dir.path(), &db, &sources, "", 0).await;
    let pid = server.child.id();
    let conn = Connection::open(&db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();

    // Two passes over the whole backlog, at full concurrency: where claims
    // used to bring every body with them, and where retries used to
    // rewrite event rows, body and all (a retry now updates only its
    // small `deliveries` row).
    let deadline = Instant::now() + Duration::from_secs(120);
    let untried = "SELECT count(*) FROM deliveries AS d JOIN events AS e ON e.id = d.event_id
                   WHERE e.delivery_id LIKE 'big-%' AND d.attempts < 2";
    while count(&conn, untried) > 0 {
        assert!(
            Instant::now() < deadline,
            "the backlog was not tried twice within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first_passes = status_kib(pid, "VmHWM:");

    // Ingest while the retries of the backlog come due.
    let (posted, took, retries) =
        post_small_while_retrying(&server.url("/hooks/github"), &db).await;
    let rate = posted as f64 / took.as_secs_f64();
    let hwm = status_kib(pid, "VmHWM:");
    eprintln!(
        "backlog of {BACKLOG} x {BIG} bytes: VmHWM {} MiB after two passes, {} MiB in all; \
         {posted} small events in {took:?} ({rate:.0}/s) beside {retries} retries",
        first_passes / 1024,
        hwm / 1024,
    );
    assert!(hwm < MAX_RSS_KIB, "the server peaked at {} MiB", hwm / 1024);
    assert_eq!(
        count(
            &conn,
            &format!("SELECT count(*) FROM events WHERE {STATE} = 'pending'")
        ),
        (BACKLOG + posted) as i64
    );
}
