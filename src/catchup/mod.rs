//! Catch-up: fetching what providers will not resend by themselves.
//!
//! One job per source that configures it: [`github`] asks GitHub to
//! redeliver the deliveries that never succeeded (GitHub never retries on
//! its own), [`gitlab`] asks GitLab to resend a hook's failed events, and
//! [`paddle`] asks Paddle to replay failed notifications (the three on the
//! shared `redeliver` loop); [`stripe`] and [`square`] list the events the
//! provider still keeps and insert the ones the inbox lacks (on the shared
//! `backfill` pass). [`run_once`] is one pass of a job, shared by
//! the scheduler ([`CatchupHandle::run`]), the admin API
//! ([`CatchupHandle::run_now`]) and `hookbox catch-up` ([`run_cli`]).
//!
//! A pass holds the job's lock in the database (`job_locks`), so a server
//! and a CLI never run one job at once; the lock expires, and each step of
//! the pass renews it, so a holder that died frees it within
//! [`LOCK_TTL`]. Every pass is recorded in `catchup_runs`; the job's mark
//! (`catchup_state`) advances only when the pass read its whole window and
//! nothing in it is left to try again, so the next pass starts from it.

mod backfill;
mod db;
pub mod github;
pub mod gitlab;
mod holder;
mod http;
pub mod paddle;
mod redeliver;
mod report;
pub mod square;
pub mod stripe;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::{
    Config, GithubRedeliveryConfig, GitlabRedeliveryConfig, PaddleReplayConfig,
    SquareBackfillConfig, StripeBackfillConfig,
};
use crate::store::catchup::{self as tables, Done, Op, RunCounts};
use crate::store::{Store, WriterHandle};
use crate::support::clock;
pub use db::Db;
pub use report::{RateLimited, Request, RunReport, Skipped, completeness_line};

pub const GITHUB_JOB: &str = "github_redelivery";
pub const GITLAB_JOB: &str = "gitlab_redelivery";
pub const STRIPE_JOB: &str = "stripe_backfill";
pub const PADDLE_JOB: &str = "paddle_replay";
pub const SQUARE_JOB: &str = "square_backfill";

/// How long a job lock holds without renewal. Each step of a pass renews
/// it, so only a dead holder lets it run out.
pub const LOCK_TTL: Duration = Duration::from_secs(10 * 60);

/// When a pass finds its job running elsewhere, the scheduler looks again
/// this soon (or at the interval, if that is shorter).
const BUSY_RETRY: Duration = Duration::from_secs(60);

/// What one HTTP exchange with a provider may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// A job's kind and settings. Two families share their pass: the kinds
/// that ask the provider to send again (GitHub, GitLab, Paddle) implement
/// `redeliver::Resend`, the kinds that fetch and insert (Stripe, Square)
/// `backfill::Fetch`; a new provider is a module of one of them, a variant
/// here and an arm in each match below.
#[derive(Debug, Clone)]
pub enum TaskSpec {
    Github(Arc<GithubRedeliveryConfig>),
    Gitlab(Arc<GitlabRedeliveryConfig>),
    Stripe(Arc<StripeBackfillConfig>),
    Paddle(Arc<PaddleReplayConfig>),
    Square(Arc<SquareBackfillConfig>),
}

impl TaskSpec {
    /// The source's job, if its config sets one up (validation allows at
    /// most one: each is tied to its kind).
    fn of(s: &crate::config::SourceConfig) -> Option<TaskSpec> {
        if let Some(c) = &s.github_redelivery {
            Some(TaskSpec::Github(Arc::new(c.clone())))
        } else if let Some(c) = &s.gitlab_redelivery {
            Some(TaskSpec::Gitlab(Arc::new(c.clone())))
        } else if let Some(c) = &s.stripe_backfill {
            Some(TaskSpec::Stripe(Arc::new(c.clone())))
        } else if let Some(c) = &s.paddle_replay {
            Some(TaskSpec::Paddle(Arc::new(c.clone())))
        } else {
            s.square_backfill
                .as_ref()
                .map(|c| TaskSpec::Square(Arc::new(c.clone())))
        }
    }

    /// One pass of the job.
    async fn run(&self, ctx: &mut RunCtx<'_>) -> anyhow::Result<()> {
        match self {
            TaskSpec::Github(cfg) => github::run(ctx, cfg).await,
            TaskSpec::Gitlab(cfg) => gitlab::run(ctx, cfg).await,
            TaskSpec::Stripe(cfg) => stripe::run(ctx, cfg).await,
            TaskSpec::Paddle(cfg) => paddle::run(ctx, cfg).await,
            TaskSpec::Square(cfg) => square::run(ctx, cfg).await,
        }
    }
}

/// A source's catch-up job, with what it needs of the source.
#[derive(Debug, Clone)]
pub struct Task {
    pub source: String,
    pub spec: TaskSpec,
    /// The source's destinations: a fetched event goes to each that takes
    /// it; one that none takes is `stored`.
    pub routes: crate::config::route::Routes,
    pub order_key: Vec<String>,
}

impl Task {
    pub fn name(&self) -> &'static str {
        match self.spec {
            TaskSpec::Github(_) => GITHUB_JOB,
            TaskSpec::Gitlab(_) => GITLAB_JOB,
            TaskSpec::Stripe(_) => STRIPE_JOB,
            TaskSpec::Paddle(_) => PADDLE_JOB,
            TaskSpec::Square(_) => SQUARE_JOB,
        }
    }

    pub fn interval(&self) -> Duration {
        match &self.spec {
            TaskSpec::Github(c) => c.interval,
            TaskSpec::Gitlab(c) => c.interval,
            TaskSpec::Stripe(c) => c.interval,
            TaskSpec::Paddle(c) => c.interval,
            TaskSpec::Square(c) => c.interval,
        }
    }

    fn lock_name(&self) -> String {
        format!("catchup:{}:{}", self.source, self.name())
    }
}

/// Every catch-up job the config sets up.
pub fn tasks(config: &Config) -> Vec<Task> {
    config
        .sources
        .iter()
        .filter_map(|s| {
            let spec = TaskSpec::of(s)?;
            Some(Task {
                source: s.name.clone(),
                spec,
                routes: crate::config::route::Routes::new(&s.destinations),
                order_key: s.order_key.clone(),
            })
        })
        .collect()
}

/// What a pass runs with: where it stores, and how it talks to providers.
pub struct Runner {
    pub db: Db,
    pub client: reqwest::Client,
}

impl Runner {
    pub fn new(db: Db) -> anyhow::Result<Runner> {
        let client = crate::support::outbound::build(|| {
            crate::support::outbound::builder().timeout(HTTP_TIMEOUT)
        })
        .context("building the HTTP client for catch-up")?;
        Ok(Runner { db, client })
    }
}

/// The state of one pass, handed to the job.
pub struct RunCtx<'a> {
    pub runner: &'a Runner,
    pub job: &'a Task,
    pub run_id: i64,
    pub dry_run: bool,
    /// When the pass started (unix ms): the mark it sets on success.
    pub started_at: i64,
    pub report: RunReport,
    shutdown: &'a CancellationToken,
    holder: String,
}

impl RunCtx<'_> {
    /// Called before each request: stops at shutdown, and renews the lock
    /// (stopping if another holder took it over after it ran out).
    pub async fn step(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.shutdown.is_cancelled(),
            "stopped because hookbox is shutting down"
        );
        let now = clock::now_ms();
        let renewed = self
            .runner
            .db
            .write(Op::Lock {
                name: self.job.lock_name(),
                holder: self.holder.clone(),
                now,
                expires_at: now + LOCK_TTL.as_millis() as i64,
            })
            .await?;
        anyhow::ensure!(
            renewed == Done::Locked(true),
            "lost the job lock to another run"
        );
        Ok(())
    }

    /// Waits `pace` unless hookbox is shutting down.
    pub async fn pause(&self, pace: Duration) {
        tokio::select! {
            () = self.shutdown.cancelled() => {}
            () = tokio::time::sleep(pace) => {}
        }
    }
}

/// One pass of `job`: takes the lock (or reports `busy`), runs, records.
/// Never fails: what went wrong is in the report (and the log).
pub async fn run_once(
    runner: &Runner,
    job: &Task,
    dry_run: bool,
    shutdown: &CancellationToken,
) -> RunReport {
    let mut report = RunReport::new(job, dry_run);
    let started_at = clock::now_ms();
    let holder = holder::new();
    release_if_holder_died(runner, job).await;
    let lock = Op::Lock {
        name: job.lock_name(),
        holder: holder.clone(),
        now: started_at,
        expires_at: started_at + LOCK_TTL.as_millis() as i64,
    };
    match runner.db.write(lock).await {
        Ok(Done::Locked(true)) => {}
        Ok(_) => {
            report.busy = true;
            tracing::info!("catch-up skipped: another run of this job holds its lock");
            return report;
        }
        Err(e) => {
            report.error = Some(format!("{e:#}"));
            tracing::error!(error = %format!("{e:#}"), "catch-up could not start");
            return report;
        }
    }
    let run = runner
        .db
        .write(Op::StartRun {
            source: job.source.clone(),
            job: job.name().to_owned(),
            dry_run,
            started_at,
        })
        .await;
    if let Ok(Done::RunId(run_id)) = run {
        report.run_id = Some(run_id);
        let mut ctx = RunCtx {
            runner,
            job,
            run_id,
            dry_run,
            started_at,
            report,
            shutdown,
            holder: holder.clone(),
        };
        let result = job.spec.run(&mut ctx).await;
        report = ctx.report;
        if let Err(e) = result {
            report.complete = false;
            report.error = Some(format!("{e:#}"));
            report.rate_limited = e.downcast_ref::<RateLimited>().is_some();
        }
        finish(runner, job, run_id, started_at, &mut report).await;
    } else {
        report.error = Some(match run {
            Err(e) => format!("{e:#}"),
            Ok(_) => "internal: no run id".to_owned(),
        });
    }
    let unlock = Op::Unlock {
        name: job.lock_name(),
        holder,
    };
    if let Err(e) = runner.db.write(unlock).await {
        tracing::warn!(error = %format!("{e:#}"), "could not release the job lock; it expires by itself");
    }
    report.log();
    report
}

/// A pass killed mid-way (kill -9, a crash, power loss) leaves its lock
/// for [`LOCK_TTL`]; when its holder is a process of this PID namespace
/// that no longer exists, the lock is released now instead, so catch-up
/// runs right after a restart, when it matters most.
async fn release_if_holder_died(runner: &Runner, job: &Task) {
    let name = job.lock_name();
    let read = name.clone();
    let current = runner
        .db
        .read(move |conn| tables::lock_holder(conn, &read))
        .await;
    let Ok(Some(stale)) = current else {
        return;
    };
    if !holder::is_dead(&stale) {
        return;
    }
    let unlock = Op::Unlock {
        name,
        holder: stale.clone(),
    };
    match runner.db.write(unlock).await {
        Ok(_) => tracing::info!(
            holder = %stale,
            "released the job lock of a catch-up run whose process is gone"
        ),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "could not release a dead run's job lock")
        }
    }
}

/// Moves the mark when the run was whole, then records the end of the run:
/// in that order, so a run seen finished and complete has its mark.
async fn finish(runner: &Runner, job: &Task, run_id: i64, started_at: i64, report: &mut RunReport) {
    if report.complete && !report.dry_run {
        let mark = Op::MarkSuccess {
            source: job.source.clone(),
            job: job.name().to_owned(),
            at: started_at,
        };
        if let Err(e) = runner.db.write(mark).await {
            report.complete = false;
            report.error = Some(format!("{e:#}"));
        }
    }
    let counts = RunCounts {
        pages: report.pages,
        seen: report.seen,
        asked: report.asked(),
        failed: report.failed,
        complete: report.complete,
        error: report.error.clone(),
    };
    let finished = Op::FinishRun {
        run_id,
        counts,
        finished_at: clock::now_ms(),
    };
    if let Err(e) = runner.db.write(finished).await {
        tracing::warn!(error = %format!("{e:#}"), "could not record the end of a catch-up run");
    }
    if !report.dry_run {
        let entry = Op::Ledger(Box::new(report.ledger(run_id, started_at)));
        if let Err(e) = runner.db.write(entry).await {
            tracing::warn!(error = %format!("{e:#}"), "could not record the pass in the completeness ledger");
        }
    }
}

/// The scheduler's side, cheap to clone: what the admin API keeps to run a
/// pass on demand, and what `app` spawns as the interval loop.
#[derive(Clone)]
pub struct CatchupHandle {
    runner: Arc<Runner>,
    jobs: Arc<Vec<Task>>,
    /// Passes started on demand stop at their next step when the server
    /// stops, like scheduled ones.
    shutdown: CancellationToken,
    /// Told of scheduled passes that fail (one on demand has its caller).
    alerts: crate::alerts::Alerter,
}

impl CatchupHandle {
    pub fn new(
        config: &Config,
        store: Store,
        writer: WriterHandle,
        wake: Arc<Notify>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Self> {
        let runner = Runner::new(Db {
            store,
            writer,
            wake: Some(wake),
        })?;
        Ok(CatchupHandle {
            runner: Arc::new(runner),
            jobs: Arc::new(tasks(config)),
            shutdown,
            alerts: crate::alerts::Alerter::default(),
        })
    }

    /// Tells `alerts` of scheduled passes that fail.
    pub fn with_alerts(mut self, alerts: crate::alerts::Alerter) -> Self {
        self.alerts = alerts;
        self
    }

    /// The sources that have a catch-up job.
    pub fn sources(&self) -> impl Iterator<Item = &str> {
        self.jobs.iter().map(|j| j.source.as_str())
    }

    /// The name of `source`'s catch-up job, if it has one.
    pub fn job_of(&self, source: &str) -> Option<&'static str> {
        self.jobs
            .iter()
            .find(|j| j.source == source)
            .map(Task::name)
    }

    /// Runs one pass of `source`'s job now (`POST /api/sources/{name}/catch-up`).
    /// `None` when the source has no catch-up job. A pass already running
    /// anywhere makes this one come back `busy` at once.
    pub async fn run_now(&self, source: &str, dry_run: bool) -> Option<RunReport> {
        let job = self.jobs.iter().find(|j| j.source == source)?;
        let span = tracing::info_span!("catchup", source = %job.source, job = job.name());
        Some(
            run_once(&self.runner, job, dry_run, &self.shutdown)
                .instrument(span)
                .await,
        )
    }

    /// Runs every job on its interval until `shutdown`; a pass in progress
    /// stops at its next step. Returns when all job loops have stopped.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut tasks = tokio::task::JoinSet::new();
        for job in self.jobs.iter().cloned() {
            let span = tracing::info_span!("catchup", source = %job.source, job = job.name());
            let runner = self.runner.clone();
            let alerts = self.alerts.clone();
            tasks.spawn(schedule(runner, job, alerts, shutdown.clone()).instrument(span));
        }
        drop(self);
        while tasks.join_next().await.is_some() {}
    }
}

/// One job's loop: a pass at start-up when the last successful one is older
/// than the interval (or there is none), then one every interval.
async fn schedule(
    runner: Arc<Runner>,
    job: Task,
    alerts: crate::alerts::Alerter,
    shutdown: CancellationToken,
) {
    let interval = job.interval();
    let (source, name) = (job.source.clone(), job.name());
    let last = runner
        .db
        .read(move |conn| tables::last_success(conn, &source, name))
        .await;
    let now = clock::now_ms();
    let interval_ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
    let mut next = match last {
        Ok(Some(at)) if now.saturating_sub(at) < interval_ms => {
            let due = at.saturating_add(interval_ms).saturating_sub(now);
            let wait = Duration::from_millis(u64::try_from(due).unwrap_or(0));
            Instant::now() + wait + jitter(interval)
        }
        Ok(_) => Instant::now(),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "cannot read when the job last ran; running it now");
            Instant::now()
        }
    };
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep_until(next) => {}
        }
        let report = run_once(&runner, &job, false, &shutdown).await;
        // A pass cut short by shutdown is not a failure worth a message.
        if let Some(error) = report.error.as_deref().filter(|_| !shutdown.is_cancelled()) {
            alerts.catchup_failed(&job.source, job.name(), error);
        }
        let missing = report.missing();
        // A refusal an earlier pass reported is not news.
        if !report.busy && missing.unreported() > 0 {
            alerts.gap(
                &job.source,
                job.name(),
                missing.total(),
                &missing.describe(),
                report.uncovered_from,
            );
        }
        let wait = if report.busy {
            BUSY_RETRY.min(interval)
        } else {
            interval
        };
        next = Instant::now() + wait + jitter(interval);
    }
}

/// Up to 5% of the interval, at most five minutes: spreads the jobs of many
/// sources (and many hookboxes) apart.
fn jitter(interval: Duration) -> Duration {
    let max = (interval / 20).min(Duration::from_secs(300));
    max.mul_f64(fastrand::f64())
}

/// `hookbox catch-up SOURCE`: one pass on the CLI's own connection. When the
/// job is running elsewhere (a server), waits up to `wait` for it to finish.
pub async fn run_cli(
    config: &Config,
    source: &str,
    dry_run: bool,
    wait: Duration,
) -> anyhow::Result<RunReport> {
    let Some(src) = config.source(source) else {
        anyhow::bail!("no enabled source named {source:?} in {}", config.origin);
    };
    let job = tasks(config)
        .into_iter()
        .find(|j| j.source == source)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "source {source:?} ({}) has no catch-up job: add [sources.github_redelivery], gitlab_redelivery, stripe_backfill, paddle_replay or square_backfill",
                src.kind.as_str()
            )
        })?;
    let (store, writer, thread) = crate::store::open_for_cli(&config.server.database)?;
    let runner = Runner::new(Db {
        store,
        writer,
        wake: None,
    })?;
    let never = CancellationToken::new();
    let deadline = Instant::now() + wait;
    let report = loop {
        let report = run_once(&runner, &job, dry_run, &never).await;
        if !report.busy || Instant::now() >= deadline {
            break report;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    drop(runner);
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .context("stopping the writer")?;
    Ok(report)
}
