//! A pull destination's `rate`: a token bucket that bounds what takes hand
//! out, shared by every consumer of the destination. It holds a tenth of a
//! second's worth (at least one), so a consumer that takes in a loop gets
//! small batches at the pace chosen, and one idle for a while gets at most
//! that tenth at once, never a second's backlog in one go.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Bucket {
    /// One token per `every`.
    every: Duration,
    capacity: f64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket refilled one token per `every`.
    pub fn new(every: Duration) -> Self {
        let capacity = (0.1 / every.as_secs_f64()).floor().max(1.0);
        Bucket {
            every,
            capacity,
            state: Mutex::new(State {
                tokens: capacity,
                at: Instant::now(),
            }),
        }
    }

    fn refill(&self, now: Instant) -> std::sync::MutexGuard<'_, State> {
        let mut s = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let earned = now.saturating_duration_since(s.at).as_secs_f64() / self.every.as_secs_f64();
        s.tokens = (s.tokens + earned).min(self.capacity);
        // Never backwards: a caller's `now` may be older than another's.
        s.at = s.at.max(now);
        s
    }

    /// Takes up to `want` tokens: how many it got, or, with none to
    /// spare, when the next one comes.
    pub fn take(&self, want: usize, now: Instant) -> Result<usize, Instant> {
        let mut s = self.refill(now);
        let whole = s.tokens.floor();
        if whole < 1.0 {
            let missing = 1.0 - s.tokens;
            return Err(now + self.every.mul_f64(missing));
        }
        // `whole` is at most the capacity, a small whole number.
        let got = (whole as usize).min(want);
        s.tokens -= got as f64;
        Ok(got)
    }

    /// Gives back tokens taken for deliveries that were not handed out.
    pub fn give_back(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut s = self.refill(Instant::now());
        s.tokens = (s.tokens + n as f64).min(self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_hands_out_a_tenth_of_a_second_at_once_then_keeps_the_pace() {
        let b = Bucket::new(Duration::from_millis(10)); // 100/s
        let t0 = Instant::now();
        assert_eq!(b.take(100, t0), Ok(10));
        let next = b.take(1, t0).unwrap_err();
        assert!(next > t0 && next <= t0 + Duration::from_millis(10));
        // Half a second later: the bucket is full again, not 50 ahead.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(b.take(100, t1), Ok(10));
        b.give_back(4);
        assert_eq!(b.take(3, t1), Ok(3));
        assert_eq!(b.take(100, t1), Ok(1));
    }

    #[test]
    fn a_slow_rate_still_hands_out_one() {
        let b = Bucket::new(Duration::from_secs(60)); // 1/m
        let t0 = Instant::now();
        assert_eq!(b.take(5, t0), Ok(1));
        let next = b.take(5, t0).unwrap_err();
        assert!(next > t0 + Duration::from_secs(59) && next <= t0 + Duration::from_secs(60));
    }
}
