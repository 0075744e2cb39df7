//! The writer thread: the only connection that writes rows, and group commit.
//!
//! Every write in hookbox is a [`WriteCmd`] sent to this thread over a
//! bounded channel. The thread blocks for one command, then drains whatever
//! else is already queued (up to [`MAX_BATCH`]) into one `BEGIN IMMEDIATE`
//! transaction and commits it. A command is answered only once its group is
//! durable: with `durability = "full"` the group goes to the syncer thread
//! ([`super::syncer`]), which fsyncs the WAL and then answers, while this
//! thread already builds the next group; so the fsync of one group overlaps
//! the inserts of the next, and its cost is shared by everyone in it. With
//! `"normal"` the group is answered right after the commit.
//!
//! When a commit fails (disk full, read-only file, I/O error), every
//! command of the group is answered [`StoreError::Unavailable`] and nothing
//! of the group is kept; the next group tries again, so the inbox recovers
//! by itself once the cause is gone. A command that fails on its own is
//! rolled back to its savepoint and answered alone; the others commit.
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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};

use super::checkpoint::Nudge;
use super::command::{Applied, Claims, WriteCmd};
use super::counters::{self, Tally};
use super::deliveries::{AttemptRecord, ClaimFrom, Lease};
use super::error::StoreError;
use super::models::{Inserted, NewEvent};
use super::recent::RecentKeys;
use super::rejections::{self, FLUSH_CHUNK, FLUSH_EVERY, Rejection, RejectionQueue};
use super::replay::ReplayFilter;
use super::retention::PruneBatch;
use super::search::{self, Indexer};
use super::syncer::Syncer;
use crate::metrics::WriterMetrics;

/// Most commands in one transaction: bounds how long the first waiter of a
/// group waits for the last one's work.
pub const MAX_BATCH: usize = 1024;

/// Why a poisoned store refuses; the log says what poisoned it.
const POISONED: &str =
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

/// Quiet time after a group before the writer indexes for search.
const INDEX_WHEN_IDLE: Duration = Duration::from_millis(20);
/// How often the writer looks for a command while waiting for that quiet.
const IDLE_POLL: Duration = Duration::from_millis(2);
/// Past this many events waiting to be indexed, the writer indexes a
/// step after every group, pause or not.
const INDEX_LAG_LIMIT: i64 = 50_000;
/// A step after a group indexes this many events per command in the
/// group: more than the group can have added, so the lag shrinks, but a
/// step no longer than a few groups' work, so no group waits behind a
/// full [`search::STEP_ROWS`] step (measured: 1,024 rows after every group
/// made p99 under a sustained load twice what it was without search).
const INDEX_PER_COMMAND: usize = 2;

/// How long a readiness answer is reused.
const READY_CACHE: Duration = Duration::from_secs(1);

/// Below this much free space on the database's file system, hookbox is not
/// ready: an event of a few kilobytes may still fit, the next will not.
const MIN_FREE_BYTES: u64 = 1024 * 1024;

/// Runs `batch` in one transaction, each command under its own savepoint,
/// so a command that fails on its own (a constraint, a bad row) is rolled
/// back and answered alone while the rest of the group commits. `Err` when
/// the group as a whole failed: the transaction could not begin or commit,
/// or SQLite rolled all of it back (it may, on a full disk or an I/O
/// error), after which nothing of the group may be kept.
fn apply_group(
    conn: &mut Connection,
    batch: &[WriteCmd],
) -> anyhow::Result<Vec<anyhow::Result<Applied>>> {
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
            Ok(applied) => {
                tx.prepare_cached("RELEASE command")?.execute([])?;
                counted.merge(&counting);
                results.push(Ok(applied));
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

/// The sending side: cheap to clone, one per part that writes.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<WriteCmd>,
    recent: Arc<RecentKeys>,
    /// The database's directory, whose free space readiness checks.
    dir: Arc<PathBuf>,
    /// Once set, nothing the store says can be trusted: refuse everything.
    poisoned: Arc<AtomicBool>,
    /// When readiness was last confirmed: `/readyz` is open to anyone and
    /// each check is a commit, so a success is reused for a moment. A
    /// failure is not: recovery shows at once.
    ready_cache: Arc<Mutex<Option<Instant>>>,
    /// Groups committed so far: a writer whose count moves is alive, even
    /// when its queue is too full to take a ping.
    progress: Arc<AtomicU64>,
    /// Refused requests, on their way to the writer.
    rejections: RejectionQueue,
}

impl WriterHandle {
    /// Stores an event, answering once it is durable (or a known duplicate).
    pub async fn insert(&self, event: NewEvent) -> Result<Inserted, StoreError> {
        // A remembered key proves nothing once the store is poisoned (its
        // file may be gone).
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable(POISONED.into()));
        }
        if let Some(id) = self.recent.get(&event.source, &event.delivery_id) {
            return Ok(Inserted::Duplicate(id));
        }
        let (reply, rx) = oneshot::channel();
        self.send(WriteCmd::Insert { event, reply })?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Round-trips a small durable write through the writer.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(WriteCmd::Ping { reply })?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Whether the writer is alive, for the watchdog: a ping commits within
    /// `within`, or the writer commits other groups meanwhile. Unlike
    /// [`Self::ping`] it waits for room in the queue: during a retry storm
    /// the queue is full because the writer is busy, and a busy writer is
    /// alive.
    pub async fn heartbeat(&self, within: Duration) -> Result<(), StoreError> {
        let before = self.progress.load(Ordering::Relaxed);
        let ping = async {
            let (reply, rx) = oneshot::channel();
            self.tx
                .send(WriteCmd::Ping { reply })
                .await
                .map_err(|_| StoreError::Closed)?;
            rx.await.map_err(|_| StoreError::Closed)?
        };
        match tokio::time::timeout(within, ping).await {
            Ok(answer) => answer,
            Err(_) if self.progress.load(Ordering::Relaxed) != before => Ok(()),
            Err(_) => Err(StoreError::Unavailable(format!(
                "the writer committed nothing in {within:?}"
            ))),
        }
    }

    /// Whether the store can take events: a ping commits, and the disk has
    /// room for more than that. A small commit can still succeed on a full
    /// disk, into WAL space SQLite already holds, while real events fail;
    /// so readiness also asks the file system.
    pub async fn ready(&self) -> Result<(), StoreError> {
        let fresh = self
            .ready_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < READY_CACHE);
        if fresh && !self.poisoned.load(Ordering::Relaxed) {
            return Ok(());
        }
        let answer = self.check_ready().await;
        *self.ready_cache.lock().unwrap_or_else(|e| e.into_inner()) =
            answer.is_ok().then(Instant::now);
        answer
    }

    async fn check_ready(&self) -> Result<(), StoreError> {
        self.ping().await?;
        let dir = self.dir.clone();
        let free = tokio::task::spawn_blocking(move || {
            nix::sys::statvfs::statvfs(dir.as_path())
                .map(|s| s.blocks_available() * s.fragment_size())
        })
        .await
        .map_err(|_| StoreError::Closed)?;
        match free {
            Ok(bytes) if bytes < MIN_FREE_BYTES => Err(StoreError::Unavailable(format!(
                "only {bytes} bytes free on the database's file system"
            ))),
            // Unknown free space is not a reason to stop taking events.
            _ => Ok(()),
        }
    }

    /// A catch-up job's write, answered once durable. Waits for room in
    /// the queue: the job is in no hurry, and ingest comes first.
    pub async fn catchup(&self, op: super::jobs::Op) -> Result<super::jobs::Done, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(WriteCmd::Catchup { op, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Renews the leases in `renew`, then leases up to the given number of
    /// due deliveries of each lane.
    pub async fn claim(
        &self,
        lanes: Vec<ClaimFrom>,
        now: i64,
        lease_until: i64,
        clock_went_back: bool,
        renew: Vec<Lease>,
    ) -> Result<Claims, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(WriteCmd::Claim {
            lanes,
            now,
            lease_until,
            clock_went_back,
            renew,
            reply,
        })?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Queues an attempt's outcome; it commits with the next group. Waits
    /// for room rather than dropping it when ingest has filled the queue:
    /// a dropped outcome would mean a second delivery.
    pub async fn record(&self, record: AttemptRecord, now: i64) -> Result<(), StoreError> {
        self.tx
            .send(WriteCmd::Record { record, now })
            .await
            .map_err(|_| StoreError::Closed)
    }

    /// Settles each lease still held by `settle` (attempt number →
    /// outcome), durably; answers which were (the others were stale).
    pub async fn settle(
        &self,
        leases: Vec<Lease>,
        settle: std::sync::Arc<dyn Fn(u32) -> super::deliveries::Settled + Send + Sync>,
        error: Option<String>,
        now: i64,
    ) -> Result<Vec<bool>, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(WriteCmd::Settle {
            leases,
            settle,
            error,
            now,
            reply,
        })?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Makes a resumed destination's backlog due now; answers once
    /// committed.
    pub async fn make_due(
        &self,
        source: String,
        destination: String,
        now: i64,
    ) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(WriteCmd::MakeDue {
                source,
                destination,
                now,
                reply,
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Gives back leases that will not be used, durably.
    pub async fn release(&self, leases: Vec<Lease>) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(WriteCmd::Release { leases, reply })?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Puts matching dead or delivered deliveries back to pending (and
    /// creates those the filters ask for), durably and all at once.
    pub async fn replay(&self, filters: Vec<ReplayFilter>, now: i64) -> Result<usize, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(WriteCmd::Replay {
            filters,
            now,
            reply,
        })?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Prunes a retention batch, durably; returns how many rows changed.
    /// Waits for room in the queue rather than fail: retention is never
    /// in a hurry, and it yields to ingest by queueing behind it.
    pub async fn prune(&self, batch: PruneBatch) -> Result<usize, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(WriteCmd::Prune { batch, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Caches a fetched named IP set, durably. Waits for room in the
    /// queue: a refresh is never in a hurry.
    pub async fn save_ip_set(
        &self,
        name: String,
        set: super::ip_sets::CachedSet,
    ) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(WriteCmd::SaveIpSet { name, set, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Pauses or resumes a destination, durably. Waits for room in the
    /// queue: rare, and the caller needs it done.
    pub async fn pause(&self, op: super::pauses::PauseOp) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(WriteCmd::Pause { op, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Records a refused request, without waiting: dropped and counted
    /// when the buffer is full.
    pub fn reject(&self, rejection: Rejection) {
        self.rejections.push(rejection);
    }

    fn send(&self, cmd: WriteCmd) -> Result<(), StoreError> {
        self.tx.try_send(cmd).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => StoreError::Overloaded,
            mpsc::error::TrySendError::Closed(_) => StoreError::Closed,
        })
    }
}

/// The threads the writer owns and stops, in order, when it stops.
pub struct Helpers {
    /// Batch size and commit time, observed once per group.
    pub metrics: WriterMetrics,
    pub checkpointer: (Nudge, JoinHandle<()>),
    /// `None` with `durability = "normal"`: answers go out after the commit.
    pub syncer: Option<(Syncer, JoinHandle<()>)>,
    /// Set by the syncer when an fsync failed: from then on nothing can be
    /// promised, so every command is refused until hookbox restarts.
    pub poisoned: Arc<AtomicBool>,
    pub recent: Arc<RecentKeys>,
    /// Counts committed groups (see [`WriterHandle::heartbeat`]).
    pub progress: Arc<AtomicU64>,
    /// `None` with search off.
    pub indexer: Option<Indexer>,
    /// Refused requests: the receive path's end, and the writer's.
    pub rejections: (RejectionQueue, mpsc::Receiver<Rejection>),
    /// Rows the rejections table keeps ([`rejections::KEEP`]).
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
    /// When the last group was committed: indexing waits for a pause.
    last_group: Instant,
    /// When the rejections buffer was last left empty.
    last_flush: Instant,
    /// When a failed rejection flush was last logged.
    flush_failed_logged: Option<Instant>,
}

impl Writer {
    fn new(conn: Connection, helpers: Helpers, file: FileIdentity) -> Self {
        Writer {
            conn,
            helpers,
            file,
            failing: None,
            last_group: Instant::now(),
            last_flush: Instant::now(),
            flush_failed_logged: None,
        }
    }

    fn run(mut self, mut rx: mpsc::Receiver<WriteCmd>) {
        // Only to wait for a command with a timeout, so that the idle
        // jobs (refused requests, the search index) get their turn without
        // taking a slot of the command queue from ingest.
        let timer = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .inspect_err(|e| {
                tracing::warn!(error = %e, "no timer for the writer: refused requests are recorded and bodies indexed only between other writes");
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
            let commands = batch.len();
            self.commit_group(&mut batch);
            self.last_group = Instant::now();
            // Busy for a while: one chunk of refusals between groups, so
            // their buffer still drains; and a search step when so much
            // waits to be indexed that it must keep pace.
            if self.rejections_due(MAX_FLUSH_DEFER) {
                self.flush_rejections();
            }
            if self.index_far_behind() {
                self.index_step(commands * INDEX_PER_COMMAND);
            }
        }
        while !self.helpers.rejections.1.is_empty() {
            self.flush_rejections();
        }
        self.stop();
    }

    /// The next command; `None` once every handle is gone. While none
    /// waits, the idle jobs take their turns: refused requests once a
    /// [`FLUSH_EVERY`], and the search index once nothing has come for
    /// [`INDEX_WHEN_IDLE`]: tokenizing takes CPU that a burst of ingest
    /// needs (measured: a quarter of the throughput of a saturated
    /// two-core machine when indexed between every two groups), and a
    /// webhook inbox's bursts end.
    fn next_command(
        &mut self,
        rx: &mut mpsc::Receiver<WriteCmd>,
        timer: Option<&tokio::runtime::Runtime>,
    ) -> Option<WriteCmd> {
        use mpsc::error::TryRecvError;
        loop {
            match rx.try_recv() {
                Ok(cmd) => return Some(cmd),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) => {}
            }
            if self.rejections_due(FLUSH_EVERY) {
                self.flush_rejections();
                continue;
            }
            let indexing = self.helpers.indexer.as_ref().is_some_and(Indexer::behind);
            if indexing && self.last_group.elapsed() >= INDEX_WHEN_IDLE {
                self.index_step(search::STEP_ROWS);
                continue;
            }
            // Wait for a command, but not past the next idle job's turn.
            let mut wait = if self.helpers.rejections.1.is_empty() {
                FLUSH_EVERY
            } else {
                FLUSH_EVERY.saturating_sub(self.last_flush.elapsed())
            };
            if indexing {
                wait = wait.min(INDEX_WHEN_IDLE.saturating_sub(self.last_group.elapsed()));
            }
            let next = match timer {
                Some(timer) => timer.block_on(async {
                    tokio::time::timeout(wait.max(IDLE_POLL), rx.recv())
                        .await
                        .ok()
                }),
                None if indexing => {
                    std::thread::sleep(IDLE_POLL);
                    continue;
                }
                None => Some(rx.blocking_recv()),
            };
            match next {
                Some(Some(cmd)) => return Some(cmd),
                Some(None) => return None,
                None => continue,
            }
        }
    }

    /// Whether more events wait to be indexed than a pause should be
    /// waited for: then a step follows every group, and search keeps
    /// pace with ingest at ingest's expense.
    fn index_far_behind(&mut self) -> bool {
        let Some(indexer) = self.helpers.indexer.as_ref() else {
            return false;
        };
        indexer.behind()
            && indexer
                .waiting(&self.conn)
                .is_ok_and(|waiting| waiting > INDEX_LAG_LIMIT)
    }

    /// Indexes the next events for search, when there may be some; a
    /// failure is logged by the indexer and tried again after the next
    /// group.
    fn index_step(&mut self, rows: usize) {
        if self.helpers.poisoned.load(Ordering::Relaxed) {
            return;
        }
        let Some(indexer) = self.helpers.indexer.as_mut() else {
            return;
        };
        if !indexer.behind() {
            return;
        }
        let started = Instant::now();
        if let Ok(seen) = indexer.step(&mut self.conn, rows)
            && seen > 0
        {
            self.helpers.checkpointer.0.nudge();
            tracing::trace!(
                events = seen,
                took_us = started.elapsed().as_micros() as u64,
                "search index step"
            );
        }
    }

    /// Whether refused requests wait and the last flush was `every` ago.
    fn rejections_due(&self, every: Duration) -> bool {
        !self.helpers.rejections.1.is_empty() && self.last_flush.elapsed() >= every
    }

    /// Flushes one chunk of waiting refused requests ([`FLUSH_CHUNK`]) in
    /// a transaction of its own; once none wait, the next flush is a
    /// [`FLUSH_EVERY`] away. Records that cannot be written are dropped
    /// and counted: they must not hold the writer, nor pile up while the
    /// disk is full.
    fn flush_rejections(&mut self) {
        let mut rows = Vec::with_capacity(FLUSH_CHUNK);
        while rows.len() < FLUSH_CHUNK {
            match self.helpers.rejections.1.try_recv() {
                Ok(r) => rows.push(r),
                Err(_) => break,
            }
        }
        if self.helpers.rejections.1.is_empty() {
            self.last_flush = Instant::now();
        }
        if rows.is_empty() {
            return;
        }
        if let Err(e) = self.write_rejections(&rows) {
            self.helpers.rejections.0.lost(rows.len());
            let now = Instant::now();
            if self
                .flush_failed_logged
                .is_none_or(|at| now.duration_since(at) >= FAILURE_LOG_INTERVAL)
            {
                tracing::warn!(error = %format!("{e:#}"), records = rows.len(), "could not record refused requests; dropped them");
                self.flush_failed_logged = Some(now);
            }
        }
    }

    fn write_rejections(&mut self, rows: &[Rejection]) -> anyhow::Result<()> {
        anyhow::ensure!(!self.helpers.poisoned.load(Ordering::Relaxed), "{POISONED}");
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .context("beginning a transaction")?;
        rejections::insert(&tx, rows, self.helpers.keep_rejections)?;
        tx.commit().context("committing")?;
        self.helpers.checkpointer.0.nudge();
        Ok(())
    }

    /// Stops the syncer (which answers what it holds) and the checkpointer,
    /// then leaves the database with an empty WAL.
    fn stop(self) {
        let Helpers {
            checkpointer: (nudge, checkpointer),
            syncer,
            ..
        } = self.helpers;
        if let Some((syncer, join)) = syncer {
            drop(syncer);
            if join.join().is_err() {
                tracing::error!("the syncer thread panicked");
            }
        }
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
    fn commit_group(&mut self, batch: &mut Vec<WriteCmd>) {
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
                if let Some(indexer) = self.helpers.indexer.as_mut() {
                    indexer.touched();
                }
                self.helpers.checkpointer.0.nudge();
                let recent = &self.helpers.recent;
                let mut durable = Vec::new();
                for (cmd, applied) in batch.drain(..).zip(results) {
                    match applied {
                        Err(e) => {
                            let reason = format!("{e:#}");
                            tracing::error!(error = %reason, "a write failed on its own; the rest of its group committed");
                            cmd.fail(StoreError::Unavailable(reason));
                        }
                        Ok(applied)
                            if self.helpers.syncer.is_none() || cmd.answers_before_sync() =>
                        {
                            cmd.answer(applied, recent);
                        }
                        Ok(applied) => durable.push((cmd, applied)),
                    }
                }
                if let Some((syncer, _)) = &self.helpers.syncer
                    && !durable.is_empty()
                {
                    syncer.sync_then_answer(durable);
                }
                if self.helpers.checkpointer.0.take_restart() {
                    self.restart_wal();
                    self.helpers.checkpointer.0.restarted();
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
    use crate::store::models::Origin;

    fn insert(delivery: &str) -> (WriteCmd, oneshot::Receiver<Result<Inserted, StoreError>>) {
        let (reply, rx) = oneshot::channel();
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
        (WriteCmd::Insert { event, reply }, rx)
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
        let batch = ["a", "poison", "b"].map(|d| insert(d).0);
        let results = apply_group(&mut conn, &batch).unwrap();
        assert!(matches!(
            results[0],
            Ok(Applied::Inserted(Inserted::New(_)))
        ));
        let err = results[1]
            .as_ref()
            .err()
            .expect("the poisoned insert fails");
        assert!(format!("{err:#}").contains("poisoned row"), "{err:#}");
        assert!(matches!(
            results[2],
            Ok(Applied::Inserted(Inserted::New(_)))
        ));
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
        apply_group(&mut conn, &[insert("a").0, insert("c").0]).unwrap();
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
        let batch = ["a", "rollback", "b"].map(|d| insert(d).0);
        let Err(err) = apply_group(&mut conn, &batch) else {
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
