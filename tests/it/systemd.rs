//! Running under systemd: sd_notify readiness, watchdog and stopping from
//! the real binary, `cred:` secrets, and the unit file itself.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::helpers::{GITHUB_SECRET, clear_env, free_port, github_request, hookbox};

/// Reads datagrams until one contains `want`, or panics after 10 s.
fn expect_message(socket: &UnixDatagram, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]);
            if text.lines().any(|l| l == want) {
                return;
            }
        }
    }
    panic!("no {want} from hookbox within 10 s");
}

#[test]
fn the_binary_tells_systemd_ready_then_feeds_the_watchdog_then_says_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let config = dir.path().join("hookbox.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\ndatabase = {:?}\n",
            free_port(),
            free_port(),
            dir.path().join("hookbox.db").display().to_string()
        ),
    )
    .unwrap();
    let mut child = hookbox()
        .args(["serve", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "300000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let result = std::panic::catch_unwind(|| {
        expect_message(&socket, "READY=1");
        expect_message(&socket, "WATCHDOG=1");
        expect_message(&socket, "WATCHDOG=1");
    });
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    if result.is_ok() {
        expect_message(&socket, "STOPPING=1");
    }
    let status = child.wait().unwrap();
    result.unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn cred_secrets_are_read_from_the_credentials_directory() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("creds");
    std::fs::create_dir(&creds).unwrap();
    std::fs::write(creds.join("github-webhook-secret"), "from-a-credential\n").unwrap();
    let config = dir.path().join("hookbox.toml");
    std::fs::write(
        &config,
        "[[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"cred:github-webhook-secret\"]\n",
    )
    .unwrap();
    let run = |creds_dir: Option<&Path>| {
        let mut cmd = hookbox();
        cmd.args(["check", "--config"]).arg(&config);
        match creds_dir {
            Some(d) => cmd.env("CREDENTIALS_DIRECTORY", d),
            None => cmd.env_remove("CREDENTIALS_DIRECTORY"),
        };
        cmd.output().unwrap()
    };
    let out = run(Some(&creds));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("cred:github-webhook-secret"), "{stdout}");
    assert!(!stdout.contains("from-a-credential"), "{stdout}");

    let out = run(None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("CREDENTIALS_DIRECTORY"), "{stderr}");
}

/// The unit as shipped, with ExecStart pointed at the binary under test.
fn unit_under_test(dir: &Path) -> std::path::PathBuf {
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/hookbox.service"
    ))
    .unwrap();
    let unit = shipped.replace(
        "ExecStart=hookbox ",
        &format!("ExecStart={} ", env!("CARGO_BIN_EXE_hookbox")),
    );
    assert_ne!(unit, shipped, "no ExecStart=hookbox in the unit");
    let path = dir.join("hookbox.service");
    std::fs::write(&path, unit).unwrap();
    path
}

fn systemd_analyze() -> Option<Command> {
    let found = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        eprintln!("skipping: systemd-analyze is not installed here");
    }
    found.then(|| Command::new("systemd-analyze"))
}

#[test]
fn the_unit_file_verifies_and_rates_ok_or_better() {
    let Some(mut verify) = systemd_analyze() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_under_test(dir.path());
    // The optional socket unit beside it, as installed.
    let socket = dir.path().join("hookbox.socket");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/hookbox.socket"),
        &socket,
    )
    .unwrap();
    let out = verify
        .arg("verify")
        .arg(&unit)
        .arg(&socket)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // Credentials the unit names do not exist on a test machine; anything
    // else systemd-analyze says is a problem with the unit.
    let complaints: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(complaints.is_empty(), "{text}");

    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true"])
        .arg(&unit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let overall = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| {
            panic!(
                "no rating in:\n{text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(
        overall.contains(" OK") || overall.contains(" SAFE"),
        "{overall}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_health_check_passes_against_a_ready_server_and_fails_without_one() {
    let app = crate::helpers::TestApp::spawn(crate::helpers::GITHUB_SOURCE).await;
    let config = app.dir.path().join("health.toml");
    let run = |admin: std::net::SocketAddr| {
        std::fs::write(
            &config,
            format!("[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"{admin}\"\n"),
        )
        .unwrap();
        hookbox()
            .args(["healthcheck", "--config"])
            .arg(&config)
            .output()
            .unwrap()
    };
    let out = tokio::task::block_in_place(|| run(app.admin_addr));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let out = tokio::task::block_in_place(|| run(closed));
    assert!(!out.status.success());
    app.shutdown().await;
}

/// The container image copies only the binary onto debian:bookworm-slim.
/// Without a Docker engine here, the next best proof: the binary runs in a
/// root file system holding nothing but itself and the shared libraries
/// `ldd` names (glibc's, which the slim image has).
#[test]
fn the_binary_runs_in_a_root_file_system_with_only_its_shared_libraries() {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !is_root {
        eprintln!("skipping: chroot needs root");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_hookbox");
    let ldd = Command::new("ldd").arg(bin).output().unwrap();
    let libs: Vec<String> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(str::to_owned)
        .collect();
    assert!(!libs.is_empty(), "ldd found no libraries");
    for lib in &libs {
        let dest = root.path().join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(lib, &dest).unwrap();
    }
    let dest = root.path().join("hookbox");
    std::fs::copy(bin, &dest).unwrap();
    for (args, want) in [
        (&["--version"][..], "hookbox "),
        (&["check"][..], "embedded default"),
    ] {
        let out = Command::new("/usr/sbin/chroot")
            .arg(root.path())
            .arg("/hookbox")
            .args(args)
            .env_clear()
            .env("GITHUB_WEBHOOK_SECRET", "x")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(want), "{args:?}: {stdout}");
    }
}

#[tokio::test]
async fn sockets_passed_by_systemd_socket_activation_are_served_in_place_of_binding() {
    let found = Command::new("systemd-socket-activate")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        eprintln!("skipping: systemd-socket-activate is not installed here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (public, admin) = (free_port(), free_port());
    let env_dump = dir.path().join("command-env");
    // listen and admin_listen name ports hookbox could not bind: only the
    // passed sockets can serve.
    let config = dir.path().join("hookbox.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\ndatabase = {:?}\n\
             [[sources]]\nname = \"github\"\nkind = \"github\"\nsecrets = [\"{GITHUB_SECRET}\"]\n\
             [sources.deliver]\ncommand = [\"/bin/sh\", \"-c\", \"env > {}\"]\n",
            dir.path().join("hookbox.db").display().to_string(),
            env_dump.display(),
        ),
    )
    .unwrap();
    // systemd's own tool: it binds both, then starts hookbox on the first
    // connection with LISTEN_FDS=2 (public, then admin, in -l order).
    let mut activator = clear_env(&mut Command::new("systemd-socket-activate"))
        .args(["-l", &format!("127.0.0.1:{public}")])
        .args(["-l", &format!("127.0.0.1:{admin}")])
        .arg(env!("CARGO_BIN_EXE_hookbox"))
        .args(["serve", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let body = br#"{"zen":"Half measures are as bad as nothing at all."}"#;
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        let url = format!("http://127.0.0.1:{public}/hooks/github");
        let sent = github_request(&client, &url, "activated-1", body)
            .send()
            .await;
        match sent {
            Ok(response) => break response.status(),
            // systemd-socket-activate may not be listening yet.
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(status, 202);
    let ready = client
        .get(format!("http://127.0.0.1:{admin}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        ready.status(),
        200,
        "the second socket is the admin listener"
    );
    // The command destination ran without the activation variables.
    let deadline = Instant::now() + Duration::from_secs(15);
    let env = loop {
        if let Ok(env) = std::fs::read_to_string(&env_dump)
            && env.contains("HOOKBOX_EVENT_ID")
        {
            break env;
        }
        assert!(Instant::now() < deadline, "the command never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!env.contains("LISTEN_FDS"), "{env}");
    assert!(!env.contains("LISTEN_PID"), "{env}");
    // hookbox replaced the activator's process (exec): SIGTERM stops it.
    let pid = nix::unistd::Pid::from_raw(activator.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert!(activator.wait().unwrap().success());
}
