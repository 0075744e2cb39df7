//! Faults around the database file and the clock: a read-only directory at
//! start-up, the file deleted under the running server, and signatures
//! dated just inside and just outside the tolerance in both directions.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::helpers::*;

/// A read-only tmpfs (mounted as root), lazily unmounted on drop.
struct ReadOnlyMount {
    path: std::path::PathBuf,
}

impl ReadOnlyMount {
    fn mount(path: &Path) -> Result<ReadOnlyMount, String> {
        std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
            .arg(path)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        Ok(ReadOnlyMount {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Runs `hookbox serve` on `database` until it exits; its status and output.
fn serve_once(dir: &Path, database: &Path) -> (std::process::ExitStatus, String) {
    let config = dir.join("hookbox.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\ndatabase = {:?}\n\
             [admin]\ntoken = \"{ADMIN_TOKEN}\"\n{GITHUB_SOURCE}",
            database.display().to_string()
        ),
    )
    .unwrap();
    let out = hookbox()
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .expect("running the hookbox binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

#[test]
fn starting_on_a_read_only_directory_fails_with_a_clear_error_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("ro");
    let _ro = match ReadOnlyMount::mount(&mnt) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("skipping: cannot mount a read-only tmpfs: {e}");
            return;
        }
    };
    let (status, output) = serve_once(dir.path(), &mnt.join("hookbox.db"));
    assert_eq!(status.code(), Some(1), "{output}");
    assert!(output.contains("ERROR"), "{output}");
    assert!(output.contains("creating the database"), "{output}");
    assert!(output.contains("Read-only file system"), "{output}");
    assert!(!output.contains("panicked"), "{output}");
}

#[test]
fn starting_on_an_existing_database_in_a_read_only_directory_fails_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let db = data.join("hookbox.db");
    // A real hookbox database, stopped cleanly, in a directory that is
    // then remounted read-only: SQLite cannot create its -wal and -shm.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let made = rt.block_on(async {
        let app = TestApp::spawn(GITHUB_SOURCE).await;
        assert_eq!(app.post_github("ro-1", b"{}").await.status(), 202);
        app.shutdown().await
    });
    std::fs::copy(made.path().join("hookbox.db"), &db).unwrap();
    let bind = Command::new("mount")
        .args(["--bind", "-o", "ro"])
        .arg(&data)
        .arg(&data)
        .output()
        .unwrap();
    if !bind.status.success() {
        eprintln!(
            "skipping: cannot bind-mount read-only: {}",
            String::from_utf8_lossy(&bind.stderr).trim()
        );
        return;
    }
    let _ro = ReadOnlyMount { path: data.clone() };
    let (status, output) = serve_once(dir.path(), &db);
    assert_eq!(status.code(), Some(1), "{output}");
    assert!(output.contains("ERROR"), "{output}");
    // The lock file beside the database is the first thing it creates.
    assert!(
        output.contains("creating the database's lock file"),
        "{output}"
    );
    assert!(output.contains("Read-only file system"), "{output}");
    assert!(!output.contains("panicked"), "{output}");
}

/// Deleting the database file under a running hookbox takes what was in
/// it (the inode goes when the process closes it), but from then on
/// nothing is acknowledged: the writer checks the path still names the
/// file it opened before every group, and refuses everything once it does
/// not, readiness included, until a restart creates a new database.
#[tokio::test]
async fn deleting_the_database_under_a_running_server_stops_every_acknowledgement() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    assert_eq!(app.post_github("before", b"{}").await.status(), 202);
    std::fs::remove_file(&app.db_path).unwrap();
    let r = app.post_github("after-unlink", b"{}").await;
    assert_eq!(r.status(), 503);
    assert_eq!(json(r).await["error"], "unavailable");
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    // A remembered key is no proof either: the row went with the file.
    assert_eq!(app.post_github("before", b"{}").await.status(), 503);
    let dir = app.shutdown().await;
    assert!(!dir.path().join("hookbox.db").exists());
    // A restart starts a new inbox, and the provider's retries land there.
    let app = TestApp::spawn_in(dir, GITHUB_SOURCE, "").await;
    assert_eq!(app.post_github("after-unlink", b"{}").await.status(), 202);
    app.shutdown().await;
}

/// Signs a Stripe body dated `t` and posts it.
async fn post_stripe_at(app: &TestApp, id: &str, t: i64) -> reqwest::Response {
    let body = format!(r#"{{"id":"{id}","type":"x"}}"#);
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(body.as_bytes());
    let sig = hex::encode(hmac_sha256(b"whsec_x", &signed));
    app.client
        .post(app.url("/hooks/stripe"))
        .header("stripe-signature", format!("t={t},v1={sig}"))
        .body(body)
        .send()
        .await
        .unwrap()
}

/// The tolerance is 300 s of the wall clock in both directions: a sender
/// whose clock runs ahead (or ours behind) is treated like a replay.
#[tokio::test]
async fn stripe_timestamps_inside_the_tolerance_either_way_are_accepted_and_outside_refused() {
    let app = TestApp::spawn(
        "[[sources]]\nname = \"stripe\"\nkind = \"stripe\"\nsecrets = [\"whsec_x\"]\n",
    )
    .await;
    // The server reads its clock after ours, possibly a second later: so
    // past offsets only grow and future ones only shrink. `+302` keeps the
    // future refusal out of reach of that tick; `+301` would be flaky.
    for (id, offset, status) in [
        ("evt_past_299", -299, 202),
        ("evt_future_299", 299, 202),
        ("evt_past_301", -301, 401),
        ("evt_future_302", 302, 401),
        ("evt_far_future", 10 * 365 * 86_400, 401),
    ] {
        let r = post_stripe_at(&app, id, now_secs() + offset).await;
        assert_eq!(r.status(), status, "{id}");
        if status == 401 {
            assert_eq!(json(r).await["error"], "timestamp_out_of_tolerance");
        }
    }
    assert_eq!(app.count("SELECT count(*) FROM events"), 2);
    app.shutdown().await;
}

#[tokio::test]
async fn a_request_still_running_after_the_drain_is_closed_and_the_writer_stops_cleanly() {
    use tokio::io::AsyncWriteExt as _;

    let dir = tempfile::tempdir().unwrap();
    let mut server = ChildServer::spawn_ready(
        dir.path(),
        &dir.path().join("hookbox.db"),
        GITHUB_SOURCE,
        // Longer than the 10 s drain, so the body wait outlives it.
        "body_timeout = \"1h\"",
        0,
    )
    .await;
    // A request whose body never finishes arriving.
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = "POST /hooks/github HTTP/1.1\r\nhost: x\r\nx-github-event: ping\r\n\
                x-github-delivery: never-finished\r\nx-hub-signature-256: sha256=00\r\n\
                content-length: 1000\r\n\r\n{\"partial\":";
    stream.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let status = server.terminate(std::time::Duration::from_secs(25)).await;
    assert!(status.success(), "{status:?}");
    let log = server.output();
    assert!(
        log.contains("requests still running after 10s; closing them"),
        "{log}"
    );
    // Closing the request let go of its writer handle: the writer drained
    // and stopped instead of being abandoned at its own timeout.
    assert!(!log.contains("the writer did not stop"), "{log}");
    assert!(log.contains("stopped"), "{log}");
    drop(stream);
}
