//! Where a catch-up run reads and writes: through the server's writer and
//! read pool, or through the CLI's own connection. Either way the SQL is
//! `crate::store::jobs`'s; this only routes it.

use std::sync::{Arc, Mutex};

use anyhow::Context;
use rusqlite::Connection;
use tokio::sync::Notify;

use crate::store::jobs::{self, Done, Op};
use crate::store::models::{Inserted, NewEvent};
use crate::store::{Store, WriterHandle};

#[derive(Clone)]
pub enum Db {
    /// Inside `hookbox serve`: writes go to the writer thread, the only
    /// writer of the process.
    Server {
        store: Store,
        writer: WriterHandle,
        /// Wakes the dispatcher when a fetched event is pending.
        wake: Arc<Notify>,
    },
    /// `hookbox catch-up`: one connection of its own, each write in its own
    /// short transaction, so a running server only waits a moment.
    Cli(Arc<Mutex<Connection>>),
}

impl Db {
    pub fn cli(conn: Connection) -> Db {
        Db::Cli(Arc::new(Mutex::new(conn)))
    }

    pub async fn write(&self, op: Op) -> anyhow::Result<Done> {
        match self {
            Db::Server { writer, .. } => writer
                .catchup(op)
                .await
                .context("writing catch-up bookkeeping"),
            Db::Cli(conn) => {
                let mut conn = conn
                    .lock()
                    .map_err(|_| anyhow::anyhow!("the database connection was poisoned"))?;
                jobs::apply_alone(&mut conn, &op)
            }
        }
    }

    pub async fn read<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> anyhow::Result<T> + Send + 'static,
    {
        match self {
            Db::Server { store, .. } => store.read(f).await,
            Db::Cli(conn) => {
                let conn = conn
                    .lock()
                    .map_err(|_| anyhow::anyhow!("the database connection was poisoned"))?;
                f(&conn)
            }
        }
    }

    pub async fn insert(&self, event: NewEvent) -> anyhow::Result<Inserted> {
        match self {
            Db::Server { writer, .. } => writer
                .insert(event)
                .await
                .context("storing a fetched event"),
            Db::Cli(conn) => {
                let mut conn = conn
                    .lock()
                    .map_err(|_| anyhow::anyhow!("the database connection was poisoned"))?;
                jobs::insert_alone(&mut conn, &event)
            }
        }
    }

    /// Tells the dispatcher new pending events are there. A CLI has no
    /// dispatcher to wake: the server's looks again within seconds.
    pub fn wake_dispatch(&self) {
        if let Db::Server { wake, .. } = self {
            wake.notify_one();
        }
    }
}
