//! Uploads that hold a request open in its body: the idle-upload attack
//! against the real binary (connections that declare the whole body budget
//! in `Content-Length` and send nothing), and what one client address may
//! hold of that budget.
//!
//! Linux routes all of 127.0.0.0/8 to the loopback interface, so a test
//! plays several clients by binding its sockets to 127.0.0.2, 127.0.0.3,
//! ...; the server still only listens on 127.0.0.1.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::helpers::*;

/// A guard against a hang, never a measurement.
const GUARD: Duration = Duration::from_secs(30);
const MIB: u64 = 1 << 20;
/// Ten uploads of GitHub's 25 MiB cap and one of 6 MiB: exactly the
/// 256 MiB hookbox keeps for request bodies.
const IDLE_UPLOADS: [u64; 11] = [
    25 * MIB,
    25 * MIB,
    25 * MIB,
    25 * MIB,
    25 * MIB,
    25 * MIB,
    25 * MIB,
    25 * MIB,
    25 * MIB,
    25 * MIB,
    6 * MIB,
];
/// The time between the starts of one provider stream's deliveries.
const PACE: Duration = Duration::from_millis(20);
const ATTACKER: [u8; 4] = [127, 0, 0, 2];
const PROVIDER: [u8; 4] = [127, 0, 0, 1];

/// A connection to `to` from the loopback address `from`.
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

/// Opens a GitHub upload from `from` that declares `length` body bytes,
/// sends the first `sent` of them and then nothing.
async fn upload(to: SocketAddr, from: [u8; 4], tag: &str, length: u64, sent: usize) -> TcpStream {
    let mut stream = connect_from(from, to).await;
    let head = format!(
        "POST /hooks/github HTTP/1.1\r\nhost: x\r\nx-github-event: push\r\n\
         x-github-delivery: {tag}\r\nx-hub-signature-256: sha256={}\r\n\
         content-length: {length}\r\n\r\n",
        "0".repeat(64)
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b'a'; sent]).await.unwrap();
    stream
}

/// The status the server answers on `stream`; `None` when it closes the
/// connection without one.
async fn answer(stream: &mut TcpStream) -> Option<u16> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while got.len() < 12 {
        match tokio::time::timeout(GUARD, stream.read(&mut buf))
            .await
            .expect("the server neither answered nor closed the connection")
        {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got)
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
}

/// The `q` quantile of sorted `values`.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).saturating_sub(1);
    sorted.get(rank).copied().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn valid_deliveries_get_202_within_500ms_while_idle_uploads_declare_the_whole_body_budget() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    // One round of the attack's 408s is enough to block its address.
    let sources = format!(
        "[edge]\nmax_failures = {}\nfailure_window = \"1h\"\nblock_for = \"1h\"\n{GITHUB_SOURCE}",
        IDLE_UPLOADS.len()
    );
    let mut server =
        ChildServer::spawn_ready(dir.path(), &db, &sources, "body_timeout = \"3s\"", 0).await;
    let addr = server.addr;
    let url = server.url("/hooks/github");

    let answered = Arc::new(AtomicUsize::new(0));
    let attackers: Vec<_> = IDLE_UPLOADS
        .iter()
        .enumerate()
        .map(|(i, &length)| {
            let answered = answered.clone();
            tokio::spawn(async move {
                let mut stream = upload(addr, ATTACKER, &format!("idle-{i}"), length, 0).await;
                let status = answer(&mut stream).await;
                answered.fetch_add(1, Ordering::SeqCst);
                status
            })
        })
        .collect();
    // A provider keeps delivering, from its own address, for as long as
    // the uploads are held open (until the body timeout answers them): four
    // streams at up to 50 deliveries a second each, a provider's pace
    // rather than a load test's, so the latency measured is the attack's
    // doing and not the deliveries queueing behind one another.
    let providers: Vec<_> = (0..4)
        .map(|c| {
            let (answered, url) = (answered.clone(), url.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::builder()
                    .local_address(IpAddr::from(PROVIDER))
                    .build()
                    .unwrap();
                let mut seen = Vec::new();
                while answered.load(Ordering::SeqCst) < IDLE_UPLOADS.len() && seen.len() < 1000 {
                    let delivery = format!("valid-{c}-{}", seen.len());
                    let started = Instant::now();
                    let status = github_request(&client, &url, &delivery, b"{}")
                        .send()
                        .await
                        .map_or(0, |r| r.status().as_u16());
                    seen.push((status, started.elapsed()));
                    tokio::time::sleep(PACE.saturating_sub(started.elapsed())).await;
                }
                seen
            })
        })
        .collect();
    let mut uploads = Vec::new();
    for a in attackers {
        uploads.push(tokio::time::timeout(GUARD, a).await.unwrap().unwrap());
    }
    let mut seen = Vec::new();
    for p in providers {
        seen.extend(tokio::time::timeout(GUARD, p).await.unwrap().unwrap());
    }

    let count = |code: u16| seen.iter().filter(|(s, _)| *s == code).count();
    let mut took: Vec<Duration> = seen.iter().map(|(_, t)| *t).collect();
    took.sort_unstable();
    let p99 = quantile(&took, 0.99);
    println!(
        "idle-upload attack: {} valid deliveries, {} got 202, {} got 503, {} other; p50 {:?}, p99 {:?}",
        seen.len(),
        count(202),
        count(503),
        seen.len() - count(202) - count(503),
        quantile(&took, 0.5),
        p99,
    );
    // Each upload was held the whole body timeout: the deliveries above
    // all ran while the attack was in place.
    assert_eq!(uploads, vec![Some(408); IDLE_UPLOADS.len()], "{uploads:?}");
    assert!(
        seen.len() >= 20,
        "only {} deliveries were tried",
        seen.len()
    );
    assert_eq!(count(202), seen.len(), "every valid delivery is accepted");
    assert!(
        p99 <= Duration::from_millis(500),
        "valid deliveries' p99 was {p99:?}"
    );

    // The timeouts counted as failures: the attacker's address is blocked
    // at once now, and the provider's is not.
    let mut again = upload(addr, ATTACKER, "idle-again", 25 * MIB, 0).await;
    assert_eq!(answer(&mut again).await, Some(429));
    let client = reqwest::Client::new();
    let r = github_request(&client, &url, "valid-after", b"{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    server.terminate(GUARD).await;
    let rows: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        rows as usize,
        seen.len() + 1,
        "one row per 202, none for the uploads"
    );
}

/// The value of the unlabelled metric `name` on the admin listener.
async fn metric(app: &TestApp, name: &str) -> Option<i64> {
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until the metric `name` reads `want`.
async fn wait_for(app: &TestApp, name: &str, want: i64) {
    let deadline = Instant::now() + GUARD;
    while metric(app, name).await != Some(want) {
        assert!(
            Instant::now() < deadline,
            "{name} never reached {want}: {:?}",
            metric(app, name).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// POSTs a signed delivery from the loopback address `from`.
async fn deliver_from(app: &TestApp, from: [u8; 4], delivery: &str) -> u16 {
    let client = reqwest::Client::builder()
        .local_address(IpAddr::from(from))
        .build()
        .unwrap();
    github_request(&client, &app.url("/hooks/github"), delivery, b"{}")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn one_address_holds_at_most_its_share_of_bodies_and_body_bytes_while_others_get_202() {
    let sources = format!(
        "[edge]\nmax_client_bodies = 3\nmax_client_body_bytes = 65536\n{}",
        GITHUB_SOURCE.replace("secrets", "max_body_bytes = 65536\nsecrets")
    );
    let app = TestApp::spawn_with(&sources, "body_timeout = \"2s\"").await;
    let (greedy, other, bulky) = ([127, 0, 0, 2], [127, 0, 0, 3], [127, 0, 0, 4]);

    // Three uploads from one address wait for their bodies...
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(upload(app.addr, greedy, &format!("held-{i}"), 1000, 0).await);
    }
    wait_for(&app, "hookbox_edge_bodies_reading", 3).await;
    // ...so a fourth from it is refused at once, and another address is
    // served as usual.
    let mut fourth = upload(app.addr, greedy, "held-3", 1000, 0).await;
    assert_eq!(answer(&mut fourth).await, Some(503));
    assert_eq!(deliver_from(&app, other, "other-1").await, 202);
    // Once they are gone, the address has its share back.
    drop(held);
    wait_for(&app, "hookbox_edge_bodies_reading", 0).await;
    assert_eq!(deliver_from(&app, greedy, "greedy-1").await, 202);

    // Two uploads from one address whose bytes together pass its share:
    // the second is refused when its bytes arrive, the first keeps its
    // bytes until its body times out.
    let mut first = upload(app.addr, bulky, "bulky-0", 65536, 40_000).await;
    wait_for(&app, "hookbox_edge_body_bytes", 40_000).await;
    let mut second = upload(app.addr, bulky, "bulky-1", 65536, 40_000).await;
    assert_eq!(answer(&mut second).await, Some(503));
    assert_eq!(deliver_from(&app, other, "other-2").await, 202);
    assert_eq!(answer(&mut first).await, Some(408));
    wait_for(&app, "hookbox_edge_body_bytes", 0).await;

    let text = app.admin_get("/metrics").await.text().await.unwrap();
    for line in [
        r#"hookbox_edge_refused_total{source="github",reason="client_bodies"} 1"#,
        r#"hookbox_edge_refused_total{source="github",reason="client_body_bytes"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    }
    assert_eq!(app.count("SELECT count(*) FROM events"), 3);
    app.shutdown().await;
}
