//! Alerts: a message in Slack, Discord, ntfy or a signed JSON webhook when
//! something needs a person (`[[alerts]]`, see `crate::config::alerts`).
//!
//! The parts of hookbox that notice trouble hold an [`Alerter`], a cheap
//! handle that never blocks and never fails:
//! * events (a delivery went dead, a catch-up run failed, a destination
//!   was paused) go through a bounded channel with `try_send`; when it is
//!   full the notice is dropped and counted
//!   (`hookbox_alert_notices_dropped_total`), so ingest and dispatch never
//!   wait for an alert;
//! * what happens per request (a refused signature, a write the store
//!   refused) only bumps an atomic counter, which the alert task samples
//!   every second ([`watch`]).
//!
//! The alert task ([`Alerts::run`]) also looks on its own at what no
//! request reports: the oldest pending delivery's age, the database's
//! file system, the served certificate's expiry ([`watch`]). Conditions that
//! are states (backlog, a full disk, a certificate running out, a source
//! over its refusal threshold) alert when they start, and again only once
//! they have ended and started anew.
//!
//! Per alert and condition at most one message goes out in `min_interval`;
//! what comes meanwhile is folded: when the interval ends, one more
//! message says how many there were and shows the latest. Each message is
//! sent on a task of its own, tried [`send::ATTEMPTS`] times with a pause
//! between, and a failure is logged and counted
//! (`hookbox_alert_messages_total{outcome="failed"}`); a receiver that is
//! down or hangs holds only its own sending task. A URL never appears in a
//! log line or error: alerts are named `alerts[i] (format)`.

mod discord;
mod json;
mod ntfy;
pub mod send;
mod slack;
pub mod watch;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{AlertConfig, Condition, Config};
use crate::delivery::alarm::Alarms;
use crate::store::Store;
use crate::support::clock;
use crate::telemetry::metrics::AlertMetrics;
use send::Target;

/// Notices waiting for the alert task. Far more than a burst of failures
/// produces between two turns of the task; past it, notices are dropped
/// (the folding would have merged them anyway).
const QUEUE: usize = 1024;

/// Something worth telling a person about, before folding.
#[derive(Debug, Clone)]
pub struct Notice {
    pub condition: Condition,
    /// One line: what happened.
    pub title: String,
    /// A few lines: where, and what to look at.
    pub text: String,
    /// The same facts as fields, for the JSON format.
    pub details: Value,
}

/// What one message says: a notice and how many it stands for.
#[derive(Debug, Clone)]
pub struct Message {
    /// `None` for `hookbox alerts test`.
    pub condition: Option<Condition>,
    pub title: String,
    pub text: String,
    pub details: Value,
    /// Notices of this condition this message stands for (1 unless
    /// repeats were folded into it; the latest is the one shown).
    pub count: u32,
    /// Unix ms.
    pub at: i64,
}

impl Message {
    fn of(notice: Notice, count: u32, folded_over: Option<Duration>) -> Message {
        let mut text = notice.text;
        if let Some(interval) = folded_over.filter(|_| count > 1) {
            text = format!(
                "{count} times in the last {} (min_interval); the latest:\n{text}",
                humantime::format_duration(interval)
            );
        }
        Message {
            condition: Some(notice.condition),
            title: notice.title,
            text,
            details: notice.details,
            count,
            at: clock::now_ms(),
        }
    }

    /// The message `hookbox alerts test` sends.
    pub fn test() -> Message {
        Message {
            condition: None,
            title: "Test alert from hookbox".to_owned(),
            text: "This receiver is set up: hookbox will post here when deliveries go dead, \
                   a source keeps refusing requests, or something else needs you."
                .to_owned(),
            details: json!({}),
            count: 1,
            at: clock::now_ms(),
        }
    }

    /// `dead`, `backlog`, ... or `test`.
    pub fn kind(&self) -> &'static str {
        self.condition.map_or("test", Condition::as_str)
    }

    /// How loud it is: ntfy's priority (1-5; 3 is the default).
    fn priority(&self) -> u8 {
        match self.condition {
            Some(Condition::Dead | Condition::Storage | Condition::Rejections | Condition::Gap) => {
                4
            }
            Some(Condition::Certificate) => 4,
            Some(_) => 3,
            None => 2,
        }
    }
}

/// The handle the rest of hookbox reports through; cheap to clone. The
/// default one (no `[[alerts]]`) does nothing.
#[derive(Clone, Default)]
pub struct Alerter(Option<Arc<Shared>>);

impl std::fmt::Debug for Alerter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Alerter(on)"
        } else {
            "Alerter(off)"
        })
    }
}

struct Shared {
    tx: mpsc::Sender<Notice>,
    /// Signature refusals per source since start, sampled by [`watch`].
    rejections: HashMap<String, AtomicU64>,
    /// Events the store refused to take (the 503s), sampled likewise.
    refused_writes: AtomicU64,
    metrics: AlertMetrics,
}

impl Alerter {
    /// Hands `notice` to the alert task without waiting.
    fn notify(&self, notice: Notice) {
        let Some(shared) = &self.0 else { return };
        if shared.tx.try_send(notice).is_err() {
            shared.metrics.dropped();
        }
    }

    /// A delivery went dead.
    pub fn dead(&self, source: &str, destination: &str, event_id: i64, error: Option<&str>) {
        if self.0.is_none() {
            return;
        }
        let why = error.unwrap_or("no error recorded");
        self.notify(Notice {
            condition: Condition::Dead,
            title: format!("A delivery went dead: {source}/{destination}"),
            text: format!(
                "Event {event_id} of source {source} will not be retried at destination {destination}.\n\
                 Last error: {why}\n\
                 Fix the destination, then: hookbox replay --dead --source {source} --destination {destination}"
            ),
            details: json!({
                "source": source, "destination": destination,
                "event_id": event_id, "error": error,
            }),
        });
    }

    /// `count` deliveries went dead at once (pull nacks).
    pub fn dead_many(&self, source: &str, destination: &str, count: usize) {
        if self.0.is_none() || count == 0 {
            return;
        }
        self.notify(Notice {
            condition: Condition::Dead,
            title: format!("{count} deliveries went dead: {source}/{destination}"),
            text: format!(
                "The consumer of pull destination {destination} (source {source}) nacked them past max_attempts.\n\
                 Then: hookbox replay --dead --source {source} --destination {destination}"
            ),
            details: json!({ "source": source, "destination": destination, "deliveries": count }),
        });
    }

    /// A catch-up run failed with `error`.
    pub fn catchup_failed(&self, source: &str, job: &str, error: &str) {
        if self.0.is_none() {
            return;
        }
        self.notify(Notice {
            condition: Condition::CatchupFailed,
            title: format!("Catch-up failed: {source} ({job})"),
            text: format!(
                "The {job} run of source {source} failed: {error}\n\
                 Events the provider failed to deliver may be missing until a run succeeds."
            ),
            details: json!({ "source": source, "job": job, "error": error }),
        });
    }

    /// A catch-up pass ended with events it could not recover; `why` says
    /// how many, for which reasons.
    pub fn gap(
        &self,
        source: &str,
        job: &str,
        missing: u32,
        why: &str,
        uncovered_from: Option<i64>,
    ) {
        if self.0.is_none() {
            return;
        }
        let since = uncovered_from
            .map(|at| {
                format!(
                    "\nWhat happened before {} is older than the provider keeps: it cannot be fetched again.",
                    clock::format_ms(at)
                )
            })
            .unwrap_or_default();
        self.notify(Notice {
            condition: Condition::Gap,
            title: format!("Catch-up could not recover {missing}: {source} ({job})"),
            text: format!(
                "The {job} pass of source {source} ended with {missing} missing: {why}.{since}\n\
                 The ledger: hookbox catch-up {source} --report"
            ),
            details: json!({
                "source": source, "job": job, "missing": missing, "why": why,
                "uncovered_from": uncovered_from,
            }),
        });
    }

    /// A destination was paused; `by` is `breaker` or `manual`.
    pub fn paused(&self, source: &str, destination: &str, by: &'static str) {
        if self.0.is_none() {
            return;
        }
        let why = match by {
            "manual" => "by hand (API or hookbox destination pause)",
            _ => "by its circuit breaker: it keeps failing; hookbox probes it before sending more",
        };
        self.notify(Notice {
            condition: Condition::Paused,
            title: format!("Destination paused: {source}/{destination}"),
            text: format!(
                "Destination {destination} of source {source} was paused {why}.\n\
                 Its deliveries wait in the queue; none is lost."
            ),
            details: json!({ "source": source, "destination": destination, "paused_by": by }),
        });
    }

    /// A request to `source` failed verification (401). One atomic add.
    pub fn rejected(&self, source: &str) {
        if let Some(counter) = self.0.as_ref().and_then(|s| s.rejections.get(source)) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The store refused an event (503). One atomic add.
    pub fn refused_write(&self) {
        if let Some(shared) = &self.0 {
            shared.refused_writes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// How the delivery core's notices reach the alert task.
impl Alarms for Alerter {
    fn dead(&self, source: &str, destination: &str, event_id: i64, error: Option<&str>) {
        Alerter::dead(self, source, destination, event_id, error);
    }

    fn dead_many(&self, source: &str, destination: &str, count: usize) {
        Alerter::dead_many(self, source, destination, count);
    }

    fn paused(&self, source: &str, destination: &str, by: &'static str) {
        Alerter::paused(self, source, destination, by);
    }
}

/// The alert task: its targets, the folding state, and the watchers.
pub struct Alerts {
    rx: mpsc::Receiver<Notice>,
    shared: Arc<Shared>,
    targets: Vec<Arc<Target>>,
    folds: HashMap<(usize, Condition), Fold>,
    watch: watch::Watch,
}

/// One alert's and condition's folding.
#[derive(Debug, Default)]
struct Fold {
    /// When the last message went.
    last_sent: Option<Instant>,
    /// Notices since then, not sent, and the latest of them.
    folded: u32,
    latest: Option<Notice>,
}

impl Alerts {
    /// The handle and, when `[[alerts]]` has any, the task that sends.
    pub fn new(
        config: &Config,
        store: Store,
        metrics: AlertMetrics,
        tls_expiry: Gauge,
    ) -> anyhow::Result<(Alerter, Option<Alerts>)> {
        if config.alerts.is_empty() {
            return Ok((Alerter::default(), None));
        }
        let client = send::client()?;
        let targets = config
            .alerts
            .iter()
            .map(|a| Target::new(a, client.clone(), metrics.clone()).map(Arc::new))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let shared = Arc::new(Shared {
            tx,
            rejections: config
                .sources
                .iter()
                .map(|s| (s.name.clone(), AtomicU64::new(0)))
                .collect(),
            refused_writes: AtomicU64::new(0),
            metrics,
        });
        let watch = watch::Watch::new(config, store, tls_expiry);
        let alerts = Alerts {
            rx,
            shared: shared.clone(),
            targets,
            folds: HashMap::new(),
            watch,
        };
        Ok((Alerter(Some(shared)), Some(alerts)))
    }

    /// Folds and sends notices until `shutdown`. Messages still being sent
    /// then are abandoned: an alert is never worth delaying a stop.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut sending: JoinSet<()> = JoinSet::new();
        let mut sample = tokio::time::interval(watch::SAMPLE_EVERY);
        sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let configs: Vec<AlertConfig> = self.targets.iter().map(|t| t.config.clone()).collect();
        let mut check = tokio::time::interval(watch::check_every(&configs));
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let flush_at = self.next_flush();
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some(notice) = self.rx.recv() => self.offer_all(notice, &mut sending),
                _ = sample.tick() => {
                    let notices = self.watch.sample(&self.shared, &configs);
                    for (alert, notice) in notices {
                        self.offer(alert, notice, &mut sending);
                    }
                }
                _ = check.tick() => {
                    let notices = self.watch.check(&configs).await;
                    for (alert, notice) in notices {
                        self.offer(alert, notice, &mut sending);
                    }
                }
                () = sleep_until(flush_at) => self.flush_due(&mut sending),
                Some(_) = sending.join_next(), if !sending.is_empty() => {}
            }
        }
        sending.abort_all();
    }

    /// Offers `notice` to every alert that wants its condition.
    fn offer_all(&mut self, notice: Notice, sending: &mut JoinSet<()>) {
        for i in 0..self.targets.len() {
            self.offer(i, notice.clone(), sending);
        }
    }

    /// Sends `notice` to alert `i` now, or folds it into the next message.
    fn offer(&mut self, i: usize, notice: Notice, sending: &mut JoinSet<()>) {
        let Some(target) = self.targets.get(i).cloned() else {
            return;
        };
        if !target.config.wants(notice.condition) {
            return;
        }
        let interval = target.config.min_interval;
        let fold = self.folds.entry((i, notice.condition)).or_default();
        let now = Instant::now();
        match fold.last_sent {
            Some(at) if now.duration_since(at) < interval => {
                fold.folded += 1;
                fold.latest = Some(notice);
            }
            _ => {
                fold.last_sent = Some(now);
                sending.spawn(send::deliver(target, Message::of(notice, 1, None)));
            }
        }
    }

    /// When the earliest fold with something in it may send it.
    fn next_flush(&self) -> Option<Instant> {
        self.folds
            .iter()
            .filter(|(_, f)| f.folded > 0)
            .filter_map(|((i, _), f)| {
                Some(f.last_sent? + self.targets.get(*i)?.config.min_interval)
            })
            .min()
    }

    /// Sends every fold whose interval has passed: one message counting
    /// what it folded, showing the latest.
    fn flush_due(&mut self, sending: &mut JoinSet<()>) {
        let now = Instant::now();
        for ((i, _), fold) in &mut self.folds {
            let Some(target) = self.targets.get(*i) else {
                continue;
            };
            let interval = target.config.min_interval;
            let due = fold
                .last_sent
                .is_none_or(|at| now.duration_since(at) >= interval);
            if fold.folded == 0 || !due {
                continue;
            }
            if let Some(latest) = fold.latest.take() {
                let message = Message::of(latest, fold.folded, Some(interval));
                sending.spawn(send::deliver(target.clone(), message));
            }
            fold.folded = 0;
            fold.last_sent = Some(now);
        }
    }
}

/// Sleeps until `at`, or forever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// `hookbox alerts test`: one test message to each alert, one attempt
/// each; the result per alert, in config order.
pub async fn test_all(config: &Config) -> anyhow::Result<Vec<(String, Result<(), String>)>> {
    let client = send::client()?;
    let metrics = AlertMetrics::default();
    let mut results = Vec::new();
    for alert in &config.alerts {
        let target = Target::new(alert, client.clone(), metrics.clone())?;
        let sent = target.send_once(&Message::test()).await;
        results.push((alert.label(), sent));
    }
    Ok(results)
}
