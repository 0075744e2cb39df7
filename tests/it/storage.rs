//! When the store cannot take an event (disk full, writer queue full),
//! hookbox answers 503 with `Retry-After` and stores nothing; when the
//! cause goes away it takes deliveries again, without a restart.

use std::collections::HashSet;
use std::fs::File;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags};

use crate::helpers::*;

/// 64 KiB of JSON: sixteen pages, so every commit of one needs new space.
fn big_body(n: usize) -> Vec<u8> {
    let mut body = format!(r#"{{"n":{n},"pad":""#).into_bytes();
    body.resize(64 * 1024 - 2, b'x');
    body.extend_from_slice(b"\"}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_503_with_retry_after_and_recovers_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    let _tmpfs = match Tmpfs::mount(&mnt, "4m") {
        Ok(tmpfs) => tmpfs,
        Err(e) => {
            eprintln!("skipping: cannot mount tmpfs: {e}");
            return;
        }
    };
    // `dir` outlives the mount (declared first, dropped last); the app
    // gets a directory of its own.
    let app = TestApp::spawn_at(
        tempfile::tempdir().unwrap(),
        mnt.join("hookbox.db"),
        GITHUB_SOURCE,
        "",
    )
    .await;
    let mut accepted = Vec::new();
    for n in 0..5 {
        let delivery = format!("before-{n}");
        let r = app.post_github(&delivery, &big_body(n)).await;
        assert_eq!(r.status(), 202, "{delivery} with room on the disk");
        accepted.push(delivery);
    }

    let filled = fill(&mnt.join("filler"));
    eprintln!("filled the tmpfs with {filled} bytes");
    assert_not_ready(&app).await;
    // SQLite may still fit a commit or two into WAL space it already holds
    // (the WAL starts over after a checkpoint): such a commit is durable
    // and rightly 202. Beyond that, every delivery is refused.
    let mut refused = Vec::new();
    for n in 0..40 {
        let delivery = format!("full-{n}");
        // Mostly large bodies; a small one needs a new page all the same.
        let body = if n % 8 == 5 {
            br#"{"small":true}"#.to_vec()
        } else {
            big_body(n)
        };
        let r = app.post_github(&delivery, &body).await;
        match r.status().as_u16() {
            202 => accepted.push(delivery),
            503 => {
                let retry_after = r
                    .headers()
                    .get("retry-after")
                    .expect("a 503 carries Retry-After");
                let secs: u64 = retry_after.to_str().unwrap().parse().unwrap();
                assert!(secs > 0, "Retry-After: {secs}");
                assert_eq!(r.text().await.unwrap(), r#"{"error":"unavailable"}"#);
                refused.push(delivery);
            }
            other => panic!("{delivery}: {other} on a full disk"),
        }
    }
    assert!(
        refused.len() >= 30,
        "a full disk refused only {} of 40 deliveries",
        refused.len()
    );
    assert_not_ready(&app).await;

    std::fs::remove_file(mnt.join("filler")).unwrap();
    for addr in [app.addr, app.admin_addr] {
        let r = app
            .client
            .get(format!("http://{addr}/readyz"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{addr}/readyz once there is room again");
    }
    for n in 0..5 {
        let delivery = format!("after-{n}");
        let r = app.post_github(&delivery, &big_body(n)).await;
        assert_eq!(r.status(), 202, "{delivery} once there is room again");
        accepted.push(delivery);
    }

    let stored = stored_deliveries(&app.db_path);
    for delivery in &accepted {
        assert!(
            stored.contains(delivery),
            "{delivery} was answered 202 but is not stored"
        );
    }
    for delivery in &refused {
        assert!(
            !stored.contains(delivery),
            "{delivery} was answered 503 but is stored"
        );
    }
    assert_eq!(stored.len(), accepted.len(), "{stored:?}");

    // "Send it again" works: a refused delivery is taken on its retry.
    assert_eq!(
        app.post_github(&refused[0], &big_body(0)).await.status(),
        202
    );
    let integrity: String = app
        .db()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_writer_queue_of_one_a_burst_gets_2xx_only_for_what_is_stored() {
    let app = Arc::new(TestApp::spawn_with(GITHUB_SOURCE, "writer_queue = 1").await);
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let app = app.clone();
            tokio::spawn(async move {
                let delivery = format!("burst-{n}");
                let body = format!(r#"{{"n":{n},"pad":"{}"}}"#, "x".repeat(n * 97 % 8000));
                let r = app.post_github(&delivery, body.as_bytes()).await;
                let status = r.status().as_u16();
                let retry_after = r.headers().contains_key("retry-after");
                let text = r.text().await.unwrap();
                (delivery, status, retry_after, text)
            })
        })
        .collect();
    let mut accepted = HashSet::new();
    let mut refused = Vec::new();
    for task in tasks {
        let (delivery, status, retry_after, text) = task.await.unwrap();
        match status {
            // Every id is distinct, so there is no 200 duplicate to expect.
            202 => assert!(accepted.insert(delivery)),
            503 => {
                assert!(retry_after, "{delivery}: 503 without Retry-After");
                assert_eq!(text, r#"{"error":"unavailable"}"#);
                refused.push(delivery);
            }
            other => panic!("{delivery}: unexpected {other} {text}"),
        }
    }
    eprintln!(
        "writer_queue = 1: {} accepted, {} refused",
        accepted.len(),
        refused.len()
    );

    let stored = stored_deliveries(&app.db_path);
    assert_eq!(stored, accepted, "stored rows are exactly the 202s");

    // The overload passes: what was refused is taken when sent again.
    for delivery in &refused {
        assert_eq!(
            app.post_github(delivery, b"{}").await.status(),
            202,
            "{delivery} sent again"
        );
    }
    let app = Arc::into_inner(app).expect("every task is done");
    assert_eq!(
        app.count("SELECT count(*) FROM events") as usize,
        accepted.len() + refused.len()
    );
    app.shutdown().await;
}

/// Waits for `/readyz` on both listeners to say 503.
async fn assert_not_ready(app: &TestApp) {
    for addr in [app.addr, app.admin_addr] {
        let r = app
            .client
            .get(format!("http://{addr}/readyz"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503, "{addr}/readyz on a full disk");
    }
}

fn stored_deliveries(db: &Path) -> HashSet<String> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut stmt = conn.prepare("SELECT delivery_id FROM events").unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Writes zeros to `path` until the filesystem has no byte left; returns
/// how many it wrote.
fn fill(path: &Path) -> u64 {
    let mut file = File::create(path).unwrap();
    let mut written = 0u64;
    // Large writes first, then smaller ones to take the last partial page.
    for size in [64 * 1024, 4096, 1] {
        let chunk = vec![0u8; size];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == ErrorKind::StorageFull => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
    }
    written
}

/// A small tmpfs, lazily unmounted on drop (even if the test fails while
/// the database is open on it).
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        Ok(Tmpfs {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
