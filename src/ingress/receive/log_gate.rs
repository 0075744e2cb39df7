//! At most one log line per interval for a line any client can make
//! hookbox write (a refused request or handshake), with a count of the
//! ones held back.
//! A flood of forged requests from many addresses, which the edge's
//! per-address failure limit does not stop, must not fill the journal:
//! past its rate limit journald drops the service's warnings too. Every
//! refusal is still counted in metrics and kept in the rejections table.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a source logs a refused request, at most.
pub const EVERY: Duration = Duration::from_secs(10);

pub struct LogGate {
    every: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last: Option<Instant>,
    held_back: u64,
}

impl LogGate {
    pub fn new(every: Duration) -> Self {
        LogGate {
            every,
            state: Mutex::default(),
        }
    }

    /// `Some(n)`: write the line now, and say that `n` were held back
    /// since the last one. `None`: hold this one back.
    pub fn pass(&self, now: Instant) -> Option<u64> {
        // A panic elsewhere cannot leave these two fields inconsistent.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match state.last {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                state.held_back += 1;
                None
            }
            _ => {
                state.last = Some(now);
                Some(std::mem::take(&mut state.held_back))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_then_the_count_of_those_held_back() {
        let gate = LogGate::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(gate.pass(t0), Some(0));
        for ms in [1, 500, 9_999] {
            assert_eq!(gate.pass(t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(gate.pass(t0 + Duration::from_secs(10)), Some(3));
        assert_eq!(gate.pass(t0 + Duration::from_secs(11)), None);
        assert_eq!(gate.pass(t0 + Duration::from_secs(25)), Some(1));
        assert_eq!(gate.pass(t0 + Duration::from_secs(60)), Some(0));
    }
}
