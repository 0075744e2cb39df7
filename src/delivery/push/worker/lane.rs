//! A lane: one destination of one source, its claimed-but-not-started
//! deliveries, and what keeps it from starting the next one.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::{CARRIED_BODIES, PREFETCH};
use crate::config::DeliverConfig;
use crate::delivery::Destination;
use crate::delivery::breaker::Breaker;
use crate::delivery::transform::{self, Metadata, Pending, Transform};
use crate::store::deliveries::{ClaimFrom, Claimed, Lease, OnFailure};
use crate::telemetry::metrics::LaneMetrics;

/// One destination of one source, its claimed-but-not-started deliveries,
/// and how busy it is.
pub(super) struct Lane {
    pub(super) source: String,
    pub(super) config: DeliverConfig,
    /// What makes its attempts (`crate::delivery::push::destination`).
    pub(super) destination: Arc<dyn Destination>,
    /// The destination's `transform`, run before each attempt.
    pub(super) transform: Option<Transform>,
    pub(super) queued: VecDeque<Claimed>,
    /// Transforms of queued deliveries, run ahead of their attempts
    /// ([`Lane::transformed`]).
    pub(super) ahead: HashMap<Lease, Pending>,
    pub(super) in_flight: usize,
    pub(super) metrics: LaneMetrics,
    /// With a `rate`: when the next attempt may start.
    pub(super) next_start: Instant,
    pub(super) breaker: Breaker,
    /// A claim for a probe is on its way.
    pub(super) probe_asked: bool,
    /// The queued delivery is the probe a paused lane may start.
    pub(super) probe_queued: bool,
    /// Paused by hand: nothing is claimed or started, not even a probe.
    pub(super) manual: bool,
    /// What an attempt whose lease ran out becomes.
    pub(super) on_failure: OnFailure,
}

impl Lane {
    /// Whether something other than the rate keeps the lane from starting
    /// its next queued delivery: nothing queued, no free slot, a pause or
    /// a hold, or a paused lane without its probe.
    pub(super) fn blocked(&self, now: Instant) -> bool {
        self.queued.is_empty()
            || self.in_flight >= self.config.concurrency
            || self.manual
            || self.breaker.is_held(now)
            || (self.breaker.is_paused() && !self.probe_queued)
    }

    /// When this lane's next queued attempt may start, if only the rate
    /// decides. Possibly a moment ago: the time may pass between the look
    /// that found it held and the loop going to sleep, which must then wake
    /// at once rather than at the idle recheck.
    pub(super) fn held_by_rate(&self, now: Instant) -> Option<Instant> {
        (self.config.rate.is_some() && !self.blocked(now)).then_some(self.next_start)
    }

    /// How many more events a claim may fetch for this lane.
    pub(super) fn room(&self) -> usize {
        (self.config.concurrency * PREFETCH).saturating_sub(self.in_flight + self.queued.len())
    }

    /// The next queued delivery if the lane has a free slot, and whether
    /// it is the lane's probe.
    pub(super) fn startable(&mut self) -> Option<(Claimed, bool)> {
        let now = Instant::now();
        if self.blocked(now) {
            return None;
        }
        let probe = self.breaker.is_paused();
        if let Some(spacing) = self.config.rate {
            // Starts spaced evenly, one per `spacing`, keeping the cadence
            // when the timer woke a little late; a lane idle for a while
            // does not make up for it with a burst.
            if self.next_start > now {
                return None;
            }
            let cadence = self.next_start + spacing;
            self.next_start = if cadence <= now {
                now + spacing
            } else {
                cadence
            };
        }
        let claimed = self.queued.pop_front()?;
        self.probe_queued = false;
        Some((claimed, probe))
    }

    /// Empties the queue (a pause, shutdown), with the transforms run
    /// ahead for it; returns the leases to give back.
    pub(super) fn drain_queued(&mut self) -> Vec<Lease> {
        self.ahead.clear();
        self.queued.drain(..).map(|c| c.lease()).collect()
    }

    /// The transform of `next`, the delivery about to start, when it was
    /// run ahead. When it was not, and its body came with the claim, it is
    /// started now, together with those of the deliveries queued to start
    /// within one concurrency's worth after it: one batch to a transform
    /// process instead of a request per attempt, as each would otherwise
    /// make when its slot frees. So a transform runs at most that many
    /// starts early; never on a lane with a `rate`, whose starts are spread
    /// out. `None`: the attempt runs its transform itself.
    pub(super) fn transformed(&mut self, next: &Claimed) -> Option<Pending> {
        let transform = self.transform.as_ref()?;
        if let Some(pending) = self.ahead.remove(&next.lease()) {
            return Some(pending);
        }
        if self.config.rate.is_some() || next.body.is_none() {
            return None;
        }
        let batch: Vec<&Claimed> = std::iter::once(next)
            .chain(
                self.queued
                    .iter()
                    .take(self.config.concurrency.saturating_sub(1))
                    .filter(|c| c.body.is_some() && !self.ahead.contains_key(&c.lease())),
            )
            .collect();
        let headers: Vec<serde_json::Map<String, serde_json::Value>> = batch
            .iter()
            .map(|c| serde_json::from_str(&c.headers).unwrap_or_default())
            .collect();
        let events: Vec<Vec<u8>> = batch
            .iter()
            .zip(&headers)
            .map(|(c, headers)| {
                transform::event(&Metadata {
                    id: c.event_id,
                    source: &self.source,
                    destination: &self.config.name,
                    delivery_id: &c.delivery_id,
                    event_type: c.event_type.as_deref(),
                    received_at: c.received_at,
                    headers,
                })
            })
            .collect();
        let bodies = batch
            .iter()
            .map(|c| c.body.as_ref().map_or(&[][..], |b| &b.0[..]));
        let mut started = transform
            .start(events.iter().map(Vec::as_slice).zip(bodies))
            .into_iter();
        let first = started.next();
        for (c, pending) in batch.iter().skip(1).zip(started) {
            self.ahead.insert(c.lease(), pending);
        }
        first
    }
}

/// Lane `i`'s part of a claim, taking up to `limit` deliveries.
pub(super) fn claim_from(i: usize, lane: &Lane, limit: usize) -> ClaimFrom {
    ClaimFrom {
        lane: i,
        source: lane.source.clone(),
        destination: lane.config.name.clone(),
        limit,
        max_delay_ms: i64::try_from(lane.config.backoff_cap.as_millis()).unwrap_or(i64::MAX),
        ahead: lane.breaker.is_paused(),
        on_failure: lane.on_failure.clone(),
        bodies: CARRIED_BODIES.saturating_sub(lane.queued.iter().map(Claimed::carried_bytes).sum()),
    }
}
