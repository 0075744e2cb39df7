//! The search index's own database file, `<database>.search` beside the
//! database (`hookbox.db.search`, with its `-wal` and `-shm`).
//!
//! It holds nothing that cannot be made again from the events' bodies:
//! the FTS5 table `events_fts` (contentless, as schema 11 had it in the
//! database) and `state`, where the indexer keeps how far it got. So it
//! is written with relaxed durability (WAL, `synchronous = NORMAL`: no
//! fsync per commit; a power cut loses the last steps, never the file's
//! consistency), kept out of backups, and rebuilt from the start whenever
//! it is missing, unreadable, of another format, or does not match the
//! database beside it ([`open`]).
//!
//! Readers attach it as the schema [`SCHEMA`] ([`attach`]): a search joins
//! `search.events_fts` to `events` on the same connection.

use std::path::{Path, PathBuf};

use anyhow::Context;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

/// The name readers attach the file under.
pub const SCHEMA: &str = "search";

/// The file's layout; another value is rebuilt.
const FORMAT: i64 = 1;

/// Keys of `state`.
pub(super) const MARK: &str = "indexed_through";
/// `source` and `delivery_id` of the event at the mark, which tells a
/// file written for this database from one of another (or of this one
/// before a backup was restored over it).
pub(super) const MARK_KEY: &str = "mark_key";
/// The database's `meta.events_removed` as of the last finished sweep.
pub(super) const SWEPT: &str = "removed_swept";

const CREATE: &str = "
CREATE VIRTUAL TABLE events_fts USING fts5 (
    body,
    content = '',
    contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
-- Merged by the indexer in small pieces, never by FTS5 itself inside a
-- commit (as in the database since schema 14).
INSERT INTO events_fts (events_fts, rank) VALUES ('automerge', 0);
CREATE TABLE state (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
";

/// Where the index of the database at `db` lives.
pub fn path_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".search");
    PathBuf::from(name)
}

/// Removes the index of `db` and its `-wal`/`-shm`; whether there was one.
pub fn remove(db: &Path) -> anyhow::Result<bool> {
    let file = path_of(db);
    let mut found = false;
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        match std::fs::remove_file(&name) {
            Ok(()) => found = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("removing the search index {}", Path::new(&name).display())
                });
            }
        }
    }
    Ok(found)
}

/// Opens the index of `db` for the indexer, after checking it against the
/// database (read through `main`); a file that fails any check is removed
/// and made anew, empty, and the reason logged.
pub fn open(db: &Path, main: &Connection) -> anyhow::Result<Connection> {
    let path = path_of(db);
    if path.exists() {
        match open_existing(&path).and_then(|c| matches(&c, main).map(|why| (c, why))) {
            Ok((conn, None)) => return Ok(conn),
            Ok((_, Some(why))) => {
                tracing::info!(file = %path.display(), "the search index is rebuilt: {why}");
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %format!("{e:#}"), "the search index is unreadable; it is rebuilt");
            }
        }
        remove(db)?;
    }
    create(&path)
}

fn open_existing(path: &Path) -> anyhow::Result<Connection> {
    let conn = connect(path)?;
    let format: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .context("reading the search index's format")?;
    anyhow::ensure!(format == FORMAT, "format {format}, not {FORMAT}");
    conn.query_row("SELECT count(*) FROM state", [], |r| r.get::<_, i64>(0))
        .context("reading the search index's state")?;
    Ok(conn)
}

fn create(path: &Path) -> anyhow::Result<Connection> {
    super::super::create_private(path)?;
    let conn = connect(path)?;
    conn.execute_batch(&format!(
        "BEGIN; {CREATE} PRAGMA user_version = {FORMAT}; COMMIT;"
    ))
    .with_context(|| format!("creating the search index {}", path.display()))?;
    Ok(conn)
}

fn connect(path: &Path) -> anyhow::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening the search index {}", path.display()))?;
    conn.busy_timeout(super::super::BUSY_TIMEOUT)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .context("switching the search index to WAL")?;
    anyhow::ensure!(mode.eq_ignore_ascii_case("wal"), "journal mode {mode}");
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "journal_size_limit", 16 * 1024 * 1024)?;
    Ok(conn)
}

/// Why the index does not describe the database read through `main`, or
/// `None` when it does: its mark must not be past the newest event (else
/// the database is older than the index: a backup restored over it), and
/// the event at its mark, if still there, must be the one indexed.
fn matches(index: &Connection, main: &Connection) -> anyhow::Result<Option<String>> {
    let mark = read_i64(index, MARK)?.unwrap_or(0);
    let newest = newest(main)?;
    if mark > newest {
        return Ok(Some(format!(
            "it covers events up to {mark}, the database's newest is {newest}"
        )));
    }
    let Some(indexed_key) = read_text(index, MARK_KEY)? else {
        return Ok(None);
    };
    let key: Option<String> = main
        .query_row(
            "SELECT source || char(0) || delivery_id FROM events WHERE id = ?1",
            [mark],
            |r| r.get(0),
        )
        .optional()
        .context("reading the event at the search index's mark")?;
    Ok(match key {
        Some(key) if key != indexed_key => {
            Some(format!("event {mark} is not the event it indexed"))
        }
        _ => None,
    })
}

/// The id of the newest event, 0 without any.
pub(super) fn newest(main: &Connection) -> anyhow::Result<i64> {
    main.prepare_cached("SELECT coalesce(max(id), 0) FROM events")?
        .query_row([], |r| r.get(0))
        .context("reading the newest event's id")
}

pub(super) fn read_i64(index: &Connection, key: &str) -> anyhow::Result<Option<i64>> {
    index
        .prepare_cached("SELECT value FROM state WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()
        .with_context(|| format!("reading the search index's {key}"))
}

fn read_text(index: &Connection, key: &str) -> anyhow::Result<Option<String>> {
    index
        .prepare_cached("SELECT value FROM state WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()
        .with_context(|| format!("reading the search index's {key}"))
}

pub(super) fn write_state(
    index: &Connection,
    key: &str,
    value: impl rusqlite::ToSql,
) -> anyhow::Result<()> {
    index
        .prepare_cached(
            "INSERT INTO state (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )?
        .execute(params![key, value])
        .with_context(|| format!("writing the search index's {key}"))?;
    Ok(())
}

/// Attaches the index of `db` to `conn` as [`SCHEMA`], with the access
/// `conn` was opened with (read-only for every reader). An error says so
/// when there is none yet.
pub fn attach(conn: &Connection, db: &Path) -> anyhow::Result<()> {
    let path = path_of(db);
    anyhow::ensure!(
        path.exists(),
        "q: there is no search index beside the database yet ({}); `hookbox serve` with \
         [search] enabled builds it",
        path.display()
    );
    let name = path
        .to_str()
        .with_context(|| format!("the search index's path {} is not UTF-8", path.display()))?;
    conn.execute("ATTACH DATABASE ?1 AS search", [name])
        .with_context(|| format!("opening the search index {}", path.display()))?;
    Ok(())
}

/// Whether `conn` has the index attached.
pub fn attached(conn: &Connection) -> anyhow::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_database_list WHERE name = ?1)",
        [SCHEMA],
        |r| r.get(0),
    )
    .context("looking for the search index")
}
