//! A lane: one destination of one source, its claimed-but-not-started
//! deliveries, and what keeps it from starting the next one.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::{CARRIED_BODIES, PREFETCH};
use crate::config::DeliverConfig;
use crate::delivery::Destination;
use crate::delivery::breaker::Breaker;
use crate::delivery::transform::Transform;
use crate::store::deliveries::{ClaimFrom, Claimed, OnFailure};
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
