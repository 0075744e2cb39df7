//! The writer's sending side: what every other part of hookbox holds to
//! write, and the checks it makes before a command is queued (a poisoned
//! store, a resend answered from memory, a full queue).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::{MIN_FREE_BYTES, POISONED, READY_CACHE};
use crate::store::command::{Claims, WriteCmd};
use crate::store::deliveries::{AttemptRecord, ClaimFrom, Lease};
use crate::store::error::StoreError;
use crate::store::models::{Inserted, NewEvent};
use crate::store::recent::RecentKeys;
use crate::store::rejections::{Rejection, RejectionQueue};
use crate::store::replay::ReplayFilter;
use crate::store::retention::PruneBatch;

/// The sending side: cheap to clone, one per part that writes.
#[derive(Clone)]
pub struct WriterHandle {
    pub(super) tx: mpsc::Sender<WriteCmd>,
    pub(super) recent: Arc<RecentKeys>,
    /// The database's directory, whose free space readiness checks.
    pub(super) dir: Arc<PathBuf>,
    /// Once set, nothing the store says can be trusted: refuse everything.
    pub(super) poisoned: Arc<AtomicBool>,
    /// When readiness was last confirmed: `/readyz` is open to anyone and
    /// each check is a commit, so a success is reused for a moment. A
    /// failure is not: recovery shows at once.
    pub(super) ready_cache: Arc<Mutex<Option<Instant>>>,
    /// Groups committed so far: a writer whose count moves is alive, even
    /// when its queue is too full to take a ping.
    pub(super) progress: Arc<AtomicU64>,
    /// Refused requests, on their way to the writer.
    pub(super) rejections: RejectionQueue,
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
    pub async fn catchup(
        &self,
        op: crate::store::jobs::Op,
    ) -> Result<crate::store::jobs::Done, StoreError> {
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

    /// Applies a pull consumer's `op` to the leases it names in lane
    /// (`source`, `destination`), durably; answers how each stood.
    pub async fn pulled(
        &self,
        source: String,
        destination: String,
        leases: Vec<crate::store::pull_leases::PullLease>,
        op: crate::store::pull_leases::Op,
        now: i64,
    ) -> Result<crate::store::pull_leases::Outcome, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(WriteCmd::Pulled {
            source,
            destination,
            leases,
            op,
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
        set: crate::store::ip_sets::CachedSet,
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
    pub async fn pause(&self, op: crate::store::pauses::PauseOp) -> Result<(), StoreError> {
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
