//! The server's periodic upkeep: retention (the hourly counters'
//! trimming too) and backup snapshots.
//!
//! [`spawn`] starts one task per job; each loops on its interval until the
//! shutdown token is cancelled, logs each run's outcome once, and lets
//! `App::run` join it before the writer is stopped. The work itself lives
//! in the store: `store::retention` (what expires, batched through the
//! writer) and `store::backup` (consistent, checked, atomic copies).

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{BackupConfig, Config, RetentionConfig};
use crate::store::backup::{self, Copied};
use crate::store::retention::{self, Cutoffs};
use crate::store::{Store, WriterHandle};

/// Starts retention, and snapshots when `backup.dir` is set.
pub fn spawn(
    config: &Config,
    store: Store,
    writer: WriterHandle,
    shutdown: CancellationToken,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let db = store.path().to_path_buf();
    tasks.push(tokio::spawn(
        run_retention(config.retention.clone(), store, writer, shutdown.clone())
            .instrument(tracing::info_span!("retention")),
    ));
    if let Some(dir) = config.backup.dir.clone() {
        tasks.push(tokio::spawn(
            run_backups(config.backup.clone(), dir, db, shutdown)
                .instrument(tracing::info_span!("backup")),
        ));
    }
    tasks
}

async fn run_retention(
    config: RetentionConfig,
    store: Store,
    writer: WriterHandle,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        let started = Instant::now();
        let cutoffs = Cutoffs::at(
            crate::support::clock::now_ms(),
            config.body_days,
            config.key_days,
        );
        match retention::run_once(&store, &writer, cutoffs, &shutdown).await {
            Ok(r)
                if r.rows_deleted
                    + r.bodies_dropped
                    + r.catchup_runs_deleted
                    + r.counter_hours_deleted
                    > 0 =>
            {
                tracing::info!(
                    rows_deleted = r.rows_deleted,
                    bodies_dropped = r.bodies_dropped,
                    catchup_runs_deleted = r.catchup_runs_deleted,
                    counter_hours_deleted = r.counter_hours_deleted,
                    duration_ms = started.elapsed().as_millis() as u64,
                    "retention removed expired events, bodies, catch-up runs and hourly counters"
                )
            }
            Ok(_) => tracing::debug!("retention found nothing expired"),
            Err(e) => tracing::warn!(
                error = format!("{e:#}"),
                "retention run failed; trying again at the next interval"
            ),
        }
    }
}

async fn run_backups(config: BackupConfig, dir: PathBuf, db: PathBuf, shutdown: CancellationToken) {
    // A restart does not take a snapshot early: the first one is due an
    // interval after the newest already there.
    let first_in = backup::newest_snapshot_age(&dir)
        .map(|age| config.interval.saturating_sub(age))
        .unwrap_or(Duration::ZERO);
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + first_in, config.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        let started = Instant::now();
        match snapshot_once(&db, &dir, config.keep, &shutdown).await {
            Ok(copied) => tracing::info!(
                path = %copied.path.display(),
                size_bytes = copied.size_bytes,
                duration_ms = started.elapsed().as_millis() as u64,
                "snapshot written"
            ),
            Err(_) if shutdown.is_cancelled() => {
                tracing::info!("snapshot interrupted by shutdown; nothing partial was kept");
            }
            Err(e) => tracing::error!(
                error = format!("{e:#}"),
                dir = %dir.display(),
                "snapshot failed; trying again at the next interval"
            ),
        }
    }
}

/// Writes one snapshot on the blocking pool; a shutdown interrupts the
/// copy (its temp file is removed) rather than wait for it.
async fn snapshot_once(
    db: &std::path::Path,
    dir: &std::path::Path,
    keep: usize,
    shutdown: &CancellationToken,
) -> anyhow::Result<Copied> {
    let db = db.to_path_buf();
    let source = tokio::task::spawn_blocking(move || backup::open_source(&db))
        .await
        .context("the snapshot task failed")??;
    let interrupt = source.get_interrupt_handle();
    let dir = dir.to_path_buf();
    let mut job = tokio::task::spawn_blocking(move || {
        backup::snapshot(&source, &dir, keep, SystemTime::now())
    });
    let result = tokio::select! {
        r = &mut job => r,
        _ = shutdown.cancelled() => {
            interrupt.interrupt();
            job.await
        }
    };
    result.context("the snapshot task failed")?
}
