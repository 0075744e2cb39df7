//! The database's file system turns read-only under the running binary.
//!
//! On Linux a plain `mount -o remount,ro` is refused (`EBUSY`) while a
//! process holds files open for writing on the mount, which hookbox always
//! does (the database, its WAL and shm). A file system goes read-only under
//! a writer only the emergency way: ext4 with `errors=remount-ro` after an
//! error (a failing disk), or SysRq-u. So the test mounts a small ext4
//! image through a loop device with `errors=remount-ro` (as root; skipped
//! with a message where it cannot), first shows the plain remount is
//! refused, then makes ext4 raise an error through
//! `/sys/fs/ext4/<dev>/trigger_fs_error`, which turns the file system
//! read-only at once, exactly as a disk error would.
//!
//! One thing no program can do on this kernel: trust an `fdatasync` that
//! is running at the instant of the error. ext4 aborts the journal first,
//! and an `fdatasync` whose transaction the abort discarded can still
//! return 0 (Linux 6.18; a Python loop of `write` + `fdatasync` on the same
//! kind of mount, without hookbox, lost its last "synced" write after
//! `e2fsck` in 12 of 100 runs). So the events whose answers came while the
//! error was being raised are only counted; every event answered before it
//! must be there, which holds only if hookbox answered after its fsync and
//! not before.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use crate::helpers::*;

/// An ext4 image mounted through a loop device; unmounted on drop (the
/// loop device goes with it, `mount -o loop` sets autoclear).
struct Ext4 {
    mnt: PathBuf,
    image: PathBuf,
    /// `loop0` and the like: the name under /sys/fs/ext4.
    dev: String,
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Ext4 {
    fn mount(dir: &Path) -> Result<Ext4, String> {
        let image = dir.join("fs.img");
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(64 << 20))
            .map_err(|e| e.to_string())?;
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))?;
        Ext4::mount_image(&image, &mnt)
    }

    fn mount_image(image: &Path, mnt: &Path) -> Result<Ext4, String> {
        run(Command::new("mount")
            .args(["-t", "ext4", "-o", "loop,errors=remount-ro"])
            .arg(image)
            .arg(mnt))?;
        let source = run(Command::new("findmnt").args(["-no", "SOURCE"]).arg(mnt))?;
        let dev = source.rsplit('/').next().unwrap_or_default().to_owned();
        let ext4 = Ext4 {
            mnt: mnt.to_path_buf(),
            image: image.to_path_buf(),
            dev,
        };
        if !ext4.trigger().exists() {
            return Err(format!("no {}", ext4.trigger().display()));
        }
        Ok(ext4)
    }

    fn trigger(&self) -> PathBuf {
        Path::new("/sys/fs/ext4")
            .join(&self.dev)
            .join("trigger_fs_error")
    }

    fn options(&self) -> String {
        run(Command::new("findmnt")
            .args(["-no", "OPTIONS"])
            .arg(&self.mnt))
        .unwrap_or_default()
    }

    /// Whether a new file can be written on the file system.
    fn writable(&self) -> bool {
        let probe = self.mnt.join("probe");
        let ok = std::fs::write(&probe, b"x").is_ok();
        let _ = std::fs::remove_file(probe);
        ok
    }

    /// Unmounts, repairs with e2fsck (the error left the file system marked
    /// as having errors) and mounts it again.
    fn repair_and_remount(mut self) -> Result<Ext4, String> {
        run(Command::new("umount").arg(&self.mnt))?;
        // Exit 1 means "errors corrected".
        let fsck = Command::new("e2fsck")
            .args(["-f", "-y"])
            .arg(&self.image)
            .output()
            .map_err(|e| e.to_string())?;
        assert!(
            matches!(fsck.status.code(), Some(0 | 1)),
            "e2fsck: {fsck:?}"
        );
        let image = std::mem::take(&mut self.image);
        let mnt = std::mem::take(&mut self.mnt);
        Ext4::mount_image(&image, &mnt)
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        if !self.mnt.as_os_str().is_empty() {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

/// A reason a response is acceptable after the file system went read-only.
fn assert_unavailable(what: &str, status: u16, retry_after: Option<&str>, body: &str) {
    assert_eq!(status, 503, "{what}: {body}");
    let secs: u64 = retry_after
        .unwrap_or_else(|| panic!("{what}: 503 without Retry-After"))
        .parse()
        .unwrap();
    assert!(secs > 0, "{what}: Retry-After {secs}");
    assert_eq!(body, r#"{"error":"unavailable"}"#, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_system_turned_read_only_under_the_server_gets_503s_and_a_loud_log_and_loses_nothing()
 {
    let dir = tempfile::tempdir().unwrap();
    let fs = match Ext4::mount(dir.path()) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("skipping: cannot mount an ext4 image on a loop device: {e}");
            return;
        }
    };
    let db = fs.mnt.join("hookbox.db");
    let mut server = ChildServer::spawn_ready(dir.path(), &db, GITHUB_SOURCE, "", 0).await;
    let client = reqwest::Client::new();
    let hooks = server.url("/hooks/github");
    let post = {
        let client = client.clone();
        move |delivery: String| {
            let client = client.clone();
            let url = hooks.clone();
            async move {
                let body = format!(r#"{{"delivery":"{delivery}"}}"#);
                let r = github_request(&client, &url, &delivery, body.as_bytes())
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let retry_after = r
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_owned());
                (delivery, status, retry_after, r.text().await.unwrap())
            }
        }
    };
    let mut acked = Vec::new();
    for n in 0..20 {
        let (delivery, status, _, body) = post(format!("before-{n}")).await;
        assert_eq!(status, 202, "{delivery}: {body}");
        acked.push(delivery);
    }

    // The plain remount is refused while hookbox holds its files open.
    let plain = run(Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&fs.mnt));
    eprintln!("mount -o remount,ro under the running server: {plain:?}");
    assert!(
        plain.is_err(),
        "the kernel let a mount with open writers go read-only: {plain:?}"
    );
    assert!(fs.writable());

    // Clients keep posting while the file system turns read-only.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|c| {
            let stop = stop.clone();
            let post = post.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let sent = Instant::now();
                    let answer = post(format!("during-{c}-{n}")).await;
                    seen.push((sent, Instant::now(), answer));
                    n += 1;
                }
                seen
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let error_at = Instant::now();
    std::fs::write(fs.trigger(), "hookbox test: disk error").unwrap();
    let read_only_at = Instant::now();
    assert!(!fs.writable(), "ext4 went read-only: {}", fs.options());
    eprintln!("file system options now: {}", fs.options());
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut refused_during = 0;
    // Answered 2xx while the kernel was raising the error: see the top.
    let mut acked_racing = Vec::new();
    for task in load {
        for (sent, answered, (delivery, status, retry_after, body)) in task.await.unwrap() {
            if (200..300).contains(&status) {
                assert!(
                    sent < read_only_at,
                    "{delivery} was sent after the file system went read-only and got {status}"
                );
                if answered < error_at {
                    acked.push(delivery);
                } else {
                    acked_racing.push(delivery);
                }
            } else {
                assert_unavailable(&delivery, status, retry_after.as_deref(), &body);
                refused_during += 1;
            }
        }
    }
    assert!(
        refused_during > 0,
        "no request met the read-only file system"
    );

    // From now on: 503 with Retry-After, not ready, and still running.
    for n in 0..20 {
        let (delivery, status, retry_after, body) = post(format!("after-{n}")).await;
        assert_unavailable(&delivery, status, retry_after.as_deref(), &body);
    }
    // A success of /readyz is reused for up to a second (READY_CACHE).
    for addr in [server.addr, server.admin_addr] {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let r = client
                .get(format!("http://{addr}/readyz"))
                .send()
                .await
                .unwrap();
            if r.status() == 503 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{addr}/readyz still {} on a read-only file system",
                r.status()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(server.running(), "hookbox crashed: {}", server.output());
    let output = server.output();
    // A commit meets the read-only file system (503 until commits succeed
    // again), or the syncer's fsync of the WAL does (503 until a restart:
    // after a failed fsync, what the kernel kept of the WAL is unknown), or
    // both, racing. Each says so once, not once per request.
    let errors = |what: &str| -> Vec<&str> {
        output
            .lines()
            .filter(|l| l.contains("ERROR") && l.contains(what))
            .collect()
    };
    let (commit, fsync) = (errors("commit failed"), errors("fsync of the WAL failed"));
    assert!(
        commit.len() <= 1 && fsync.len() <= 1 && !(commit.is_empty() && fsync.is_empty()),
        "one ERROR per way writes fail:\n{output}"
    );
    let poisoned = !fsync.is_empty();
    let loud = [commit, fsync].concat();
    eprintln!("the log says: {}", loud[0]);
    assert!(
        ["readonly", "read-only", "i/o", "input/output"]
            .iter()
            .any(|cause| loud[0].to_lowercase().contains(cause)),
        "the ERROR names the cause: {}",
        loud[0]
    );
    assert!(!output.contains("panicked"), "{output}");

    // "Remount rw": the kernel keeps an ext4 that turned read-only on an
    // error read-only until it is unmounted (the emergency flag survives a
    // remount), so hookbox cannot recover in place; it keeps refusing.
    let rw = run(Command::new("mount")
        .args(["--options-mode", "ignore", "-o", "remount,rw"])
        .arg(&fs.mnt));
    eprintln!(
        "mount -o remount,rw: {rw:?}; writable: {}; options: {}",
        fs.writable(),
        fs.options()
    );
    if fs.writable() && !poisoned {
        // A kernel that does let it go back: hookbox must take events again
        // without a restart (the commit is retried with each group).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (delivery, status, _, body) = post(format!("rw-{}", acked.len())).await;
            if status == 202 {
                acked.push(delivery);
                break;
            }
            assert!(Instant::now() < deadline, "no recovery after rw: {body}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    } else {
        let (delivery, status, retry_after, body) = post("still-ro".into()).await;
        assert_unavailable(&delivery, status, retry_after.as_deref(), &body);
        assert!(server.running(), "hookbox crashed: {}", server.output());
    }

    // The operator's way out: stop hookbox, repair, start it again.
    let status = server.terminate(Duration::from_secs(30)).await;
    eprintln!("SIGTERM on a read-only file system: {status:?}");
    let output = server.output();
    assert!(!output.contains("panicked"), "{output}");
    assert!(
        status.code().is_some(),
        "hookbox exits on SIGTERM, not by a signal: {status:?}"
    );
    drop(server);
    let fs = fs.repair_and_remount().unwrap();
    assert!(fs.writable());
    let server = ChildServer::spawn_ready(dir.path(), &db, GITHUB_SOURCE, "", 1).await;
    let conn = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let stored = |delivery: &str| -> i64 {
        conn.query_row(
            "SELECT count(*) FROM events WHERE delivery_id = ?1",
            [delivery],
            |r| r.get(0),
        )
        .unwrap()
    };
    for delivery in &acked {
        assert_eq!(stored(delivery), 1, "{delivery} was acknowledged");
    }
    let racing_kept: i64 = acked_racing.iter().map(|delivery| stored(delivery)).sum();
    let r = github_request(&client, &server.url("/hooks/github"), "after-repair", b"{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    eprintln!(
        "{} events acknowledged before the error all there after the repair; \
         {racing_kept} of {} acknowledged while it was raised kept; \
         {refused_during} refused while it turned read-only",
        acked.len(),
        acked_racing.len()
    );
    drop(server);
    drop(fs);
}
