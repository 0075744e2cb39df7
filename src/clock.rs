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
