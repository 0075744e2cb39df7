//! Wall-clock time as the store and the verifiers use it.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    /// Added to this thread's reading of the clock; 0 outside tests.
    static SHIFT_MS: Cell<i64> = const { Cell::new(0) };
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    wall.saturating_add(SHIFT_MS.with(Cell::get))
}

/// Moves the clock of the calling thread by `ms` (0 puts it back).
///
/// Only for tests: provider vectors made by the providers' SDKs are signed
/// at a fixed past time, and replaying them through the real server needs
/// its clock at that time. A `#[tokio::test]` runs the server it spawns on
/// its own (current) thread, so shifting that thread moves the server's
/// clock and no other test's. Nothing in hookbox calls it.
#[doc(hidden)]
pub fn shift_this_thread(ms: i64) {
    SHIFT_MS.with(|shift| shift.set(ms));
}

/// Unix time in seconds.
pub fn now_secs() -> i64 {
    now_ms() / 1000
}

/// Unix milliseconds as RFC 3339, to the second, UTC.
pub fn format_ms(ms: i64) -> String {
    let t = UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
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
