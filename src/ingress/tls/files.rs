//! A certificate and key on disk (`[server.tls] cert`, `key`), swapped
//! without a restart.
//!
//! The pair is read by `config::cert::load`, which config validation also
//! calls, so `hookbox check` and start-up name the bad file.
//! [`Reloader::run`] swaps the pair in the [`CertStore`] on SIGHUP and when
//! either file's modification time, size or inode changes (checked every
//! `watch_interval`). Polling rather than inotify: certbot and most ACME
//! clients write a new file and rename it (or repoint a symlink) into
//! place, which a poll of `metadata()` sees whatever the path's history,
//! and a stat of two files every few seconds costs nothing. A pair that
//! fails to load is logged with its path and the old one keeps serving.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use prometheus_client::metrics::gauge::Gauge;

use super::CertStore;
use crate::config::TlsFiles;
use crate::config::cert::load;

/// What a file looked like when last loaded: a rename into place changes
/// the inode, an in-place rewrite the time or size.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp(Option<(SystemTime, u64, u64)>);

impl Stamp {
    fn of(path: &Path) -> Stamp {
        Stamp(std::fs::metadata(path).ok().map(|m| {
            (
                m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                m.len(),
                m.ino(),
            )
        }))
    }
}

/// Loads the configured pair and swaps it in on SIGHUP or a file change.
pub struct Reloader {
    store: Arc<CertStore>,
    config: TlsFiles,
    hangup: Signal,
    seen: (Stamp, Stamp),
}

impl Reloader {
    /// Loads the pair (an error names the file) and starts listening for
    /// SIGHUP, so a reload asked for before [`Reloader::run`] starts is not
    /// lost (nor kills the process, SIGHUP's default).
    pub fn new(config: &TlsFiles, expiry: Gauge) -> anyhow::Result<Reloader> {
        let seen = (Stamp::of(&config.cert), Stamp::of(&config.key));
        let pair = load(&config.cert, &config.key)?;
        let hangup = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
        let store = Arc::new(CertStore::new(expiry));
        store.set(pair);
        Ok(Reloader {
            store,
            config: config.clone(),
            hangup,
            seen,
        })
    }

    pub fn store(&self) -> Arc<CertStore> {
        self.store.clone()
    }

    /// Swaps the pair on SIGHUP, and when a file changes if
    /// `watch_interval` is not zero, until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let interval = self.config.watch_interval;
        let mut tick = tokio::time::interval(if interval.is_zero() {
            Duration::from_secs(3600)
        } else {
            interval
        });
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        tick.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = self.hangup.recv() => self.reload("SIGHUP"),
                _ = tick.tick(), if !interval.is_zero() => {
                    let now = (Stamp::of(&self.config.cert), Stamp::of(&self.config.key));
                    if now != self.seen {
                        self.reload("files changed");
                    }
                }
            }
        }
    }

    /// Loads the pair again; on failure the old one keeps serving. The
    /// stamps are taken first, so a failed pair is not retried until a
    /// file changes again (or SIGHUP), rather than logged every tick.
    fn reload(&mut self, why: &str) {
        self.seen = (Stamp::of(&self.config.cert), Stamp::of(&self.config.key));
        match load(&self.config.cert, &self.config.key) {
            Ok(pair) => {
                self.store.set(pair);
                tracing::info!(
                    reason = why,
                    cert = %self.config.cert.display(),
                    "TLS certificate reloaded"
                );
            }
            Err(e) => tracing::error!(
                reason = why,
                error = %e,
                "TLS certificate not reloaded; still serving the previous one"
            ),
        }
    }
}
