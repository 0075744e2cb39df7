//! The SQLite store: one file, one writer thread, a pool of readers.
//!
//! [`open`] prepares the file (WAL, schema), hands the only read-write
//! connection to the writer thread ([`writer`]) and builds an r2d2 pool of
//! read-only connections for everything that only looks ([`Store`]), and
//! a smaller one for searches alone ([`Store::search`]).
//! Nothing else in hookbox opens the database for writing, so our own
//! writes never meet `SQLITE_BUSY` and inserts can be committed in groups.
//!
//! Each write is a [`write::Write`] defined beside the SQL it runs (the
//! feature modules below); the writer runs them without knowing them.
//! A CLI command that writes opens the same pair ([`open_for_cli`]) on a
//! connection of its own, and sends the same writes.

pub mod backup;
pub mod catchup;
pub mod checkpoint;
pub mod counters;
pub mod deliveries;
mod error;
pub mod ingest;
pub mod ip_sets;
pub mod ledger;
pub mod lock;
pub mod models;
pub mod orphans;
pub mod outcomes;
pub mod pauses;
pub mod pull_leases;
pub mod queries;
mod recent;
pub mod rejections;
mod replay;
pub mod retention;
pub mod schema;
pub mod search;
mod syncer;
#[cfg(test)]
pub(crate) mod test_support;
pub mod write;
pub mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::config::{Durability, SearchConfig};
use crate::telemetry::metrics::WriterMetrics;
pub use error::StoreError;
pub use lock::DatabaseLock;
pub use replay::{Replay, ReplayFilter, replay};
pub use writer::WriterHandle;

/// How long a reader waits for a lock before giving up.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Searches that may run at once, each on a connection of its own pool:
/// one search costs up to its deadline of CPU, and on a two-core machine
/// two leave the rest of hookbox a share of it.
const SEARCH_CONNECTIONS: u32 = 2;

/// How long a search waits for one of those connections before it is
/// answered "busy": a few searches' worth of deadlines.
const SEARCH_WAIT: Duration = Duration::from_secs(10);

/// Read access to the database.
#[derive(Clone)]
pub struct Store {
    pool: r2d2::Pool<SqliteConnectionManager>,
    /// Searches only, so that delivery, pull and `/metrics` reads never
    /// queue behind one (`search`'s module doc).
    search_pool: r2d2::Pool<SqliteConnectionManager>,
    /// How long one search may run.
    search_timeout: Duration,
    path: PathBuf,
    /// What the writer thread observes per group, for `/metrics`.
    writer_metrics: WriterMetrics,
}

/// The writer thread, to be joined at shutdown once every handle is gone,
/// and the search indexer's, if search is on.
pub struct WriterThread(JoinHandle<()>, Option<search::indexer::IndexerThread>);

impl WriterThread {
    /// Stops the indexer, then waits for the writer to answer what is
    /// queued, checkpoint and stop.
    pub fn join(self) {
        if let Some(indexer) = self.1 {
            indexer.stop();
        }
        if self.0.join().is_err() {
            tracing::error!("the writer thread panicked");
        }
    }
}

/// Opens (creating if needed) the database at `path`, and with search on
/// its index file beside it, whose indexer starts; with search off, that
/// file is removed and nothing is indexed.
pub fn open(
    path: &Path,
    durability: Durability,
    queue: usize,
    search: &SearchConfig,
) -> anyhow::Result<(Store, WriterHandle, WriterThread)> {
    let conn = open_writer_connection(path)?;
    let indexer = if search.enabled {
        Some(search::indexer::spawn(path)?)
    } else {
        if search::file::remove(path)? {
            // A self-hoster who turned search off does not want the words
            // of bodies kept; turned on again, it is rebuilt.
            tracing::info!("search is off: removed the search index");
        }
        None
    };
    let interrupted = deliveries::interrupt_all(&conn)?;
    if interrupted > 0 {
        tracing::info!(
            events = interrupted,
            "deliveries were left running by the previous run; each counts as an interrupted attempt and is due again"
        );
    }
    let poisoned = Arc::new(AtomicBool::new(false));
    let recent = Arc::new(recent::RecentKeys::default());
    let writer_metrics = WriterMetrics::default();
    let helpers = writer::Helpers {
        metrics: writer_metrics.clone(),
        checkpointer: Some(checkpoint::spawn(path)?),
        syncer: match durability {
            Durability::Full => Some(syncer::spawn(
                path,
                poisoned.clone(),
                writer_metrics.sync_seconds.clone(),
            )?),
            Durability::Normal => None,
        },
        poisoned,
        recent,
        progress: Arc::default(),
        rejections: rejections::RejectionQueue::new(
            rejections::BUFFER,
            writer_metrics.rejections_dropped.clone(),
        ),
        keep_rejections: rejections::KEEP,
    };
    let (store, writer, thread) = start(conn, helpers, queue, path, search.timeout)?;
    Ok((store, writer, WriterThread(thread.0, indexer)))
}

/// Starts the writer thread on `conn` and opens the read pools beside it.
fn start(
    conn: Connection,
    helpers: writer::Helpers,
    queue: usize,
    path: &Path,
    search_timeout: Duration,
) -> anyhow::Result<(Store, WriterHandle, WriterThread)> {
    let writer_metrics = helpers.metrics.clone();
    let (writer, join) = writer::spawn(conn, helpers, queue, path)?;
    // Readers are few (admin API, metrics) and start lazily so an idle
    // hookbox holds one.
    let pool = r2d2::Pool::builder()
        .max_size(4)
        .min_idle(Some(1))
        .build(reader(path))
        .context("opening the read-only connection pool")?;
    // None until someone searches.
    let search_pool = r2d2::Pool::builder()
        .max_size(SEARCH_CONNECTIONS)
        .min_idle(Some(0))
        .connection_timeout(SEARCH_WAIT)
        .build(searcher(path))
        .context("opening the search connection pool")?;
    let store = Store {
        pool,
        search_pool,
        search_timeout,
        path: path.to_path_buf(),
        writer_metrics,
    };
    Ok((store, writer, WriterThread(join, None)))
}

/// Read-only connections to `path`, for a pool.
fn reader(path: &Path) -> SqliteConnectionManager {
    SqliteConnectionManager::file(path)
        .with_flags(OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .with_init(|c| {
            plan_once(c)?;
            c.busy_timeout(BUSY_TIMEOUT)?;
            c.pragma_update(None, "foreign_keys", "ON")?;
            c.pragma_update(None, "query_only", "ON")
        })
}

/// Read-only connections to `path` with its search index attached, for
/// the search pool. Without an index file (not built yet, or search off)
/// the connection opens without it and a search says so.
fn searcher(path: &Path) -> SqliteConnectionManager {
    let db = path.to_path_buf();
    reader(path).with_init(move |c| {
        plan_once(c)?;
        c.busy_timeout(BUSY_TIMEOUT)?;
        c.pragma_update(None, "foreign_keys", "ON")?;
        c.pragma_update(None, "query_only", "ON")?;
        if search::file::path_of(&db).exists()
            && let Err(e) = search::file::attach(c, &db)
        {
            tracing::warn!(error = %format!("{e:#}"), "could not open the search index");
        }
        Ok(())
    })
}

/// The one connection that writes rows: WAL, schema.
///
/// It runs with `synchronous=NORMAL` whatever the durability: with "full"
/// the syncer thread fsyncs the WAL before any answer goes out, which is
/// what `FULL` would do inside the commit, but without stopping the writer.
fn open_writer_connection(path: &Path) -> anyhow::Result<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the database directory {}", dir.display()))?;
    }
    create_private(path)?;
    let mut conn = Connection::open(path)
        .with_context(|| format!("opening the database {}", path.display()))?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .context("switching the database to WAL")?;
    anyhow::ensure!(
        mode.eq_ignore_ascii_case("wal"),
        "the database stayed in {mode} journal mode; WAL is needed (is the file on a network filesystem?)"
    );
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    plan_once(&conn)?;
    // The checkpointer thread does this, off the commit path.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    schema::apply(&mut conn)
        .with_context(|| format!("preparing the schema of {}", path.display()))?;
    Ok(conn)
}

/// Has SQLite plan each statement once, when it is prepared. Otherwise a
/// statement whose `LIMIT` is a bound parameter (the dispatcher's claim,
/// each search step, every list) is parsed and planned again every time
/// it runs, to fit the plan to the limit's value: 7 % of the writer's
/// time while deliveries drain. None of hookbox's plans depend on it.
fn plan_once(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map(drop)
}

/// Creates the database file readable by its owner only, so events and
/// their bodies are not world-readable; SQLite gives the `-wal` and `-shm`
/// files the same mode.
fn create_private(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating the database {}", path.display())),
    }
}

/// Writes a CLI command queues at most; it sends one at a time.
const CLI_QUEUE: usize = 16;

/// The store and a writer of its own for a one-off CLI command that writes
/// (`hookbox replay`, `purge`, `destination`, `catch-up`), which may run
/// while the server does. Its writer is the server's writer thread on a
/// connection of its own: the same writes and groups, each
/// answered once durable (whatever `server.durability` says); its
/// transactions wait for the server's rather than fail with
/// `SQLITE_BUSY`. It never checkpoints on its own account nor indexes for
/// search: the server does both. The database must exist and be at this
/// hookbox's schema version (only `serve` migrates).
pub fn open_for_cli(path: &Path) -> anyhow::Result<(Store, WriterHandle, WriterThread)> {
    anyhow::ensure!(path.exists(), "no database at {}", path.display());
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
        .with_context(|| format!("opening the database {}", path.display()))?;
    plan_once(&conn)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // The syncer fsyncs the WAL before any answer, as in the server.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    anyhow::ensure!(
        version == schema::SCHEMA_VERSION,
        "the database is at schema version {version}, this hookbox expects {}; run `hookbox serve` once to migrate",
        schema::SCHEMA_VERSION
    );
    let poisoned = Arc::new(AtomicBool::new(false));
    let metrics = WriterMetrics::default();
    let helpers = writer::Helpers {
        checkpointer: None,
        syncer: Some(syncer::spawn(
            path,
            poisoned.clone(),
            metrics.sync_seconds.clone(),
        )?),
        poisoned,
        recent: Arc::default(),
        progress: Arc::default(),
        // Nothing is refused here: the queue stays empty.
        rejections: rejections::RejectionQueue::new(1, metrics.rejections_dropped.clone()),
        keep_rejections: rejections::KEEP,
        metrics,
    };
    start(
        conn,
        helpers,
        CLI_QUEUE,
        path,
        SearchConfig::default().timeout,
    )
}

/// A read-only connection for a CLI command that only looks (`hookbox
/// events`, `hookbox backup`): it never takes a write lock, so it works the
/// same whether or not the server runs, and it cannot change a row.
pub fn open_read_only(path: &Path) -> anyhow::Result<Connection> {
    anyhow::ensure!(path.exists(), "no database at {}", path.display());
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening the database {} read-only", path.display()))?;
    plan_once(&conn)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "query_only", "ON")?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .with_context(|| format!("reading the schema version of {}", path.display()))?;
    anyhow::ensure!(
        version == schema::SCHEMA_VERSION,
        "the database is at schema version {version}, this hookbox expects {}; run `hookbox serve` once to migrate",
        schema::SCHEMA_VERSION
    );
    Ok(conn)
}

impl Store {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn writer_metrics(&self) -> &WriterMetrics {
        &self.writer_metrics
    }

    /// Runs `f` on a pooled read-only connection on the blocking pool.
    pub async fn read<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> anyhow::Result<T> + Send + 'static,
    {
        let pool = self.pool.clone();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let conn = pool.get().context("taking a read connection")?;
            f(&conn)
        })
        .await
        .context("the read task failed")?
    }

    /// Runs the search `f` on a connection of the search pool, stopped
    /// after the configured `[search] timeout` ([`search::with_deadline`]).
    pub async fn search<T, F>(&self, f: F) -> Result<T, search::SearchError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> anyhow::Result<T> + Send + 'static,
    {
        let pool = self.search_pool.clone();
        let limit = self.search_timeout;
        let db = self.path.clone();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            // The pool's only failure is its wait running out (a
            // connection that cannot open is retried until then).
            let conn = pool.get().map_err(|e| {
                tracing::debug!(error = %e, "no search connection came free");
                search::SearchError::Busy(SEARCH_WAIT)
            })?;
            if !search::file::attached(&conn)? {
                // Built since this connection opened (or never): try again.
                search::file::attach(&conn, &db)?;
            }
            search::with_deadline(&conn, limit, f)
        })
        .await
        .context("the search task failed")?
    }
}
