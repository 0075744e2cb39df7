//! The indexer: a thread of its own that keeps the index file
//! ([`super::file`]) up with the events, off the writer and its WAL.
//!
//! It reads what is new from the database on a read-only connection, by
//! id past its mark, and writes the words with the new mark in one
//! transaction of the index file: after a crash it resumes where the file
//! says, and nothing the database holds is lost if it lags. Batches are
//! large ([`BATCH_ROWS`]): steps no longer hold the writer, and fewer,
//! bigger segments mean less merging. Once it has caught up it looks
//! again every [`POLL`], so new events wait about that long and come in
//! batches of whatever arrived meanwhile.
//!
//! What the database forgets, the index forgets too. Retention and purges
//! bump `meta.events_removed` ([`super::removed`]); when it moved, the
//! indexer sweeps the index in chunks of [`SWEEP_CHUNK`] ids and deletes
//! the words of events that are gone or have no body any more. Until it
//! has, searches join every match to its row and keep only those with a
//! body, so nothing deleted is ever found. An id taken again (the newest
//! events deleted, new ones given the same ids) is seen as the newest id
//! falling below the mark: the index drops what lies past it.
//!
//! It runs at the lowest priority ([`NICE`]): tokenizing is CPU that a
//! burst of ingest wants, and the index may lag.
//!
//! Merging: FTS5's `automerge` is 0; after each batch the indexer merges
//! for about as long as the batch took, and while idle until nothing is
//! left ([`MERGE_PAGES`] a piece).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior, params};

use super::file::{self, MARK, MARK_KEY, SWEPT};
use super::indexable;

/// Most events one batch indexes and most bytes of bodies it reads (one
/// larger body is a batch of its own).
pub const BATCH_ROWS: usize = 4096;
const BATCH_BYTES: usize = 8 * 1024 * 1024;

/// How long the indexer sleeps once it has caught up.
pub const POLL: Duration = Duration::from_millis(50);

/// Leaf pages of merge work per FTS5 `merge` command.
const MERGE_PAGES: i64 = 16;
/// Merge time of an idle round.
const IDLE_MERGE: Duration = Duration::from_millis(20);

/// The indexer's nice value: the kernel gives it a core when nothing
/// else wants one, so during a burst the receive path, the writer and
/// deliveries run first and the index lags, catching up once the burst
/// has passed (at 19, a hundredth or so of a contended core: it never
/// stops altogether). On Linux the value is the thread's own.
const NICE: i32 = 19;

/// Index rows looked at per round of a sweep.
pub const SWEEP_CHUNK: i64 = 2048;

/// The indexer thread, stopped and joined at shutdown.
pub struct IndexerThread {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl IndexerThread {
    /// Stops the indexer after its current round and waits for it.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        if self.thread.join().is_err() {
            tracing::error!("the search indexer thread panicked");
        }
    }
}

/// Opens (checking, or rebuilding) the index of `db` and starts its
/// indexer.
pub fn spawn(db: &Path) -> anyhow::Result<IndexerThread> {
    let main = read_connection(db)?;
    let index = file::open(db, &main)?;
    let mut indexer = Indexer::new(db, main, index)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::Builder::new()
        .name("search-indexer".into())
        .spawn(move || {
            if let Err(e) = rustix::process::setpriority_process(None, NICE) {
                tracing::debug!(error = %e, "could not lower the search indexer's priority");
            }
            indexer.run(&stopping)
        })
        .context("starting the search indexer thread")?;
    Ok(IndexerThread { stop, thread })
}

/// The indexer's view of the database: read-only, so it can never take
/// the writer's lock.
pub(crate) fn read_connection(db: &Path) -> anyhow::Result<Connection> {
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening the database {} for the indexer", db.display()))?;
    conn.busy_timeout(super::super::BUSY_TIMEOUT)?;
    conn.pragma_update(None, "query_only", "ON")?;
    Ok(conn)
}

/// What a round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// Indexed this many events.
    Indexed(usize),
    /// Merged, swept or dropped ids past the newest: more may follow.
    Tidied,
    /// Nothing to do.
    Idle,
}

pub struct Indexer {
    db: PathBuf,
    main: Connection,
    index: Connection,
    /// Every event up to this id has been looked at.
    mark: i64,
    /// Whether the segments may want merging.
    merging: bool,
    /// Where a sweep under way goes on from, and the count of removals
    /// it will have caught up with.
    sweep: Option<(i64, i64)>,
    /// Since when rounds fail, so the log says it once per streak.
    failing: bool,
}

impl Indexer {
    pub fn new(db: &Path, main: Connection, index: Connection) -> anyhow::Result<Indexer> {
        let mark = file::read_i64(&index, MARK)?.unwrap_or(0);
        Ok(Indexer {
            db: db.to_path_buf(),
            main,
            index,
            mark,
            merging: true,
            sweep: None,
            failing: false,
        })
    }

    fn run(&mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            match self.round() {
                Ok(Round::Indexed(n)) if n >= BATCH_ROWS => {}
                Ok(Round::Tidied) => {}
                // A short batch: let the next one gather.
                Ok(Round::Indexed(_) | Round::Idle) => std::thread::park_timeout(POLL),
                Err(e) if is_damaged(&e) => {
                    tracing::error!(error = %format!("{e:#}"), "the search index file is damaged; it is removed and rebuilt at the next start, and searches may miss events until then");
                    if let Err(e) = file::remove(&self.db) {
                        tracing::error!(error = %format!("{e:#}"), "could not remove the damaged search index");
                    }
                    return;
                }
                Err(e) => {
                    if !self.failing {
                        self.failing = true;
                        tracing::warn!(error = %format!("{e:#}"), "search indexing failed; it is tried again");
                    }
                    std::thread::park_timeout(POLL * 20);
                }
            }
        }
    }

    /// Indexes the next batch, or merges, sweeps or drops ids past the
    /// newest event when there is nothing to index.
    pub fn round(&mut self) -> anyhow::Result<Round> {
        let outcome = self.try_round();
        if outcome.is_ok() && self.failing {
            self.failing = false;
            tracing::info!("search indexing works again");
        }
        outcome
    }

    fn try_round(&mut self) -> anyhow::Result<Round> {
        let newest = file::newest(&self.main)?;
        if newest < self.mark {
            self.forget_past(newest)?;
            return Ok(Round::Tidied);
        }
        if newest > self.mark {
            let started = Instant::now();
            let seen = self.index_batch()?;
            if self.merging || seen > 0 {
                self.merge(started.elapsed())?;
            }
            return Ok(Round::Indexed(seen));
        }
        if self.merging {
            self.merge(IDLE_MERGE)?;
            return Ok(Round::Tidied);
        }
        if self.sweep_step()? {
            return Ok(Round::Tidied);
        }
        Ok(Round::Idle)
    }

    /// Reads the next events past the mark, up to [`BATCH_ROWS`] or
    /// [`BATCH_BYTES`], and indexes them with the new mark.
    fn index_batch(&mut self) -> anyhow::Result<usize> {
        // Read first, on the database's snapshot, and let it go before
        // writing: the read would otherwise keep the checkpointer from
        // the WAL's end for the whole write.
        let mut texts: Vec<(i64, String)> = Vec::new();
        let (mut seen, mut mark, mut mark_key, mut bytes) = (0, self.mark, None, 0);
        {
            let mut select = self.main.prepare_cached(
                "SELECT id, body, source || char(0) || delivery_id FROM events
                 WHERE id > ?1 ORDER BY id LIMIT ?2",
            )?;
            let mut rows = select.query(params![self.mark, BATCH_ROWS as i64])?;
            while let Some(row) = rows.next().context("reading events to index")? {
                let body = row.get_ref(1)?.as_blob_or_null()?;
                if let Some(text) = body.and_then(indexable) {
                    texts.push((row.get(0)?, text.to_owned()));
                }
                bytes += body.map_or(0, <[u8]>::len);
                seen += 1;
                mark = row.get(0)?;
                mark_key = Some(row.get::<_, String>(2)?);
                if bytes >= BATCH_BYTES {
                    break;
                }
            }
        }
        if seen == 0 {
            return Ok(0);
        }
        let tx = self
            .index
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .context("beginning a search index batch")?;
        {
            let mut insert =
                tx.prepare_cached("INSERT INTO events_fts (rowid, body) VALUES (?1, ?2)")?;
            for (id, text) in &texts {
                insert
                    .execute(params![id, text])
                    .context("indexing an event")?;
            }
        }
        file::write_state(&tx, MARK, mark)?;
        file::write_state(&tx, MARK_KEY, mark_key)?;
        tx.commit().context("committing a search index batch")?;
        self.mark = mark;
        self.merging = true;
        Ok(seen)
    }

    /// Merges for about `time` (at least one piece), in a transaction of
    /// its own.
    fn merge(&mut self, time: Duration) -> anyhow::Result<()> {
        let tx = self
            .index
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .context("beginning a search index merge")?;
        let more = merge(&tx, time)?;
        tx.commit().context("committing a search index merge")?;
        self.merging = more;
        Ok(())
    }

    /// The newest events were deleted and their ids may be given again:
    /// drops the words past `newest` and moves the mark back to it.
    fn forget_past(&mut self, newest: i64) -> anyhow::Result<()> {
        let tx = self
            .index
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .context("beginning to drop ids past the newest event")?;
        let ids: Vec<i64> = tx
            .prepare_cached("SELECT id FROM events_fts_docsize WHERE id > ?1")?
            .query_map([newest], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()
            .context("reading ids past the newest event")?;
        delete(&tx, &ids)?;
        file::write_state(&tx, MARK, newest)?;
        file::write_state(&tx, MARK_KEY, None::<String>)?;
        tx.commit()
            .context("committing the drop of ids past the newest event")?;
        tracing::debug!(
            dropped = ids.len(),
            newest,
            "the newest events were deleted"
        );
        self.mark = newest;
        Ok(())
    }

    /// One chunk of a sweep; starts one when the database has removed
    /// events or bodies since the last. Whether it did anything.
    fn sweep_step(&mut self) -> anyhow::Result<bool> {
        let (from, target) = match self.sweep {
            Some(at) => at,
            None => {
                let removed = super::removals(&self.main)?;
                let swept = file::read_i64(&self.index, SWEPT)?.unwrap_or(0);
                if removed == swept {
                    return Ok(false);
                }
                (0, removed)
            }
        };
        let ids: Vec<i64> = self
            .index
            .prepare_cached("SELECT id FROM events_fts_docsize WHERE id > ?1 ORDER BY id LIMIT ?2")?
            .query_map(params![from, SWEEP_CHUNK], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()
            .context("reading indexed ids to sweep")?;
        let mut gone = Vec::new();
        {
            let mut kept = self
                .main
                .prepare_cached("SELECT body IS NOT NULL FROM events WHERE id = ?1")?;
            for &id in &ids {
                let has_body: Option<bool> = kept
                    .query_row([id], |r| r.get(0))
                    .map(Some)
                    .or_else(|e| match e {
                        rusqlite::Error::QueryReturnedNoRows => Ok(None),
                        e => Err(e),
                    })
                    .context("looking up an indexed event")?;
                if has_body != Some(true) {
                    gone.push(id);
                }
            }
        }
        let tx = self
            .index
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .context("beginning a sweep of the search index")?;
        delete(&tx, &gone)?;
        let done = (ids.len() as i64) < SWEEP_CHUNK;
        if done {
            file::write_state(&tx, SWEPT, target)?;
        }
        tx.commit()
            .context("committing a sweep of the search index")?;
        if !gone.is_empty() {
            self.merging = true;
        }
        self.sweep = match ids.last() {
            Some(&last) if !done => Some((last, target)),
            _ => None,
        };
        Ok(true)
    }
}

fn delete(conn: &Connection, ids: &[i64]) -> anyhow::Result<()> {
    let mut delete = conn.prepare_cached("DELETE FROM events_fts WHERE rowid = ?1")?;
    for id in ids {
        delete
            .execute([id])
            .context("deleting an event from the search index")?;
    }
    Ok(())
}

/// Merges the index's segments, one [`MERGE_PAGES`] piece after another,
/// until FTS5 has no merge left to do or `time` has passed (after at
/// least one piece); returns whether work may remain. A piece merges
/// only on a level holding `usermerge` (4) segments or more, so an index
/// that has caught up is left alone.
fn merge(conn: &Connection, time: Duration) -> anyhow::Result<bool> {
    let mut piece =
        conn.prepare_cached("INSERT INTO events_fts (events_fts, rank) VALUES ('merge', ?1)")?;
    let started = Instant::now();
    loop {
        let before = conn.total_changes();
        piece
            .execute([MERGE_PAGES])
            .context("merging the search index")?;
        // FTS5's documented signal: a piece that did nothing changes
        // fewer than two rows.
        if conn.total_changes() - before < 2 {
            return Ok(false);
        }
        if started.elapsed() >= time {
            return Ok(true);
        }
    }
}

/// Whether `e` says the index file is damaged rather than busy or full.
fn is_damaged(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<rusqlite::Error>(),
            Some(rusqlite::Error::SqliteFailure(f, _))
                if matches!(f.code, ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::queries::{EventFilter, list_events};
    use crate::store::search::SearchQuery;
    use crate::store::search::fixture::Fixture;

    /// The ids `q` finds through the listing's own query, newest first.
    fn found(fx: &Fixture, q: &str) -> Vec<i64> {
        let filter = EventFilter {
            q: Some(SearchQuery::parse(q).unwrap()),
            limit: 100,
            ..EventFilter::default()
        };
        list_events(fx, &filter)
            .unwrap()
            .events
            .iter()
            .map(|e| e.id)
            .collect()
    }

    fn indexed(fx: &Fixture) -> i64 {
        fx.query_row("SELECT count(*) FROM search.events_fts_docsize", [], |r| {
            r.get(0)
        })
        .unwrap()
    }

    fn segments(fx: &Fixture) -> i64 {
        fx.query_row(
            "SELECT count(DISTINCT segid) FROM search.events_fts_idx",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    #[test]
    fn a_restart_resumes_at_the_mark_and_a_search_says_how_far_it_got() {
        let mut fx = Fixture::new();
        let first = fx.add(b"kept word");
        assert_eq!(fx.index_all(), 1);
        let second = fx.add(b"kept again");
        let filter = EventFilter {
            q: Some(SearchQuery::parse("kept").unwrap()),
            limit: 10,
            ..EventFilter::default()
        };
        let page = list_events(&fx, &filter).unwrap();
        assert_eq!(page.events.len(), 1);
        assert_eq!(
            page.search,
            Some(crate::store::search::Coverage {
                indexed_through: first,
                not_yet_indexed: 1
            })
        );
        // A new indexer (a restart) starts from the mark in the file: the
        // first event is not indexed twice.
        fx.ix = Fixture::indexer(&fx.path);
        assert_eq!(fx.index_all(), 1);
        assert_eq!(found(&fx, "kept"), [second, first]);
        assert_eq!(
            list_events(&fx, &filter).unwrap().search.unwrap(),
            crate::store::search::Coverage {
                indexed_through: second,
                not_yet_indexed: 0
            }
        );
    }

    #[test]
    fn deleted_events_and_dropped_bodies_are_never_found_and_a_sweep_takes_them_out() {
        let mut fx = Fixture::new();
        let gone = fx.add(b"alpha one");
        let dropped = fx.add(b"alpha two");
        let kept = fx.add(b"alpha three");
        fx.index_all();
        fx.delete(gone);
        fx.execute("UPDATE events SET body = NULL WHERE id = ?1", [dropped])
            .unwrap();
        crate::store::search::removed(&fx, 1).unwrap();
        // Not yet swept, and already not found.
        assert_eq!(indexed(&fx), 3);
        assert_eq!(found(&fx, "alpha"), [kept]);
        assert!(found(&fx, "two").is_empty());
        fx.index_all();
        assert_eq!(indexed(&fx), 1);
        assert_eq!(found(&fx, "alpha"), [kept]);
        // Swept once: nothing more to do until the next removal.
        assert!(!fx.ix.sweep_step().unwrap());
    }

    #[test]
    fn ids_given_again_after_the_newest_were_deleted_are_indexed_anew() {
        let mut fx = Fixture::new();
        let a = fx.add(b"first alpha");
        let b = fx.add(b"second bravo");
        fx.index_all();
        fx.delete(b);
        // SQLite gives the next row the deleted id again.
        let c = fx.add(b"third charlie");
        assert_eq!(c, b);
        // The indexer saw the newest id drop below its mark meanwhile.
        fx.delete(c);
        assert_eq!(fx.ix.round().unwrap(), Round::Tidied);
        let c = fx.add(b"third charlie");
        fx.index_all();
        assert!(found(&fx, "bravo").is_empty());
        assert_eq!(found(&fx, "charlie"), [c]);
        assert_eq!(found(&fx, "first"), [a]);
    }

    #[test]
    fn a_missing_damaged_foreign_or_newer_index_file_is_rebuilt() {
        let mut fx = Fixture::new();
        let ids = [fx.add(b"one word"), fx.add(b"two word")];
        fx.index_all();
        let file = file::path_of(&fx.path);
        // Whatever the file holds now, a restart's indexer, and how many
        // events it indexed (again).
        let restart = |fx: &mut Fixture| {
            let _ = fx.conn.execute_batch("DETACH DATABASE search");
            fx.ix = Fixture::indexer(&fx.path);
            file::attach(&fx.conn, &fx.path).unwrap();
            let again = fx.index_all();
            assert_eq!(found(fx, "word").len(), 2);
            again
        };
        // As it was: nothing indexed again.
        assert_eq!(restart(&mut fx), 0);
        // Missing.
        fx.conn.execute_batch("DETACH DATABASE search").unwrap();
        assert!(file::remove(&fx.path).unwrap());
        file::attach(&fx.conn, &fx.path).unwrap_err();
        assert_eq!(restart(&mut fx), 2);
        // Not a database.
        fx.conn.execute_batch("DETACH DATABASE search").unwrap();
        file::remove(&fx.path).unwrap();
        std::fs::write(&file, [b'x'; 4096]).unwrap();
        assert_eq!(restart(&mut fx), 2);
        // Of another database: the event at its mark is another.
        fx.execute(
            "UPDATE search.state SET value = 'x' WHERE key = ?1",
            [MARK_KEY],
        )
        .unwrap();
        assert_eq!(restart(&mut fx), 2);
        // Newer than the database (a backup restored over it).
        fx.execute(
            "UPDATE search.state SET value = ?2 WHERE key = ?1",
            params![MARK, ids[1] + 5],
        )
        .unwrap();
        assert_eq!(restart(&mut fx), 2);
    }

    #[test]
    fn fts5_never_merges_by_itself_and_batches_merge_the_segments_they_add() {
        let mut fx = Fixture::new();
        let automerge: i64 = fx
            .query_row(
                "SELECT v FROM search.events_fts_config WHERE k = 'automerge'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(automerge, 0);
        // Each one-event batch flushes a segment of its own; without merge
        // work, 60 of them leave 15 segments (FTS5's crisis merge folds 16
        // on a level into one). With it, no level keeps four (FTS5's
        // `usermerge`), and 60 events fit on three levels: at most 9.
        for i in 0..60 {
            fx.add(format!("word{i} shared").as_bytes());
            assert_eq!(fx.ix.round().unwrap(), Round::Indexed(1));
        }
        fx.index_all();
        let after = segments(&fx);
        assert!((1..=9).contains(&after), "{after} segments");
        assert_eq!(found(&fx, "shared").len(), 60);
    }
}
