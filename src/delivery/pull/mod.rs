//! Pull destinations: consumers that cannot be reached take their
//! deliveries, with leases and acknowledgements.
//!
//! A `pull` destination is a lane like any other (its own deliveries,
//! per-key order, retries and dead letters), except that nothing is pushed:
//! a consumer asks `POST /pull/{source}/{destination}` (public listener,
//! bearer = the destination's token) or `/api/pull/...` (admin listener,
//! admin token). A take claims up to `max` due deliveries through the
//! writer, leased for the destination's `timeout`, exactly as the
//! dispatcher claims; with none due it long-polls up to `wait`. The
//! consumer then acks (delivered) or nacks (a failed attempt: backoff,
//! `max_attempts`, dead) each lease, or extends the leases of what it is
//! still working on; a lease that expired or was settled already changes
//! nothing and is reported stale. A lease is named by its random secret
//! and looked up in the URL's lane only ([`crate::store::pull_leases`]),
//! and one that runs out is a failed attempt, recorded by the next take.
//!
//! A waiting long-poll costs no writer work: it sleeps on its lane's
//! [`Notify`] until an insert gives the lane a delivery ([`PullHub::wake`]),
//! an ack or nack may have let the next of a key through, or the next
//! retry comes due (the claim says when), and only then claims again.
//!
//! On the public listener the edge applies: the client address, the
//! failure limit (a wrong token counts as a failed verification and ends
//! in 429), and [`PullHub`]'s bound on long-polls per address.

mod api;
mod rate;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;
use tokio::sync::Notify;

use crate::config::{Config, Destination};
use crate::delivery::alarm::Alarm;
use crate::delivery::board::Board;
use crate::delivery::settle::Rule;
use crate::edge::Edge;
use crate::store::{Store, WriterHandle};

pub use api::{admin_routes, public_routes};

/// One pull destination, as the API serves it.
pub struct PullLane {
    pub source: String,
    pub destination: String,
    /// SHA-256 of the token: compared in constant time, whatever the
    /// length of what was sent.
    token: [u8; 32],
    /// How long a take's lease lasts.
    timeout: Duration,
    /// What a nack, or a lease that ran out, makes of a delivery.
    rule: Rule,
    max_bytes: u64,
    /// `rate`: how fast takes may hand out deliveries.
    rate: Option<rate::Bucket>,
    /// Woken when the lane may have a delivery to hand out.
    wake: Notify,
}

impl PullLane {
    /// Whether `sent` is this destination's token.
    fn token_matches(&self, sent: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(sent).into();
        digest.ct_eq(&self.token).into()
    }
}

/// Every pull destination of the config, and what their API shares.
pub struct PullHub {
    lanes: HashMap<(String, String), Arc<PullLane>>,
    /// Pull destinations by source, for [`PullHub::wake`].
    by_source: HashMap<String, Vec<Arc<PullLane>>>,
    writer: WriterHandle,
    store: Store,
    edge: Arc<Edge>,
    /// Where pauses by hand are: a paused pull destination hands out
    /// nothing.
    board: Arc<Board>,
    /// Long-polls waiting, per client address.
    waiting: Mutex<HashMap<IpAddr, u32>>,
    max_waiting: u32,
    /// Ends waiting takes at shutdown: they answer what they have (none)
    /// rather than hold the server's drain.
    shutdown: tokio_util::sync::CancellationToken,
    /// Told of deliveries a nack made dead.
    alerts: Alarm,
}

impl PullHub {
    pub fn new(
        config: &Config,
        store: Store,
        writer: WriterHandle,
        edge: Arc<Edge>,
        board: Arc<Board>,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Self {
        let mut lanes = HashMap::new();
        let mut by_source: HashMap<String, Vec<Arc<PullLane>>> = HashMap::new();
        for source in &config.sources {
            for d in &source.destinations {
                let Destination::Pull { token, max_bytes } = &d.destination else {
                    continue;
                };
                let lane = Arc::new(PullLane {
                    source: source.name.clone(),
                    destination: d.name.clone(),
                    token: Sha256::digest(token.expose().as_bytes()).into(),
                    timeout: d.timeout,
                    rule: Rule::of(d),
                    max_bytes: *max_bytes,
                    rate: d.rate.map(rate::Bucket::new),
                    wake: Notify::new(),
                });
                by_source
                    .entry(source.name.clone())
                    .or_default()
                    .push(lane.clone());
                lanes.insert((source.name.clone(), d.name.clone()), lane);
            }
        }
        PullHub {
            lanes,
            by_source,
            writer,
            store,
            edge,
            board,
            waiting: Mutex::new(HashMap::new()),
            max_waiting: config.edge.max_client_long_polls,
            shutdown,
            alerts: Alarm::default(),
        }
    }

    /// Tells `alerts` of deliveries a nack makes dead.
    pub fn with_alerts(mut self, alerts: Alarm) -> Self {
        self.alerts = alerts;
        self
    }

    /// Whether `source` has a pull destination (the receiver skips
    /// [`PullHub::wake`] otherwise).
    pub fn serves(&self, source: &str) -> bool {
        self.by_source.contains_key(source)
    }

    /// After an insert gave `source`'s `destinations` a delivery: wakes the
    /// long-polls of those that are pull destinations.
    pub fn wake(&self, source: &str, destinations: &[Arc<str>]) {
        let Some(lanes) = self.by_source.get(source) else {
            return;
        };
        for lane in lanes {
            // One event needs one take: waking every waiting take would
            // have each of them claim through the writer, for one winner.
            // A take that is not waiting yet finds the permit.
            if destinations.iter().any(|d| **d == *lane.destination) {
                lane.wake.notify_one();
            }
        }
    }

    /// Wakes every long-poll: deliveries were put back to pending from
    /// elsewhere (a replay).
    pub fn wake_all(&self) {
        for lane in self.lanes.values() {
            lane.wake.notify_waiters();
        }
    }

    fn lane(&self, source: &str, destination: &str) -> Option<&Arc<PullLane>> {
        self.lanes.get(&(source.to_owned(), destination.to_owned()))
    }

    /// Counts a long-poll of `client` in; `None` when it holds its share.
    fn start_waiting(self: &Arc<Self>, client: IpAddr) -> Option<Waiting> {
        let mut waiting = self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = waiting.entry(client).or_insert(0);
        if *n >= self.max_waiting {
            return None;
        }
        *n += 1;
        Some(Waiting {
            hub: self.clone(),
            client,
        })
    }
}

/// A long-poll counted against its address until dropped.
struct Waiting {
    hub: Arc<PullHub>,
    client: IpAddr,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut waiting = self
            .hub
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = waiting.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                waiting.remove(&self.client);
            }
        }
    }
}
