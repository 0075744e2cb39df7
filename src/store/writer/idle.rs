//! What the writer does between groups of commands: it waits for the
//! next one, and while none comes it flushes refused requests. (Search
//! indexing has a thread and a file of its own: `store::search::indexer`.)

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::TransactionBehavior;
use tokio::sync::mpsc;

use super::{FAILURE_LOG_INTERVAL, POISONED, Writer};
use crate::store::rejections::{self, FLUSH_CHUNK, FLUSH_EVERY, Rejection};
use crate::store::write::Queued;

/// The shortest wait for a command, so a flush that is due just now does
/// not spin.
const IDLE_POLL: Duration = Duration::from_millis(2);

impl Writer {
    /// The next command; `None` once every handle is gone. While none
    /// waits, refused requests are flushed once a [`FLUSH_EVERY`].
    pub(super) fn next_command(
        &mut self,
        rx: &mut mpsc::Receiver<Box<dyn Queued>>,
        timer: Option<&tokio::runtime::Runtime>,
    ) -> Option<Box<dyn Queued>> {
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
            // Wait for a command, but not past the next flush's turn.
            let wait = if self.helpers.rejections.1.is_empty() {
                FLUSH_EVERY
            } else {
                FLUSH_EVERY.saturating_sub(self.last_flush.elapsed())
            };
            let next = match timer {
                Some(timer) => timer.block_on(async {
                    tokio::time::timeout(wait.max(IDLE_POLL), rx.recv())
                        .await
                        .ok()
                }),
                None => Some(rx.blocking_recv()),
            };
            match next {
                Some(Some(cmd)) => return Some(cmd),
                Some(None) => return None,
                None => continue,
            }
        }
    }

    /// Whether refused requests wait and the last flush was `every` ago.
    pub(super) fn rejections_due(&self, every: Duration) -> bool {
        !self.helpers.rejections.1.is_empty() && self.last_flush.elapsed() >= every
    }

    /// Flushes one chunk of waiting refused requests ([`FLUSH_CHUNK`]) in
    /// a transaction of its own; once none wait, the next flush is a
    /// [`FLUSH_EVERY`] away. Records that cannot be written are dropped
    /// and counted: they must not hold the writer, nor pile up while the
    /// disk is full.
    pub(super) fn flush_rejections(&mut self) {
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
        let written = rejections::insert(&tx, rows, self.helpers.keep_rejections, &mut self.folds)
            .and_then(|()| tx.commit().context("committing"));
        if written.is_err() {
            // Rolled back: the rows it remembered may not exist, and their
            // ids will be given again.
            self.folds = rejections::Folds::default();
        }
        written?;
        self.nudge();
        Ok(())
    }
}
