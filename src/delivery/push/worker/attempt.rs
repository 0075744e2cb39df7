//! One attempt: read the body, run the destination's transform if it has
//! one, deliver, settle the outcome (delivered, a retry after backoff, or
//! dead), count it, log it, and record it through the writer.
//!
//! A transform with no output settles the delivery `skipped`, and one that
//! fails settles it `dead` with the reason: either way the destination is
//! not contacted, so its breaker hears nothing of it.
//!
//! A command still running when the shutdown grace ends (the dispatcher's
//! `stop`) is interrupted: its future is dropped, which SIGKILLs the
//! command's process group (`crate::delivery::push::command`), and the attempt is
//! recorded as [`INTERRUPTED`], as a lease a crash left is at the next
//! start: it counts toward `max_attempts`, as the command may have had
//! effects, and the delivery is due again at once unless that was its last
//! attempt: the destination did not fail, hookbox stopped. A url attempt
//! is not interrupted here: the drain abandons it and gives its lease back.

use tokio_util::sync::CancellationToken;

use super::{BODY_READ_PAUSE, Dispatcher, Done};
use crate::delivery::breaker::Verdict;
use crate::delivery::settle::{Ended, Rule, settle};
use crate::delivery::transform::{Applied, Pending, Transform};
use crate::delivery::{Attempt, Destination, Job, Outcome};
use crate::store::deliveries::{
    self, AttemptRecord, Claimed, INTERRUPTED, Record, Release, Settled,
};
use crate::store::{Store, WriterHandle};
use crate::support::clock;
use crate::telemetry::metrics::AttemptOutcome;

impl Dispatcher {
    /// Builds the task for one claimed delivery, counting it in its lane. A
    /// probe that fails is not counted against `max_attempts`: it stays
    /// due, for the next probe.
    pub(super) fn attempt(
        &mut self,
        claimed: Claimed,
        probe: bool,
        transformed: Option<Pending>,
    ) -> impl Future<Output = Done> + Send + 'static {
        let lane = &mut self.lanes[claimed.lane];
        lane.in_flight += 1;
        let source = lane.source.clone();
        let destination = lane.config.name.clone();
        let deliverer = lane.destination.clone();
        let transform = lane.transform.clone();
        let config = lane.config.clone();
        let metrics = lane.metrics.clone();
        let writer = self.writer.clone();
        let store = self.store.clone();
        let alerts = self.alerts.clone();
        let stop = self.stop.clone();
        async move {
            let lease = claimed.lease();
            let started_at = clock::now_ms();
            let Ran {
                job,
                attempt,
                interrupted,
                contacted,
            } = run(
                claimed,
                (source, destination),
                &store,
                &writer,
                (&*deliverer, transform.as_ref(), transformed),
                &stop,
            )
            .await?;
            let now = clock::now_ms();
            let ended = Ended { probe, interrupted };
            let settled = settle(attempt.outcome, job.attempt, ended, &Rule::of(&config), now);
            log_attempt(&job, &attempt, settled);
            let outcome = match settled {
                Settled::Delivered => AttemptOutcome::Delivered,
                Settled::Retry(_) => AttemptOutcome::Retry,
                Settled::Dead => AttemptOutcome::Dead,
                Settled::Skipped => AttemptOutcome::Skipped,
            };
            metrics.attempt(outcome, attempt.duration);
            let record = AttemptRecord {
                lease,
                event_id: job.event_id,
                source: job.source.clone(),
                destination: job.destination.clone(),
                attempt: job.attempt,
                started_at,
                duration_ms: attempt.duration.as_millis() as i64,
                settled,
                status: attempt.status,
                error: attempt.error,
                counted: !(probe && matches!(settled, Settled::Retry(_))),
            };
            let error = record.error.clone();
            match writer.queue(Record { record, now }).await {
                Ok(()) if settled == Settled::Dead => {
                    alerts.dead(
                        &job.source,
                        &job.destination,
                        job.event_id,
                        error.as_deref(),
                    );
                }
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(event.id = job.event_id, destination = %job.destination, error = %e,
                    "cannot record the attempt; it will be made again when its lease runs out")
                }
            }
            // Stopping: no breaker to tell, and hookbox failed, not the
            // destination; nor when the destination was never contacted.
            (!interrupted && contacted).then(|| verdict(attempt.outcome, attempt.status))
        }
    }
}

/// What [`run`] did: the job (its body dropped), the attempt, whether
/// `stop` cut it short, and whether the destination was contacted at all
/// (not when a transform skipped or failed).
struct Ran {
    job: Job,
    attempt: Attempt,
    interrupted: bool,
    contacted: bool,
}

/// Reads the event's body, transforms it, and makes the attempt; `None`
/// when there was none to make (nothing to record).
async fn run(
    mut claimed: Claimed,
    (source, destination): (String, String),
    store: &Store,
    writer: &WriterHandle,
    (deliverer, transform, transformed): (&dyn Destination, Option<&Transform>, Option<Pending>),
    stop: &CancellationToken,
) -> Option<Ran> {
    let id = claimed.event_id;
    let body = match claimed.body.take() {
        Some(carried) => Ok(Some(carried.0)),
        None => store.read(move |conn| deliveries::body(conn, id)).await,
    };
    match body {
        Ok(Some(body)) => {
            let mut job = job(claimed, source, destination, body);
            let started = std::time::Instant::now();
            let refused = |outcome, error| Attempt {
                outcome,
                status: None,
                duration: started.elapsed(),
                error,
            };
            let mut contacted = true;
            let (attempt, interrupted) = match transform {
                Some(t) => match applied(t, transformed, &job).await {
                    Applied::Send { body, content_type } => {
                        job.body = body;
                        job.content_type = Some(content_type.to_owned());
                        deliver(deliverer, &job, stop).await
                    }
                    Applied::Skip => {
                        contacted = false;
                        (refused(Outcome::Skipped, None), false)
                    }
                    Applied::Fail(why) => {
                        contacted = false;
                        (refused(Outcome::Dead, Some(why)), false)
                    }
                    Applied::Retry(why) => {
                        contacted = false;
                        let retry = Outcome::Retry { retry_after: None };
                        (refused(retry, Some(why)), false)
                    }
                },
                None => deliver(deliverer, &job, stop).await,
            };
            // Not kept while the outcome waits for room in the writer's queue.
            job.body = bytes::Bytes::new();
            Some(Ran {
                job,
                attempt,
                interrupted,
                contacted,
            })
        }
        Ok(None) => {
            tracing::warn!(event.id = id, "the event was deleted before its attempt");
            None
        }
        // Not an attempt: the destination never saw it, so it must not
        // count toward max_attempts (or make the event dead). The claim is
        // given back after a pause, so a database that cannot be read is
        // not read in a loop.
        Err(e) => {
            tracing::warn!(
                event.id = id,
                error = %format!("{e:#}"),
                "cannot read the event's body; trying again shortly, no attempt counted"
            );
            tokio::time::sleep(BODY_READ_PAUSE).await;
            if let Err(e) = writer.write(Release(vec![claimed.lease()])).await {
                tracing::warn!(error = %e, "cannot give the claim back; its lease runs out");
            }
            None
        }
    }
}

/// What `transform` makes of `job`: the run started ahead of the attempt
/// if there was one, else one now.
async fn applied(transform: &Transform, ahead: Option<Pending>, job: &Job) -> Applied {
    match ahead {
        Some(pending) => pending.applied().await,
        None => transform.apply(job).await,
    }
}

/// Runs the attempt; a command's until `stop` at the latest (`true`), when
/// dropping it kills the command's process group. `biased`: once stopping,
/// a command not started yet is not started.
async fn deliver(
    deliverer: &dyn Destination,
    job: &Job,
    stop: &CancellationToken,
) -> (Attempt, bool) {
    if !deliverer.interruptible() {
        return (deliverer.deliver(job).await, false);
    }
    let started = std::time::Instant::now();
    tokio::select! {
        biased;
        () = stop.cancelled() => {
            let attempt = Attempt {
                outcome: Outcome::Retry { retry_after: None },
                status: None,
                duration: started.elapsed(),
                error: Some(INTERRUPTED.to_owned()),
            };
            (attempt, true)
        }
        attempt = deliverer.deliver(job) => (attempt, false),
    }
}

/// How an attempt's outcome reads to the breaker: a `Retry-After` on a
/// 429 or 503 asks the whole destination to wait.
fn verdict(outcome: Outcome, status: Option<u16>) -> Verdict {
    match outcome {
        Outcome::Delivered => Verdict::Delivered,
        Outcome::Dead => Verdict::Refused,
        // Not reached: a skip never contacts the destination.
        Outcome::Skipped => Verdict::Delivered,
        Outcome::Retry { retry_after } => Verdict::Failed {
            pause_for: retry_after.filter(|_| matches!(status, Some(429 | 503))),
        },
    }
}

fn job(c: Claimed, source: String, destination: String, body: Vec<u8>) -> Job {
    let headers = serde_json::from_str(&c.headers).unwrap_or_default();
    Job {
        event_id: c.event_id,
        source,
        destination,
        delivery_id: c.delivery_id,
        event_type: c.event_type,
        received_at: c.received_at,
        content_type: c.content_type,
        headers,
        body: body.into(),
        attempt: c.attempt,
    }
}

/// A delivery is a debug line, as an accepted event is: the attempts table
/// and the dashboard keep every one, and a backlog draining at thousands a
/// second would otherwise run past journald's rate limit (10,000 lines per
/// 30 s by default), which then drops the service's warnings too. A failed
/// attempt is worth a line at the default level.
fn log_attempt(job: &Job, attempt: &Attempt, settled: Settled) {
    let duration_ms = attempt.duration.as_millis() as u64;
    let status = attempt.status.map(i64::from).unwrap_or(-1);
    match settled {
        Settled::Delivered => tracing::debug!(
            source = %job.source, destination = %job.destination, event.id = job.event_id, attempt = job.attempt, status, duration_ms, "delivered"
        ),
        Settled::Retry(at) => tracing::info!(
            source = %job.source, destination = %job.destination, event.id = job.event_id, attempt = job.attempt, status, duration_ms,
            retry_in_ms = at - clock::now_ms(), error = attempt.error.as_deref().unwrap_or(""),
            "attempt failed; will retry"
        ),
        Settled::Skipped => tracing::debug!(
            source = %job.source, destination = %job.destination, event.id = job.event_id,
            "skipped: the transform gave nothing to send"
        ),
        Settled::Dead => tracing::warn!(
            source = %job.source, destination = %job.destination, event.id = job.event_id, attempt = job.attempt, status, duration_ms,
            error = attempt.error.as_deref().unwrap_or(""), "attempt failed; event is dead"
        ),
    }
}
