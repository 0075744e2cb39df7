//! Failed ACME orders in a row, and how long the next one waits.
//!
//! A failed order is retried after [`FIRST_RETRY`], doubling up to
//! [`MAX_RETRY`]: Let's Encrypt allows five failed validations per domain
//! an hour. The count and the wall-clock time of the next order are kept
//! in the cache (see `super::cache`), so restarting does not start over;
//! the running process waits on the monotonic clock, so a wall clock that
//! is set back (or forward) does not stretch or cut a wait, and a record
//! written under another clock never holds orders back longer than
//! [`MAX_RETRY`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The first retry after a failed order.
const FIRST_RETRY: Duration = Duration::from_secs(120);
/// The longest wait between orders.
const MAX_RETRY: Duration = Duration::from_secs(3600);

/// The record kept in the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    pub failures: u32,
    /// No order before this (Unix s).
    pub retry_at: i64,
    /// The domains that failed: another list is a new start.
    pub domains: Vec<String>,
}

impl Backoff {
    /// Whether this record is about `domains`, in any order.
    pub fn covers(&self, domains: &[String]) -> bool {
        sorted(&self.domains) == sorted(domains)
    }

    /// Counts one more failure at `now` (Unix s); returns the wait before
    /// the next order.
    pub fn failed(&mut self, domains: &[String], now: i64, at_once: bool) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let wait = if at_once && self.failures == 1 {
            Duration::ZERO
        } else {
            retry_delay(self.failures)
        };
        self.retry_at = now.saturating_add_unsigned(wait.as_secs());
        self.domains = domains.to_vec();
        wait
    }

    /// How long, from `now` (Unix s), the record still holds orders back.
    pub fn remaining(&self, now: i64) -> Duration {
        seconds_until(self.retry_at, now).min(MAX_RETRY)
    }
}

fn sorted(domains: &[String]) -> Vec<&str> {
    let mut names: Vec<&str> = domains.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn retry_delay(failures: u32) -> Duration {
    FIRST_RETRY
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(MAX_RETRY)
}

pub fn seconds_until(at: i64, now: i64) -> Duration {
    Duration::from_secs(u64::try_from(at.saturating_sub(now)).unwrap_or(0))
}

pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn retries_back_off_from_two_minutes_to_an_hour() {
        let delays = (1..=8).map(retry_delay).collect::<Vec<_>>();
        assert_eq!(delays[0], Duration::from_secs(120));
        assert_eq!(delays[1], Duration::from_secs(240));
        assert_eq!(delays[4], Duration::from_secs(1920));
        assert_eq!(delays[5], MAX_RETRY);
        assert_eq!(delays[7], MAX_RETRY);
        assert_eq!(retry_delay(u32::MAX), MAX_RETRY);
    }

    #[test]
    fn failures_count_up_and_set_the_next_order() {
        let domains = names(&["a.example"]);
        let mut backoff = Backoff::default();
        assert_eq!(
            backoff.failed(&domains, 1_000, false),
            Duration::from_secs(120)
        );
        assert_eq!(backoff.retry_at, 1_120);
        assert_eq!(
            backoff.failed(&domains, 2_000, false),
            Duration::from_secs(240)
        );
        assert_eq!((backoff.failures, backoff.retry_at), (2, 2_240));
        // An account the CA forgot is registered again at once, only once.
        let mut fresh = Backoff::default();
        assert_eq!(fresh.failed(&domains, 0, true), Duration::ZERO);
        assert_eq!(fresh.failed(&domains, 0, true), Duration::from_secs(240));
    }

    #[test]
    fn a_record_holds_orders_until_its_time_and_never_past_the_longest_retry() {
        let backoff = Backoff {
            failures: 3,
            retry_at: 1_000,
            domains: names(&["a.example"]),
        };
        assert_eq!(backoff.remaining(880), Duration::from_secs(120));
        assert_eq!(backoff.remaining(1_000), Duration::ZERO);
        assert_eq!(backoff.remaining(5_000), Duration::ZERO);
        // Written under a clock a day ahead of this one.
        assert_eq!(backoff.remaining(1_000 - 86_400), MAX_RETRY);
        assert_eq!(Backoff::default().remaining(1_000), Duration::ZERO);
    }

    #[test]
    fn a_record_is_about_the_same_domains_in_any_order() {
        let backoff = Backoff {
            domains: names(&["a.example", "b.example"]),
            ..Backoff::default()
        };
        assert!(backoff.covers(&names(&["b.example", "a.example"])));
        assert!(!backoff.covers(&names(&["a.example"])));
        assert!(!backoff.covers(&names(&["a.example", "c.example"])));
    }
}
