//! The failure limit: an address that keeps failing verification is
//! answered 429 for a while, before its body is read.
//!
//! Only failures count (401s), per client address, in fixed windows of
//! `failure_window`: the `max_failures`-th failure inside one window blocks
//! the address for `block_for`. Valid traffic is never counted, so another
//! client's failures cannot slow it down. IPv6 addresses are counted per
//! /64, the block a single host usually holds, so one attacker cannot rotate
//! through its own subnet.
//!
//! Memory is bounded: at most `max_tracked` addresses are remembered. When
//! the table is full, entries whose window and block are over go first, then
//! the least recently seen.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::config::EdgeConfig;

#[derive(Debug, Clone, Copy)]
struct Entry {
    window_start: Instant,
    failures: u32,
    blocked_until: Option<Instant>,
    last_seen: Instant,
}

#[derive(Debug)]
pub struct FailureLimit {
    max_failures: u32,
    window: Duration,
    block_for: Duration,
    max_tracked: usize,
    table: Mutex<HashMap<IpAddr, Entry>>,
}

/// The key an address is counted under: itself, or its /64 for IPv6.
pub(super) fn key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

impl FailureLimit {
    /// `None` when `max_failures = 0` (the limit is off).
    pub fn new(config: &EdgeConfig) -> Option<Self> {
        (config.max_failures > 0).then(|| FailureLimit {
            max_failures: config.max_failures,
            window: config.failure_window,
            block_for: config.block_for,
            max_tracked: config.max_tracked,
            table: Mutex::new(HashMap::new()),
        })
    }

    /// How long `ip` is still blocked, if it is.
    pub fn blocked(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let until = table.get(&key(ip))?.blocked_until?;
        (until > now).then(|| until - now)
    }

    /// Counts a failed verification; returns true when it blocked `ip`.
    pub fn failed(&self, ip: IpAddr, now: Instant) -> bool {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let k = key(ip);
        if !table.contains_key(&k) && table.len() >= self.max_tracked {
            self.evict(&mut table, now);
        }
        let entry = table.entry(k).or_insert(Entry {
            window_start: now,
            failures: 0,
            blocked_until: None,
            last_seen: now,
        });
        entry.last_seen = now;
        if entry.blocked_until.is_some_and(|until| until > now) {
            return false;
        }
        entry.blocked_until = None;
        if now.duration_since(entry.window_start) >= self.window {
            entry.window_start = now;
            entry.failures = 0;
        }
        entry.failures += 1;
        if entry.failures >= self.max_failures {
            entry.blocked_until = Some(now + self.block_for);
            entry.failures = 0;
            entry.window_start = now;
            return true;
        }
        false
    }

    /// Addresses remembered now, for metrics and tests.
    pub fn tracked(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Makes room: drops what no longer matters, then, if the table is
    /// still full, the least recently seen tenth.
    fn evict(&self, table: &mut HashMap<IpAddr, Entry>, now: Instant) {
        table.retain(|_, e| {
            e.blocked_until.is_some_and(|until| until > now)
                || now.duration_since(e.window_start) < self.window
        });
        if table.len() < self.max_tracked {
            return;
        }
        let mut seen: Vec<(Instant, IpAddr)> =
            table.iter().map(|(k, e)| (e.last_seen, *k)).collect();
        seen.sort_unstable();
        let drop = (self.max_tracked / 10).max(1).min(seen.len());
        for (_, k) in &seen[..drop] {
            table.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(max_failures: u32, max_tracked: usize) -> FailureLimit {
        FailureLimit {
            max_failures,
            window: Duration::from_secs(60),
            block_for: Duration::from_secs(300),
            max_tracked,
            table: Mutex::new(HashMap::new()),
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_nth_failure_in_a_window_blocks_until_block_for_has_passed() {
        let l = limit(3, 100);
        let t0 = Instant::now();
        let a = ip("198.51.100.1");
        assert!(!l.failed(a, t0));
        assert!(!l.failed(a, t0));
        assert_eq!(l.blocked(a, t0), None);
        assert!(l.failed(a, t0));
        assert_eq!(l.blocked(a, t0), Some(Duration::from_secs(300)));
        assert_eq!(l.blocked(ip("198.51.100.2"), t0), None);
        let later = t0 + Duration::from_secs(301);
        assert_eq!(l.blocked(a, later), None);
        // The block is over and the count starts again.
        assert!(!l.failed(a, later));
    }

    #[test]
    fn failures_in_different_windows_do_not_add_up() {
        let l = limit(2, 100);
        let t0 = Instant::now();
        let a = ip("198.51.100.1");
        assert!(!l.failed(a, t0));
        assert!(!l.failed(a, t0 + Duration::from_secs(61)));
        assert!(l.failed(a, t0 + Duration::from_secs(62)));
    }

    #[test]
    fn ipv6_addresses_count_per_64() {
        let l = limit(2, 100);
        let t0 = Instant::now();
        assert!(!l.failed(ip("2001:db8:1:2::1"), t0));
        assert!(l.failed(ip("2001:db8:1:2::ffff"), t0));
        assert!(l.blocked(ip("2001:db8:1:2:abcd::9"), t0).is_some());
        assert!(l.blocked(ip("2001:db8:1:3::1"), t0).is_none());
    }

    #[test]
    fn the_table_stays_bounded_and_forgets_the_oldest_first() {
        let l = limit(2, 10);
        let t0 = Instant::now();
        let blocked = ip("203.0.113.250");
        l.failed(blocked, t0);
        l.failed(blocked, t0);
        for i in 0..100u8 {
            l.failed(
                IpAddr::from([198, 51, 100, i]),
                t0 + Duration::from_millis(u64::from(i) + 1),
            );
            assert!(l.tracked() <= 10);
        }
        // The most recent address is still counted.
        assert!(l.failed(ip("198.51.100.99"), t0 + Duration::from_millis(200)));
    }
}
