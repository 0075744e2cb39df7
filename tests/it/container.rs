//! The container image, built from the project's own Dockerfile (its
//! prebuilt path, with `target/release/hookbox`) on a Debian base made by
//! debootstrap, run by real podman: a signed delivery stored by a
//! non-root user, the image's HEALTHCHECK, the volume keeping the database
//! for a second container, `podman stop` under load, `--read-only`, and
//! `compose.yaml` under podman-compose.
//!
//! Needs root, Debian's `podman`, `runc`, `debootstrap` and
//! `podman-compose`, and an up-to-date release build, all of which
//! `.ci/run` provides; without them the tests say so and pass, except
//! under `CI`, where they fail.

mod podman;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use podman::{Container, IMAGE, Podman, Volume, podman, repo, unique};

use crate::helpers::*;

/// `docker stop`'s timeout the manual recommends, longer than the drain.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The arguments of a hookbox container on `volume`, its public port
/// published on the host's loopback at `port`.
fn serve_args(volume: &Volume, port: u16) -> Vec<String> {
    vec![
        "-p".into(),
        format!("127.0.0.1:{port}:8080"),
        "-v".into(),
        format!("{}:/var/lib/hookbox", volume.0),
        "-e".into(),
        format!("GITHUB_WEBHOOK_SECRET={GITHUB_SECRET}"),
        format!("--stop-timeout={}", STOP_TIMEOUT.as_secs()),
    ]
}

fn start(podman: &'static Podman, args: &[String]) -> Container {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Container::run(podman, &args)
}

/// `podman stop`, which must exit 0 within the stop timeout, and the
/// container's exit code, which must be 0 too.
fn stop(podman: &Podman, container: &Container) -> Duration {
    let started = Instant::now();
    podman.ok(&[
        "stop",
        "-t",
        &STOP_TIMEOUT.as_secs().to_string(),
        &container.0,
    ]);
    let took = started.elapsed();
    assert!(took < STOP_TIMEOUT, "podman stop took {took:?}");
    assert_eq!(podman.exit_code(&container.0), "0", "hookbox's exit code");
    took
}

async fn post(port: u16, delivery: &str) -> reqwest::Response {
    let body = format!(r#"{{"delivery":"{delivery}"}}"#);
    github_request(
        &reqwest::Client::new(),
        &format!("http://127.0.0.1:{port}/hooks/github"),
        delivery,
        body.as_bytes(),
    )
    .send()
    .await
    .unwrap()
}

/// The uid of the container's hookbox process (pid 1).
fn process_uid(podman: &Podman, container: &Container) -> String {
    let status = podman.ok(&["exec", &container.0, "cat", "/proc/1/status"]);
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().to_owned()
}

#[test]
fn the_build_context_holds_the_release_binary_and_nothing_else_of_target() {
    let Some(podman) = podman() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let containerfile = dir.path().join("Containerfile");
    std::fs::write(
        &containerfile,
        format!("FROM {IMAGE}\nCOPY target /context-target\n"),
    )
    .unwrap();
    let tag = format!("localhost/{}", unique("context"));
    podman.ok(&[
        "build",
        "--pull=never",
        "-f",
        &containerfile.display().to_string(),
        "-t",
        &tag,
        &repo().display().to_string(),
    ]);
    let files = podman.ok(&[
        "run",
        "--rm",
        "--entrypoint",
        "find",
        &tag,
        "/context-target",
        "-type",
        "f",
    ]);
    let _ = podman.run(&["rmi", "-f", &tag]);
    assert_eq!(files, "/context-target/release/hookbox");
    // And that file is the host's binary, as the image holds it.
    let sum = |out: String| out.split_whitespace().next().unwrap_or_default().to_owned();
    let host = Command::new("sha256sum")
        .arg(repo().join("target/release/hookbox"))
        .output()
        .unwrap();
    let image = podman.ok(&[
        "run",
        "--rm",
        "--entrypoint",
        "sha256sum",
        IMAGE,
        "/usr/local/bin/hookbox",
    ]);
    assert_eq!(
        sum(String::from_utf8_lossy(&host.stdout).into()),
        sum(image)
    );
}

#[tokio::test]
async fn a_delivery_is_stored_by_a_non_root_user_and_a_second_container_on_the_volume_knows_it() {
    let Some(podman) = podman() else {
        return;
    };
    let healthcheck = podman.ok(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.Healthcheck.Test}}",
        IMAGE,
    ]);
    assert!(healthcheck.contains("hookbox healthcheck"), "{healthcheck}");
    let volume = Volume::new(podman);
    let port = free_port();
    let first = start(podman, &serve_args(&volume, port));
    podman.wait_healthy(&first.0).await;

    let response = post(port, "container-1").await;
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
    assert_eq!(process_uid(podman, &first), "10001");
    let owner = podman.ok(&[
        "exec",
        &first.0,
        "stat",
        "-c",
        "%u",
        "/var/lib/hookbox/hookbox.db",
    ]);
    assert_eq!(owner, "10001");
    stop(podman, &first);

    let port = free_port();
    let second = start(podman, &serve_args(&volume, port));
    podman.wait_healthy(&second.0).await;
    let response = post(port, "container-1").await;
    assert_eq!(response.status(), 200);
    assert!(response.text().await.unwrap().contains("duplicate"));
    stop(podman, &second);
}

#[tokio::test]
async fn podman_stop_under_load_exits_0_in_time_and_every_2xx_is_stored() {
    let Some(podman) = podman() else {
        return;
    };
    let volume = Volume::new(podman);
    let port = free_port();
    let container = start(podman, &serve_args(&volume, port));
    podman.wait_healthy(&container.0).await;

    let stopping = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(AtomicUsize::new(0));
    let posters: Vec<_> = (0..8)
        .map(|poster| {
            let (stopping, answers) = (stopping.clone(), answers.clone());
            tokio::spawn(async move {
                let mut stored = Vec::new();
                let client = reqwest::Client::new();
                for n in 0.. {
                    let delivery = format!("load-{poster}-{n}");
                    let body = format!(r#"{{"n":{n}}}"#);
                    let sent = github_request(
                        &client,
                        &format!("http://127.0.0.1:{port}/hooks/github"),
                        &delivery,
                        body.as_bytes(),
                    )
                    .timeout(PATIENCE)
                    .send()
                    .await;
                    match sent {
                        Ok(r) if r.status().is_success() => {
                            answers.fetch_add(1, Ordering::Relaxed);
                            stored.push(delivery);
                        }
                        // Refused or cut once the stop began: not promised.
                        _ if stopping.load(Ordering::Relaxed) => break,
                        other => panic!("{delivery} before the stop: {other:?}"),
                    }
                }
                stored
            })
        })
        .collect();
    // Stop in the middle of the load, whatever this machine's pace.
    eventually("20 deliveries answered 2xx", || {
        (answers.load(Ordering::Relaxed) >= 20).then_some(())
    })
    .await;
    stopping.store(true, Ordering::Relaxed);
    let stop_podman = podman;
    let name = container.0.clone();
    let took = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        stop_podman.ok(&["stop", "-t", &STOP_TIMEOUT.as_secs().to_string(), &name]);
        started.elapsed()
    })
    .await
    .unwrap();
    assert!(took < STOP_TIMEOUT, "podman stop took {took:?}");
    assert_eq!(podman.exit_code(&container.0), "0", "hookbox's exit code");

    let mut answered = BTreeSet::new();
    for poster in posters {
        answered.extend(poster.await.unwrap());
    }
    let stored: BTreeSet<String> = open(&podman.database(&volume))
        .prepare("SELECT delivery_id FROM events WHERE source = 'github'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let lost: Vec<_> = answered.difference(&stored).collect();
    assert!(lost.is_empty(), "answered 2xx but not stored: {lost:?}");
}

#[tokio::test]
async fn a_read_only_container_with_only_the_volume_writable_receives() {
    let Some(podman) = podman() else {
        return;
    };
    let volume = Volume::new(podman);
    let port = free_port();
    let mut args = serve_args(&volume, port);
    // Without podman's own tmpfs on /tmp, /run and /var/tmp.
    args.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
    let container = start(podman, &args);
    podman.wait_healthy(&container.0).await;
    let response = post(port, "read-only-1").await;
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
    let denied = podman.run(&["exec", &container.0, "touch", "/tmp/probe"]);
    assert!(!denied.status.success(), "/tmp is writable");
    assert!(
        text(&denied).contains("Read-only file system"),
        "{}",
        text(&denied)
    );
    stop(podman, &container);
    let events: i64 = open(&podman.database(&volume))
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(events, 1);
}

#[tokio::test]
async fn compose_up_serves_the_public_port_and_the_admin_port_on_loopback_only() {
    let Some(podman) = podman() else {
        return;
    };
    if !debian_tools(&["podman-compose"], "podman-compose") {
        return;
    }
    let project = unique("compose").replace('-', "");
    let (port, admin_port) = (free_port(), free_port());
    let compose = |args: &[&str]| {
        let mut cmd = Command::new("podman-compose");
        podman.env(&mut cmd);
        cmd.current_dir(repo())
            .args(["-f", "compose.yaml", "-p", &project])
            .args(args)
            .env("GITHUB_WEBHOOK_SECRET", GITHUB_SECRET)
            .env("HOOKBOX_PORT", port.to_string())
            .env("HOOKBOX_ADMIN_PORT", admin_port.to_string())
            .env("HOOKBOX_BINARY", "prebuilt")
            .output()
            .unwrap()
    };
    let _down = Down(&compose);
    // compose.yaml's build, with HOOKBOX_BINARY from the environment as
    // from .env.
    let build = compose(&["build"]);
    assert!(
        build.status.success(),
        "podman-compose build: {}",
        text(&build)
    );
    let up = compose(&["up", "-d"]);
    assert!(up.status.success(), "podman-compose up: {}", text(&up));
    let container = format!("{project}_hookbox_1");
    podman.wait_healthy(&container).await;

    let response = post(port, "compose-1").await;
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
    let ready = reqwest::get(format!("http://127.0.0.1:{admin_port}/readyz"))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let published = podman.ok(&["port", &container, "8081/tcp"]);
    assert_eq!(published, format!("127.0.0.1:{admin_port}"));

    let down = compose(&["down"]);
    assert!(
        down.status.success(),
        "podman-compose down: {}",
        text(&down)
    );
    let _ = podman.run(&["volume", "rm", "-f", &format!("{project}_hookbox")]);
}

/// `podman-compose down` however the compose test ends.
struct Down<'a, F: Fn(&[&str]) -> std::process::Output>(&'a F);

impl<F: Fn(&[&str]) -> std::process::Output> Drop for Down<'_, F> {
    fn drop(&mut self) {
        let _ = (self.0)(&["down"]);
    }
}

#[test]
fn the_config_compose_mounts_is_valid() {
    let out = hookbox()
        .arg("check")
        .arg("--config")
        .arg(repo().join("dist/container/hookbox.toml"))
        .env("GITHUB_WEBHOOK_SECRET", GITHUB_SECRET)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}
