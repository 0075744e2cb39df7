//! What a write is: a change that a feature defines beside its SQL, which the
//! writer thread runs without knowing what it does.
//!
//! A feature adds a write by implementing [`Write`] next to its statements
//! (`deliveries::writes`, `pull_leases`, `catchup`, ...) and sending it with
//! [`super::WriterHandle::write`]; nothing in the writer, the syncer or the
//! handle changes. The writer only knows what the trait says: how to apply
//! the write inside the group's transaction, whether its answer may go out
//! at the commit or must wait until the group is durable, and whether its
//! sender waits for room in the queue. The CLI sends the same writes to a
//! writer of its own (`super::open_for_cli`), so there is one write path.
//!
//! In the queue a write travels as a [`Queued`]: the write, its output once
//! applied, and the channel its asker waits on, its type forgotten so that
//! one channel carries every kind.

use rusqlite::Transaction;
use tokio::sync::oneshot;

use super::counters::Tally;
use super::error::StoreError;

/// One write, run by the writer inside a group's transaction; rolled back
/// alone if it fails (the group runs again, each write under a savepoint
/// of its own).
pub trait Write: Send + 'static {
    /// What the asker is answered.
    type Output: Send + 'static;

    /// Answered as soon as the group commits, before it is durable. Only
    /// for writes whose loss in a power cut breaks no promise: a claim
    /// only sets a lease, and a lost lease means the event is delivered
    /// again, which at-least-once delivery allows; answering those at once
    /// keeps delivery off the fsync's path.
    const AT_COMMIT: bool = false;

    /// The sender waits for room in the writer's queue rather than being
    /// answered [`StoreError::Overloaded`]: for writes that are in no hurry
    /// or must not be lost, which then queue behind ingest.
    const WAITS_FOR_ROOM: bool = false;

    /// Applies the write, adding what it counts ([`super::counters`]) to
    /// `tally`. An `Err` rolls back this write alone and answers it
    /// [`StoreError::Unavailable`]; what it counted is not counted. It may
    /// run twice, the first time rolled back (another write of its group
    /// failed): it changes nothing but the database and `tally`.
    fn apply(&mut self, tx: &Transaction, tally: &mut Tally) -> anyhow::Result<Self::Output>;

    /// Runs just before the answer goes out, once the write is durable (or
    /// committed, with [`Self::AT_COMMIT`]), in commit order: where what is
    /// kept in memory follows what is on disk.
    fn answered(&self, _output: &Self::Output) {}

    /// Runs when the write is answered with `err`, for a write whose
    /// sender may no longer be there to hear it.
    fn failed(&self, _err: &StoreError) {}
}

/// A queued write, whatever its kind.
pub(super) trait Queued: Send {
    /// Applies the write, keeping its output for the answer.
    fn apply(&mut self, tx: &Transaction, tally: &mut Tally) -> anyhow::Result<()>;
    /// [`Write::AT_COMMIT`].
    fn at_commit(&self) -> bool;
    /// Answers with the output kept by [`Queued::apply`]. A dropped
    /// receiver means the asker went away; there is nobody to tell.
    fn answer(self: Box<Self>);
    fn fail(self: Box<Self>, err: StoreError);
}

/// A write on its way, with the channel its answer goes to.
pub(super) struct Asked<W: Write> {
    write: W,
    output: Option<W::Output>,
    reply: oneshot::Sender<Result<W::Output, StoreError>>,
}

/// Where the answer to a queued write comes.
pub(super) type Answer<T> = oneshot::Receiver<Result<T, StoreError>>;

/// `write`, ready for the queue, and where its answer will come.
pub(super) fn ask<W: Write>(write: W) -> (Box<dyn Queued>, Answer<W::Output>) {
    let (reply, rx) = oneshot::channel();
    let asked = Asked {
        write,
        output: None,
        reply,
    };
    (Box::new(asked), rx)
}

impl<W: Write> Queued for Asked<W> {
    fn apply(&mut self, tx: &Transaction, tally: &mut Tally) -> anyhow::Result<()> {
        // Run again after a rolled-back first run, a failure must not leave
        // that run's output to be answered.
        self.output = None;
        self.output = Some(self.write.apply(tx, tally)?);
        Ok(())
    }

    fn at_commit(&self) -> bool {
        W::AT_COMMIT
    }

    fn answer(self: Box<Self>) {
        let Asked {
            write,
            output,
            reply,
        } = *self;
        match output {
            Some(output) => {
                write.answered(&output);
                drop(reply.send(Ok(output)));
            }
            // Only a writer that answers what it did not apply gets here.
            None => {
                let err =
                    StoreError::Unavailable("internal: answered before it was applied".into());
                write.failed(&err);
                drop(reply.send(Err(err)));
            }
        }
    }

    fn fail(self: Box<Self>, err: StoreError) {
        self.write.failed(&err);
        drop(self.reply.send(Err(err)));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use anyhow::Context as _;

    use super::*;
    use crate::config::{Durability, SearchConfig};

    /// A write no module of the store defines: it keeps a note in `meta`,
    /// or fails when told to, saying so through `failed`.
    struct Note {
        text: &'static str,
        fail: bool,
        heard_failure: Arc<AtomicBool>,
    }

    impl Write for Note {
        type Output = usize;

        fn apply(&mut self, tx: &Transaction, _: &mut Tally) -> anyhow::Result<usize> {
            let n = tx
                .execute(
                    "INSERT INTO meta (key, value) VALUES (?1, 'noted')",
                    [self.text],
                )
                .context("keeping a note")?;
            anyhow::ensure!(!self.fail, "told to fail");
            Ok(n)
        }

        fn failed(&self, _: &StoreError) {
            self.heard_failure.store(true, Ordering::Relaxed);
        }
    }

    fn note(text: &'static str, fail: bool) -> (Note, Arc<AtomicBool>) {
        let heard_failure = Arc::new(AtomicBool::new(false));
        let note = Note {
            text,
            fail,
            heard_failure: heard_failure.clone(),
        };
        (note, heard_failure)
    }

    #[tokio::test]
    async fn a_write_the_writer_never_heard_of_is_run_in_a_group_and_answered_once_durable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hookbox.db");
        let (store, writer, thread) =
            crate::store::open(&path, Durability::Full, 16, &SearchConfig::default()).unwrap();
        let (kept, kept_failed) = note("kept", false);
        let (refused, refused_failed) = note("refused", true);
        let (kept, refused) = tokio::join!(writer.write(kept), writer.write(refused));
        assert_eq!(kept.unwrap(), 1);
        let Err(StoreError::Unavailable(reason)) = refused else {
            panic!("a write that fails is answered unavailable");
        };
        assert!(reason.contains("told to fail"), "{reason}");
        assert!(!kept_failed.load(Ordering::Relaxed));
        assert!(
            refused_failed.load(Ordering::Relaxed),
            "its own failure hook ran"
        );
        let notes: Vec<String> = store
            .read(|c| {
                let mut stmt = c.prepare("SELECT key FROM meta WHERE value = 'noted'")?;
                let keys = stmt.query_map([], |r| r.get(0))?;
                Ok(keys.collect::<rusqlite::Result<_>>()?)
            })
            .await
            .unwrap();
        assert_eq!(notes, ["kept"], "the failed write alone was rolled back");
        drop(writer);
        thread.join();
    }

    #[tokio::test]
    async fn the_cli_runs_the_same_writes_on_a_writer_of_its_own_beside_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hookbox.db");
        let (_server_store, server, server_thread) =
            crate::store::open(&path, Durability::Full, 16, &SearchConfig::default()).unwrap();
        let (store, cli, cli_thread) = crate::store::open_for_cli(&path).unwrap();
        let (by_cli, _) = note("by the cli", false);
        let (by_server, _) = note("by the server", false);
        assert_eq!(cli.write(by_cli).await.unwrap(), 1);
        assert_eq!(server.write(by_server).await.unwrap(), 1);
        let notes: i64 = store
            .read(|c| {
                Ok(
                    c.query_row("SELECT count(*) FROM meta WHERE value = 'noted'", [], |r| {
                        r.get(0)
                    })?,
                )
            })
            .await
            .unwrap();
        assert_eq!(notes, 2);
        drop(cli);
        cli_thread.join();
        drop(server);
        server_thread.join();
    }
}
