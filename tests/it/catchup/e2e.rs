//! The simulated outage, through the real binary: while hookbox was down,
//! GitHub's deliveries failed and Stripe's events went unanswered. Started
//! again, hookbox's start-up catch-up asks the fake GitHub to redeliver
//! (which it does, to hookbox) and fetches from the fake Stripe; every
//! missed event ends in the inbox once. Then `hookbox catch-up --dry-run`
//! runs beside the server, prints what it would ask for, and asks nothing.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::fake::{Attempt, BASE_ID, Fake, HOOK_ID, STRIPE_KEY, TOKEN};
use super::stripe::{STRIPE_SECRET, event};
use super::{ago, query_i64, wait_for_count};
use crate::helpers::GITHUB_SECRET;

struct Server {
    child: Child,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- hookbox log ---\n{log}");
        }
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn hookbox() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hookbox"));
    for var in [
        "GITHUB_WEBHOOK_SECRET",
        "STRIPE_WEBHOOK_SECRET",
        "HOOKBOX_CONFIG",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn write_config(dir: &Path, addr: SocketAddr, fake: &str) -> PathBuf {
    let path = dir.join("hookbox.toml");
    std::fs::write(
        &path,
        format!(
            r#"[server]
listen = "{addr}"
admin_listen = "{admin}"
database = {db:?}

[[sources]]
name = "github"
kind = "github"
secrets = ["{GITHUB_SECRET}"]

[sources.github_redelivery]
repo = "acme/shop"
hook_id = {HOOK_ID}
token = "{TOKEN}"
api_url = "{fake}"
pace = "10ms"

[[sources]]
name = "stripe"
kind = "stripe"
secrets = ["{STRIPE_SECRET}"]
stripe_backfill = {{ api_key = "{STRIPE_KEY}", api_url = "{fake}" }}
"#,
            admin = free_addr(),
            db = dir.join("hookbox.db").display().to_string(),
        ),
    )
    .unwrap();
    path
}

async fn start(config: &Path, addr: SocketAddr, log: PathBuf) -> Server {
    let out = File::create(&log).unwrap();
    let child = hookbox()
        .arg("serve")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("starting the hookbox binary");
    let mut server = Server { child, log };
    let deadline = Instant::now() + Duration::from_secs(15);
    let client = reqwest::Client::new();
    loop {
        assert!(
            server.child.try_wait().unwrap().is_none(),
            "hookbox exited before it was ready"
        );
        let ready = client.get(format!("http://{addr}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            return server;
        }
        assert!(Instant::now() < deadline, "hookbox was not ready in 15 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_one_catch_up_pass_brings_every_missed_event_into_the_inbox() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    // What happened while hookbox was down.
    let missed: Vec<String> = (0..6).map(|n| format!("missed-{n}")).collect();
    let mut attempts: Vec<Attempt> = missed
        .iter()
        .enumerate()
        .map(|(n, g)| Attempt::new(BASE_ID + n as i64, g, ago(7200 - n as i64 * 600), false))
        .collect();
    attempts.push(Attempt::new(BASE_ID + 99, "before-outage", ago(9000), true));
    let fake = Fake::start(attempts).await;
    fake.redeliver_to(format!("http://{addr}/hooks/github"), GITHUB_SECRET);
    let stripe_missed = ["evt_a", "evt_b", "evt_c"];
    for (n, id) in stripe_missed.iter().enumerate() {
        fake.add_stripe_event(event(id, ago(3600 * (n as i64 + 1))));
    }

    let config = write_config(dir.path(), addr, &fake.url());
    let server = start(&config, addr, dir.path().join("hookbox.log")).await;
    let db = dir.path().join("hookbox.db");
    wait_for_count(
        &db,
        "SELECT count(*) FROM events WHERE source = 'github'",
        6,
    )
    .await;
    wait_for_count(
        &db,
        "SELECT count(*) FROM events WHERE source = 'stripe' AND origin = 'fetched'",
        3,
    )
    .await;
    for guid in &missed {
        let sql =
            format!("SELECT count(*) FROM events WHERE delivery_id = '{guid}' AND origin = 'push'");
        assert_eq!(query_i64(&db, &sql), 1, "{guid}");
    }
    for id in stripe_missed {
        let sql = format!("SELECT count(*) FROM events WHERE delivery_id = '{id}'");
        assert_eq!(query_i64(&db, &sql), 1, "{id}");
    }
    assert_eq!(
        fake.posts(),
        (0..6).map(|n| BASE_ID + n).collect::<Vec<_>>(),
        "one redelivery per missed event, oldest first"
    );
    fake.assert_no_problems();
    wait_for_count(
        &db,
        "SELECT count(*) FROM catchup_state WHERE job IN ('github_redelivery', 'stripe_backfill')",
        2,
    )
    .await;

    // A new failure; the CLI's dry run beside the running server shows it
    // and asks nothing.
    fake.add(Attempt::new(BASE_ID + 500, "late-failure", ago(10), false));
    let out = hookbox()
        .args(["catch-up", "github", "--dry-run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("github github_redelivery (dry run)"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "would ask: late-failure attempt {}",
            BASE_ID + 500
        )),
        "{stdout}"
    );
    assert!(stdout.contains("result: complete"), "{stdout}");
    assert_eq!(fake.posts().len(), 6, "a dry run asks nothing");

    // SIGTERM stops the server cleanly with the scheduler in it.
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut server = server;
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "hookbox did not stop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(exit.code(), Some(0));
}
