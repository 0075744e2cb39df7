//! The checkpointer thread: copies committed WAL pages back into the
//! database file, off the writer's path.
//!
//! SQLite normally checkpoints inside the commit that crosses the WAL size
//! threshold, so one unlucky group of requests waits for megabytes to be
//! copied and the database file to be fsynced. Here the writer turns that
//! off and nudges this thread after each commit instead; the thread runs a
//! `PASSIVE` checkpoint at most every [`INTERVAL`], which never takes the
//! write lock, so ingest goes on while pages are copied. Under sustained
//! load a passive checkpoint can always be a few groups behind and the WAL
//! would never start over; once the WAL passes [`RESTART_PAGES`] a
//! `RESTART` checkpoint (which waits for the writer's current group) lets
//! it restart, and that wait is short because the passive runs already
//! copied nearly everything.
//!
//! This connection never writes rows: the writer thread stays the only one
//! that does.

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::{Connection, OpenFlags};

/// Shortest time between two checkpoints.
const INTERVAL: Duration = Duration::from_millis(100);

/// WAL pages (4 KiB each) past which a checkpoint waits for the writer so
/// the WAL can start over: 64 MiB.
const RESTART_PAGES: i64 = 16_384;

/// How long a restart waits for the writer and readers before giving up
/// until the next round.
const RESTART_WAIT: Duration = Duration::from_millis(50);

/// Passive rounds tried before a restart to shrink what it must copy.
const CATCH_UP_ROUNDS: usize = 8;

/// Pages left to copy at which a restart is cheap enough.
const RESTART_BACKLOG_PAGES: i64 = 256;

/// The writer's side: nudges the checkpointer after a commit.
pub struct Nudge(mpsc::SyncSender<()>);

impl Nudge {
    /// Tells the checkpointer there is something to copy. Never blocks: one
    /// pending nudge is as good as many.
    pub fn nudge(&self) {
        let _ = self.0.try_send(());
    }
}

/// Starts the checkpointer for the database at `path`. It stops when the
/// [`Nudge`] is dropped, that is, when the writer stops.
pub fn spawn(path: &Path) -> anyhow::Result<(Nudge, JoinHandle<()>)> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {} for checkpoints", path.display()))?;
    // Whatever the durability: the WAL is synced before its pages are
    // copied and the database after, so a checkpoint never loses a commit.
    conn.pragma_update(None, "synchronous", "FULL")?;
    // A RESTART holds new writes back while it waits for readers; a long
    // read (a backup, an admin query) must not hold ingest back with it.
    // If readers are still busy, the next round tries again.
    conn.busy_timeout(RESTART_WAIT)?;
    let (tx, rx) = mpsc::sync_channel(1);
    let join = std::thread::Builder::new()
        .name("store-checkpoint".into())
        .spawn(move || run(&conn, &rx))
        .context("starting the checkpoint thread")?;
    Ok((Nudge(tx), join))
}

fn run(conn: &Connection, rx: &mpsc::Receiver<()>) {
    let mut last = Instant::now();
    while rx.recv().is_ok() {
        let since = last.elapsed();
        if since < INTERVAL {
            std::thread::sleep(INTERVAL - since);
        }
        // Drop the nudges that came while sleeping: this run covers them.
        while rx.try_recv().is_ok() {}
        last = Instant::now();
        if let Err(e) = checkpoint(conn) {
            tracing::warn!(
                error = format!("{e:#}"),
                "WAL checkpoint failed; will retry"
            );
        }
    }
}

fn checkpoint(conn: &Connection) -> anyhow::Result<()> {
    let (mut log, mut copied) = passive(conn)?;
    if log < RESTART_PAGES {
        return Ok(());
    }
    // Catch up until little is left, so the restart holds the writer back
    // for only a moment.
    for _ in 0..CATCH_UP_ROUNDS {
        if log - copied <= RESTART_BACKLOG_PAGES {
            break;
        }
        (log, copied) = passive(conn)?;
    }
    tracing::debug!(
        wal_pages = log,
        backlog_pages = log - copied,
        "restarting the WAL"
    );
    conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))
        .context("restart checkpoint")?;
    Ok(())
}

/// Copies what it can without waiting; returns (WAL pages, pages copied).
fn passive(conn: &Connection) -> anyhow::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
    .context("passive checkpoint")
}
