//! Dispatch across a crash and a graceful stop: a delivery interrupted by
//! `kill -9` of the real binary, or abandoned at the end of the shutdown
//! grace period, is delivered again after the restart, under the same
//! `webhook-id`.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::deliver::*;
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
    let mut server = Binary::spawn_ready(dir.path(), &sources, 0).await;
    let body = repo_body("acme/widgets", 1);
    let id = post_event(server.addr, "github", "held", "application/json", &body).await;

    let first = down.wait_for_hits(1).await;
    server.kill9();
    let db = dir.path().join("hookbox.db");
    let row = event_row(&db, id);
    assert_eq!(row.state, "pending", "{row:?}");
    assert!(
        row.lease_until.is_some(),
        "the killed process held a lease: {row:?}"
    );

    // The lease runs for a minute; the restart must not wait for it.
    let server = Binary::spawn_ready(dir.path(), &sources, 1).await;
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
        [(2, "delivered".into(), Some(204))],
        "the killed attempt left no record"
    );
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

// -------------------------------------------------------------- binary ---

/// `hookbox serve` as a child process on the database in `dir`; killed on
/// drop so a failed assertion leaves nothing running, its log printed when
/// the test fails (or with `TEST_LOG=1`).
struct Binary {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Binary {
    /// Starts and waits for `/readyz`; ports are picked free and let go,
    /// so a start that loses one to another socket is tried again.
    async fn spawn_ready(dir: &Path, sources: &str, run: usize) -> Binary {
        for attempt in 0..4 {
            let mut server = Binary::start(dir, sources, run);
            match server.wait_ready().await {
                Ok(()) => return server,
                Err(exit) if attempt < 3 && server.log().contains("binding the") => {
                    eprintln!("hookbox could not bind ({exit}); trying other ports");
                }
                Err(exit) => panic!("hookbox exited before it was ready: {exit}"),
            }
        }
        unreachable!()
    }

    fn start(dir: &Path, sources: &str, run: usize) -> Binary {
        let addr = free_addr();
        let config = dir.join("hookbox.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"{addr}\"\nadmin_listen = \"{}\"\ndatabase = {:?}\n{sources}",
                free_addr(),
                dir.join("hookbox.db").display().to_string()
            ),
        )
        .unwrap();
        let log = dir.join(format!("hookbox-{run}.log"));
        let out = File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_hookbox"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env_remove("HOOKBOX_CONFIG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("starting the hookbox binary");
        Binary { child, addr, log }
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("{status:?}"));
            }
            let ready = client
                .get(format!("http://{}/readyz", self.addr))
                .send()
                .await;
            if ready.is_ok_and(|r| r.status() == 200) {
                return Ok(());
            }
            assert!(Instant::now() < deadline, "hookbox not ready within 15 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL (what `Child::kill` sends on Unix), then reap.
    fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() || std::env::var_os("TEST_LOG").is_some() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "--- {} ---\n{}",
                self.log.display(),
                lines[lines.len().saturating_sub(60)..].join("\n")
            );
        }
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}
