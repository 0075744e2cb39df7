//! The writer thread: the only read-write connection, and group commit.
//!
//! Every write in hookbox is a [`WriteCmd`] sent to this thread over a
//! bounded channel. The thread blocks for one command, then drains whatever
//! else is already queued (up to [`MAX_BATCH`]) into one `BEGIN IMMEDIATE`
//! transaction, commits once (one fsync for the whole group), and only then
//! answers each command. So a request is acknowledged only after its row is
//! durable, and the cost of the fsync is shared by everyone who was waiting.
//!
//! When the commit fails (disk full, read-only file, I/O error), every
//! command of the group is answered [`StoreError::Unavailable`] and nothing
//! of the group is kept; the next group tries again, so the inbox recovers
//! by itself once the cause is gone.
//!
//! The thread exits when every [`WriterHandle`] has been dropped, after it
//! has answered what was queued and checkpointed the WAL.

use std::thread::JoinHandle;

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::{mpsc, oneshot};

use super::models::{Inserted, NewEvent};

/// Most commands in one transaction: bounds how long the first waiter of a
/// group waits for the last one's work.
pub const MAX_BATCH: usize = 1024;

/// Why the writer could not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The queue is full: the caller should come back shortly.
    #[error("the writer queue is full")]
    Overloaded,
    /// The database did not commit; the reason is for logs, not clients.
    #[error("the database could not commit: {0}")]
    Unavailable(String),
    /// The writer has stopped (shutdown, or it died).
    #[error("the writer has stopped")]
    Closed,
}

/// Everything the writer does, in one place.
pub enum WriteCmd {
    Insert {
        event: NewEvent,
        reply: oneshot::Sender<Result<Inserted, StoreError>>,
    },
    /// Proves the thread is alive and the database takes a commit.
    Ping {
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

impl WriteCmd {
    fn fail(self, err: StoreError) {
        // A dropped receiver means the client went away; nothing to tell.
        match self {
            WriteCmd::Insert { reply, .. } => drop(reply.send(Err(err))),
            WriteCmd::Ping { reply } => drop(reply.send(Err(err))),
        }
    }
}

/// The sending side: cheap to clone, one per part that writes.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<WriteCmd>,
}

impl WriterHandle {
    /// Stores an event, answering once it is committed (or known duplicate).
    pub async fn insert(&self, event: NewEvent) -> Result<Inserted, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(WriteCmd::Insert { event, reply })?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Round-trips a small write through the writer.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(WriteCmd::Ping { reply })?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    fn send(&self, cmd: WriteCmd) -> Result<(), StoreError> {
        self.tx.try_send(cmd).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => StoreError::Overloaded,
            mpsc::error::TrySendError::Closed(_) => StoreError::Closed,
        })
    }
}

/// Starts the writer thread on `conn`, with room for `queue` waiting commands.
pub fn spawn(conn: Connection, queue: usize) -> anyhow::Result<(WriterHandle, JoinHandle<()>)> {
    let (tx, rx) = mpsc::channel(queue);
    let join = std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || Writer { conn }.run(rx))
        .context("starting the writer thread")?;
    Ok((WriterHandle { tx }, join))
}

struct Writer {
    conn: Connection,
}

/// What one command did inside the transaction, before the commit.
enum Applied {
    Inserted(Inserted),
    Done,
}

impl WriteCmd {
    fn answer(self, applied: Applied) {
        match (self, applied) {
            (WriteCmd::Insert { reply, .. }, Applied::Inserted(inserted)) => {
                drop(reply.send(Ok(inserted)))
            }
            (WriteCmd::Ping { reply }, _) => drop(reply.send(Ok(()))),
            (cmd, Applied::Done) => cmd.fail(StoreError::Unavailable("internal: no row id".into())),
        }
    }
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<WriteCmd>) {
        let mut batch = Vec::with_capacity(64);
        while let Some(first) = rx.blocking_recv() {
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(cmd) => batch.push(cmd),
                    Err(_) => break,
                }
            }
            self.commit_group(&mut batch);
        }
        if let Err(e) = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
            tracing::warn!(error = %e, "final WAL checkpoint failed; the next start will finish it");
        }
        tracing::debug!("writer stopped");
    }

    /// Runs `batch` in one transaction, then answers every command in it:
    /// with its result when the commit succeeded, with 503 when it did not.
    fn commit_group(&mut self, batch: &mut Vec<WriteCmd>) {
        match self.apply(batch) {
            Ok(results) => {
                for (cmd, applied) in batch.drain(..).zip(results) {
                    cmd.answer(applied);
                }
            }
            Err(e) => {
                let reason = format!("{e:#}");
                tracing::error!(error = %reason, batch_size = batch.len(), "commit failed; answering 503");
                for cmd in batch.drain(..) {
                    cmd.fail(StoreError::Unavailable(reason.clone()));
                }
            }
        }
    }

    fn apply(&mut self, batch: &[WriteCmd]) -> anyhow::Result<Vec<Applied>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .context("beginning a transaction")?;
        let results = batch
            .iter()
            .map(|cmd| match cmd {
                WriteCmd::Insert { event, .. } => insert(&tx, event).map(Applied::Inserted),
                WriteCmd::Ping { .. } => heartbeat(&tx).map(|()| Applied::Done),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        tx.commit().context("committing")?;
        Ok(results)
    }
}

/// Inserts unless `(source, delivery_id)` is already there; either way
/// returns the row id. A duplicate inside the same group finds the row the
/// earlier command of the group inserted.
fn insert(tx: &rusqlite::Transaction, e: &NewEvent) -> anyhow::Result<Inserted> {
    let new_id = tx
        .prepare_cached(
            "INSERT INTO events (source, delivery_id, event_type, order_key, received_at, origin,
                                 content_type, headers, body, state, next_attempt_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, CASE ?10 WHEN 'pending' THEN ?5 END)
             ON CONFLICT (source, delivery_id) DO NOTHING
             RETURNING id",
        )?
        .query_row(
            params![
                e.source,
                e.delivery_id,
                e.event_type,
                e.order_key,
                e.received_at,
                e.origin.as_str(),
                e.content_type,
                e.headers,
                &e.body[..],
                e.state.as_str(),
            ],
            |r| r.get(0),
        )
        .optional()
        .context("inserting an event")?;
    if let Some(id) = new_id {
        return Ok(Inserted::New(id));
    }
    let id = tx
        .prepare_cached("SELECT id FROM events WHERE source = ?1 AND delivery_id = ?2")?
        .query_row(params![e.source, e.delivery_id], |r| r.get(0))
        .context("finding the stored duplicate")?;
    Ok(Inserted::Duplicate(id))
}

fn heartbeat(tx: &rusqlite::Transaction) -> anyhow::Result<()> {
    tx.prepare_cached(
        "INSERT INTO meta (key, value) VALUES ('heartbeat', ?1)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute([crate::clock::now_ms().to_string()])
    .context("writing the heartbeat")?;
    Ok(())
}
