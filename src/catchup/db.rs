//! Where a catch-up run reads and writes: a store's read pool and its
//! writer, the server's inside `hookbox serve` or the one `hookbox
//! catch-up` opens for itself (`crate::store::open_for_cli`). The SQL is
//! `crate::store::catchup`'s, the writes its [`Op`]s.

use std::sync::Arc;

use anyhow::Context;
use rusqlite::Connection;
use tokio::sync::Notify;

use crate::store::catchup::{Done, Op};
use crate::store::models::{Inserted, NewEvent};
use crate::store::{Store, WriterHandle};

#[derive(Clone)]
pub struct Db {
    pub store: Store,
    pub writer: WriterHandle,
    /// Wakes the dispatcher when a fetched event is pending; `None` in the
    /// CLI, which has no dispatcher (the server's looks again within
    /// seconds).
    pub wake: Option<Arc<Notify>>,
}

impl Db {
    pub async fn write(&self, op: Op) -> anyhow::Result<Done> {
        self.writer
            .write(op)
            .await
            .context("writing catch-up bookkeeping")
    }

    pub async fn read<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> anyhow::Result<T> + Send + 'static,
    {
        self.store.read(f).await
    }

    pub async fn insert(&self, event: NewEvent) -> anyhow::Result<Inserted> {
        crate::store::ingest::store(&self.writer, event)
            .await
            .context("storing a fetched event")
    }

    /// Tells the dispatcher new pending events are there.
    pub fn wake_dispatch(&self) {
        if let Some(wake) = &self.wake {
            wake.notify_one();
        }
    }
}
