//! Every destination's pause state, shared by those who act on it and
//! those who show it: the dispatcher writes its breakers' states here, the
//! admin API and `hookbox destination` pause and resume by hand, pull
//! takes and the dispatcher read the hand's pauses, and `/api/stats` and
//! the dashboard show it all.
//!
//! A pause by hand is durable (`crate::store::pauses`) before it is set
//! here; [`watch`] brings in those the CLI writes to the database while the
//! server runs, the way `hookbox replay` reaches a running server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::alarm::Alarm;
use crate::store::Store;
use crate::store::pauses::{self, Cause, Pause};

/// How often [`watch`] reads the pauses the CLI may have written.
pub const WATCH_EVERY: Duration = Duration::from_secs(2);

type Key = (String, String);

/// One destination's state as the admin API shows it, in unix ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Status {
    /// Paused by hand since.
    pub manual_since: Option<i64>,
    /// Paused by its breaker since.
    pub paused_since: Option<i64>,
    pub next_probe_at: Option<i64>,
    pub held_until: Option<i64>,
}

impl Status {
    /// `open`, `paused` or `held` at `now`, with why and its times.
    pub fn to_json(self, now: i64) -> serde_json::Value {
        let held = self.held_until.filter(|t| *t > now);
        let (state, by) = match (self.manual_since, self.paused_since, held) {
            (Some(_), _, _) => ("paused", Some("manual")),
            (None, Some(_), _) => ("paused", Some("breaker")),
            (None, None, Some(_)) => ("held", Some("retry_after")),
            (None, None, None) => ("open", None),
        };
        serde_json::json!({
            "state": state,
            "paused_by": by,
            "paused_since": self.manual_since.or(self.paused_since),
            "next_probe_at": self.next_probe_at.filter(|_| self.manual_since.is_none()),
            "held_until": held,
        })
    }
}

#[derive(Debug, Default)]
pub struct Board {
    /// The breakers' part of each [`Status`].
    breakers: Mutex<HashMap<Key, Status>>,
    /// Pauses by hand: since when.
    manual: Mutex<HashMap<Key, i64>>,
    /// Bumped on every change of `manual`, so the dispatcher looks at it
    /// only when it changed, and [`watch`] never applies a reading older
    /// than a change made meanwhile.
    generation: AtomicU64,
    /// Told of each new pause by hand (the dispatcher tells of breakers').
    alerts: Alarm,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn key(source: &str, destination: &str) -> Key {
    (source.to_owned(), destination.to_owned())
}

impl Board {
    /// A board as the last run left it.
    pub fn restored(pauses: &[Pause]) -> Self {
        let board = Board::default();
        for p in pauses {
            let k = key(&p.source, &p.destination);
            match p.cause {
                Cause::Manual => {
                    lock(&board.manual).insert(k, p.since);
                }
                Cause::Breaker => {
                    lock(&board.breakers).insert(
                        k,
                        Status {
                            paused_since: Some(p.since),
                            next_probe_at: p.next_probe_at,
                            ..Status::default()
                        },
                    );
                }
            }
        }
        board
    }

    /// Tells `alerts` of pauses by hand from now on.
    pub fn with_alerts(mut self, alerts: Alarm) -> Self {
        self.alerts = alerts;
        self
    }

    /// Sets a destination's breaker state.
    pub fn set(&self, source: &str, destination: &str, status: Status) {
        let mut map = lock(&self.breakers);
        if status == Status::default() {
            map.remove(&key(source, destination));
        } else {
            map.insert(key(source, destination), status);
        }
    }

    /// The whole state; `open` for a destination never paused or held.
    pub fn get(&self, source: &str, destination: &str) -> Status {
        let k = key(source, destination);
        let breaker = lock(&self.breakers).get(&k).copied().unwrap_or_default();
        Status {
            manual_since: self.manual_since(source, destination),
            ..breaker
        }
    }

    /// Since when the destination is paused by hand, if it is.
    pub fn manual_since(&self, source: &str, destination: &str) -> Option<i64> {
        lock(&self.manual).get(&key(source, destination)).copied()
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Pauses (`Some(since)`) or resumes a destination by hand, once the
    /// store has it. Returns whether anything changed.
    pub fn set_manual(&self, source: &str, destination: &str, since: Option<i64>) -> bool {
        let mut manual = lock(&self.manual);
        let k = key(source, destination);
        let changed = match since {
            Some(t) if !manual.contains_key(&k) => manual.insert(k, t).is_none(),
            Some(_) => false,
            None => manual.remove(&k).is_some(),
        };
        if changed {
            self.generation.fetch_add(1, Ordering::AcqRel);
            if since.is_some() {
                self.alerts.paused(source, destination, "manual");
            }
        }
        changed
    }

    /// Replaces the pauses by hand with what the store holds, read after
    /// `seen` was the generation; a change made since wins. Returns
    /// whether anything changed.
    fn sync_manual(&self, seen: u64, stored: HashMap<Key, i64>) -> bool {
        let mut manual = lock(&self.manual);
        if self.generation() != seen || *manual == stored {
            return false;
        }
        for (source, destination) in stored.keys().filter(|k| !manual.contains_key(*k)) {
            self.alerts.paused(source, destination, "manual");
        }
        *manual = stored;
        self.generation.fetch_add(1, Ordering::AcqRel);
        true
    }
}

/// Reads the pauses by hand from the store every [`WATCH_EVERY`], and on a
/// change calls `woken` (the server wakes the dispatcher and the pull
/// takes: the board knows neither). Cheap: the table holds a row per
/// paused destination.
pub async fn watch(
    board: std::sync::Arc<Board>,
    store: Store,
    woken: impl Fn() + Send,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(WATCH_EVERY) => {}
        }
        let seen = board.generation();
        let stored = match store.read(pauses::load).await {
            Ok(rows) => rows
                .into_iter()
                .filter(|p| p.cause == Cause::Manual)
                .map(|p| ((p.source, p.destination), p.since))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "cannot read the destinations' pauses; looking again shortly");
                continue;
            }
        };
        if board.sync_manual(seen, stored) {
            tracing::info!("destination pauses changed in the database (hookbox destination)");
            woken();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_made_before_a_change_does_not_undo_it() {
        let board = Board::default();
        let seen = board.generation();
        assert!(board.set_manual("gh", "ci", Some(5)));
        assert!(!board.set_manual("gh", "ci", Some(9)), "already paused");
        assert!(!board.sync_manual(seen, HashMap::new()), "stale reading");
        assert_eq!(board.manual_since("gh", "ci"), Some(5));
        let seen = board.generation();
        assert!(board.sync_manual(seen, HashMap::new()));
        assert_eq!(board.manual_since("gh", "ci"), None);
    }

    #[test]
    fn the_state_says_who_paused_it() {
        let board = Board::restored(&[Pause {
            source: "gh".into(),
            destination: "ci".into(),
            cause: Cause::Breaker,
            since: 10,
            next_probe_at: Some(40),
        }]);
        let json = board.get("gh", "ci").to_json(20);
        assert_eq!(json["state"], "paused");
        assert_eq!(json["paused_by"], "breaker");
        assert_eq!(json["next_probe_at"], 40);
        board.set_manual("gh", "ci", Some(30));
        let json = board.get("gh", "ci").to_json(20);
        assert_eq!(json["paused_by"], "manual");
        assert_eq!(json["paused_since"], 30);
        assert!(
            json["next_probe_at"].is_null(),
            "no probe while paused by hand"
        );
        assert_eq!(board.get("gh", "other").to_json(20)["state"], "open");
    }
}
