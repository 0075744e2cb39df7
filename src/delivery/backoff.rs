//! The retry schedule: exponential backoff with full jitter. When to retry
//! at all is the settle rule's (`super::settle`).
//!
//! After failed attempt `n` (1-based) the ceiling is
//! `min(cap, base * 2^(n-1))` and the wait is drawn uniformly from
//! `[0, ceiling)` ("full jitter", as in the AWS architecture blog's
//! "Exponential Backoff And Jitter"): retries of many events that failed
//! together spread out instead of arriving at the destination in waves.
//!
//! The random source is a parameter so tests can pin it; production passes
//! `&mut fastrand::f64` (fastrand is already in the build through tempfile,
//! is fast, and jitter needs no cryptographic randomness).

use std::time::Duration;

/// The ceiling for the wait after failed attempt `attempt`:
/// `min(cap, base * 2^(attempt-1))`, computed by doubling so that no attempt
/// number, however large, overflows.
fn ceiling(attempt: u32, base: Duration, cap: Duration) -> Duration {
    if base.is_zero() {
        return Duration::ZERO;
    }
    let mut ceiling = base;
    // Stops after at most ~95 doublings: a non-zero duration reaches
    // Duration::MAX (about 2^94 ns) by then.
    for _ in 1..attempt {
        if ceiling >= cap {
            break;
        }
        ceiling = ceiling.saturating_mul(2);
    }
    ceiling.min(cap)
}

/// How long to wait after failed attempt `attempt` (1-based): uniform in
/// `[0, min(cap, base * 2^(attempt-1))]`. `rng` returns uniform values in
/// `[0, 1)`; anything else it returns is clamped into that range.
pub fn delay(
    attempt: u32,
    base: Duration,
    cap: Duration,
    rng: &mut impl FnMut() -> f64,
) -> Duration {
    let ceiling = ceiling(attempt, base, cap);
    let r = rng();
    let r = if r.is_finite() {
        r.clamp(0.0, 1.0)
    } else {
        0.0
    };
    Duration::try_from_secs_f64(ceiling.as_secs_f64() * r)
        .unwrap_or(ceiling)
        .min(ceiling)
}

/// How long to wait after failed attempt `attempt` when the destination may
/// have sent `Retry-After`.
///
/// Retry-After is honoured up to `cap`: the wait is the larger of the
/// jittered delay and `min(retry_after, cap)`. Waiting less than asked would
/// hit a destination that said it is not ready; waiting more than `cap`
/// would let one response (`Retry-After: 86400`) park an event far longer
/// than the operator configured, so `backoff_cap` stays the upper bound.
pub fn next(
    attempt: u32,
    retry_after: Option<Duration>,
    base: Duration,
    cap: Duration,
    rng: &mut impl FnMut() -> f64,
) -> Duration {
    let jittered = delay(attempt, base, cap, rng);
    match retry_after {
        Some(asked) => jittered.max(asked.min(cap)),
        None => jittered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_secs(30);
    const CAP: Duration = Duration::from_secs(3600);

    fn almost_one() -> f64 {
        1.0 - f64::EPSILON
    }

    #[test]
    fn ceilings_double_from_base_up_to_the_cap() {
        let ceilings: Vec<u64> = (1..=10).map(|n| ceiling(n, BASE, CAP).as_secs()).collect();
        assert_eq!(
            ceilings,
            [30, 60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]
        );
        // Attempt 0 is treated like attempt 1.
        assert_eq!(ceiling(0, BASE, CAP), BASE);
    }

    #[test]
    fn delays_stay_within_zero_and_the_ceiling_for_many_attempts() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut draw = || rng.f64();
        for attempt in 1..=200 {
            let top = ceiling(attempt, BASE, CAP);
            for _ in 0..50 {
                let d = delay(attempt, BASE, CAP, &mut draw);
                assert!(d <= top, "attempt {attempt}: {d:?} > {top:?}");
                assert!(d <= CAP);
            }
        }
        assert_eq!(delay(3, BASE, CAP, &mut || 0.0), Duration::ZERO);
        let near_top = delay(3, BASE, CAP, &mut almost_one);
        assert!(near_top <= Duration::from_secs(120) && near_top > Duration::from_secs(119));
        // The production source works as the rng.
        assert!(delay(4, BASE, CAP, &mut fastrand::f64) <= Duration::from_secs(240));
    }

    #[test]
    fn the_ceiling_never_decreases_and_is_capped() {
        let mut last = Duration::ZERO;
        for attempt in 1..=1000 {
            let top = delay(attempt, BASE, CAP, &mut almost_one);
            assert!(top >= last, "attempt {attempt}");
            assert!(top <= CAP);
            last = top;
        }
    }

    #[test]
    fn huge_attempt_numbers_and_extreme_durations_do_not_overflow() {
        for attempt in [64, 65, 1_000, u32::MAX - 1, u32::MAX] {
            assert_eq!(ceiling(attempt, BASE, CAP), CAP);
            assert!(delay(attempt, BASE, CAP, &mut almost_one) <= CAP);
        }
        assert_eq!(
            ceiling(u32::MAX, Duration::MAX, Duration::MAX),
            Duration::MAX
        );
        assert_eq!(
            ceiling(u32::MAX, Duration::from_nanos(1), Duration::MAX),
            Duration::MAX
        );
        assert!(delay(u32::MAX, Duration::MAX, Duration::MAX, &mut almost_one) <= Duration::MAX);
        assert_eq!(ceiling(u32::MAX, Duration::ZERO, CAP), Duration::ZERO);
        // A misbehaving rng is clamped, not trusted.
        for r in [f64::NAN, -1.0, 2.0, f64::INFINITY] {
            assert!(delay(2, BASE, CAP, &mut || r) <= Duration::from_secs(60));
        }
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let seven = Some(Duration::from_secs(7));
        // Jitter drew 0: Retry-After sets the wait.
        assert_eq!(
            next(1, seven, BASE, CAP, &mut || 0.0),
            Duration::from_secs(7)
        );
        // Jitter drew more than asked: the longer wait wins.
        let d = next(1, seven, BASE, CAP, &mut || 0.5);
        assert_eq!(d, Duration::from_secs(15));
        // Asking for a day is cut to the cap.
        let day = Some(Duration::from_secs(86_400));
        assert_eq!(next(1, day, BASE, CAP, &mut || 0.0), CAP);
        // Without Retry-After it is the plain jittered delay.
        assert_eq!(
            next(2, None, BASE, CAP, &mut || 0.5),
            Duration::from_secs(30)
        );
    }
}
