//! A misbehaving downstream through the running server (the single
//! attempts are unit-tested in `src/dispatch/url/tests.rs`): one that
//! accepts connections and never answers, then redirects, then answers 200
//! with an endless body. Timeouts and bounds hold, redirects are not
//! followed, nothing is lost, and each event settles once.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::helpers::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Accept, read nothing, answer nothing, keep the connection open.
    Hang,
    /// 302 to another server (which counts the requests it gets).
    Redirect,
    /// 200 with a chunked body that never ends.
    EndlessOk,
}

/// A raw HTTP/1.1 downstream whose behaviour the test switches.
struct Rogue {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    /// Connections accepted in each mode.
    accepted: Arc<Mutex<Vec<Mode>>>,
}

impl Rogue {
    async fn start(redirect_to: String) -> Rogue {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(Mutex::new(Mode::Hang));
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let (m, a) = (mode.clone(), accepted.clone());
        tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let mode = *m.lock().unwrap();
                a.lock().unwrap().push(mode);
                match mode {
                    Mode::Hang => held.push(stream),
                    Mode::Redirect => {
                        tokio::spawn(answer(stream, redirect(&redirect_to)));
                    }
                    Mode::EndlessOk => {
                        tokio::spawn(endless(stream));
                    }
                }
            }
        });
        Rogue {
            addr,
            mode,
            accepted,
        }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn accepted(&self, mode: Mode) -> usize {
        self.accepted
            .lock()
            .unwrap()
            .iter()
            .filter(|m| **m == mode)
            .count()
    }
}

fn redirect(to: &str) -> String {
    format!(
        "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )
}

/// Reads one request (headers and a `content-length` body).
async fn read_request(stream: &mut TcpStream) -> Option<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(())
}

async fn answer(mut stream: TcpStream, response: String) {
    if read_request(&mut stream).await.is_some() {
        let _ = stream.write_all(response.as_bytes()).await;
    }
}

/// 200, then 64 KiB chunks until the reader goes away.
async fn endless(mut stream: TcpStream) {
    if read_request(&mut stream).await.is_none() {
        return;
    }
    let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
    if stream.write_all(head).await.is_err() {
        return;
    }
    let mut chunk = format!("{:x}\r\n", 64 * 1024).into_bytes();
    chunk.extend(std::iter::repeat_n(b'x', 64 * 1024));
    chunk.extend_from_slice(b"\r\n");
    while stream.write_all(&chunk).await.is_ok() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_then_redirecting_then_endless_downstream_times_out_is_not_followed_and_loses_nothing()
 {
    let target = Downstream::start(|_, _| Reply::status(204)).await;
    let rogue = Rogue::start(target.url()).await;
    let timeout = Duration::from_secs(1);
    let sources = deliver_source(
        "github",
        &url_destination_unguarded(&format!("http://{}/hook", rogue.addr)),
        "1s",
        1000,
    );
    let app = TestApp::spawn(&sources).await;
    let db = app.db_path.clone();
    let mut ids = Vec::new();
    for n in 0..6 {
        // Distinct keys: no event waits behind another's retry.
        let body = repo_body(&format!("acme/{n}"), n);
        ids.push(
            post_event(
                app.addr,
                "github",
                &format!("ev-{n}"),
                "application/json",
                &body,
            )
            .await,
        );
    }

    // Hanging: every attempt ends at the timeout, and is retried.
    eventually("every event to time out at least once", || {
        ids.iter()
            .all(|id| attempt_rows(&db, *id).iter().any(|a| a.outcome == "retry"))
            .then_some(())
    })
    .await;
    for id in &ids {
        for a in attempt_rows(&db, *id) {
            assert_eq!(a.outcome, "retry", "{a:?}");
            assert_eq!(a.status, None, "{a:?}");
            assert_eq!(a.error.as_deref(), Some("timed out after 1s"), "{a:?}");
            let took = Duration::from_millis(a.duration_ms as u64);
            assert!(
                took >= timeout && took < timeout + Duration::from_secs(2),
                "the timeout bounds a hanging attempt: {a:?}"
            );
        }
    }
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) FROM events WHERE {STATE} <> 'pending'"
        )),
        0
    );

    // Redirecting: retried, never followed.
    rogue.set(Mode::Redirect);
    eventually("every event to meet the redirect", || {
        ids.iter()
            .all(|id| attempt_rows(&db, *id).iter().any(|a| a.status == Some(302)))
            .then_some(())
    })
    .await;
    for id in &ids {
        let redirected = attempt_rows(&db, *id)
            .into_iter()
            .find(|a| a.status == Some(302))
            .unwrap();
        assert_eq!(redirected.outcome, "retry");
        assert_eq!(
            redirected.error.as_deref(),
            Some(format!("HTTP 302: redirect not followed (to {})", target.url()).as_str())
        );
    }
    assert!(target.hits().is_empty(), "a redirect was followed");

    // 200 with an endless body: delivered, the body read only so far.
    rogue.set(Mode::EndlessOk);
    let started = Instant::now();
    for id in &ids {
        let row = wait_for_state(&db, *id, "delivered").await;
        let rows = attempt_rows(&db, *id);
        let last = rows.last().unwrap();
        assert_eq!(
            (last.outcome.as_str(), last.status),
            ("delivered", Some(200))
        );
        assert!(
            Duration::from_millis(last.duration_ms as u64) < timeout,
            "an endless 200 body is not read to its end: {last:?}"
        );
        assert_eq!(row.attempts as usize, rows.len(), "{rows:?}");
    }
    eprintln!(
        "connections: {} hung, {} redirected, {} endless; delivered {:?} after the switch",
        rogue.accepted(Mode::Hang),
        rogue.accepted(Mode::Redirect),
        rogue.accepted(Mode::EndlessOk),
        started.elapsed()
    );
    assert!(target.hits().is_empty(), "a redirect was followed");
    assert_eq!(app.count("SELECT count(*) FROM events"), 6);
    app.shutdown().await;
}

#[tokio::test]
async fn without_system_ca_certificates_hookbox_warns_uses_its_own_roots_and_delivers() {
    let dir = tempfile::tempdir().unwrap();
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let db = dir.path().join("hookbox.db");
    // rustls-native-certs reads only these when they are set: a system
    // with no CA certificates, as a minimal Debian without ca-certificates.
    let server = ChildServer::spawn_ready_with(
        dir.path(),
        &db,
        &deliver_source("github", &url_destination(&down.url()), "5s", 3),
        "",
        0,
        &[
            ("SSL_CERT_FILE", "/dev/null"),
            ("SSL_CERT_DIR", "/nonexistent"),
        ],
        |_| {},
    )
    .await;
    post_event(
        server.addr,
        "github",
        "no-ca-1",
        "application/json",
        &repo_body("octo/ca", 1),
    )
    .await;
    // Delivered: the dispatcher (and catch-up) built their clients.
    down.wait_for_hits(1).await;
    let log = server.output();
    assert!(
        log.contains("trusting the Mozilla roots built into hookbox"),
        "{log}"
    );
}
