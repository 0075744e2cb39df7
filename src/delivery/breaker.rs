//! A destination's circuit breaker: after `breaker_failures` failed
//! attempts in a row the destination is *paused*, and only a probe (one
//! delivery) goes every `breaker_probe`, doubling up to [`MAX_PROBE`]. A
//! probe that succeeds closes the breaker, and the backlog that waited is
//! due at once. A 429 or 503 with `Retry-After` holds the whole
//! destination for that long, whatever the count; then it goes on as
//! before (a hold is the destination's own word on when to come back, not
//! a sign that it is down). With `breaker_failures = 0` neither happens:
//! each delivery keeps its own retry schedule, `Retry-After` included.
//!
//! This is the state machine alone, on the monotonic clock; the dispatcher
//! (`super::push::worker`) asks it before claiming for a lane and tells it how
//! each attempt ended. A probe's failure is not counted against the
//! delivery's `max_attempts`: a pause must never push deliveries toward
//! `dead`.

use std::time::{Duration, Instant};

/// The longest time between two probes.
pub const MAX_PROBE: Duration = Duration::from_secs(300);

/// How an attempt ended, as the breaker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    /// The destination failed (timeout, connection, 5xx, 429...);
    /// `pause_for` is a `Retry-After` that asks the whole destination to
    /// wait.
    Failed {
        pause_for: Option<Duration>,
    },
    /// A permanent answer about this delivery (410, 422...): it says
    /// nothing of the destination's health.
    Refused,
}

/// What changed, for the log and the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    None,
    /// Paused now; the first probe goes after the returned wait.
    Paused(Duration),
    /// Held for this long by a `Retry-After`.
    Held(Duration),
    /// Closed by a successful probe: the backlog is due at once.
    Closed,
}

/// What the dispatcher may claim for the lane now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum May {
    /// As much as its concurrency allows.
    Claim,
    /// One delivery, as a probe.
    Probe,
    /// Nothing until this instant.
    WaitUntil(Instant),
}

#[derive(Debug)]
pub struct Breaker {
    /// `None`: never pauses on failures (Retry-After still does).
    threshold: Option<u32>,
    first_probe: Duration,
    failures: u32,
    paused: Option<Paused>,
    /// No attempt before this (a `Retry-After`).
    hold_until: Option<Instant>,
}

#[derive(Debug)]
struct Paused {
    next_probe: Instant,
    /// The wait after the next failed probe.
    every: Duration,
    /// A probe is out; no other goes until it ends.
    probing: bool,
}

impl Breaker {
    pub fn new(threshold: Option<u32>, first_probe: Duration) -> Self {
        Breaker {
            threshold,
            first_probe,
            failures: 0,
            paused: None,
            hold_until: None,
        }
    }

    pub fn is_paused(&self) -> bool {
        self.paused.is_some()
    }

    /// When the next probe goes, while paused.
    pub fn next_probe(&self) -> Option<Instant> {
        self.paused.as_ref().map(|p| p.next_probe)
    }

    /// Until when a `Retry-After` holds the destination.
    pub fn held_until(&self) -> Option<Instant> {
        self.hold_until
    }

    /// Whether a `Retry-After` holds every attempt at `now`.
    pub fn is_held(&self, now: Instant) -> bool {
        self.hold_until.is_some_and(|t| t > now)
    }

    pub fn may(&self, now: Instant) -> May {
        if let Some(until) = self.hold_until.filter(|t| *t > now) {
            return May::WaitUntil(until);
        }
        match &self.paused {
            None => May::Claim,
            Some(p) if p.probing => May::WaitUntil(now + MAX_PROBE),
            Some(p) if p.next_probe <= now => May::Probe,
            Some(p) => May::WaitUntil(p.next_probe),
        }
    }

    /// A probe was claimed and is on its way.
    pub fn probe_started(&mut self) {
        if let Some(p) = &mut self.paused {
            p.probing = true;
        }
    }

    /// A probe was claimed but there was nothing to send: look again at
    /// the next probe time.
    pub fn probe_empty(&mut self, now: Instant) {
        if let Some(p) = &mut self.paused {
            p.probing = false;
            p.next_probe = now + p.every.min(self.first_probe);
        }
    }

    /// Records how an attempt ended; `probe` when it was the probe.
    pub fn record(&mut self, verdict: Verdict, probe: bool, now: Instant) -> Change {
        match verdict {
            Verdict::Refused if probe => self.close(),
            Verdict::Refused => Change::None,
            Verdict::Delivered if self.paused.is_some() && probe => self.close(),
            Verdict::Delivered => {
                // An attempt started before the pause succeeding says
                // little; the probe decides.
                if self.paused.is_none() {
                    self.failures = 0;
                }
                Change::None
            }
            Verdict::Failed { pause_for } => {
                self.failures = self.failures.saturating_add(1);
                if let Some(wait) = pause_for.filter(|_| self.threshold.is_some()) {
                    let wait = wait.min(MAX_PROBE);
                    self.hold_until = Some(now + wait);
                    if let Some(p) = &mut self.paused {
                        p.probing = false;
                        p.next_probe = p.next_probe.max(now + wait);
                    }
                    return Change::Held(wait);
                }
                match &mut self.paused {
                    Some(p) if probe => {
                        p.probing = false;
                        p.next_probe = now + p.every;
                        p.every = (p.every * 2).min(MAX_PROBE);
                        Change::None
                    }
                    Some(_) => Change::None,
                    None if self.threshold.is_some_and(|t| self.failures >= t) => {
                        self.pause(now, self.first_probe, self.first_probe * 2)
                    }
                    None => Change::None,
                }
            }
        }
    }

    /// Paused as the last run left it (`crate::store::pauses`): the next
    /// probe at `next_probe`, and the interval starting over.
    pub fn restore(&mut self, next_probe: Instant) {
        self.paused = Some(Paused {
            next_probe,
            every: (self.first_probe * 2).min(MAX_PROBE),
            probing: false,
        });
    }

    fn pause(&mut self, now: Instant, wait: Duration, then: Duration) -> Change {
        self.paused = Some(Paused {
            next_probe: now + wait,
            every: then.min(MAX_PROBE),
            probing: false,
        });
        Change::Paused(wait)
    }

    fn close(&mut self) -> Change {
        self.failures = 0;
        if self.paused.take().is_some() {
            Change::Closed
        } else {
            Change::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAIL: Verdict = Verdict::Failed { pause_for: None };

    #[test]
    fn it_pauses_after_the_threshold_probes_doubling_and_closes_on_success() {
        let t0 = Instant::now();
        let mut b = Breaker::new(Some(3), Duration::from_secs(30));
        assert_eq!(b.record(FAIL, false, t0), Change::None);
        assert_eq!(b.record(Verdict::Delivered, false, t0), Change::None);
        assert_eq!(b.record(FAIL, false, t0), Change::None);
        assert_eq!(b.record(FAIL, false, t0), Change::None);
        assert_eq!(
            b.may(t0),
            May::Claim,
            "a success in between reset the count"
        );
        assert_eq!(
            b.record(FAIL, false, t0),
            Change::Paused(Duration::from_secs(30))
        );
        assert_eq!(b.may(t0), May::WaitUntil(t0 + Duration::from_secs(30)));
        let t1 = t0 + Duration::from_secs(30);
        assert_eq!(b.may(t1), May::Probe);
        b.probe_started();
        assert!(
            matches!(b.may(t1), May::WaitUntil(_)),
            "one probe at a time"
        );
        // A failed probe: the next waits twice as long, then 4x, capped.
        assert_eq!(b.record(FAIL, true, t1), Change::None);
        assert_eq!(b.may(t1), May::WaitUntil(t1 + Duration::from_secs(60)));
        let mut at = t1;
        for _ in 0..10 {
            at += MAX_PROBE;
            assert_eq!(b.may(at), May::Probe);
            b.probe_started();
            b.record(FAIL, true, at);
        }
        assert_eq!(b.may(at), May::WaitUntil(at + MAX_PROBE));
        at += MAX_PROBE;
        b.probe_started();
        assert_eq!(b.record(Verdict::Delivered, true, at), Change::Closed);
        assert_eq!(b.may(at), May::Claim);
    }

    #[test]
    fn retry_after_pauses_at_once_and_permanent_answers_do_not_count() {
        let t0 = Instant::now();
        let mut b = Breaker::new(Some(2), Duration::from_secs(30));
        for _ in 0..5 {
            assert_eq!(b.record(Verdict::Refused, false, t0), Change::None);
        }
        assert_eq!(b.may(t0), May::Claim);
        let asked = Verdict::Failed {
            pause_for: Some(Duration::from_secs(7)),
        };
        assert_eq!(
            b.record(asked, false, t0),
            Change::Held(Duration::from_secs(7))
        );
        assert_eq!(b.may(t0), May::WaitUntil(t0 + Duration::from_secs(7)));
        // Then it goes on as before: no probe, a failure counts as one.
        assert_eq!(b.may(t0 + Duration::from_secs(7)), May::Claim);
        assert!(!b.is_paused());
        // Without a threshold nothing pauses or holds the destination.
        let mut never = Breaker::new(None, Duration::from_secs(30));
        for _ in 0..100 {
            never.record(FAIL, false, t0);
        }
        assert_eq!(never.record(asked, false, t0), Change::None);
        assert_eq!(never.may(t0), May::Claim);
    }
}
