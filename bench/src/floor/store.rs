//! The least a durable SQLite inbox does per event, with nothing else
//! sharing the machine: the ceiling hookbox's ingest is read against.

use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rusqlite::{Connection, params};
use serde_json::{Value, json};

/// A GitHub push of the size the load generators send (1.8 KiB).
const BODY_LEN: usize = 1_850;

/// As often as hookbox's checkpointer runs (`src/store/checkpoint.rs`).
const CHECKPOINT_EVERY: Duration = Duration::from_millis(25);

/// WAL pages at which SQLite checkpoints in a commit and starts the WAL
/// over: hookbox's restart threshold.
const RESTART_PAGES: u32 = 4_096;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Ids {
    /// GUID-shaped, anywhere in the index, as GitHub sends them.
    Random,
    /// Numbered in arrival order: every insert lands on the index's last page.
    Sequential,
}

impl Ids {
    fn name(self) -> &'static str {
        match self {
            Ids::Random => "random",
            Ids::Sequential => "sequential",
        }
    }
}

pub struct Figure {
    ids: Ids,
    group: usize,
    events: u64,
    seconds: f64,
    syncs: u64,
    sync_busy: Duration,
    written: Option<u64>,
}

impl Figure {
    fn per_sec(&self) -> f64 {
        self.events as f64 / self.seconds
    }

    fn written_per_event(&self) -> Option<u64> {
        self.written.map(|w| w / self.events.max(1))
    }

    pub fn json(&self) -> Value {
        json!({
            "floor": "store",
            "ids": self.ids.name(),
            "group": self.group,
            "events_per_sec": self.per_sec(),
            "syncs": self.syncs,
            "sync_avg_ms": self.sync_avg_ms(),
            "syncer_busy": self.sync_busy.as_secs_f64() / self.seconds,
            "written_per_event": self.written_per_event(),
        })
    }

    fn sync_avg_ms(&self) -> f64 {
        self.sync_busy.as_secs_f64() * 1e3 / self.syncs.max(1) as f64
    }
}

impl fmt::Display for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "store: {} ids, groups of {}: {:.0} durable events/s, {} WAL fsyncs of {:.2} ms on average (syncer busy {:.0} %)",
            self.ids.name(),
            self.group,
            self.per_sec(),
            self.syncs,
            self.sync_avg_ms(),
            self.sync_busy.as_secs_f64() / self.seconds * 100.0,
        )?;
        if let Some(w) = self.written_per_event() {
            write!(f, ", {:.1} KB written per event", w as f64 / 1e3)?;
        }
        Ok(())
    }
}

/// What the writer has committed and the syncer has made durable, in
/// events, and whether the run is over.
#[derive(Default)]
struct Progress {
    committed: u64,
    synced: u64,
    done: bool,
    failed: Option<String>,
}

#[derive(Default)]
struct Shared {
    progress: Mutex<Progress>,
    /// The writer committed, or the run ended.
    committed: Condvar,
    /// The syncer synced.
    synced: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Progress> {
        // A thread that panicked holding the lock left counts, not broken state.
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Inserts events for `run_for` in groups of `group`, each group answered
/// (counted) only once the WAL holding it is fsynced. Like hookbox, the
/// writer builds the next group while the previous one is synced, and no
/// further: the requests of a third group would still be waiting for
/// their answers.
pub fn measure(dir: &Path, ids: Ids, group: usize, run_for: Duration) -> Result<Figure> {
    if group == 0 {
        bail!("--group must be at least 1");
    }
    let scratch = tempfile::Builder::new()
        .prefix("hookbox-floor-store")
        .tempdir_in(dir)
        .with_context(|| format!("making a scratch directory in {}", dir.display()))?;
    let db = scratch.path().join("floor.db");
    let conn = open(&db)?;
    let wal = File::options()
        .write(true)
        .open(scratch.path().join("floor.db-wal"))
        .context("opening the WAL")?;
    let shared = Arc::new(Shared::default());
    let written_before = written_bytes();

    let syncer = {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || sync_loop(&wal, &shared))
    };
    let checkpointer = {
        let shared = Arc::clone(&shared);
        let db = db.clone();
        std::thread::spawn(move || checkpoint_loop(&db, &shared))
    };
    let started = Instant::now();
    let inserted = insert_loop(&conn, ids, group, run_for, &shared);
    let events = {
        let mut p = shared.lock();
        if inserted.is_ok() {
            let last = p.committed;
            while p.synced < last && p.failed.is_none() {
                p = shared.synced.wait(p).unwrap_or_else(|e| e.into_inner());
            }
        }
        p.done = true;
        shared.committed.notify_all();
        p.synced
    };
    let seconds = started.elapsed().as_secs_f64();
    let (syncs, sync_busy) = syncer
        .join()
        .map_err(|_| anyhow::anyhow!("the syncer thread panicked"))?;
    checkpointer
        .join()
        .map_err(|_| anyhow::anyhow!("the checkpoint thread panicked"))??;
    inserted?;
    if let Some(failed) = shared.lock().failed.take() {
        bail!("{failed}");
    }
    let rows: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
    if u64::try_from(rows) != Ok(events) {
        bail!("{events} events were answered but the table holds {rows}");
    }
    Ok(Figure {
        ids,
        group,
        events,
        seconds,
        syncs,
        sync_busy,
        written: written_before.zip(written_bytes()).map(|(a, b)| b - a),
    })
}

fn open(db: &Path) -> Result<Connection> {
    let conn = Connection::open(db).with_context(|| format!("opening {}", db.display()))?;
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = NORMAL;
         PRAGMA wal_autocheckpoint = {RESTART_PAGES};
         CREATE TABLE events (
             id          INTEGER PRIMARY KEY,
             source      TEXT    NOT NULL,
             delivery_id TEXT    NOT NULL,
             event_type  TEXT,
             received_at INTEGER NOT NULL,
             headers     TEXT    NOT NULL,
             body        BLOB,
             UNIQUE (source, delivery_id)
         );"
    ))
    .context("creating the table")?;
    Ok(conn)
}

fn insert_loop(
    conn: &Connection,
    ids: Ids,
    group: usize,
    run_for: Duration,
    shared: &Shared,
) -> Result<()> {
    let body: Vec<u8> = (0..BODY_LEN)
        .map(|_| fastrand::alphanumeric() as u8)
        .collect();
    let mut insert = conn.prepare(
        "INSERT INTO events (source, delivery_id, event_type, received_at, headers, body)
         VALUES ('github', ?1, 'push', ?2, '{\"x-github-event\":\"push\"}', ?3)
         ON CONFLICT DO NOTHING RETURNING id",
    )?;
    let started = Instant::now();
    let mut n: u64 = 0;
    while started.elapsed() < run_for {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        for _ in 0..group {
            n += 1;
            let id = match ids {
                Ids::Random => guid(fastrand::u128(..)),
                Ids::Sequential => format!("{n:036}"),
            };
            let _: i64 = insert
                .query_row(params![id, n as i64, body], |r| r.get(0))
                .context("inserting an event")?;
        }
        conn.execute_batch("COMMIT")?;
        let mut p = shared.lock();
        p.committed = n;
        shared.committed.notify_one();
        let before = n - group as u64;
        while p.synced < before && p.failed.is_none() {
            p = shared.synced.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(failed) = &p.failed {
            bail!("{failed}");
        }
    }
    Ok(())
}

fn guid(x: u128) -> String {
    let hex = format!("{x:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Fsyncs the WAL whenever something was committed since the last fsync;
/// returns how many fsyncs it made and how long they took.
fn sync_loop(wal: &File, shared: &Shared) -> (u64, Duration) {
    let (mut syncs, mut busy) = (0, Duration::ZERO);
    let mut p = shared.lock();
    loop {
        while p.committed == p.synced && !p.done {
            p = shared.committed.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        if p.committed == p.synced {
            return (syncs, busy);
        }
        let covers = p.committed;
        drop(p);
        let t = Instant::now();
        let synced = wal.sync_data();
        busy += t.elapsed();
        syncs += 1;
        p = shared.lock();
        match synced {
            Ok(()) => p.synced = covers,
            Err(e) => {
                p.failed = Some(format!("fdatasync of the WAL: {e}"));
                shared.synced.notify_all();
                return (syncs, busy);
            }
        }
        shared.synced.notify_all();
    }
}

/// Copies WAL pages into the database file every [`CHECKPOINT_EVERY`]
/// without taking the write lock, then fsyncs the database file.
fn checkpoint_loop(db: &Path, shared: &Shared) -> Result<()> {
    let conn = Connection::open(db).context("opening the checkpoint connection")?;
    let file = File::options()
        .write(true)
        .open(db)
        .context("opening the database file")?;
    loop {
        std::thread::sleep(CHECKPOINT_EVERY);
        if shared.lock().done {
            return Ok(());
        }
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .context("checkpointing")?;
        file.sync_data().context("fsyncing the database file")?;
    }
}

/// Bytes this process has had written to storage, where Linux tells.
fn written_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_it_counts_is_in_the_table() {
        let dir = tempfile::tempdir().unwrap();
        for ids in [Ids::Random, Ids::Sequential] {
            let f = measure(dir.path(), ids, 8, Duration::from_millis(200)).unwrap();
            assert!(f.events >= 8, "{f}");
            assert_eq!(f.events % 8, 0, "whole groups only: {f}");
            assert!(f.syncs >= 1, "{f}");
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the scratch database is removed"
        );
    }

    #[test]
    fn random_ids_are_guid_shaped() {
        let g = guid(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(g, "01234567-89ab-cdef-0123-456789abcdef");
    }
}
