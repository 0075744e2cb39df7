//! What the writer does between groups of commands: it waits for the
//! next one, and while none comes it flushes refused requests and indexes
//! bodies for search, in steps short enough that a burst's first group
//! never waits long behind them.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::TransactionBehavior;
use tokio::sync::mpsc;

use super::{FAILURE_LOG_INTERVAL, POISONED, Writer};
use crate::store::rejections::{self, FLUSH_CHUNK, FLUSH_EVERY, Rejection};
use crate::store::search::{self, Indexer};
use crate::store::write::Queued;

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
pub(super) const INDEX_PER_COMMAND: usize = 2;

impl Writer {
    /// The next command; `None` once every handle is gone. While none
    /// waits, the idle jobs take their turns: refused requests once a
    /// [`FLUSH_EVERY`], and the search index once nothing has come for
    /// [`INDEX_WHEN_IDLE`]: tokenizing takes CPU that a burst of ingest
    /// needs (measured: a quarter of the throughput of a saturated
    /// two-core machine when indexed between every two groups), and a
    /// webhook inbox's bursts end.
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
    pub(super) fn index_far_behind(&mut self) -> bool {
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
    pub(super) fn index_step(&mut self, rows: usize) {
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
            self.nudge();
            tracing::trace!(
                events = seen,
                took_us = started.elapsed().as_micros() as u64,
                "search index step"
            );
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
