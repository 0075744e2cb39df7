//! The writer's sending side: what every other part of hookbox holds to
//! write. It sends any [`Write`] and knows none of them; it also says
//! whether the writer is alive and the store ready.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{MIN_FREE_BYTES, READY_CACHE};
use crate::store::error::StoreError;
use crate::store::ingest::Ping;
use crate::store::recent::RecentKeys;
use crate::store::rejections::{Rejection, RejectionQueue};
use crate::store::write::{Queued, Write, ask};

/// The sending side: cheap to clone, one per part that writes.
#[derive(Clone)]
pub struct WriterHandle {
    pub(super) tx: mpsc::Sender<Box<dyn Queued>>,
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
    /// Round-trips a small durable write through the writer.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.write(Ping).await
    }

    /// Whether the writer is alive, for the watchdog: a ping commits within
    /// `within`, or the writer commits other groups meanwhile. Unlike
    /// [`Self::ping`] it waits for room in the queue: during a retry storm
    /// the queue is full because the writer is busy, and a busy writer is
    /// alive.
    pub async fn heartbeat(&self, within: Duration) -> Result<(), StoreError> {
        let before = self.progress.load(Ordering::Relaxed);
        let ping = async {
            let (queued, rx) = ask(Ping);
            self.enqueue(queued, true).await?;
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

    /// Runs `write` in the next group; answers once it is durable (or
    /// committed: [`Write::AT_COMMIT`]). When the queue is full, answers
    /// [`StoreError::Overloaded`] at once, or waits for room
    /// ([`Write::WAITS_FOR_ROOM`]).
    pub async fn write<W: Write>(&self, write: W) -> Result<W::Output, StoreError> {
        let (queued, rx) = ask(write);
        self.enqueue(queued, W::WAITS_FOR_ROOM).await?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Queues `write` for the next group without waiting for its answer:
    /// for a write whose failure its own [`Write::failed`] handles.
    pub async fn queue<W: Write>(&self, write: W) -> Result<(), StoreError> {
        let (queued, _) = ask(write);
        self.enqueue(queued, W::WAITS_FOR_ROOM).await
    }

    /// Records a refused request, without waiting: dropped and counted
    /// when the buffer is full.
    pub fn reject(&self, rejection: Rejection) {
        self.rejections.push(rejection);
    }

    async fn enqueue(&self, queued: Box<dyn Queued>, wait: bool) -> Result<(), StoreError> {
        if wait {
            return self.tx.send(queued).await.map_err(|_| StoreError::Closed);
        }
        self.tx.try_send(queued).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => StoreError::Overloaded,
            mpsc::error::TrySendError::Closed(_) => StoreError::Closed,
        })
    }

    /// Whether a fatal error made the store refuse everything.
    pub(in crate::store) fn poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Relaxed)
    }

    /// Keys of events durably stored lately (`super::super::recent`).
    pub(in crate::store) fn recent(&self) -> &Arc<RecentKeys> {
        &self.recent
    }
}
