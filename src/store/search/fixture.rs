//! A database file and its index file in a temporary directory, for the
//! search tests: `Fixture` derefs to a read-write connection to the
//! database with the index attached, and holds an indexer of its own.

use std::ops::{Deref, DerefMut};
use std::path::PathBuf;

use rusqlite::Connection;

use super::indexer::{Indexer, Round, read_connection};
use super::{file, removed};

pub(crate) struct Fixture {
    /// Kept for as long as the files are used.
    pub _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub conn: Connection,
    pub ix: Indexer,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hookbox.db");
        let mut conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        crate::store::schema::apply(&mut conn).unwrap();
        let ix = Self::indexer(&path);
        file::attach(&conn, &path).unwrap();
        Fixture {
            _dir: dir,
            path,
            conn,
            ix,
        }
    }

    /// An indexer as a restart makes it: the index file checked (and
    /// rebuilt if it fails) and the mark read from it.
    pub fn indexer(path: &std::path::Path) -> Indexer {
        let main = read_connection(path).unwrap();
        let index = file::open(path, &main).unwrap();
        Indexer::new(path, main, index).unwrap()
    }

    pub fn add(&self, body: &[u8]) -> i64 {
        self.conn
            .execute(
                "INSERT INTO events (source, delivery_id, received_at, body, state)
                 VALUES ('s', hex(randomblob(8)), 1, ?1, 'stored')",
                [body],
            )
            .unwrap();
        self.conn.last_insert_rowid()
    }

    /// Deletes event `id` as retention does.
    pub fn delete(&self, id: i64) {
        self.conn
            .execute("DELETE FROM events WHERE id = ?1", [id])
            .unwrap();
        removed(&self.conn, 1).unwrap();
    }

    /// Rounds until the indexer has nothing left to do; how many events
    /// it indexed.
    pub fn index_all(&mut self) -> usize {
        let mut indexed = 0;
        loop {
            match self.ix.round().unwrap() {
                Round::Indexed(n) => indexed += n,
                Round::Tidied => {}
                Round::Idle => return indexed,
            }
        }
    }
}

impl Deref for Fixture {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for Fixture {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}
