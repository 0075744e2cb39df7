//! systemd integration: readiness, the watchdog and stopping, through
//! `sd_notify` (a no-op when `NOTIFY_SOCKET` is unset, as outside systemd).
//!
//! `READY=1` is sent once both listeners are bound and the database is
//! open. The watchdog is fed only after a ping has gone through the writer
//! thread and committed, so a wedged writer (or a database that cannot
//! commit) stops the pings and lets systemd restart hookbox, while a
//! healthy but idle one keeps them coming.

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
/// answers, if systemd asked for one (`WatchdogSec=`).
pub async fn watchdog(writer: WriterHandle, shutdown: CancellationToken) {
    let Some(interval) = sd_notify::watchdog_enabled() else {
        return;
    };
    let period = (interval / 2).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        match tokio::time::timeout(period, writer.ping()).await {
            Ok(Ok(())) => send(&[NotifyState::Watchdog]),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the writer cannot commit; not feeding the watchdog")
            }
            Err(_) => tracing::warn!("the writer did not answer in time; not feeding the watchdog"),
        }
    }
}
