//! The dispatcher: claims due deliveries through the writer and runs their
//! attempts, within each destination's concurrency limit.
//!
//! Each destination of each source is a lane of its own: its queue, its
//! slots, its claims. A lane whose destination is down fills with retries
//! scheduled later and claims nothing meanwhile; the other lanes of the
//! same source keep claiming and running as before.
//!
//! It sleeps until something can happen: a new event (the receiver wakes
//! it), an attempt finishing (a slot frees up), the next retry coming due
//! (the claim tells it when), or, with nothing pending, [`IDLE_RECHECK`] as
//! a backstop for events put back to pending from outside the server
//! (`hookbox replay`). There is no fixed polling interval on the hot path:
//! an idle hookbox starts delivering a fresh event within milliseconds.
//!
//! A claim brings each lane's events with their bodies, as far as
//! [`CARRIED_BODIES`] allows for the lane's queue; an attempt whose body
//! did not come along reads it from the read-only pool when it starts. So
//! memory holds at most that much per lane, and one body per running
//! attempt.
//!
//! Each attempt's outcome goes back to the writer, which commits it with
//! the next group; until then the event stays leased, and only the claim
//! that ran it may settle it (its token). Every claim first renews the
//! leases of the events the dispatcher holds, queued or running, in its
//! own transaction and by its own reading of the wall clock; with nothing
//! to claim, a claim that only renews goes every [`RENEW_EVERY`]. So a
//! wall clock stepped forward past a lease (NTP on a board without a
//! clock, a resumed VM) never makes an event the dispatcher is still
//! running claimable again, and held leases are alive again soon after
//! the step.
//!
//! On shutdown running attempts get [`SHUTDOWN_GRACE`] to finish. Then a
//! command still running is killed with its whole process group (outside
//! systemd's cgroup nothing else would, and a restart would run the same
//! delivery beside it) and its attempt recorded as interrupted, due again
//! at once ([`attempt`]); url attempts are abandoned and their leases
//! released, so the next start picks them up at once.

mod attempt;
mod lane;
mod pauses;

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::lane::{Lane, claim_from};
use self::pauses::persist;
use super::Shared;
use crate::config::Config;
use crate::delivery::alarm::Alarm;
use crate::delivery::board::Board;
use crate::delivery::breaker::{Breaker, May, Verdict};
use crate::delivery::settle::Rule;
use crate::delivery::transform;
use crate::store::deliveries::{Claim, Claims, Release};
use crate::store::deliveries::{ClaimFrom, Claimed, Lease};
use crate::store::pauses::PauseOp;
use crate::store::{Store, StoreError, WriterHandle};
use crate::support::clock;
use crate::telemetry::metrics::Metrics;

/// With nothing pending, look again this often anyway.
pub const IDLE_RECHECK: Duration = Duration::from_secs(5);

/// How long running attempts may finish after shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// After the grace, how long interrupted commands' attempts may take to be
/// recorded (a kill and a write: milliseconds, unless the writer is stuck).
const RECORD_GRACE: Duration = Duration::from_secs(5);

/// A lease outlives the attempt's own timeout by this much.
const LEASE_MARGIN: Duration = Duration::from_secs(60);

/// After a body could not be read, its claim is given back this much later.
pub(super) const BODY_READ_PAUSE: Duration = Duration::from_secs(1);

/// With events held and no claim made for this long (by the monotonic
/// clock), a claim goes only to renew their leases: well within
/// [`LEASE_MARGIN`], so one that waits its turn behind a busy writer still
/// comes in time.
const RENEW_EVERY: Duration = Duration::from_secs(15);

/// Each claim fetches up to this many times a source's concurrency, so
/// that under heavy ingest, when every trip through the writer queue waits
/// behind a group of inserts, one trip still feeds many attempts.
pub(super) const PREFETCH: usize = 16;

/// The bytes of bodies a lane's queue may hold, carried by its claims: a
/// busy url destination's queue of 2 KiB events, and half a broker's.
pub(super) const CARRIED_BODIES: u64 = 1 << 20;

type ClaimFuture = dyn Future<Output = Result<Claims, StoreError>> + Send;

pub struct Dispatcher {
    store: Store,
    writer: WriterHandle,
    lanes: Vec<Lane>,
    wake: Arc<Notify>,
    /// Where the admin API reads each lane's breaker, and where pauses by
    /// hand come from.
    board: Arc<Board>,
    /// The board's generation the lanes' `manual` were last synced at.
    seen_manual: u64,
    /// Breaker pauses on their way to the store, in order.
    persist: tokio::sync::mpsc::UnboundedSender<PauseOp>,
    persisted: Option<tokio::sync::mpsc::UnboundedReceiver<PauseOp>>,
    lease: Duration,
    /// Told of deliveries going dead and of breakers pausing.
    alerts: Alarm,
    /// Cancelled when the shutdown grace is over: commands still running
    /// are interrupted.
    stop: CancellationToken,
}

/// The running attempts: which lane each belongs to, its claim, and
/// whether it is the lane's probe.
type Running = HashMap<tokio::task::Id, (usize, Lease, bool)>;

/// What a finished attempt tells its lane's breaker; `None` when no
/// attempt was made.
pub(super) type Done = Option<Verdict>;

impl Dispatcher {
    /// A dispatcher for every push destination (url, command, broker) of every
    /// source, reading bodies through `store`'s read-only pool; `None` when
    /// there is none. Pull destinations are `crate::delivery::pull`'s.
    pub fn new(
        config: &Config,
        store: Store,
        writer: WriterHandle,
        wake: Arc<Notify>,
        board: Arc<Board>,
        metrics: &Metrics,
    ) -> anyhow::Result<Option<Self>> {
        let shared = Shared {
            client: super::url::client().context("building the HTTP client for deliveries")?,
            withheld: config.secret_env().into(),
        };
        let pairs: Vec<_> = config
            .sources
            .iter()
            .flat_map(|s| s.destinations.iter().map(move |d| (s, d)))
            .collect();
        let transforms = transform::for_destinations(pairs.iter().map(|(_, d)| *d))
            .context("preparing the transform processes")?;
        let mut lanes: Vec<Lane> = pairs
            .into_iter()
            .zip(transforms)
            .filter_map(|((source, cfg), transform)| {
                Some(Lane {
                    source: source.name.clone(),
                    destination: super::destination(cfg, &shared)?,
                    transform,
                    metrics: metrics.lane(&source.name, &cfg.name),
                    config: cfg.clone(),
                    queued: VecDeque::new(),
                    ahead: HashMap::new(),
                    in_flight: 0,
                    next_start: Instant::now(),
                    breaker: Breaker::new(cfg.breaker_failures, cfg.breaker_probe),
                    probe_asked: false,
                    probe_queued: false,
                    manual: false,
                    on_failure: Rule::of(cfg).on_failure(),
                })
            })
            .collect();
        // Paused as the last run left them: by hand, or by a breaker whose
        // probe goes when it was due (at once if that is past).
        let (now, wall) = (Instant::now(), clock::now_ms());
        for lane in &mut lanes {
            let status = board.get(&lane.source, &lane.config.name);
            lane.manual = status.manual_since.is_some();
            if status.paused_since.is_some() {
                let wait = status.next_probe_at.unwrap_or(wall).saturating_sub(wall);
                let wait = Duration::from_millis(u64::try_from(wait).unwrap_or(0));
                lane.breaker.restore(now + wait);
            }
            lane.metrics.paused(lane.manual || lane.breaker.is_paused());
        }
        let (persist, persisted) = tokio::sync::mpsc::unbounded_channel();
        // A lease covers one attempt; renewals cover the wait in the queue
        // before it. Leases only matter within one run: the next start
        // clears them.
        let longest = lanes.iter().map(|l| l.config.timeout).max();
        Ok(longest.map(|wait| Dispatcher {
            store,
            writer,
            lanes,
            wake,
            seen_manual: board.generation(),
            board,
            persist,
            persisted: Some(persisted),
            lease: wait.saturating_add(LEASE_MARGIN),
            alerts: Alarm::default(),
            stop: CancellationToken::new(),
        }))
    }

    /// Tells `alerts` of deliveries going dead and of breakers pausing.
    pub fn with_alerts(mut self, alerts: Alarm) -> Self {
        self.alerts = alerts;
        self
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut tasks: JoinSet<Done> = JoinSet::new();
        let mut running = Running::new();
        // At most one claim is on its way through the writer at a time; the
        // loop keeps starting queued events while it is.
        let mut claim: Option<Pin<Box<ClaimFuture>>> = None;
        // Look at once: events may be due from before a restart.
        let mut next_due = Some(0);
        // The wall clock at the last claim: seeing it go backwards, the next
        // claim also shortens leases granted under the old clock.
        let mut last_claim_at = i64::MIN;
        // When the last claim went, by the monotonic clock.
        let mut last_claim = Instant::now();
        if let Some(rx) = self.persisted.take() {
            tokio::spawn(persist(self.writer.clone(), rx));
        }
        loop {
            self.sync_manual();
            self.start_queued(&mut tasks, &mut running);
            let now = clock::now_ms();
            let mut wanted = self.wanted();
            let holds = !running.is_empty() || self.lanes.iter().any(|l| !l.queued.is_empty());
            let renew = holds && last_claim.elapsed() >= RENEW_EVERY;
            let can_claim = claim.is_none() && !wanted.is_empty();
            let probe = wanted
                .iter()
                .any(|w| self.lanes[w.lane].breaker.is_paused());
            let due = can_claim && (probe || next_due.is_some_and(|due| due <= now));
            if claim.is_none() && (due || renew) {
                let writer = self.writer.clone();
                let lease_until =
                    now.saturating_add(i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX));
                let clock_went_back = now < last_claim_at;
                if clock_went_back {
                    tracing::warn!(
                        by_ms = last_claim_at - now,
                        "the wall clock went backwards; bringing retries and leases scheduled under it within reach"
                    );
                }
                if clock_went_back || renew {
                    // Every lane: its leases, and when its next event is due.
                    for (i, lane) in self.lanes.iter().enumerate() {
                        if !wanted.iter().any(|w| w.lane == i) {
                            wanted.push(claim_from(i, lane, 0));
                        }
                    }
                }
                let held = self.held(&running);
                for w in &wanted {
                    let lane = &mut self.lanes[w.lane];
                    lane.probe_asked = w.limit > 0 && lane.breaker.is_paused();
                }
                last_claim_at = now;
                last_claim = Instant::now();
                claim = Some(Box::pin(async move {
                    let claim = Claim {
                        lanes: wanted,
                        now,
                        lease_until,
                        clock_went_back,
                        renew: held,
                    };
                    writer.write(claim).await
                }));
                next_due = None;
            }
            // Nothing to claim for (queues full, or a claim on its way):
            // a finished attempt or the claim's answer wakes the loop.
            let sleep = match next_due {
                // Never longer than the backstop: events put back to pending
                // from outside (hookbox replay) must not wait behind a
                // retry that is due hours from now.
                Some(due) if can_claim => {
                    Duration::from_millis((due - now).max(0) as u64).min(IDLE_RECHECK)
                }
                _ => IDLE_RECHECK,
            };
            // A lane whose rate holds its queue back starts the next then;
            // a paused one sends its probe then.
            let at = Instant::now();
            let sleep = self
                .lanes
                .iter()
                .filter_map(|l| match l.breaker.may(at) {
                    May::WaitUntil(t) => Some(t),
                    _ => l.held_by_rate(at),
                })
                .map(|t| t.saturating_duration_since(at))
                .fold(sleep, Duration::min);
            tokio::select! {
                () = shutdown.cancelled() => break,
                claimed = async { claim.as_mut().expect("guarded by the condition").await }, if claim.is_some() => {
                    claim = None;
                    // The claim answers for the lanes it asked about; a lane
                    // left out (its queue was full) may have asked to look
                    // again meanwhile (an attempt finished): keep the
                    // earlier, or that lane waits for the idle backstop.
                    let answered = self.take(claimed, now);
                    next_due = match (next_due, answered) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                () = self.wake.notified() => next_due = Some(0),
                Some(done) = tasks.join_next_with_id() => {
                    let (id, verdict) = match done {
                        Ok((id, verdict)) => (id, verdict),
                        Err(e) => (e.id(), None),
                    };
                    if let Some((i, _, probe)) = running.remove(&id) {
                        self.lanes[i].in_flight -= 1;
                        self.judge(i, verdict, probe);
                    }
                    next_due = Some(0);
                }
                () = tokio::time::sleep(sleep) => next_due = Some(0),
            }
        }
        // A claim still on its way: its events stay leased until the next
        // start clears them.
        drop(claim);
        self.drain(tasks, running).await;
    }

    /// The claims of every event the dispatcher holds, queued or running.
    fn held(&self, running: &Running) -> Vec<Lease> {
        let queued = self.lanes.iter().flat_map(|l| l.queued.iter());
        queued
            .map(Claimed::lease)
            .chain(running.values().map(|(_, lease, _)| *lease))
            .collect()
    }

    /// The lanes that should claim now, with how many events each may take:
    /// those whose queue is down to half its room, so that a claim, which
    /// waits its turn behind groups of inserts, fetches many at once.
    /// A paused lane asks for one delivery when its probe is due and
    /// nothing of it is out.
    fn wanted(&self) -> Vec<ClaimFrom> {
        let now = Instant::now();
        self.lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.manual)
            .filter_map(|(i, l)| match l.breaker.may(now) {
                May::Claim => (l.queued.len() <= l.config.concurrency * PREFETCH / 2
                    && l.room() > 0)
                    .then(|| claim_from(i, l, l.room())),
                May::Probe if l.in_flight == 0 && l.queued.is_empty() && !l.probe_asked => {
                    Some(claim_from(i, l, 1))
                }
                _ => None,
            })
            .collect()
    }

    /// Releases leases the dispatcher will not use now, off the loop.
    fn give_back(&self, leases: Vec<Lease>) {
        if leases.is_empty() {
            return;
        }
        let writer = self.writer.clone();
        tokio::spawn(async move {
            if let Err(e) = writer.write(Release(leases)).await {
                tracing::warn!(error = %e, "cannot give back a paused destination's claims; their leases run out");
            }
        });
    }

    /// Queues what a claim returned; returns when to claim next.
    fn take(&mut self, claimed: Result<Claims, StoreError>, now: i64) -> Option<i64> {
        match claimed {
            Ok(claims) => {
                // A lane paused while this claim was on its way takes only
                // a probe it asked for; the rest goes back.
                let mut give_back = Vec::new();
                for job in claims.claimed {
                    let Some(lane) = self.lanes.get_mut(job.lane) else {
                        continue;
                    };
                    if lane.manual {
                        // Paused by hand while the claim was on its way.
                        give_back.push(job.lease());
                        continue;
                    }
                    if lane.probe_asked {
                        lane.probe_asked = false;
                        lane.probe_queued = true;
                        lane.breaker.probe_started();
                    } else if lane.breaker.is_paused() {
                        give_back.push(job.lease());
                        continue;
                    }
                    lane.queued.push_back(job);
                }
                self.give_back(give_back);
                for i in claims.died {
                    if let Some(lane) = self.lanes.get(i) {
                        self.alerts.dead_many(&lane.source, &lane.config.name, 1);
                    }
                }
                let at = Instant::now();
                for lane in &mut self.lanes {
                    if std::mem::take(&mut lane.probe_asked) {
                        lane.breaker.probe_empty(at);
                    }
                }
                claims.next_due
            }
            Err(e) => {
                let at = Instant::now();
                for lane in &mut self.lanes {
                    if std::mem::take(&mut lane.probe_asked) {
                        lane.breaker.probe_empty(at);
                    }
                }
                tracing::warn!(error = %e, "cannot claim due deliveries; trying again in 1 s");
                Some(now + 1000)
            }
        }
    }

    /// Starts queued events while their lanes have free slots.
    fn start_queued(&mut self, tasks: &mut JoinSet<Done>, running: &mut Running) {
        for i in 0..self.lanes.len() {
            while let Some((claimed, probe)) = self.lanes[i].startable() {
                let lease = claimed.lease();
                let transformed = self.lanes[i].transformed(&claimed);
                let handle = tasks.spawn(self.attempt(claimed, probe, transformed));
                running.insert(handle.id(), (i, lease, probe));
            }
        }
    }

    /// Lets running attempts finish within the grace period, then
    /// interrupts the commands still running and waits for their attempts
    /// to be recorded, abandons the rest and releases their leases, with
    /// those of queued events.
    async fn drain(mut self, mut tasks: JoinSet<Done>, mut running: Running) {
        let queued: Vec<Lease> = self.lanes.iter_mut().flat_map(Lane::drain_queued).collect();
        if !tasks.is_empty() {
            tracing::info!(running = tasks.len(), "waiting for running deliveries");
        }
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        while let Ok(Some(done)) =
            tokio::time::timeout_at(deadline, tasks.join_next_with_id()).await
        {
            if let Ok((id, _)) = done {
                running.remove(&id);
            }
        }
        self.stop.cancel();
        let deadline = tokio::time::Instant::now() + RECORD_GRACE;
        while running
            .values()
            .any(|(lane, _, _)| self.lanes[*lane].destination.interruptible())
        {
            match tokio::time::timeout_at(deadline, tasks.join_next_with_id()).await {
                Ok(Some(Ok((id, _)))) => _ = running.remove(&id),
                // Panicked: its lease is released below.
                Ok(Some(Err(_))) => {}
                Ok(None) | Err(_) => break,
            }
        }
        tasks.shutdown().await;
        if !running.is_empty() {
            tracing::warn!(
                count = running.len(),
                "abandoned running deliveries at shutdown"
            );
        }
        let release: Vec<Lease> = running
            .into_values()
            .map(|(_, lease, _)| lease)
            .chain(queued)
            .collect();
        if release.is_empty() {
            return;
        }
        if let Err(e) = self.writer.write(Release(release)).await {
            tracing::warn!(error = %e, "cannot release leases; the next start clears them");
        }
    }
}
