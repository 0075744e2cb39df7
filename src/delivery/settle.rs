//! The settle rule: the one place that says what an attempt becomes,
//! whatever kind of destination made it: delivered, a retry at a time
//! [`super::backoff`] draws, or dead once it was attempt `max_attempts` or
//! the destination refused it for good.
//!
//! Every path that ends an attempt comes here: the dispatcher's attempts
//! ([`settle`]), a pull consumer's nack and a lease that ran out (through
//! [`Rule::on_failure`], which the store calls inside the transaction that
//! records them). Two circumstances bend it, the same way for everyone: a
//! paused destination's probe that fails is due again at once (a pause
//! must never push deliveries toward dead), and an attempt cut short by a
//! stop of hookbox is due again at once unless it was the last one (the
//! destination did not fail, hookbox stopped; it still counts, as the
//! attempt may have had effects).

use std::sync::Arc;
use std::time::Duration;

use super::Outcome;
use super::backoff;
use crate::config::DeliverConfig;
use crate::store::deliveries::{OnFailure, Settled};

/// A destination's retry settings.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl Rule {
    pub fn of(config: &DeliverConfig) -> Rule {
        Rule {
            max_attempts: config.max_attempts,
            base: config.backoff_base,
            cap: config.backoff_cap,
        }
    }

    /// The rule as the store applies it to a nack or a lease that ran out,
    /// given the attempt's number and whether a stop cut it short.
    pub fn on_failure(self) -> OnFailure {
        OnFailure(Arc::new(move |attempt, interrupted, now| {
            after_failure(attempt, None, interrupted, &self, now)
        }))
    }
}

/// How an attempt came to its end, beside its outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ended {
    /// It was a paused destination's probe.
    pub probe: bool,
    /// A stop of hookbox cut it short.
    pub interrupted: bool,
}

/// What attempt number `attempt`, which ended with `outcome`, makes of its
/// delivery at `now`.
pub fn settle(outcome: Outcome, attempt: u32, ended: Ended, rule: &Rule, now: i64) -> Settled {
    match outcome {
        Outcome::Delivered => Settled::Delivered,
        Outcome::Dead => Settled::Dead,
        Outcome::Skipped => Settled::Skipped,
        Outcome::Retry { .. } if ended.probe => Settled::Retry(now),
        Outcome::Retry { retry_after } => {
            after_failure(attempt, retry_after, ended.interrupted, rule, now)
        }
    }
}

/// What failed attempt `attempt` makes of its delivery: dead once it was
/// attempt `max_attempts`, else a retry at `now` plus
/// [`backoff::next`]'s wait (at once when a stop cut it short).
pub fn after_failure(
    attempt: u32,
    retry_after: Option<Duration>,
    interrupted: bool,
    rule: &Rule,
    now: i64,
) -> Settled {
    if attempt >= rule.max_attempts {
        return Settled::Dead;
    }
    if interrupted {
        return Settled::Retry(now);
    }
    let wait = backoff::next(
        attempt,
        retry_after,
        rule.base,
        rule.cap,
        &mut fastrand::f64,
    );
    let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
    Settled::Retry(now.saturating_add(wait_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: Rule = Rule {
        max_attempts: 3,
        base: Duration::from_secs(30),
        cap: Duration::from_secs(3600),
    };
    const NOW: i64 = 1_000_000;

    fn retry(retry_after: Option<Duration>) -> Outcome {
        Outcome::Retry { retry_after }
    }

    fn retry_at(settled: Settled) -> i64 {
        match settled {
            Settled::Retry(at) => at,
            other => panic!("not a retry: {other:?}"),
        }
    }

    #[test]
    fn a_failed_attempt_retries_within_its_backoff_until_the_last_is_dead() {
        let plain = Ended::default();
        for attempt in 1..3 {
            let at = retry_at(settle(retry(None), attempt, plain, &RULE, NOW));
            let ceiling = 30_000 << (attempt - 1);
            assert!(
                (NOW..=NOW + ceiling).contains(&at),
                "attempt {attempt}: {at}"
            );
        }
        assert_eq!(settle(retry(None), 3, plain, &RULE, NOW), Settled::Dead);
        assert_eq!(settle(retry(None), 9, plain, &RULE, NOW), Settled::Dead);
        assert_eq!(settle(Outcome::Dead, 1, plain, &RULE, NOW), Settled::Dead);
        assert_eq!(
            settle(Outcome::Delivered, 3, plain, &RULE, NOW),
            Settled::Delivered
        );
    }

    #[test]
    fn retry_after_is_waited_for_up_to_the_cap() {
        let asked = Some(Duration::from_secs(600));
        let at = retry_at(settle(retry(asked), 1, Ended::default(), &RULE, NOW));
        assert!(at >= NOW + 600_000, "{at}");
        let day = Some(Duration::from_secs(86_400));
        let at = retry_at(settle(retry(day), 1, Ended::default(), &RULE, NOW));
        assert_eq!(at, NOW + 3_600_000);
    }

    #[test]
    fn a_failed_probe_is_due_again_at_once_even_past_max_attempts() {
        let probe = Ended {
            probe: true,
            interrupted: false,
        };
        assert_eq!(
            settle(retry(None), 3, probe, &RULE, NOW),
            Settled::Retry(NOW)
        );
        assert_eq!(settle(Outcome::Dead, 1, probe, &RULE, NOW), Settled::Dead);
    }

    #[test]
    fn an_interrupted_attempt_is_due_at_once_unless_it_was_the_last() {
        let cut = Ended {
            probe: false,
            interrupted: true,
        };
        assert_eq!(settle(retry(None), 2, cut, &RULE, NOW), Settled::Retry(NOW));
        assert_eq!(settle(retry(None), 3, cut, &RULE, NOW), Settled::Dead);
        // The store's view of the same rule, for leases a stop left behind.
        let on_failure = RULE.on_failure();
        assert_eq!(on_failure.decide(2, true, NOW), Settled::Retry(NOW));
        assert_eq!(on_failure.decide(3, true, NOW), Settled::Dead);
        assert!(retry_at(on_failure.decide(1, false, NOW)) <= NOW + 30_000);
    }
}
