//! The dispatcher: claims due events through the writer and runs their
//! attempts, within each source's concurrency limit.
//!
//! It sleeps until something can happen: a new event (the receiver wakes
//! it), an attempt finishing (a slot frees up), the next retry coming due
//! (the claim tells it when), or, with nothing pending, [`IDLE_RECHECK`] as
//! a backstop for events put back to pending from outside the server
//! (`hookbox replay`). There is no fixed polling interval on the hot path:
//! an idle hookbox starts delivering a fresh event within milliseconds.
//!
//! Each attempt's outcome goes back to the writer, which commits it with
//! the next group; until then the event stays leased. On shutdown running
//! attempts get [`SHUTDOWN_GRACE`] to finish; the rest are abandoned (a
//! command's process group is killed) and their leases released, so the
//! next start picks them up at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{Deliverer, Job, Outcome, backoff};
use crate::clock;
use crate::config::{Config, DeliverConfig};
use crate::store::WriterHandle;
use crate::store::dispatch::{AttemptRecord, Claimed, Settled};

/// With nothing pending, look again this often anyway.
pub const IDLE_RECHECK: Duration = Duration::from_secs(5);

/// How long running attempts may finish after shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A lease outlives the attempt's own timeout by this much, so only a
/// process that died lets a lease run out.
const LEASE_MARGIN: Duration = Duration::from_secs(60);

/// One source's destination and how busy it is.
struct Lane {
    config: DeliverConfig,
    deliverer: Arc<Deliverer>,
    in_flight: usize,
}

pub struct Dispatcher {
    writer: WriterHandle,
    lanes: HashMap<String, Lane>,
    wake: Arc<Notify>,
    lease: Duration,
}

impl Dispatcher {
    /// A dispatcher for every source with a destination; `None` when no
    /// source has one.
    pub fn new(
        config: &Config,
        writer: WriterHandle,
        wake: Arc<Notify>,
    ) -> anyhow::Result<Option<Self>> {
        let client = super::url::client().context("building the HTTP client for deliveries")?;
        let lanes: HashMap<String, Lane> = config
            .sources
            .iter()
            .filter_map(|s| Some((s.name.clone(), s.deliver.clone()?)))
            .map(|(name, cfg)| {
                let lane = Lane {
                    deliverer: Arc::new(Deliverer::new(&cfg, &client)),
                    config: cfg,
                    in_flight: 0,
                };
                (name, lane)
            })
            .collect();
        let longest = lanes.values().map(|l| l.config.timeout).max();
        Ok(longest.map(|timeout| Dispatcher {
            writer,
            lanes,
            wake,
            lease: timeout + LEASE_MARGIN,
        }))
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut running: HashMap<tokio::task::Id, (String, i64)> = HashMap::new();
        // Look at once: events may be due from before a restart.
        let mut next_due = Some(0);
        loop {
            let now = clock::now_ms();
            let free: Vec<(String, usize)> = self
                .lanes
                .iter()
                .filter(|(_, l)| l.in_flight < l.config.concurrency)
                .map(|(name, l)| (name.clone(), l.config.concurrency - l.in_flight))
                .collect();
            if !free.is_empty() && next_due.is_some_and(|due| due <= now) {
                let lease_until = now + self.lease.as_millis() as i64;
                match self.writer.claim(free, now, lease_until).await {
                    Ok(claims) => {
                        next_due = claims.next_due;
                        for claimed in claims.jobs {
                            let (source, id) = (claimed.source.clone(), claimed.id);
                            let handle = tasks.spawn(self.attempt(claimed));
                            running.insert(handle.id(), (source, id));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot claim due events; trying again in 1 s");
                        next_due = Some(now + 1000);
                    }
                }
                continue;
            }
            let sleep = match next_due {
                Some(due) if !free.is_empty() => Duration::from_millis((due - now).max(0) as u64),
                _ => IDLE_RECHECK,
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.wake.notified() => next_due = Some(0),
                Some(done) = tasks.join_next_with_id() => {
                    let id = match &done {
                        Ok((id, ())) => *id,
                        Err(e) => e.id(),
                    };
                    if let Some((source, _)) = running.remove(&id)
                        && let Some(lane) = self.lanes.get_mut(&source)
                    {
                        lane.in_flight -= 1;
                    }
                    next_due = Some(0);
                }
                () = tokio::time::sleep(sleep) => next_due = Some(0),
            }
        }
        self.drain(tasks, running).await;
    }

    /// Builds the task for one claimed event, counting it in its lane.
    fn attempt(&mut self, claimed: Claimed) -> impl Future<Output = ()> + Send + 'static {
        let lane = self
            .lanes
            .get_mut(&claimed.source)
            .expect("claims are only asked for configured lanes");
        lane.in_flight += 1;
        let deliverer = lane.deliverer.clone();
        let config = lane.config.clone();
        let writer = self.writer.clone();
        async move {
            let job = job(claimed);
            let started_at = clock::now_ms();
            let attempt = deliverer.deliver(&job).await;
            let now = clock::now_ms();
            let settled = match attempt.outcome {
                Outcome::Delivered => Settled::Delivered,
                Outcome::Dead => Settled::Dead,
                Outcome::Retry { .. } if job.attempt >= config.max_attempts => Settled::Dead,
                Outcome::Retry { retry_after } => {
                    let wait = backoff::next(
                        job.attempt,
                        retry_after,
                        config.backoff_base,
                        config.backoff_cap,
                        &mut fastrand::f64,
                    );
                    Settled::Retry(now + wait.as_millis() as i64)
                }
            };
            log_attempt(&job, &attempt, settled);
            let record = AttemptRecord {
                event_id: job.event_id,
                attempt: job.attempt,
                started_at,
                duration_ms: attempt.duration.as_millis() as i64,
                settled,
                status: attempt.status,
                error: attempt.error,
            };
            if let Err(e) = writer.record(record, now) {
                tracing::warn!(event.id = job.event_id, error = %e,
                    "cannot record the attempt; the event will be delivered again when its lease runs out");
            }
        }
    }

    /// Lets running attempts finish within the grace period, then abandons
    /// the rest and releases their leases.
    async fn drain(
        self,
        mut tasks: JoinSet<()>,
        mut running: HashMap<tokio::task::Id, (String, i64)>,
    ) {
        if tasks.is_empty() {
            return;
        }
        tracing::info!(running = tasks.len(), "waiting for running deliveries");
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        while let Ok(Some(done)) =
            tokio::time::timeout_at(deadline, tasks.join_next_with_id()).await
        {
            if let Ok((id, ())) = done {
                running.remove(&id);
            }
        }
        tasks.shutdown().await;
        let abandoned: Vec<i64> = running.into_values().map(|(_, id)| id).collect();
        if abandoned.is_empty() {
            return;
        }
        tracing::warn!(
            count = abandoned.len(),
            "abandoned deliveries at shutdown; released for the next start"
        );
        if let Err(e) = self.writer.release(abandoned, clock::now_ms()).await {
            tracing::warn!(error = %e, "cannot release leases; they run out by themselves");
        }
    }
}

fn job(c: Claimed) -> Job {
    let headers = serde_json::from_str(&c.headers).unwrap_or_default();
    Job {
        event_id: c.id,
        source: c.source,
        delivery_id: c.delivery_id,
        event_type: c.event_type,
        content_type: c.content_type,
        headers,
        body: c.body.into(),
        attempt: c.attempt,
    }
}

fn log_attempt(job: &Job, attempt: &super::Attempt, settled: Settled) {
    let duration_ms = attempt.duration.as_millis() as u64;
    let status = attempt.status.map(i64::from).unwrap_or(-1);
    match settled {
        Settled::Delivered => tracing::info!(
            source = %job.source, event.id = job.event_id, attempt = job.attempt, status, duration_ms, "delivered"
        ),
        Settled::Retry(at) => tracing::info!(
            source = %job.source, event.id = job.event_id, attempt = job.attempt, status, duration_ms,
            retry_in_ms = at - clock::now_ms(), error = attempt.error.as_deref().unwrap_or(""),
            "attempt failed; will retry"
        ),
        Settled::Dead => tracing::warn!(
            source = %job.source, event.id = job.event_id, attempt = job.attempt, status, duration_ms,
            error = attempt.error.as_deref().unwrap_or(""), "attempt failed; event is dead"
        ),
    }
}
