//! The writer thread: the only connection that writes rows, and group commit.
//!
//! Every write in hookbox is a [`Write`](super::write::Write), defined by
//! its feature beside its SQL and sent to this thread over a bounded
//! channel; the thread runs them without knowing what they do. It blocks
//! for one command, then drains whatever else is already queued (up to
//! [`MAX_BATCH`]) into one `BEGIN IMMEDIATE` transaction and commits it. A
//! command is answered only once its group is durable (unless its write
//! says it may be answered at the commit): with `durability = "full"` the group goes to the syncer thread
//! ([`super::syncer`]), which fsyncs the WAL and then answers, while this
//! thread already builds the next group; so the fsync of one group overlaps
//! the inserts of the next, and its cost is shared by everyone in it. With
//! `"normal"` the group is answered right after the commit.
//!
//! When a commit fails (disk full, read-only file, I/O error), every
//! command of the group is answered [`StoreError::Unavailable`] and nothing
//! of the group is kept; the next group tries again, so the inbox recovers
//! by itself once the cause is gone. A command that fails on its own is
//! rolled back alone (its group runs again, each command under a savepoint)
//! and answered alone; the others commit.
//!
//! Once nothing has come for a moment, the thread indexes new events for
//! search in transactions of its own ([`super::search`]), so no answer
//! waits for the words of a body and a burst of ingest does not share
//! the CPU with tokenizing.
//!
//! Refused requests (`super::rejections`) come by a channel of their own
//! and go last: the writer flushes them, in short transactions of their
//! own, when no command waits (at most once per
//! [`super::rejections::FLUSH_EVERY`]), or between groups once they have
//! waited [`MAX_FLUSH_DEFER`].
//!
//! The thread exits when every [`WriterHandle`] has been dropped, after it
//! has answered what was queued, flushed the rejections, stopped the
//! syncer and the checkpointer, and checkpointed the WAL.
//!
//! The same thread runs the CLI's writes, on the CLI's own connection
//! (`super::open_for_cli`): without a checkpointer, search indexing or
//! refused requests, with the same groups and syncer.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::mpsc;

use super::checkpoint::Nudge;
use super::counters::{self, Tally};
use super::error::StoreError;
use super::recent::RecentKeys;
use super::rejections::{Rejection, RejectionQueue};
use super::syncer::Syncer;
use super::write::Queued;
use crate::telemetry::metrics::WriterMetrics;

mod handle;
mod idle;

pub use handle::WriterHandle;

/// Most commands in one transaction: bounds how long the first waiter of a
/// group waits for the last one's work.
pub const MAX_BATCH: usize = 1024;

/// Why a poisoned store refuses; the log says what poisoned it.
pub(super) const POISONED: &str =
    "the store refuses writes after a fatal error (see the log); restart hookbox";

/// Which file a path named when the database was opened.
struct FileIdentity {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl FileIdentity {
    fn of(path: &Path) -> anyhow::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta =
            std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(FileIdentity {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// One `stat` per group: cheap next to the group's commit.
    fn still_there(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.path).is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino)
    }
}

/// How long a readiness answer is reused.
const READY_CACHE: Duration = Duration::from_secs(1);

/// Below this much free space on the database's file system, hookbox is not
/// ready: an event of a few kilobytes may still fit, the next will not.
const MIN_FREE_BYTES: u64 = 1024 * 1024;

/// Runs `batch` in one transaction, so that a command that fails on its
/// own (a constraint, a bad row) is rolled back and answered alone while
/// the rest of the group commits. `Err` when the group as a whole failed:
/// the transaction could not begin or commit, or SQLite rolled all of it
/// back (it may, on a full disk or an I/O error), after which nothing of
/// the group may be kept.
///
/// A savepoint per command copies every page the command touches to the
/// statement journal: a tenth of a delivery drain's rate. So the group
/// first runs without them, and only a group in which a command fails is
/// rolled back and run again with them ([`apply_each`]). A write's `apply`
/// changes only the database and its tally (what it keeps in memory waits
/// for `answered`), so running it twice is safe.
fn apply_group(
    conn: &mut Connection,
    batch: &mut [Box<dyn Queued>],
) -> anyhow::Result<Vec<anyhow::Result<()>>> {
    match apply_all(conn, batch)? {
        Some(results) => Ok(results),
        None => apply_each(conn, batch),
    }
}

/// Runs `batch` in one transaction without savepoints and commits it;
/// `None`, with nothing kept, when a command failed.
fn apply_all(
    conn: &mut Connection,
    batch: &mut [Box<dyn Queued>],
) -> anyhow::Result<Option<Vec<anyhow::Result<()>>>> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .context("beginning a transaction")?;
    let mut counted = Tally::default();
    for cmd in batch.iter_mut() {
        if cmd.apply(&tx, &mut counted).is_err() {
            // Dropping the transaction rolls it back.
            return Ok(None);
        }
    }
    if !counted.is_empty() {
        flush_counters(&tx, &counted)?;
    }
    tx.commit().context("committing")?;
    Ok(Some(batch.iter().map(|_| Ok(())).collect()))
}

/// Runs `batch` in one transaction, each command under its own savepoint.
fn apply_each(
    conn: &mut Connection,
    batch: &mut [Box<dyn Queued>],
) -> anyhow::Result<Vec<anyhow::Result<()>>> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .context("beginning a transaction")?;
    let mut results = Vec::with_capacity(batch.len());
    // What the group counts, and what the command running now counts: a
    // command rolled back to its savepoint counts nothing.
    let mut counted = Tally::default();
    let mut counting = Tally::default();
    for cmd in batch {
        tx.prepare_cached("SAVEPOINT command")?.execute([])?;
        counting.clear();
        match cmd.apply(&tx, &mut counting) {
            Ok(()) => {
                tx.prepare_cached("RELEASE command")?.execute([])?;
                counted.merge(&counting);
                results.push(Ok(()));
            }
            Err(e) if tx.is_autocommit() => {
                return Err(e.context("SQLite rolled back the whole transaction"));
            }
            Err(e) => {
                tx.prepare_cached("ROLLBACK TO command")?.execute([])?;
                tx.prepare_cached("RELEASE command")?.execute([])?;
                results.push(Err(e));
            }
        }
    }
    if !counted.is_empty() {
        flush_counters(&tx, &counted)?;
    }
    tx.commit().context("committing")?;
    Ok(results)
}

/// Longest refused requests wait for an idle writer before a chunk of
/// them is flushed after each group anyway.
pub const MAX_FLUSH_DEFER: Duration = Duration::from_secs(2);

/// Writes the group's counters under a savepoint of their own: counters
/// that cannot be written are lost (and logged), never the events and
/// outcomes they count. `Err` only when SQLite rolled back the whole
/// transaction meanwhile.
fn flush_counters(tx: &rusqlite::Transaction, counted: &Tally) -> anyhow::Result<()> {
    tx.prepare_cached("SAVEPOINT counters")?.execute([])?;
    match counters::flush(tx, counted) {
        Ok(()) => {
            tx.prepare_cached("RELEASE counters")?.execute([])?;
        }
        Err(e) if tx.is_autocommit() => {
            return Err(e.context("SQLite rolled back the whole transaction"));
        }
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "the hourly counters of a group were not written; the charts miss them");
            tx.prepare_cached("ROLLBACK TO counters")?.execute([])?;
            tx.prepare_cached("RELEASE counters")?.execute([])?;
        }
    }
    Ok(())
}

/// While commits keep failing, the failure is logged at most this often.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The threads the writer owns and stops, in order, when it stops.
pub struct Helpers {
    /// Batch size and commit time, observed once per group.
    pub metrics: WriterMetrics,
    /// `None` in the CLI: the server's checkpointer, or SQLite's own at
    /// the commit, keeps the WAL short; a CLI that waited to start it over
    /// would wait for the server's readers.
    pub checkpointer: Option<(Nudge, JoinHandle<()>)>,
    /// `None` with `durability = "normal"`: answers go out after the commit.
    pub syncer: Option<(Syncer, JoinHandle<()>)>,
    /// Set by the syncer when an fsync failed: from then on nothing can be
    /// promised, so every command is refused until hookbox restarts.
    pub poisoned: Arc<AtomicBool>,
    /// Keys of stored events, handed to every [`WriterHandle`]: the
    /// writes of ingest and retention keep it, not the writer.
    pub recent: Arc<RecentKeys>,
    /// Counts committed groups (see [`WriterHandle::heartbeat`]).
    pub progress: Arc<AtomicU64>,
    /// Refused requests: the receive path's end, and the writer's.
    pub rejections: (RejectionQueue, mpsc::Receiver<Rejection>),
    /// Rows the rejections table keeps ([`super::rejections::KEEP`]).
    pub keep_rejections: i64,
}

/// Starts the writer thread on `conn`, with room for `queue` waiting commands.
pub fn spawn(
    conn: Connection,
    helpers: Helpers,
    queue: usize,
    db: &Path,
) -> anyhow::Result<(WriterHandle, JoinHandle<()>)> {
    let (tx, rx) = mpsc::channel(queue);
    let recent = helpers.recent.clone();
    let poisoned = helpers.poisoned.clone();
    let progress = helpers.progress.clone();
    let rejections = helpers.rejections.0.clone();
    let file = FileIdentity::of(db)?;
    let join = std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || Writer::new(conn, helpers, file).run(rx))
        .context("starting the writer thread")?;
    let dir = match db.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => dir.to_path_buf(),
        None => PathBuf::from("."),
    };
    Ok((
        WriterHandle {
            tx,
            recent,
            dir: Arc::new(dir),
            poisoned,
            ready_cache: Arc::default(),
            progress,
            rejections,
        },
        join,
    ))
}

struct Writer {
    conn: Connection,
    helpers: Helpers,
    /// The database file as opened: if the path stops naming it, commits
    /// would go to a file nobody will open again.
    file: FileIdentity,
    /// Since when commits have been failing, and when that was last logged.
    failing: Option<(Instant, Instant)>,
    /// When the rejections buffer was last left empty.
    last_flush: Instant,
    /// When a failed rejection flush was last logged.
    flush_failed_logged: Option<Instant>,
    /// The rows repeated refusals fold into.
    folds: super::rejections::Folds,
}

impl Writer {
    fn new(conn: Connection, helpers: Helpers, file: FileIdentity) -> Self {
        Writer {
            conn,
            helpers,
            file,
            failing: None,
            last_flush: Instant::now(),
            flush_failed_logged: None,
            folds: super::rejections::Folds::default(),
        }
    }

    fn run(mut self, mut rx: mpsc::Receiver<Box<dyn Queued>>) {
        // Only to wait for a command with a timeout, so that the idle
        // job (refused requests) gets its turn without
        // taking a slot of the command queue from ingest.
        let timer = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .inspect_err(|e| {
                tracing::warn!(error = %e, "no timer for the writer: refused requests are recorded only between other writes");
            })
            .ok();
        let mut batch = Vec::with_capacity(64);
        while let Some(first) = self.next_command(&mut rx, timer.as_ref()) {
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(cmd) => batch.push(cmd),
                    Err(_) => break,
                }
            }
            self.commit_group(&mut batch);
            // Busy for a while: one chunk of refusals between groups, so
            // their buffer still drains.
            if self.rejections_due(MAX_FLUSH_DEFER) {
                self.flush_rejections();
            }
        }
        while !self.helpers.rejections.1.is_empty() {
            self.flush_rejections();
        }
        self.stop();
    }

    /// Stops the syncer (which answers what it holds) and the checkpointer,
    /// then, in the server, leaves the database with an empty WAL.
    fn stop(self) {
        let Helpers {
            checkpointer,
            syncer,
            ..
        } = self.helpers;
        if let Some((syncer, join)) = syncer {
            drop(syncer);
            if join.join().is_err() {
                tracing::error!("the syncer thread panicked");
            }
        }
        let Some((nudge, checkpointer)) = checkpointer else {
            tracing::debug!("writer stopped");
            return;
        };
        drop(nudge);
        if checkpointer.join().is_err() {
            tracing::error!("the checkpoint thread panicked");
        }
        if let Err(e) = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
            tracing::warn!(error = %e, "final WAL checkpoint failed; the next start will finish it");
        }
        tracing::debug!("writer stopped");
    }

    /// Runs `batch` in one transaction, then has every command answered:
    /// with its result once durable, with 503 when the commit failed.
    fn commit_group(&mut self, batch: &mut Vec<Box<dyn Queued>>) {
        if !self.helpers.poisoned.load(Ordering::Relaxed) && !self.file.still_there() {
            tracing::error!(
                database = %self.file.path.display(),
                "the database file was deleted or replaced under the running server: \
                 refusing every write until hookbox is restarted"
            );
            self.helpers.poisoned.store(true, Ordering::Relaxed);
        }
        if self.helpers.poisoned.load(Ordering::Relaxed) {
            for cmd in batch.drain(..) {
                cmd.fail(StoreError::Unavailable(POISONED.into()));
            }
            return;
        }
        let started = Instant::now();
        let applied = apply_group(&mut self.conn, batch);
        self.helpers.metrics.batch_size.observe(batch.len() as f64);
        self.helpers
            .metrics
            .commit_seconds
            .observe(started.elapsed().as_secs_f64());
        match applied {
            Ok(results) => {
                self.recovered();
                self.helpers.progress.fetch_add(1, Ordering::Relaxed);
                self.nudge();
                let mut durable = Vec::new();
                for (cmd, applied) in batch.drain(..).zip(results) {
                    match applied {
                        Err(e) => {
                            let reason = format!("{e:#}");
                            tracing::error!(error = %reason, "a write failed on its own; the rest of its group committed");
                            cmd.fail(StoreError::Unavailable(reason));
                        }
                        Ok(()) if self.helpers.syncer.is_none() || cmd.at_commit() => {
                            cmd.answer();
                        }
                        Ok(()) => durable.push(cmd),
                    }
                }
                if let Some((syncer, _)) = &self.helpers.syncer
                    && !durable.is_empty()
                {
                    syncer.sync_then_answer(durable);
                }
                if let Some((nudge, _)) = &self.helpers.checkpointer
                    && nudge.take_restart()
                {
                    self.restart_wal();
                    nudge.restarted();
                }
            }
            Err(e) => {
                let reason = format!("{e:#}");
                self.failed(&reason, batch.len());
                for cmd in batch.drain(..) {
                    cmd.fail(StoreError::Unavailable(reason.clone()));
                }
            }
        }
    }

    /// Tells the checkpointer that pages were committed.
    fn nudge(&self) {
        if let Some((nudge, _)) = &self.helpers.checkpointer {
            nudge.nudge();
        }
    }

    /// Starts the WAL over between two groups, when the checkpointer says
    /// it is past its size and nearly all copied (`super::checkpoint`).
    fn restart_wal(&self) {
        let started = Instant::now();
        match super::checkpoint::restart(&self.conn, super::BUSY_TIMEOUT) {
            Ok(true) => {
                tracing::debug!(
                    took_us = started.elapsed().as_micros() as u64,
                    "WAL restarted"
                );
            }
            Ok(false) => tracing::debug!("WAL restart skipped: a reader still uses it"),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "restarting the WAL failed; it is tried again later");
            }
        }
    }

    /// Logs a failed commit: at once when commits start failing, then at
    /// most every [`FAILURE_LOG_INTERVAL`], so a full disk does not also
    /// flood the log.
    fn failed(&mut self, reason: &str, batch_size: usize) {
        let now = Instant::now();
        match &mut self.failing {
            None => {
                tracing::error!(error = %reason, batch_size, "commit failed; answering 503 until it succeeds again");
                self.failing = Some((now, now));
            }
            Some((since, logged)) if now.duration_since(*logged) >= FAILURE_LOG_INTERVAL => {
                tracing::error!(
                    error = %reason,
                    failing_for_secs = now.duration_since(*since).as_secs(),
                    "commits still failing; answering 503"
                );
                *logged = now;
            }
            Some(_) => {}
        }
    }

    fn recovered(&mut self) {
        if let Some((since, _)) = self.failing.take() {
            tracing::info!(
                failed_for_secs = since.elapsed().as_secs(),
                "commits succeed again"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ingest::Insert;
    use crate::store::models::{Inserted, NewEvent, Origin};
    use crate::store::write::{Answer, ask};

    fn insert(delivery: &str) -> (Box<dyn Queued>, Answer<Inserted>) {
        let event = NewEvent {
            source: "s".to_owned(),
            delivery_id: delivery.to_owned(),
            event_type: None,
            order_key: None,
            received_at: 1,
            origin: Origin::Push,
            content_type: None,
            headers: "{}".to_owned(),
            body: bytes::Bytes::from_static(b"{}"),
            destinations: vec!["default".into()],
        };
        ask(Insert {
            event,
            recent: Arc::default(),
        })
    }

    fn db() -> Connection {
        let conn = crate::store::test_support::db();
        // One row the database refuses, as a constraint would.
        conn.execute_batch(
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON events
             WHEN NEW.delivery_id = 'poison'
             BEGIN SELECT RAISE(ABORT, 'poisoned row'); END;",
        )
        .unwrap();
        conn
    }

    #[test]
    fn a_command_that_fails_on_its_own_is_rolled_back_alone_and_its_group_commits() {
        let mut conn = db();
        let (mut batch, mut answers): (Vec<_>, Vec<_>) =
            ["a", "poison", "b"].map(insert).into_iter().unzip();
        let results = apply_group(&mut conn, &mut batch).unwrap();
        // What each write did, as its asker hears it.
        for (cmd, result) in batch.into_iter().zip(&results) {
            if result.is_ok() {
                cmd.answer();
            }
        }
        let mut answer = |i: usize| answers[i].try_recv().ok().and_then(Result::ok);
        assert!(matches!(answer(0), Some(Inserted::New(_))));
        let err = results[1].as_ref().expect_err("the poisoned insert fails");
        assert!(format!("{err:#}").contains("poisoned row"), "{err:#}");
        assert!(matches!(answer(2), Some(Inserted::New(_))));
        let stored: Vec<String> = conn
            .prepare("SELECT delivery_id FROM events ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(stored, ["a", "b"]);
        assert!(conn.is_autocommit(), "the transaction ended");
        // The counters count what committed: the rolled-back insert and
        // the duplicate of a later group do not count.
        let received = |conn: &Connection| -> i64 {
            conn.query_row(
                "SELECT received FROM hourly_counts WHERE source = 's' AND hour = 0",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(received(&conn), 2);
        apply_group(&mut conn, &mut [insert("a").0, insert("c").0]).unwrap();
        assert_eq!(received(&conn), 3);
    }

    #[test]
    fn a_group_whose_transaction_sqlite_rolled_back_keeps_nothing() {
        let mut conn = db();
        // ROLLBACK inside a trigger is not allowed; RAISE(ROLLBACK) ends
        // the whole transaction, as SQLite may on a full disk.
        conn.execute_batch(
            "CREATE TRIGGER roll_all BEFORE INSERT ON events
             WHEN NEW.delivery_id = 'rollback'
             BEGIN SELECT RAISE(ROLLBACK, 'whole transaction'); END;",
        )
        .unwrap();
        let mut batch = ["a", "rollback", "b"].map(|d| insert(d).0);
        let Err(err) = apply_group(&mut conn, &mut batch) else {
            panic!("the group must fail as a whole");
        };
        assert!(format!("{err:#}").contains("rolled back the whole transaction"));
        let n: i64 = conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0, "nothing of the group is kept, nor auto-committed");
        let counted: i64 = conn
            .query_row("SELECT count(*) FROM hourly_counts", [], |r| r.get(0))
            .unwrap();
        assert_eq!(counted, 0, "nor counted");
    }
}
