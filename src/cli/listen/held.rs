//! The leases `listen` holds, and the task that keeps them alive.
//!
//! A take leases each event for the destination's `timeout`; an app
//! slower than that would otherwise see its events again (taken anew by
//! this or another consumer) while it still works on the first copy.
//! Every third of a lease, [`keep`] extends every lease still held: a
//! lease is never closer than two thirds of its length to running out.
//! What the server answers stale was lost (a freeze, a network gap): it
//! leaves the held set with a line, and the loop does not forward it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use super::lane::{Extended, Lane};

/// Shortest pause between two extends, whatever the lease.
const MIN_PERIOD: Duration = Duration::from_millis(50);

/// Leases held (taken, neither settled nor given back), each with its
/// event's id for the lines.
#[derive(Default)]
pub(super) struct Held(Mutex<HashMap<String, String>>);

impl Held {
    fn leases(&self) -> MutexGuard<'_, HashMap<String, String>> {
        // A panic elsewhere cannot leave the map half-written: every
        // change is one insert or remove.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn hold(&self, lease: &str, id: String) {
        self.leases().insert(lease.to_owned(), id);
    }

    pub fn holds(&self, lease: &str) -> bool {
        self.leases().contains_key(lease)
    }

    /// Lets go of `lease` (settled or lost); its event's id if it was held.
    pub fn drop_lease(&self, lease: &str) -> Option<String> {
        self.leases().remove(lease)
    }

    /// Lets go of every lease, for a give-back.
    pub fn take_all(&self) -> Vec<String> {
        self.leases().drain().map(|(lease, _)| lease).collect()
    }

    fn snapshot(&self) -> Vec<String> {
        self.leases().keys().cloned().collect()
    }
}

/// Extends what `held` holds every third of the lease `lease` says (none:
/// waits for a take that says), until the server says it cannot.
pub(super) async fn keep(
    lane: Arc<Lane>,
    held: Arc<Held>,
    mut lease: watch::Receiver<Option<Duration>>,
) {
    loop {
        let length = *lease.borrow_and_update();
        let Some(length) = length else {
            if lease.changed().await.is_err() {
                return;
            }
            continue;
        };
        let period = (length / 3).max(MIN_PERIOD);
        tokio::select! {
            changed = lease.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
            () = tokio::time::sleep(period) => {}
        }
        let leases = held.snapshot();
        if leases.is_empty() {
            continue;
        }
        match lane.extend(&leases, period).await {
            Ok(Extended::Stale(stale)) => {
                for lease in stale {
                    // Settled meanwhile (the ack won the race): not lost.
                    if let Some(id) = held.drop_lease(&lease) {
                        eprintln!(
                            "lost the lease of event {id} (the server says it ran out): the app may see it again"
                        );
                    }
                }
            }
            Ok(Extended::Unsupported) => {
                eprintln!(
                    "the server cannot extend leases (an older hookbox): an event the app takes longer than the destination's timeout with comes again"
                );
                return;
            }
            Err(e) => eprintln!(
                "cannot extend {} leases ({e:#}); trying again",
                leases.len()
            ),
        }
    }
}
