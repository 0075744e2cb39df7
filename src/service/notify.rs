//! systemd integration: readiness, the watchdog and stopping, through
//! `sd_notify` (a no-op when `NOTIFY_SOCKET` is unset, as outside systemd).
//!
//! `READY=1` is sent once both listeners are bound and the database is
//! open. The watchdog is fed only while the writer commits: a ping of its
//! own went through the writer thread and committed, or other groups did
//! within the period (a busy writer's queue is full, and the ping waits
//! for room). So a wedged writer (or a database that cannot commit) stops
//! the feeding and lets systemd restart hookbox, while a healthy one, idle
//! or in a retry storm, keeps it fed.

use std::time::Duration;

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;

use crate::store::WriterHandle;

/// Tells systemd hookbox is ready to receive.
pub fn ready() {
    send(&[NotifyState::Ready]);
}

/// Tells systemd hookbox has begun to stop.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

fn send(state: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

/// Feeds the watchdog at half its interval for as long as the writer
/// is alive, if systemd asked for one (`WatchdogSec=`).
pub async fn watchdog(writer: WriterHandle, shutdown: CancellationToken) {
    let Some(interval) = sd_notify::watchdog_enabled() else {
        return;
    };
    let period = (interval / 2).max(Duration::from_millis(100));
    keep_fed(&writer, period, &shutdown, || {
        send(&[NotifyState::Watchdog])
    })
    .await;
}

/// Calls `feed` every `period` that the writer shows it is alive
/// ([`WriterHandle::heartbeat`]): it commits a ping, or other groups, within
/// the period. A full queue is not a dead writer: the ping waits for room.
pub async fn keep_fed(
    writer: &WriterHandle,
    period: Duration,
    shutdown: &CancellationToken,
    mut feed: impl FnMut(),
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let alive = tokio::select! {
            () = shutdown.cancelled() => return,
            alive = writer.heartbeat(period) => alive,
        };
        match alive {
            Ok(()) => feed(),
            Err(e) => {
                tracing::warn!(error = %e, "the writer is not committing; not feeding the watchdog")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::config::Durability;
    use crate::store::StoreError;
    use crate::store::retention::{Prune, PruneBatch};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_whose_queue_a_retry_storm_keeps_full_is_still_fed() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, writer, thread) = crate::store::open(
            &dir.path().join("hookbox.db"),
            Durability::Full,
            4,
            &crate::config::SearchConfig::default(),
        )
        .unwrap();
        let stop = CancellationToken::new();
        // Many more writers than the queue has room for, each sending again
        // as soon as it is answered (as dispatch lanes recording outcomes
        // do): the queue never has a free slot for long.
        let storm: Vec<_> = (0..64)
            .map(|_| {
                let (writer, stop) = (writer.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.is_cancelled() {
                        let batch = PruneBatch {
                            what: Prune::Rows,
                            ids: Vec::new(),
                            before: 0,
                        };
                        crate::store::retention::prune(&writer, batch)
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        // The storm does fill the queue: a ping that will not wait for room
        // is refused (the watchdog's ping was, before it waited).
        let mut refused = false;
        for _ in 0..200 {
            if matches!(writer.ping().await, Err(StoreError::Overloaded)) {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(refused, "the storm fills the queue");

        let feeds = Arc::new(AtomicUsize::new(0));
        let fed = feeds.clone();
        let watching = stop.child_token();
        let dog = {
            let (writer, watching) = (writer.clone(), watching.clone());
            tokio::spawn(async move {
                keep_fed(&writer, Duration::from_millis(100), &watching, || {
                    fed.fetch_add(1, Ordering::Relaxed);
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(2050)).await;
        watching.cancel();
        dog.await.unwrap();
        let fed = feeds.load(Ordering::Relaxed);
        // A tick every 100 ms for two seconds; a busy machine may miss
        // some. Before the ping waited for room: once or twice in all.
        assert!(fed >= 10, "fed {fed} times in 2 s");

        stop.cancel();
        for task in storm {
            task.await.unwrap();
        }
        drop(writer);
        thread.join();
    }
}
