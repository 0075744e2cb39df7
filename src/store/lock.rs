//! One `hookbox serve` per database: an exclusive lock on a file beside it.
//!
//! A server assumes it is the only one: at start it releases every lease
//! a previous run left behind, and from then on it alone claims and
//! settles deliveries. A second server on the same file would release the
//! first one's running deliveries and send them again, concurrently. So
//! `serve` takes [`DatabaseLock`] before it opens the database, and a
//! second one stops at once, naming the process that holds it, having
//! changed nothing.
//!
//! The lock is `flock(2)` on `<database>.lock` (not on the database
//! itself, whose POSIX locks SQLite owns), held for as long as the server
//! runs. The kernel drops it when the process dies, however it dies, so a
//! crash never leaves a stale lock behind; the file stays and records the
//! last holder's pid. The CLI verbs do not take it: they work beside a
//! running server through SQLite's own locking.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

/// Held while a server runs on the database; dropping it lets another start.
#[derive(Debug)]
pub struct DatabaseLock {
    /// Closing this file releases the lock.
    _file: File,
    path: PathBuf,
}

impl DatabaseLock {
    /// Takes the lock for `database`, or fails at once when another process
    /// holds it. Creates the database's directory if needed, and nothing
    /// else.
    pub fn acquire(database: &Path) -> anyhow::Result<DatabaseLock> {
        let path = lock_path(database);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the database directory {}", dir.display()))?;
        }
        // Not truncated on open: the holder's pid must survive until we
        // know whether we hold the lock.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("creating the database's lock file {}", path.display()))?;
        match try_lock_briefly(&file) {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = read_holder(&mut file);
                anyhow::bail!(
                    "the database {} is in use by another hookbox serve ({holder}; lock file {}); \
                     only one server may run on a database",
                    database.display(),
                    path.display()
                );
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        record_holder(&mut file).with_context(|| format!("writing {}", path.display()))?;
        Ok(DatabaseLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How long a lock held elsewhere is tried again before giving up.
const LOCK_PATIENCE: Duration = Duration::from_millis(250);

/// `try_lock`, tried again for [`LOCK_PATIENCE`]. A lock can be held for
/// an instant by a process that is not a server: a child forked by the
/// process that held it (the descriptor is shared until the child's exec
/// closes it). A real second server holds it for good, and is reported
/// as soon as the patience runs out.
fn try_lock_briefly(file: &File) -> Result<(), TryLockError> {
    let deadline = Instant::now() + LOCK_PATIENCE;
    loop {
        match file.try_lock() {
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// `hookbox.db` → `hookbox.db.lock`.
pub fn lock_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

fn record_holder(file: &mut File) -> std::io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "{}", std::process::id())?;
    file.sync_data()
}

/// Who holds the lock, in words, as the holder recorded it.
fn read_holder(file: &mut File) -> String {
    let mut text = String::new();
    let pid = file
        .read_to_string(&mut text)
        .ok()
        .and_then(|_| text.trim().parse::<u32>().ok());
    match pid {
        Some(pid) => format!("pid {pid}"),
        // The holder has opened the file but not yet written to it.
        None => "pid not yet recorded".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_database_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state").join("hookbox.db");
        let first = DatabaseLock::acquire(&db).unwrap();
        assert_eq!(
            first.path(),
            dir.path().join("state").join("hookbox.db.lock")
        );
        let err = DatabaseLock::acquire(&db).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        assert!(err.contains("in use by another hookbox serve"), "{err}");
        assert!(!db.exists(), "nothing but the lock file was created");
        drop(first);
        DatabaseLock::acquire(&db).expect("free again once the holder is gone");
    }
}
