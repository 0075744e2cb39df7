//! Wall-clock time as the store and the verifiers use it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Unix time in seconds.
pub fn now_secs() -> i64 {
    now_ms() / 1000
}

/// The clock the receive route checks signature timestamps against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum VerifyClock {
    /// The system clock: always, outside tests.
    #[default]
    System,
    /// A fixed unix time in seconds. No config key sets it: tests do, so
    /// that signatures a provider's SDK made once, at a fixed time (the
    /// committed vectors), go through the real router.
    Fixed(i64),
}

impl VerifyClock {
    /// The verification time, given the system time `now_ms`.
    pub fn now_secs(self, now_ms: i64) -> i64 {
        match self {
            VerifyClock::System => now_ms / 1000,
            VerifyClock::Fixed(secs) => secs,
        }
    }
}

/// A time as an operator writes it: unix milliseconds, RFC 3339
/// (`2026-11-01T12:00:00Z`), or a bare date (`2026-11-01`, midnight UTC).
pub fn parse_time(value: &str) -> Option<i64> {
    if let Ok(ms) = value.parse::<i64>() {
        return Some(ms);
    }
    let is_date = value.len() == 10
        && value.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    let text = if is_date {
        format!("{value}T00:00:00Z")
    } else {
        value.to_owned()
    };
    humantime::parse_rfc3339_weak(&text)
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_milliseconds_rfc3339_or_a_date() {
        assert_eq!(parse_time("1700000000000"), Some(1_700_000_000_000));
        assert_eq!(parse_time("2023-11-14T22:13:20Z"), Some(1_700_000_000_000));
        assert_eq!(parse_time("2023-11-14"), Some(1_699_920_000_000));
        for bad in ["yesterday", "2023-11-1", "2023/11/14", ""] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }
}
