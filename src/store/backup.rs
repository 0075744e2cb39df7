//! Consistent copies of the live database: `hookbox backup DEST` and the
//! server's rotated snapshots in `backup.dir`.
//!
//! Copying `hookbox.db` alone while hookbox runs is not a backup: in WAL
//! mode the latest commits live in `hookbox.db-wal` until a checkpoint
//! copies them back, and a copy taken while a checkpoint writes can hold
//! half old, half new pages. A copy here is `VACUUM INTO` on a read-only
//! connection: it reads one snapshot of the database (a WAL read
//! transaction, which never blocks the writer and which the writer never
//! blocks) and writes it as a self-contained file in rollback-journal
//! mode, with no `-wal` beside it.
//!
//! Every copy is written the same way, so the final name only ever holds a
//! whole, checked file: into a temporary file (mode 0600) in the
//! destination's directory whose name ends in `.tmp` and starts with a dot,
//! checked with `PRAGMA integrity_check`, fsynced, renamed to the final name,
//! and then the directory is fsynced so the rename survives a power cut.
//! A copy that fails its check is removed and reported.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use rusqlite::{Connection, OpenFlags};

/// Snapshot file names: `hookbox-20250102T030405Z.db` (UTC, sortable).
const SNAPSHOT_PREFIX: &str = "hookbox-";
const SNAPSHOT_SUFFIX: &str = ".db";
/// The timestamp part: `20250102T030405Z`.
const STAMP_LEN: usize = 16;

/// What a copy wrote.
#[derive(Debug, Clone)]
pub struct Copied {
    pub path: PathBuf,
    pub size_bytes: u64,
}

/// The connection a copy reads through: read-only, so it never takes the
/// write lock and works whether or not the server runs.
pub fn open_source(db: &Path) -> anyhow::Result<Connection> {
    anyhow::ensure!(db.exists(), "no database at {}", db.display());
    // Not `query_only`: SQLite counts writing the VACUUM INTO target
    // as a write and refuses it there; the read-only open is what keeps
    // this connection off the database.
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening the database {} read-only", db.display()))?;
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(conn)
}

/// Writes a consistent, checked copy of `source`'s database to `dest`.
/// Refuses to replace an existing `dest` unless `overwrite`.
pub fn write(source: &Connection, dest: &Path, overwrite: bool) -> anyhow::Result<Copied> {
    let name = dest
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} does not name a file", dest.display()))?;
    if !overwrite && dest.exists() {
        bail!(
            "{} already exists; pass --force to replace it",
            dest.display()
        );
    }
    let tmp = dest.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    copy_via(source, &tmp, dest, overwrite, || Ok(()))
}

/// Writes a snapshot named after `now` into `dir` (created mode 0700 if
/// missing), keeping the newest `keep`. The oldest are deleted just before
/// the new one is renamed into place, so the folder never holds more than
/// `keep` snapshots, and never one that is partial.
pub fn snapshot(
    source: &Connection,
    dir: &Path,
    keep: usize,
    now: SystemTime,
) -> anyhow::Result<Copied> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating the backup directory {}", dir.display()))?;
    remove_stale_temps(dir)?;
    let name = snapshot_name(now);
    let dest = dir.join(&name);
    // Two snapshots within one second share a name: the later replaces
    // the earlier, atomically, as a rename does.
    copy_via(
        source,
        &dir.join(format!(".{name}.tmp")),
        &dest,
        true,
        || make_room(dir, keep, &dest),
    )
}

/// The snapshots in `dir`, oldest first.
pub fn list_snapshots(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(e)
                .with_context(|| format!("listing the backup directory {}", dir.display()));
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        if let Some(name) = entry.file_name().to_str().filter(|n| is_snapshot_name(n)) {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names.into_iter().map(|n| dir.join(n)).collect())
}

/// How long ago the newest snapshot in `dir` was written, if there is one.
pub fn newest_snapshot_age(dir: &Path) -> Option<Duration> {
    let newest = list_snapshots(dir).ok()?.pop()?;
    let modified = fs::metadata(newest).ok()?.modified().ok()?;
    Some(
        SystemTime::now()
            .duration_since(modified)
            .unwrap_or_default(),
    )
}

/// `hookbox-YYYYMMDDTHHMMSSZ.db` for `t`, in UTC.
pub fn snapshot_name(t: SystemTime) -> String {
    let rfc3339 = humantime::format_rfc3339_seconds(t).to_string();
    let stamp: String = rfc3339
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    format!("{SNAPSHOT_PREFIX}{stamp}{SNAPSHOT_SUFFIX}")
}

fn is_snapshot_name(name: &str) -> bool {
    let Some(stamp) = name
        .strip_prefix(SNAPSHOT_PREFIX)
        .and_then(|n| n.strip_suffix(SNAPSHOT_SUFFIX))
    else {
        return false;
    };
    let b = stamp.as_bytes();
    b.len() == STAMP_LEN
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit)
}

/// The copy procedure shared by `write` and `snapshot`: temp file, check,
/// fsync, `before_place`, rename, fsync the directory. The temp file is
/// removed on any failure.
fn copy_via(
    source: &Connection,
    tmp: &Path,
    dest: &Path,
    overwrite: bool,
    before_place: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<Copied> {
    let tmp_str = tmp
        .to_str()
        .with_context(|| format!("{} is not valid UTF-8", tmp.display()))?;
    let guard = RemoveOnDrop(Some(tmp.to_path_buf()));
    create_private(tmp)?;
    source
        .execute("VACUUM INTO ?1", [tmp_str])
        .with_context(|| format!("copying the database into {}", tmp.display()))?;
    check(tmp)?;
    let file = File::open(tmp).with_context(|| format!("opening {}", tmp.display()))?;
    // SQLite writes a VACUUM INTO target without syncing it.
    file.sync_all()
        .with_context(|| format!("syncing {}", tmp.display()))?;
    let size_bytes = file.metadata()?.len();
    fs::set_permissions(tmp, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("setting the mode of {}", tmp.display()))?;
    before_place()?;
    if overwrite {
        fs::rename(tmp, dest)
            .with_context(|| format!("renaming {} to {}", tmp.display(), dest.display()))?;
    } else {
        place_new(tmp, dest)?;
    }
    guard.disarm();
    sync_dir(dest)?;
    Ok(Copied {
        path: dest.to_path_buf(),
        size_bytes,
    })
}

/// Moves `tmp` to `dest` unless `dest` exists: a hard link fails rather
/// than replace, so a file that appeared meanwhile is never clobbered.
fn place_new(tmp: &Path, dest: &Path) -> anyhow::Result<()> {
    match fs::hard_link(tmp, dest) {
        Ok(()) => {
            fs::remove_file(tmp).with_context(|| format!("removing {}", tmp.display()))?;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} already exists; pass --force to replace it",
            dest.display()
        ),
        // A filesystem without hard links: check, then rename.
        Err(_) if !dest.exists() => fs::rename(tmp, dest)
            .with_context(|| format!("renaming {} to {}", tmp.display(), dest.display())),
        Err(e) => Err(e).with_context(|| format!("placing the copy at {}", dest.display())),
    }
}

/// Opens the copy on its own and runs `PRAGMA integrity_check`.
fn check(path: &Path) -> anyhow::Result<()> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening the copy {}", path.display()))?;
    let mut stmt = conn.prepare("PRAGMA integrity_check")?;
    let findings = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .with_context(|| format!("checking the copy {}", path.display()))?;
    if findings != ["ok"] {
        bail!(
            "the copy failed its integrity check: {}",
            findings.join("; ")
        );
    }
    Ok(())
}

/// Deletes the oldest snapshots so that `keep` remain once `incoming`
/// is in place (it may replace a snapshot of the same name).
fn make_room(dir: &Path, keep: usize, incoming: &Path) -> anyhow::Result<()> {
    let mut snapshots = list_snapshots(dir)?;
    snapshots.retain(|p| p != incoming);
    let extra = (snapshots.len() + 1).saturating_sub(keep);
    for old in &snapshots[..extra] {
        match fs::remove_file(old) {
            Ok(()) => tracing::debug!(path = %old.display(), "old snapshot removed"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("removing the old snapshot {}", old.display()));
            }
        }
    }
    if extra > 0 {
        sync_dir(&dir.join("."))?;
    }
    Ok(())
}

/// Removes snapshot temp files a crash left behind (`.hookbox-….db.tmp`,
/// and the `-journal` SQLite keeps beside it while it writes); only the
/// server writes those names, one at a time.
fn remove_stale_temps(dir: &Path) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let stale = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix('.'))
            .map(|n| n.strip_suffix("-journal").unwrap_or(n))
            .and_then(|n| n.strip_suffix(".tmp"))
            .is_some_and(is_snapshot_name);
        if stale {
            let path = entry.path();
            fs::remove_file(&path)
                .with_context(|| format!("removing the leftover {}", path.display()))?;
            tracing::info!(path = %path.display(), "removed a snapshot left unfinished by an earlier run");
        }
    }
    Ok(())
}

/// Creates an empty file only its owner can read: `VACUUM INTO` fills an
/// existing empty file and keeps its mode.
fn create_private(path: &Path) -> anyhow::Result<()> {
    let create = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
    };
    match create() {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Ours, from a run that died: the name carries our pid or is a
            // snapshot name only the server writes.
            fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
            create().map(drop)
        }
        Err(e) => Err(e),
    }
    .with_context(|| format!("creating {}", path.display()))
}

/// Fsyncs the directory holding `path`, so a rename or unlink in it is
/// durable.
fn sync_dir(path: &Path) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing the directory {}", dir.display()))
}

/// Removes a temp file unless disarmed.
struct RemoveOnDrop(Option<PathBuf>);

impl RemoveOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(path) = self.0.take()
            && let Err(e) = fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "could not remove a temporary copy");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(dir: &Path) -> (Connection, Connection) {
        let path = dir.join("hookbox.db");
        let mut writer = Connection::open(&path).unwrap();
        writer.pragma_update(None, "journal_mode", "WAL").unwrap();
        writer.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        super::super::schema::apply(&mut writer).unwrap();
        writer
            .execute(
                "INSERT INTO events (source, delivery_id, received_at, body, state)
                 VALUES ('s', 'a', 1, x'7b7d', 'stored')",
                [],
            )
            .unwrap();
        (writer, open_source(&path).unwrap())
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_copy_holds_what_is_only_in_the_wal_and_stands_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (_writer, source) = source(dir.path());
        let dest = dir.path().join("out").join("copy.db");
        fs::create_dir(dir.path().join("out")).unwrap();
        let copied = write(&source, &dest, false).unwrap();
        assert!(copied.size_bytes > 0);
        assert_eq!(mode(&dest), 0o600);
        // Nothing but the copy: no temp file, no -wal.
        let names: Vec<_> = fs::read_dir(dir.path().join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["copy.db"]);
        let copy = Connection::open_with_flags(&dest, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let n: i64 = copy
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1);
        // An existing file is refused, then replaced with overwrite.
        let err = write(&source, &dest, false).unwrap_err().to_string();
        assert!(err.contains("--force"), "{err}");
        write(&source, &dest, true).unwrap();
    }

    #[test]
    fn snapshots_rotate_and_leftover_temps_go() {
        let dir = tempfile::tempdir().unwrap();
        let (_writer, source) = source(dir.path());
        let backups = dir.path().join("backups");
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for i in 0..4 {
            snapshot(&source, &backups, 2, base + Duration::from_secs(i)).unwrap();
        }
        assert_eq!(mode(&backups), 0o700);
        let names: Vec<String> = list_snapshots(&backups)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            ["hookbox-20231114T221322Z.db", "hookbox-20231114T221323Z.db"]
        );
        let leftover = backups.join(".hookbox-20231114T221324Z.db.tmp");
        fs::write(&leftover, b"half").unwrap();
        fs::write(backups.join("notes.txt"), b"mine").unwrap();
        snapshot(&source, &backups, 2, base + Duration::from_secs(10)).unwrap();
        assert!(!leftover.exists());
        assert!(backups.join("notes.txt").exists());
        assert_eq!(list_snapshots(&backups).unwrap().len(), 2);
    }

    #[test]
    fn snapshot_names_are_strict() {
        assert!(is_snapshot_name("hookbox-20231114T221322Z.db"));
        for bad in [
            "hookbox.db",
            "hookbox-20231114T221322Z.db.tmp",
            ".hookbox-20231114T221322Z.db.tmp",
            "hookbox-2023111xT221322Z.db",
            "hookbox-20231114T221322Z.db-wal",
        ] {
            assert!(!is_snapshot_name(bad), "{bad}");
        }
    }
}
