//! Backups while the server runs and writes: `hookbox backup DEST` through
//! the real binary, and the server's own rotated snapshots.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use tokio::task::JoinHandle;

use crate::helpers::{GITHUB_SOURCE, TestApp, cli, hookbox, run, text};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn integrity(conn: &Connection) -> String {
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

/// Clients posting distinct deliveries; each 202 is recorded in order.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(app: &TestApp, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..clients)
            .map(|c| {
                let (stop, acked) = (stop.clone(), acked.clone());
                let app = AppRef {
                    client: app.client.clone(),
                    url: app.url("/hooks/github"),
                };
                tokio::spawn(async move {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let delivery = format!("load-{c}-{n}");
                        n += 1;
                        let body = format!(r#"{{"n":"{delivery}","pad":"{}"}}"#, "x".repeat(2000));
                        if app.post(&delivery, body.as_bytes()).await == 202 {
                            acked.lock().unwrap().push(delivery);
                        }
                    }
                })
            })
            .collect();
        Load { stop, acked, tasks }
    }

    fn acked(&self) -> Vec<String> {
        self.acked.lock().unwrap().clone()
    }

    async fn wait_for(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.acked.lock().unwrap().len() < n {
            assert!(Instant::now() < deadline, "the load never reached {n}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        Arc::try_unwrap(self.acked).unwrap().into_inner().unwrap()
    }
}

/// What a load client needs of the app.
struct AppRef {
    client: reqwest::Client,
    url: String,
}

impl AppRef {
    async fn post(&self, delivery: &str, body: &[u8]) -> u16 {
        self.client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("x-github-event", "push")
            .header("x-github-delivery", delivery)
            .header(
                "x-hub-signature-256",
                crate::helpers::github_signature(crate::helpers::GITHUB_SECRET, body),
            )
            .body(body.to_vec())
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    }
}

fn stored_deliveries(conn: &Connection) -> HashSet<String> {
    conn.prepare("SELECT delivery_id FROM events")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_load_passes_integrity_check_and_holds_every_event_acknowledged_before_it() {
    let app = TestApp::spawn(GITHUB_SOURCE).await;
    let load = Load::start(&app, 16);
    // A few thousand rows first, so the copy takes a moment of its own.
    load.wait_for(2000).await;
    let out_dir = tempfile::tempdir().unwrap();
    let dest = out_dir.path().join("hookbox-backup.db");

    let acked_before = load.acked();
    let mut cmd = cli(&app.db_path);
    cmd.arg("backup").arg(&dest);
    let started = Instant::now();
    let out = run(cmd).await;
    let took = started.elapsed();
    let acked_after = load.acked().len();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("integrity_check ok"), "{}", text(&out));
    eprintln!(
        "backup of {} acknowledged events took {took:?}; {} more were acknowledged meanwhile",
        acked_before.len(),
        acked_after - acked_before.len()
    );

    let copy = Connection::open_with_flags(&dest, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    assert_eq!(integrity(&copy), "ok");
    let stored = stored_deliveries(&copy);
    let missing: Vec<&String> = acked_before
        .iter()
        .filter(|d| !stored.contains(*d))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged events are missing from the backup, e.g. {:?}",
        missing.len(),
        acked_before.len(),
        &missing[..missing.len().min(5)]
    );
    assert_eq!(mode(&dest), 0o600);
    // The copy stands alone: nothing else was left beside it.
    let names: Vec<_> = std::fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["hookbox-backup.db"]);

    // An existing file is kept unless --force.
    let before = std::fs::metadata(&dest).unwrap().len();
    let mut again = cli(&app.db_path);
    again.arg("backup").arg(&dest);
    let out = run(again).await;
    assert!(!out.status.success());
    assert!(text(&out).contains("--force"), "{}", text(&out));
    assert_eq!(std::fs::metadata(&dest).unwrap().len(), before);
    let acked_now = load.acked();
    let mut forced = cli(&app.db_path);
    forced.arg("backup").arg("--force").arg(&dest);
    let out = run(forced).await;
    assert!(out.status.success(), "{}", text(&out));
    let copy = Connection::open_with_flags(&dest, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let stored = stored_deliveries(&copy);
    assert!(acked_now.iter().all(|d| stored.contains(d)));

    let all = load.stop().await;
    assert!(all.len() > acked_before.len());
    app.shutdown().await;
}

#[test]
fn a_backup_of_a_missing_database_fails_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out.db");
    let mut cmd = cli(&dir.path().join("absent.db"));
    let out = cmd.arg("backup").arg(&dest).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("no database at"), "{}", text(&out));
    assert!(!dest.exists());
}

fn is_final_name(name: &str) -> bool {
    name.starts_with("hookbox-")
        && name.ends_with("Z.db")
        && name.len() == "hookbox-20250101T000000Z.db".len()
}

/// Copies a snapshot the way a backup job would (`cp`), then checks the
/// copy; `None` when rotation deleted it between listing and copying.
fn copy_and_check(snapshot: &Path, scratch: &Path) -> Option<i64> {
    let target = scratch.join("check.db");
    let _ = std::fs::remove_file(&target);
    match std::fs::copy(snapshot, &target) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("copying {}: {e}", snapshot.display()),
    }
    let conn = Connection::open_with_flags(&target, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    assert_eq!(
        integrity(&conn),
        "ok",
        "{} is not a sound database",
        snapshot.display()
    );
    Some(
        conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_snapshot_folder_only_ever_holds_whole_checked_files_and_at_most_keep_of_them() {
    let backups_parent = tempfile::tempdir().unwrap();
    let backups: PathBuf = backups_parent.path().join("snapshots");
    let app = TestApp::spawn_with(
        GITHUB_SOURCE,
        &format!(
            "\n[backup]\ndir = {:?}\ninterval = \"200ms\"\nkeep = 3\n",
            backups.display().to_string()
        ),
    )
    .await;
    let load = Load::start(&app, 8);
    let scratch = tempfile::tempdir().unwrap();
    let mut seen = HashSet::new();
    let mut checked = 0;
    let mut max_events = 0;
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline || seen.len() < 4 {
        assert!(
            Instant::now() < deadline + Duration::from_secs(20),
            "snapshots are not being written: saw {seen:?}"
        );
        let names: Vec<String> = match std::fs::read_dir(&backups) {
            Ok(entries) => entries
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("{e}"),
        };
        let finals: Vec<&String> = names.iter().filter(|n| is_final_name(n)).collect();
        assert!(finals.len() <= 3, "more than keep = 3: {names:?}");
        for name in finals {
            if let Some(n) = copy_and_check(&backups.join(name), scratch.path()) {
                checked += 1;
                max_events = max_events.max(n);
                seen.insert(name.clone());
            }
        }
        // Anything else in the folder is a temp file a restore would skip.
        for other in names.iter().filter(|n| !is_final_name(n)) {
            assert!(
                other.starts_with(".hookbox-") && other.contains(".db.tmp"),
                "unexpected file {other}"
            );
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let acked = load.stop().await;
    app.shutdown().await;
    eprintln!(
        "checked {checked} snapshot copies under {} names; the largest held {max_events} events ({} acknowledged)",
        seen.len(),
        acked.len()
    );
    assert!(max_events > 0, "no snapshot held the load's events");

    assert_eq!(mode(&backups), 0o700);
    let left: Vec<PathBuf> = std::fs::read_dir(&backups)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    for path in &left {
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(is_final_name(name), "left behind: {name}");
        assert_eq!(mode(path), 0o600, "{name}");
    }
}

#[test]
fn check_prints_retention_and_backup_and_names_each_bad_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookbox.toml");
    std::fs::write(&path, "[backup]\ndir = \"/var/backups/hookbox\"\n").unwrap();
    let out = hookbox()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "[retention]",
        "body_days = 7",
        "key_days = 30",
        "[backup]",
        "dir = \"/var/backups/hookbox\"",
        "keep = 24",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }

    std::fs::write(
        &path,
        "[retention]\nbody_days = 10\nkey_days = 3\n[backup]\nkeep = 0\ninterval = \"0s\"\n",
    )
    .unwrap();
    let out = hookbox()
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for key in ["retention.key_days", "backup.keep", "backup.interval"] {
        assert!(stderr.contains(key), "missing {key} in:\n{stderr}");
    }
}
