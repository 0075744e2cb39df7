//! The syncer thread: makes committed groups durable, then answers them.
//!
//! With `durability = "full"` the writer connection runs with
//! `synchronous=NORMAL`, so a commit writes its WAL frames without waiting
//! for the disk, and this thread does the waiting: it takes every group the
//! writer has committed since its last pass, calls `fdatasync` on the WAL
//! file once, and only then answers the commands of those groups. Because
//! the fsync starts after the commits it covers, an answer still means what
//! `synchronous=FULL` means (the WAL frames of the transaction are on
//! stable storage), but the writer can build and commit the next group
//! while the disk works on the previous one.
//!
//! If an fsync fails, the kernel may already have dropped the pages it
//! could not write, and a later fsync can succeed without them; so one
//! failure poisons the store: those groups get 503 and the writer refuses
//! everything until hookbox is restarted and SQLite recovers from what is
//! really on disk.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use prometheus_client::metrics::histogram::Histogram;

use super::error::StoreError;
use super::write::Queued;

type Group = Vec<Box<dyn Queued>>;

/// An fsync this slow is logged (at debug): every answer waiting on it
/// is at least this late.
const SLOW_SYNC: Duration = Duration::from_millis(50);

/// The writer's side of the syncer.
pub struct Syncer(mpsc::Sender<Group>);

impl Syncer {
    /// Queues a committed group to be answered once the WAL is synced.
    pub(super) fn sync_then_answer(&self, group: Group) {
        if let Err(mpsc::SendError(group)) = self.0.send(group) {
            // The syncer is gone (it panicked): nothing can be promised.
            for cmd in group {
                cmd.fail(StoreError::Unavailable("the syncer has stopped".into()));
            }
        }
    }
}

/// Opens the WAL file of the database at `db` and starts the syncer. It
/// stops, after answering what it holds, when the [`Syncer`] is dropped.
pub fn spawn(
    db: &Path,
    poisoned: Arc<AtomicBool>,
    sync_seconds: Histogram,
) -> anyhow::Result<(Syncer, JoinHandle<()>)> {
    let mut wal_path = db.as_os_str().to_owned();
    wal_path.push("-wal");
    // SQLite keeps this inode for as long as a connection is open (ours
    // always is); creating it first is harmless, an empty WAL is valid.
    let wal = private_file(Path::new(&wal_path))?;
    let (tx, rx) = mpsc::channel::<Group>();
    let join = std::thread::Builder::new()
        .name("store-syncer".into())
        .spawn(move || run(&wal, &rx, &poisoned, &sync_seconds))
        .context("starting the syncer thread")?;
    Ok((Syncer(tx), join))
}

fn private_file(path: &Path) -> anyhow::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening the WAL {}", path.display()))
}

fn run(wal: &File, rx: &mpsc::Receiver<Group>, poisoned: &AtomicBool, sync_seconds: &Histogram) {
    let mut pending: Vec<Group> = Vec::new();
    while let Ok(first) = rx.recv() {
        pending.push(first);
        pending.extend(rx.try_iter());
        // After a failed fsync, a later one can succeed without the pages
        // the kernel dropped: groups committed before the writer noticed
        // must not be answered as durable.
        if poisoned.load(Ordering::Relaxed) {
            for cmd in pending.drain(..).flatten() {
                cmd.fail(StoreError::Unavailable("an earlier fsync failed".into()));
            }
            continue;
        }
        let started = Instant::now();
        let synced = wal.sync_data();
        let took = started.elapsed();
        sync_seconds.observe(took.as_secs_f64());
        if took >= SLOW_SYNC {
            let answers: usize = pending.iter().map(Vec::len).sum();
            tracing::debug!(
                took_ms = took.as_millis() as u64,
                answers,
                "slow fsync of the WAL"
            );
        }
        match synced {
            Ok(()) => {
                for cmd in pending.drain(..).flatten() {
                    cmd.answer();
                }
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "fsync of the WAL failed: refusing all writes until hookbox is restarted"
                );
                poisoned.store(true, Ordering::Relaxed);
                for cmd in pending.drain(..).flatten() {
                    cmd.fail(StoreError::Unavailable(format!("fsync failed: {e}")));
                }
            }
        }
    }
}
