//! `kill -9` the real binary under load, restart it on the same file, and
//! check the promise behind every 2xx: the event is there, exactly once,
//! in a database that passes `integrity_check`. Then SIGTERM under load
//! must end in exit status 0 with every acknowledged event committed.

use std::collections::HashMap;
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use tokio::task::JoinHandle;

use crate::helpers::{GITHUB_SECRET, github_signature};

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

/// A delivery the server answered 2xx, with the row id it gave (`None`
/// when the kill cut the body after the status line).
#[derive(Debug, Clone)]
struct Acked {
    delivery: String,
    row: Option<i64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_delivery_survives_kill_9_exactly_once_and_sigterm_exits_0() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let mut acked: Vec<Acked> = Vec::new();

    for (cycle, (after, at_most)) in KILL_AFTER.into_iter().enumerate() {
        let mut server = Server::spawn_ready(dir.path(), cycle).await;
        if cycle > 0 {
            check_database(&db, &acked, true);
            check_duplicates_answer_with_the_original_row(&server, &acked).await;
        }
        let load = Load::start(server.addr, &format!("c{cycle}"), CLIENTS);
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
    let mut server = Server::spawn_ready(dir.path(), KILL_AFTER.len()).await;
    check_database(&db, &acked, true);
    check_duplicates_answer_with_the_original_row(&server, &acked).await;
    let load = Load::start(server.addr, "term", 8);
    load.wait_for(200, Duration::from_secs(2)).await;
    let status = server.terminate(TERM_TIMEOUT);
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
        match stored.get(&a.delivery) {
            None => lost.push(a.delivery.clone()),
            Some(&(row, count)) if count != 1 || a.row.is_some_and(|r| r != row) => {
                wrong.push(format!(
                    "{} stored {count}x as row {row}, answered {:?}",
                    a.delivery, a.row
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
async fn check_duplicates_answer_with_the_original_row(server: &Server, acked: &[Acked]) {
    let mut with_row: Vec<&Acked> = acked.iter().filter(|a| a.row.is_some()).collect();
    with_row.sort_by_key(|a| a.row);
    let n = with_row.len();
    assert!(n > 0, "nothing was acknowledged with a row id");
    let mut picks: Vec<&Acked> = with_row[n.saturating_sub(10)..].to_vec();
    picks.extend((0..10).map(|i| with_row[i * n / 10]));
    let client = reqwest::Client::new();
    for a in picks {
        let r = post(&client, server.addr, &a.delivery, b"{\"again\":true}")
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{} sent again", a.delivery);
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["status"], "duplicate");
        assert_eq!(body["id"].as_i64(), a.row, "{} keeps its row", a.delivery);
    }
}

async fn post(
    client: &reqwest::Client,
    addr: SocketAddr,
    delivery: &str,
    body: &[u8],
) -> reqwest::Result<reqwest::Response> {
    client
        .post(format!("http://{addr}/hooks/github"))
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", delivery)
        .header("x-hub-signature-256", github_signature(GITHUB_SECRET, body))
        .body(body.to_vec())
        .send()
        .await
}

// ---------------------------------------------------------------- load ---

/// Clients posting distinct deliveries as fast as the server answers.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<ClientReport>>,
}

#[derive(Default)]
struct ClientReport {
    acked: Vec<Acked>,
    statuses: HashMap<u16, usize>,
    errors: usize,
}

impl ClientReport {
    /// Unique ids are new: 202, or 503 if the server is saturated.
    fn assert_only_expected_statuses(&self) {
        let unexpected: Vec<_> = self
            .statuses
            .iter()
            .filter(|(s, _)| !matches!(s, 202 | 503))
            .collect();
        assert!(
            unexpected.is_empty(),
            "unexpected statuses: {:?}",
            self.statuses
        );
    }
}

impl Load {
    fn start(addr: SocketAddr, prefix: &str, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let tasks = (0..clients)
            .map(|c| {
                let prefix = format!("{prefix}-t{c}");
                tokio::spawn(client_loop(addr, prefix, stop.clone(), acked.clone()))
            })
            .collect();
        Load { stop, acked, tasks }
    }

    /// Waits until `count` deliveries are acknowledged or `at_most` passed.
    async fn wait_for(&self, count: usize, at_most: Duration) {
        let deadline = Instant::now() + at_most;
        while self.acked.load(Ordering::Relaxed) < count && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    async fn stop(self) -> ClientReport {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = ClientReport::default();
        for task in self.tasks {
            let report = tokio::time::timeout(Duration::from_secs(15), task)
                .await
                .expect("a client stops once told to")
                .unwrap();
            all.acked.extend(report.acked);
            for (status, n) in report.statuses {
                *all.statuses.entry(status).or_default() += n;
            }
            all.errors += report.errors;
        }
        all
    }
}

async fn client_loop(
    addr: SocketAddr,
    prefix: String,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicUsize>,
) -> ClientReport {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut report = ClientReport::default();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let delivery = format!("{prefix}-{n}");
        // Sizes from tiny to several pages, so commits span overflow pages.
        let body = format!(
            r#"{{"delivery":"{delivery}","pad":"{}"}}"#,
            "x".repeat((n * 1237) % 6000)
        );
        n += 1;
        match post(&client, addr, &delivery, body.as_bytes()).await {
            Ok(r) => {
                let status = r.status().as_u16();
                *report.statuses.entry(status).or_default() += 1;
                if r.status().is_success() {
                    // The status line is the promise; the body may be cut.
                    let row = r
                        .json::<serde_json::Value>()
                        .await
                        .ok()
                        .and_then(|v| v["id"].as_i64());
                    report.acked.push(Acked { delivery, row });
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                report.errors += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    report
}

// -------------------------------------------------------------- server ---

/// The `hookbox` binary as a child process; killed on drop, so a failed
/// assertion does not leave it running. Its log goes to a file, printed
/// when the test fails (or always with `TEST_LOG=1`).
struct Server {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Server {
    fn start(dir: &Path, run: usize) -> Server {
        let addr = free_addr();
        let admin = free_addr();
        let config = dir.join("hookbox.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"{addr}\"\nadmin_listen = \"{admin}\"\ndatabase = {:?}\ndurability = \"full\"\n\n\
                 [[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n",
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
        Server { child, addr, log }
    }

    /// Starts hookbox on the database in `dir` and waits for `/readyz`.
    /// Ports are picked free and then let go, so another socket may take
    /// one in between: a start that fails to bind is tried again.
    async fn spawn_ready(dir: &Path, run: usize) -> Server {
        for attempt in 0.. {
            let mut server = Server::start(dir, run);
            match server.wait_ready().await {
                Ok(()) => return server,
                Err(exit) if attempt < 3 && server.log_tail(20).contains("binding the") => {
                    eprintln!("hookbox could not bind ({exit}); trying other ports");
                }
                Err(exit) => panic!("hookbox exited before it was ready: {exit}"),
            }
        }
        unreachable!()
    }

    /// `Err` when the process exited instead of getting ready.
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
            assert!(
                Instant::now() < deadline,
                "hookbox was not ready within 15 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `Child::kill` is SIGKILL on Unix; the caller checks the signal.
    fn kill9(&mut self) -> ExitStatus {
        self.child.kill().unwrap();
        self.child.wait().unwrap()
    }

    fn terminate(&mut self, within: Duration) -> ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM failed");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "hookbox did not exit within {within:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() || std::env::var_os("TEST_LOG").is_some() {
            eprintln!("--- {} ---\n{}", self.log.display(), self.log_tail(80));
        }
    }
}

/// A loopback address nobody is listening on (bind :0, then let go).
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}
