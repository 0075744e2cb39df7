//! `hookbox listen` as a developer runs it: the real binary pulling from a
//! real server and forwarding to a local endpoint.

use std::collections::BTreeSet;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::helpers::*;

const TOKEN: &str = "listen-token-0123456789";

fn source() -> String {
    source_leasing("3s")
}

/// The pull destination `laptop`, leasing what it hands out for `timeout`.
fn source_leasing(timeout: &str) -> String {
    format!(
        r#"{GITHUB_SOURCE}order_key = ["/repository/full_name"]
[[sources.deliver]]
name = "laptop"
pull = {{ token = "{TOKEN}" }}
timeout = "{timeout}"
backoff_base = "100ms"
backoff_cap = "200ms"
"#
    )
}

fn listen(app: &TestApp, down: &Downstream, extra: &[&str]) -> std::process::Command {
    let mut cmd = hookbox();
    cmd.args(["listen", "--url", &app.url(""), "--source", "github"])
        .args(["--destination", "laptop", "--forward-to", &down.url()])
        .args(extra)
        .env("HOOKBOX_PULL_TOKEN", TOKEN);
    cmd
}

fn spawn(mut cmd: std::process::Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits up to 30 s for `probe`; if it never holds, stops `child` and
/// fails showing what it printed.
async fn until(child: Child, what: &str, mut probe: impl FnMut() -> bool) -> Child {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !probe() {
        if std::time::Instant::now() > deadline {
            stop(child);
            panic!("gave up waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child
}

/// Kills `child` and shows what it printed, for a failing test's log.
fn stop(mut child: Child) {
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "listen printed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn delivered(app: &TestApp) -> i64 {
    app.count("SELECT count(*) FROM deliveries WHERE state = 'delivered'")
}

/// Sends `signal` to the `hookbox listen` child.
fn signal(child: &Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
}

/// Waits up to `within` for `child` to exit; fails showing what it
/// printed if it does not.
async fn exits_within(mut child: Child, within: Duration) -> std::process::Output {
    let deadline = std::time::Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            stop(child);
            panic!("listen did not exit within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.wait_with_output().unwrap()
}

/// What a take of the test's pull destination hands out, as the server
/// answers it (`query`: e.g. `?max=100`).
async fn take(app: &TestApp, query: &str) -> serde_json::Value {
    app.client
        .post(app.url(&format!("/pull/github/laptop{query}")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn post_all(app: &TestApp, ids: &[String]) {
    for (i, id) in ids.iter().enumerate() {
        let body = format!(
            r#"{{"repository":{{"full_name":"acme/r{}"}},"n":{i}}}"#,
            i % 3
        );
        assert_eq!(app.post_github(id, body.as_bytes()).await.status(), 202);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_forwards_what_arrived_while_it_was_away_with_body_and_headers_then_exits() {
    let app = TestApp::spawn(&source()).await;
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let ids: Vec<String> = (0..12).map(|i| format!("away-{i}")).collect();
    post_all(&app, &ids).await;
    let out = listen(&app, &down, &["--once"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hits = down.hits();
    let got: BTreeSet<&str> = hits.iter().map(|h| h.header("x-github-delivery")).collect();
    assert_eq!(got, ids.iter().map(String::as_str).collect());
    assert_eq!(hits.len(), 12, "each once");
    assert_eq!(hits[0].header("content-type"), "application/json");
    assert_eq!(hits[0].header("x-github-event"), "push");
    assert!(hits[0].body.starts_with(br#"{"repository""#));
    // One line per event: time, source, type, delivery id, event id, status, ms.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 12, "{stdout}");
    let fields: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(fields[1..4], ["github", "push", "away-0"], "{}", lines[0]);
    assert_eq!(fields[5], "204");
    assert!(fields[6].ends_with("ms"));
    assert_eq!(delivered(&app), 12);
    // Per key, in arrival order.
    for key in 0..3 {
        let of_key: Vec<&str> = hits
            .iter()
            .map(|h| h.header("x-github-delivery"))
            .filter(|d| d.trim_start_matches("away-").parse::<usize>().unwrap() % 3 == key)
            .collect();
        let mut sorted = of_key.clone();
        sorted.sort_by_key(|d| d.trim_start_matches("away-").parse::<usize>().unwrap());
        assert_eq!(of_key, sorted);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_local_endpoint_is_nacked_and_retried_until_it_answers() {
    let app = TestApp::spawn(&source()).await;
    // The first try of each event fails.
    let tries = std::sync::Mutex::new(std::collections::HashMap::<String, u32>::new());
    let down = Downstream::start(move |delivery, _| {
        let mut tries = tries.lock().unwrap();
        let n = tries.entry(delivery.to_owned()).or_default();
        *n += 1;
        Reply::status(if *n == 1 { 500 } else { 200 })
    })
    .await;
    let ids: Vec<String> = (0..3).map(|i| format!("flaky-{i}")).collect();
    post_all(&app, &ids).await;
    let child = spawn(listen(&app, &down, &[]));
    let child = until(child, "every event delivered", || delivered(&app) == 3).await;
    stop(child);
    let failed = down.hits().iter().filter(|h| !h.ok()).count();
    assert_eq!(failed, 3, "each failed once, then went through");
    assert_eq!(
        app.count("SELECT count(*) FROM attempts WHERE outcome = 'retry'"),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_stream_and_restarted_every_event_arrives_and_ends_delivered() {
    let app = TestApp::spawn(&source()).await;
    let down = Downstream::start(|_, _| Reply::status(204).after(Duration::from_millis(30))).await;
    let ids: Vec<String> = (0..40).map(|i| format!("k-{i}")).collect();
    post_all(&app, &ids).await;
    let child = spawn(listen(&app, &down, &["--max", "5"]));
    let child = until(child, "a few forwarded", || down.hits().len() >= 8).await;
    // SIGKILL: no chance to give anything back.
    stop(child);
    let child = spawn(listen(&app, &down, &["--max", "5"]));
    let child = until(child, "every event delivered", || delivered(&app) == 40).await;
    stop(child);
    let got: BTreeSet<String> = down
        .hits()
        .iter()
        .map(|h| h.header("x-github-delivery").to_owned())
        .collect();
    assert_eq!(got, ids.into_iter().collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_gives_back_what_it_holds_at_once_and_exits_0() {
    let app = TestApp::spawn(&source()).await;
    // Slow enough that listen holds a batch when SIGINT comes.
    let down = Downstream::start(|_, _| Reply::status(204).after(Duration::from_millis(300))).await;
    let ids: Vec<String> = (0..10).map(|i| format!("int-{i}")).collect();
    post_all(&app, &ids).await;
    let mut child = spawn(listen(&app, &down, &["--max", "10"]));
    eventually("the first forwarded", || {
        (!down.hits().is_empty()).then_some(())
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    // What it had not forwarded is due at once, not when the 3 s leases
    // would have run out.
    let left = app.count("SELECT count(*) FROM deliveries WHERE state = 'pending'");
    assert!(left > 0, "SIGINT came after everything was forwarded");
    let took = take(&app, "?max=100").await;
    let n = took["events"].as_array().unwrap().len();
    assert!(n > 0, "nothing was given back: {took}");
    assert_eq!(
        app.count("SELECT count(*) FROM attempts WHERE outcome = 'retry'"),
        0,
        "giving back counts no attempt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_speaks_https_trusting_the_ca_it_is_given() {
    let certs = tempfile::tempdir().unwrap();
    let tls = crate::limits::tls_files(certs.path());
    let ca = certs.path().join("ca.pem");
    std::fs::write(&ca, &tls.ca).unwrap();
    let server_tls = format!(
        "[server.tls]\ncert = {:?}\nkey = {:?}",
        tls.cert.display().to_string(),
        tls.key.display().to_string()
    );
    let app = TestApp::spawn_with(&source(), &server_tls).await;
    let https = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(tls.ca.as_bytes()).unwrap()])
        .build()
        .unwrap();
    let url = format!("https://{}/hooks/github", app.addr);
    let r = github_request(&https, &url, "over-tls", br#"{"zen":"tls"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let down = Downstream::start(|_, _| Reply::status(204)).await;
    let mut cmd = hookbox();
    cmd.args(["listen", "--url", &format!("https://{}", app.addr)])
        .args(["--source", "github", "--destination", "laptop"])
        .args(["--forward-to", &down.url(), "--once", "--ca"])
        .arg(&ca)
        .env("HOOKBOX_PULL_TOKEN", TOKEN);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(down.hits().len(), 1);
    assert_eq!(down.hits()[0].header("x-github-delivery"), "over-tls");
    assert_eq!(delivered(&app), 1);
    // Without the CA the certificate is refused: --once says so and exits 1.
    let mut cmd = hookbox();
    cmd.args(["listen", "--url", &format!("https://{}", app.addr)])
        .args(["--source", "github", "--destination", "laptop"])
        .args(["--forward-to", &down.url(), "--once"])
        .env("HOOKBOX_PULL_TOKEN", TOKEN);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot take events"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_slower_than_the_lease_gets_each_event_once_acked_at_its_first_attempt() {
    // Five events of five keys come in one take; at 1 s each the last is
    // answered 5 s after the take, well past its 2 s lease, unless listen
    // keeps the leases alive and acks each one as it goes through.
    let app = TestApp::spawn(&source_leasing("2s")).await;
    let down = Downstream::start(|_, _| Reply::status(204).after(Duration::from_secs(1))).await;
    for i in 0..5 {
        let body = format!(r#"{{"repository":{{"full_name":"acme/slow{i}"}}}}"#);
        let id = format!("slow-{i}");
        assert_eq!(app.post_github(&id, body.as_bytes()).await.status(), 202);
    }
    let child = spawn(listen(&app, &down, &["--max", "10"]));
    let child = until(child, "every event delivered", || delivered(&app) == 5).await;
    // A copy handed out again would be with the app now: let it arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop(child);
    let mut seen: Vec<String> = down
        .hits()
        .iter()
        .map(|h| h.header("x-github-delivery").to_owned())
        .collect();
    seen.sort();
    let ids: Vec<String> = (0..5).map(|i| format!("slow-{i}")).collect();
    assert_eq!(seen, ids, "each event reaches the app exactly once");
    assert_eq!(
        app.count("SELECT count(*) FROM deliveries WHERE state = 'delivered' AND attempts = 1"),
        5,
        "each delivered at its first attempt"
    );
    assert_eq!(app.count("SELECT count(*) FROM attempts"), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_while_the_app_works_is_reported_not_silently_acked() {
    let app = TestApp::spawn(&source_leasing("2s")).await;
    let down = Downstream::start(|_, _| Reply::status(204).after(Duration::from_secs(1))).await;
    post_all(&app, &["lost-0".to_owned()]).await;
    let child = spawn(listen(&app, &down, &[]));
    down.wait_for_hits(1).await;
    // Stopped past the lease (a laptop lid, a debugger), listen cannot
    // extend it: once back, the server says the lease is gone.
    signal(&child, nix::sys::signal::Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(3)).await;
    signal(&child, nix::sys::signal::Signal::SIGCONT);
    let child = until(child, "the event delivered", || delivered(&app) == 1).await;
    signal(&child, nix::sys::signal::Signal::SIGINT);
    let out = exits_within(child, Duration::from_secs(2)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("may see it again"),
        "no line about the lost lease:\n{stderr}"
    );
    assert_eq!(down.hits().len(), 2, "taken again after the loss");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_gives_back_the_event_the_app_is_still_working_on_and_exits_0_within_2s() {
    // Leases far longer than the test: only a release makes it due again.
    let app = TestApp::spawn(&source_leasing("60s")).await;
    let never = Gate::new();
    let down = Downstream::start(move |_, _| Reply::status(204).until(never.clone())).await;
    post_all(&app, &["held-0".to_owned()]).await;
    let child = spawn(listen(&app, &down, &[]));
    down.wait_for_hits(1).await;
    signal(&child, nix::sys::signal::Signal::SIGINT);
    let out = exits_within(child, Duration::from_secs(2)).await;
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        app.count("SELECT count(*) FROM deliveries WHERE state = 'pending' AND attempts = 0"),
        1
    );
    assert_eq!(
        app.count("SELECT count(*) FROM attempts"),
        0,
        "no attempt counted"
    );
    assert_eq!(app.count("SELECT count(*) FROM leases"), 0, "released");
    let took = take(&app, "").await;
    assert_eq!(
        took["events"][0]["delivery_id"], "held-0",
        "due at once: {took}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigint_exits_at_once_while_the_first_waits_for_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hookbox.db");
    let server = ChildServer::spawn_ready(dir.path(), &db, &source_leasing("60s"), "", 0).await;
    let client = reqwest::Client::new();
    let body = br#"{"repository":{"full_name":"acme/r0"}}"#;
    let r = github_request(&client, &server.url("/hooks/github"), "twice-0", body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let never = Gate::new();
    let down = Downstream::start(move |_, _| Reply::status(204).until(never.clone())).await;
    let mut cmd = hookbox();
    cmd.args(["listen", "--url", &server.url(""), "--source", "github"])
        .args(["--destination", "laptop", "--forward-to", &down.url()])
        .env("HOOKBOX_PULL_TOKEN", TOKEN);
    let child = spawn(cmd);
    down.wait_for_hits(1).await;
    // The give-back the first SIGINT starts gets no answer.
    server.freeze();
    signal(&child, nix::sys::signal::Signal::SIGINT);
    tokio::time::sleep(Duration::from_millis(100)).await;
    signal(&child, nix::sys::signal::Signal::SIGINT);
    let out = exits_within(child, Duration::from_millis(400)).await;
    server.thaw();
    assert_eq!(out.status.code(), Some(130), "{:?}", out.status);
}
