//! Databases for the store's unit tests: an in-memory connection at the
//! current schema, as [`super::open`] leaves a new file. Tests that need
//! rows of their own add them on top.

use rusqlite::Connection;

/// An in-memory database at the current schema.
pub(crate) fn db() -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    super::schema::apply(&mut conn).unwrap();
    conn
}

/// [`db`] with `foreign_keys=ON`, as every connection [`super::open`]
/// makes has it: for tests of deletes that cascade.
pub(crate) fn db_with_foreign_keys() -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    super::schema::apply(&mut conn).unwrap();
    conn
}
