//! README.md's quick start, executed: its run command starts the real
//! binary on the embedded default, which takes a signed GitHub delivery
//! (and the README's own `curl` block, where curl and openssl are
//! installed) and exits 0 on SIGTERM; its test command is the one
//! `.ci/run` runs.
//!
//! The run command uses the default ports (8080 public, 8081 admin). When
//! either is taken on this machine the test fails saying so, rather than
//! skipping: a quick start that cannot start is worth knowing about.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::{github_signature, hookbox};

/// Held while the default ports are in use by this file's tests.
static DEFAULT_PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn read(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {name}: {e}"))
}

/// The `sh` code blocks of README.md's "## Quick start" section.
fn quick_start_commands() -> Vec<String> {
    let readme = read("README.md");
    let start = readme
        .find("\n## Quick start\n")
        .expect("README.md has a \"## Quick start\" section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    section
        .split("```sh\n")
        .skip(1)
        .map(|block| {
            block
                .split("```")
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .collect()
}

/// The quick start's run command, its try-it block, and its test command.
fn quick_start() -> (String, String, String) {
    let blocks = quick_start_commands();
    let find = |what: &str, pick: &dyn Fn(&str) -> bool| {
        let found: Vec<&String> = blocks.iter().filter(|b| pick(b)).collect();
        assert_eq!(
            found.len(),
            1,
            "one {what} block in the quick start: {blocks:?}"
        );
        found[0].clone()
    };
    (
        find("`cargo run`", &|b| b.contains("cargo run")),
        find("`curl`", &|b| b.contains("curl ")),
        find("`cargo test`", &|b| b.starts_with("cargo test")),
    )
}

#[test]
fn the_readme_test_command_is_the_one_ci_runs() {
    let (_, _, test) = quick_start();
    let ci = read(".ci/run");
    let ci_tests: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("cargo test"))
        .collect();
    assert_eq!(
        ci_tests,
        vec![test.as_str()],
        ".ci/run must run exactly the README's test command"
    );
}

/// Kills the server if the test fails before it stopped it.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn which(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn port_is_free(addr: &str) -> bool {
    std::net::TcpListener::bind(addr).is_ok()
}

#[tokio::test]
async fn the_readme_run_command_serves_and_takes_a_signed_github_delivery() {
    let _ports = DEFAULT_PORTS.lock().await;
    let (run, try_it, _) = quick_start();

    // `NAME=value ... cargo run --release -- ARGS`
    let words: Vec<&str> = run.split_whitespace().collect();
    let env: Vec<(&str, &str)> = words
        .iter()
        .map_while(|w| w.split_once('='))
        .filter(|(name, _)| name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .collect();
    let rest = &words[env.len()..];
    let cargo_run = ["cargo", "run", "--release", "--"];
    assert_eq!(
        &rest[..cargo_run.len()],
        &cargo_run,
        "the run command is `cargo run --release -- ...`: {run}"
    );
    let args = &rest[cargo_run.len()..];
    let secret = env
        .iter()
        .find(|(name, _)| *name == "GITHUB_WEBHOOK_SECRET")
        .map(|(_, value)| *value)
        .expect("the run command sets GITHUB_WEBHOOK_SECRET");

    assert!(
        !Path::new(hookbox::config::SYSTEM_CONFIG).exists(),
        "{} exists on this machine, so the quick start would not run on the embedded default",
        hookbox::config::SYSTEM_CONFIG
    );
    for addr in ["0.0.0.0:8080", "127.0.0.1:8081"] {
        assert!(
            port_is_free(addr),
            "{addr} is in use on this machine: the quick start's default listeners need ports 8080 and 8081; free them and run again"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let mut cmd = hookbox();
    cmd.args(args).current_dir(dir.path());
    for (name, value) in &env {
        cmd.env(name, value);
    }
    let log = dir.path().join("server.log");
    let log_file = std::fs::File::create(&log).unwrap();
    cmd.stdout(Stdio::null()).stderr(log_file);
    let mut server = Server(cmd.spawn().unwrap());
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!(
                "`{run}` exited with {status} before it was ready:\n{}",
                log_text()
            );
        }
        let ready = client
            .get("http://127.0.0.1:8080/readyz")
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready within 30 s:\n{}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let body = br#"{"zen":"Keep it logically awesome.","hook_id":1}"#;
    let response = client
        .post("http://127.0.0.1:8080/hooks/github")
        .header("content-type", "application/json")
        .header("x-github-event", "ping")
        .header("x-github-delivery", "quick-start-0001")
        .header("x-hub-signature-256", github_signature(secret, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "{}", log_text());
    assert!(
        dir.path().join("hookbox.db").exists(),
        "the database is ./hookbox.db in the working directory"
    );

    // The README's own curl, as a user would paste it.
    if which("curl") && which("openssl") {
        let out = Command::new("sh")
            .args(["-c", &try_it])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.starts_with("HTTP/1.1 202"),
            "the quick start's curl did not get 202:\n{stdout}{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            log_text()
        );
    } else {
        eprintln!("curl or openssl is not installed: the README's curl block was not run");
    }

    let pid = nix::unistd::Pid::from_raw(server.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "no exit within 30 s of SIGTERM:\n{}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        status.success(),
        "exit {status} after SIGTERM:\n{}",
        log_text()
    );
}

#[test]
fn version_prints_the_version_and_the_git_commit() {
    let out = hookbox().arg("--version").output().unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("hookbox {} (", env!("CARGO_PKG_VERSION"));
    let commit = stdout
        .trim_end()
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not `{prefix}COMMIT)`: {stdout}"));
    assert!(
        commit == "unknown commit"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{commit:?} is neither a 12-digit commit nor \"unknown commit\""
    );
}
