//! The checkpointer thread: copies committed WAL pages back into the
//! database file, off the writer's path.
//!
//! SQLite normally checkpoints inside the commit that crosses the WAL size
//! threshold, so one unlucky group of requests waits for megabytes to be
//! copied and the database file to be fsynced. Here the writer turns that
//! off and nudges this thread after each commit instead; the thread runs a
//! `PASSIVE` checkpoint at most every [`INTERVAL`], which never takes the
//! write lock, so ingest goes on while pages are copied.
//!
//! Under sustained load a passive checkpoint is always a few groups behind,
//! so the WAL is never all copied between two commits and SQLite never
//! starts it over: it would grow with everything written. Once it passes
//! [`RESTART_PAGES`] and the passive runs have caught up to a few pages,
//! this thread asks the writer ([`Nudge::take_restart`]) to run a
//! `RESTART` checkpoint between two groups. It cannot run it itself: a
//! restart needs the write lock, and a writer that commits back to back
//! never leaves it free long enough for another connection to take it (a
//! test shows the WAL growing past four times its limit that way).
//!
//! The restart holds the next group back while it runs, and it ends with
//! an fsync of the database file. SQLite syncs the database file only in a
//! checkpoint that copies the whole WAL, which under load is only ever the
//! restart: without help, every page the passive runs copied since the
//! last restart would still be waiting in the page cache, and the
//! restart's fsync would write them all while ingest waits. So this thread
//! syncs the database file itself after each passive run that copied
//! something, holding no lock: the restart has a few pages to copy and
//! almost nothing to sync.
//!
//! This connection never writes rows: the writer thread stays the only one
//! that does.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::{Connection, OpenFlags};

/// Shortest time between two checkpoints. Each round ends with an fsync
/// of the database file holding every page it copied, and the WAL's own
/// fsyncs (the answers' wait) queue behind it on the disk: the shorter the
/// interval, the smaller that fsync, but the more of them. Measured on a
/// two-core VM, 64 connections of new events, medians of 3 (`bench/`):
/// with hookbox-loadgen, 100 ms gave 5,863/s at p50 9.3 ms, p99 29.9 ms;
/// 25 ms 5,688/s, 10.8 ms, 23.1 ms; 10 ms 5,408/s, 11.6 ms, 21.2 ms. With
/// wrk, 100 ms p99 18-19 ms, 10-20 ms 11-15 ms. A round only follows a
/// commit, so at rest nothing changes.
const INTERVAL: Duration = Duration::from_millis(25);

/// WAL pages (4 KiB each) past which a checkpoint waits for the writer so
/// the WAL can start over: 16 MiB, the most the WAL file grows to under
/// sustained load (a test holds it to that).
pub const RESTART_PAGES: i64 = 4_096;

/// Passive rounds tried before a restart to shrink what it must copy.
const CATCH_UP_ROUNDS: usize = 8;

/// Pages left to copy at which a restart is cheap enough.
const RESTART_BACKLOG_PAGES: i64 = 256;

/// The states of a restart request ([`Nudge::take_restart`]).
const IDLE: u8 = 0;
const WANTED: u8 = 1;
const RUNNING: u8 = 2;

/// How long the checkpointer waits for the writer to take a restart it
/// asked for: a writer with nothing to commit never looks, and then the WAL
/// has no reason to start over.
const RESTART_WAIT: Duration = Duration::from_millis(500);

/// The writer's side: nudges the checkpointer after a commit, and hears
/// when the WAL should start over.
pub struct Nudge {
    tx: mpsc::SyncSender<()>,
    restart: Arc<AtomicU8>,
}

impl Nudge {
    /// Tells the checkpointer there is something to copy. Never blocks: one
    /// pending nudge is as good as many.
    pub fn nudge(&self) {
        let _ = self.tx.try_send(());
    }

    /// Whether the WAL is past its restart size with nearly everything
    /// copied: if so, the writer runs [`restart`] now, between groups, and
    /// calls [`Nudge::restarted`] after.
    pub fn take_restart(&self) -> bool {
        self.restart
            .compare_exchange(WANTED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The restart taken is over (done or skipped): the checkpointer goes
    /// on.
    pub fn restarted(&self) {
        self.restart.store(IDLE, Ordering::Release);
    }
}

/// Starts the WAL over, on the writer's connection between two groups;
/// what the passive runs have not copied yet is copied first. Never waits
/// for readers (a backup, an admin query): if one still reads the WAL the
/// restart is skipped, and the checkpointer asks again after its next
/// round.
pub fn restart(conn: &Connection, busy_timeout: Duration) -> anyhow::Result<bool> {
    conn.busy_timeout(Duration::ZERO)?;
    let done = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0));
    conn.busy_timeout(busy_timeout)?;
    // The first column is 1 when a reader kept it from finishing.
    Ok(done.context("restart checkpoint")? == 0)
}

/// Starts the checkpointer for the database at `path`. It stops when the
/// [`Nudge`] is dropped, that is, when the writer stops.
pub fn spawn(path: &Path) -> anyhow::Result<(Nudge, JoinHandle<()>)> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {} for checkpoints", path.display()))?;
    // Only ever fsynced through this handle, never written.
    let file = std::fs::File::open(path)
        .with_context(|| format!("opening {} to sync it", path.display()))?;
    // Whatever the durability: the WAL is synced before its pages are
    // copied and the database after, so a checkpoint never loses a commit.
    conn.pragma_update(None, "synchronous", "FULL")?;
    let (tx, rx) = mpsc::sync_channel(1);
    let restart = Arc::new(AtomicU8::new(IDLE));
    let ask = restart.clone();
    let join = std::thread::Builder::new()
        .name("store-checkpoint".into())
        .spawn(move || run(&conn, &file, &rx, &ask))
        .context("starting the checkpoint thread")?;
    Ok((Nudge { tx, restart }, join))
}

fn run(conn: &Connection, file: &std::fs::File, rx: &mpsc::Receiver<()>, restart: &AtomicU8) {
    let mut last = Instant::now();
    let mut synced = Synced::default();
    while rx.recv().is_ok() {
        let since = last.elapsed();
        if since < INTERVAL {
            std::thread::sleep(INTERVAL - since);
        }
        // Drop the nudges that came while sleeping: this run covers them.
        while rx.try_recv().is_ok() {}
        last = Instant::now();
        if let Err(e) = checkpoint(conn, file, &mut synced, restart) {
            tracing::warn!(
                error = format!("{e:#}"),
                "WAL checkpoint failed; will retry"
            );
        }
    }
}

/// The WAL's state at the last sync of the database file: syncing again
/// is only worth it once a passive run copied more.
#[derive(Default)]
struct Synced {
    log: i64,
    copied: i64,
}

fn checkpoint(
    conn: &Connection,
    file: &std::fs::File,
    synced: &mut Synced,
    restart: &AtomicU8,
) -> anyhow::Result<()> {
    let (mut log, mut copied) = passive(conn)?;
    if log >= RESTART_PAGES {
        // Catch up until little is left, so the restart holds the writer
        // back for only a moment.
        for _ in 0..CATCH_UP_ROUNDS {
            if log - copied <= RESTART_BACKLOG_PAGES {
                break;
            }
            (log, copied) = passive(conn)?;
        }
    }
    // A restart (or SQLite's own reset) starts the counts over.
    if (log, copied) != (synced.log, synced.copied) && copied > 0 {
        file.sync_data().context("syncing the database file")?;
        *synced = Synced { log, copied };
    }
    if log >= RESTART_PAGES && log - copied <= RESTART_BACKLOG_PAGES {
        tracing::debug!(
            wal_pages = log,
            backlog_pages = log - copied,
            "asking the writer to restart the WAL"
        );
        // No checkpoint of ours while the writer restarts: a restart that
        // finds the checkpoint lock taken gives up. A restart the writer
        // took always ends: it runs on the writer's thread and never waits
        // for a lock.
        restart.store(WANTED, Ordering::Release);
        let asked = Instant::now();
        while restart.load(Ordering::Acquire) != IDLE {
            if asked.elapsed() >= RESTART_WAIT
                && restart
                    .compare_exchange(WANTED, IDLE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(())
}

/// Copies what it can without waiting; returns (WAL pages, pages copied).
fn passive(conn: &Connection) -> anyhow::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
    .context("passive checkpoint")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that commits back to back, as under sustained ingest, never
    /// leaves the WAL fully copied between two commits, so SQLite never
    /// starts it over by itself: only the restart keeps it near
    /// [`RESTART_PAGES`], instead of growing with everything written.
    #[test]
    fn the_wal_stays_near_its_restart_size_under_back_to_back_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hookbox.db");
        let writer = Connection::open(&path).unwrap();
        writer.pragma_update(None, "journal_mode", "WAL").unwrap();
        writer.pragma_update(None, "synchronous", "NORMAL").unwrap();
        writer.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        writer
            .execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
            .unwrap();
        let (nudge, join) = spawn(&path).unwrap();
        let wal = dir.path().join("hookbox.db-wal");
        let limit = RESTART_PAGES as u64 * 4096;
        let body = vec![7u8; 64 * 1024];
        let mut largest = 0;
        // Eight times the restart size through the WAL, as groups of four
        // 64 KiB rows, at 64 MiB/s: as fast as ingest writes, well past
        // what a checkpoint round every 25 ms sees at once.
        let groups = 8 * limit / (4 * body.len() as u64);
        let started = Instant::now();
        for n in 0..groups {
            let due = started + Duration::from_millis(4 * n);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let tx = writer.unchecked_transaction().unwrap();
            for _ in 0..4 {
                tx.execute("INSERT INTO t (body) VALUES (?1)", [&body])
                    .unwrap();
            }
            tx.commit().unwrap();
            // As the syncer does under `durability = "full"`.
            std::fs::File::open(&wal).unwrap().sync_data().unwrap();
            nudge.nudge();
            if nudge.take_restart() {
                assert!(restart(&writer, Duration::from_secs(5)).unwrap());
                nudge.restarted();
            }
            largest = largest.max(std::fs::metadata(&wal).unwrap().len());
        }
        drop(nudge);
        join.join().unwrap();
        // Past the limit by what arrives while a round copies and syncs.
        assert!(
            largest <= 3 * limit,
            "the WAL grew to {} MiB (restart size {} MiB)",
            largest >> 20,
            limit >> 20
        );
    }
}
