//! The dispatcher's side of pauses: what a lane's breaker makes of each
//! attempt, pauses by hand from the board, and keeping breaker pauses in
//! the store so a restart goes on probing.

use std::time::Instant;

use super::{Dispatcher, Done};
use crate::delivery::board::Status;
use crate::delivery::breaker::Change;
use crate::store::WriterHandle;
use crate::store::deliveries::MakeDue;
use crate::store::pauses::{Cause, Pause, PauseOp};
use crate::support::clock;

impl Dispatcher {
    /// Tells lane `i`'s breaker how an attempt ended, and acts on a change:
    /// a pause gives back what the lane holds queued; a close makes its
    /// backlog due at once.
    pub(super) fn judge(&mut self, i: usize, verdict: Done, probe: bool) {
        let lane = &mut self.lanes[i];
        let now = Instant::now();
        let Some(verdict) = verdict else {
            if probe {
                lane.breaker.probe_empty(now);
            }
            return;
        };
        let (source, destination) = (lane.source.clone(), lane.config.name.clone());
        let change = lane.breaker.record(verdict, probe, now);
        if change != Change::None || lane.breaker.is_paused() {
            let since = self.board.get(&source, &destination).paused_since;
            let wall = |t: Instant| {
                let ahead =
                    i64::try_from(t.saturating_duration_since(now).as_millis()).unwrap_or(i64::MAX);
                clock::now_ms().saturating_add(ahead)
            };
            let status = Status {
                manual_since: None,
                paused_since: lane
                    .breaker
                    .is_paused()
                    .then(|| since.unwrap_or_else(clock::now_ms)),
                next_probe_at: lane.breaker.next_probe().map(wall),
                held_until: lane.breaker.held_until().filter(|t| *t > now).map(wall),
            };
            self.board.set(&source, &destination, status);
            // Only pauses and closes are kept: a Retry-After hold is short
            // and not worth a write.
            let op = match (status.paused_since, change) {
                (Some(since), _) => Some(PauseOp::Set(Pause {
                    source: source.clone(),
                    destination: destination.clone(),
                    cause: Cause::Breaker,
                    since,
                    next_probe_at: status.next_probe_at,
                })),
                (None, Change::Closed) => Some(PauseOp::Lift {
                    source: source.clone(),
                    destination: destination.clone(),
                    cause: Cause::Breaker,
                }),
                (None, _) => None,
            };
            // Nobody waits for it: lost in a crash, the pause is learned
            // again by the next failures, or closed by the next probe.
            if let Some(op) = op {
                drop(self.persist.send(op));
            }
        }
        let lane = &mut self.lanes[i];
        match change {
            Change::None => {}
            Change::Held(wait) => {
                tracing::info!(%source, %destination, for_ms = wait.as_millis() as u64,
                    "destination asked to wait (Retry-After); holding all its deliveries");
            }
            Change::Paused(wait) => {
                tracing::warn!(%source, %destination, probe_in_ms = wait.as_millis() as u64,
                    "destination paused: it keeps failing (or asked to wait); probing it before sending more");
                lane.metrics.paused(true);
                self.alerts.paused(&source, &destination, "breaker");
                let queued = lane.drain_queued();
                self.give_back(queued);
            }
            Change::Closed => {
                tracing::info!(%source, %destination,
                    "destination back: a probe succeeded; its backlog is due now");
                lane.metrics.paused(lane.manual);
                if !lane.manual {
                    self.flush(source, destination);
                }
            }
        }
    }

    /// Makes a destination's backlog due at once, then claims: the
    /// destination is back, its deliveries must not wait out backoffs
    /// that only the outage earned. Claiming first would find it all
    /// scheduled ahead.
    fn flush(&self, source: String, destination: String) {
        let (writer, wake) = (self.writer.clone(), self.wake.clone());
        tokio::spawn(async move {
            let due = MakeDue {
                source,
                destination,
                now: clock::now_ms(),
            };
            if let Err(e) = writer.write(due).await {
                tracing::warn!(error = %e, "cannot make a resumed destination's backlog due; it goes as scheduled");
            }
            wake.notify_one();
        });
    }

    /// Brings the lanes in step with the pauses by hand on the board: a
    /// pause gives back what the lane holds queued; a resume flushes its
    /// backlog, unless its breaker still holds it paused.
    pub(super) fn sync_manual(&mut self) {
        let generation = self.board.generation();
        if generation == self.seen_manual {
            return;
        }
        self.seen_manual = generation;
        let mut give_back = Vec::new();
        let mut flush = Vec::new();
        let now = Instant::now();
        for lane in &mut self.lanes {
            let (source, destination) = (&lane.source, &lane.config.name);
            let manual = self.board.manual_since(source, destination).is_some();
            if manual == lane.manual {
                continue;
            }
            lane.manual = manual;
            lane.metrics.paused(manual || lane.breaker.is_paused());
            if manual {
                tracing::info!(%source, %destination, "destination paused by hand; its deliveries wait, none is lost");
                if std::mem::take(&mut lane.probe_queued) {
                    lane.breaker.probe_empty(now);
                }
                give_back.extend(lane.drain_queued());
            } else {
                tracing::info!(%source, %destination, "destination resumed by hand");
                if !lane.breaker.is_paused() {
                    flush.push((source.clone(), destination.clone()));
                }
            }
        }
        self.give_back(give_back);
        for (source, destination) in flush {
            self.flush(source, destination);
        }
    }
}

/// Writes the breakers' pauses to the store in the order they happened, so
/// a restart goes on probing instead of sending a backlog at a service
/// that is still down.
pub(super) async fn persist(
    writer: WriterHandle,
    mut ops: tokio::sync::mpsc::UnboundedReceiver<PauseOp>,
) {
    while let Some(op) = ops.recv().await {
        if let Err(e) = writer.write(op).await {
            tracing::warn!(error = %e, "cannot keep a destination's pause; after a restart its breaker learns it again");
        }
    }
}
