//! The range every duration and count in the config must fall in.
//!
//! Serde takes any `u32`, `u64`, `usize` or duration string, so without a
//! ceiling a slip like `timeout = "40000000000y"` or `writer_queue =
//! 18446744073709551615` passes `hookbox check` and then panics `serve`
//! (an `Instant` or `Duration` overflow, a channel or semaphore too big to
//! make) or wraps a cast so a check turns upside down. Each ceiling here is
//! far above any setting that makes sense and far below where arithmetic
//! on it can fail; each floor is where a smaller value would mean "never"
//! or "at once" rather than what was meant.
//!
//! The bounds are data, in [`DURATIONS`] and [`COUNTS`], so the validators,
//! the tests (which find every duration and count field in the `Raw*`
//! types and require it to be listed here) and the docs read the same
//! numbers. The validators call [`DurationLimit::check`] and
//! [`CountLimit::check`] with the table the key sits in, so a problem
//! names the key as the rest of validation does:
//! `sources[0] ("github").deliver.timeout: 40000000000years is over the
//! maximum of 1h`.

use std::time::Duration;

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);
const MIB: u64 = 1024 * 1024;

/// Bounds of a duration key, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationLimit {
    /// The key as the configuration reference writes it
    /// (`sources.deliver.timeout`: an array of tables has no index).
    pub key: &'static str,
    pub min: Duration,
    pub max: Duration,
}

/// Bounds of a count key, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountLimit {
    /// As [`DurationLimit::key`].
    pub key: &'static str,
    pub min: u64,
    pub max: u64,
}

/// The last part of a dotted key: the field's own name.
fn field(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

impl DurationLimit {
    /// Pushes a problem when `value` is out of bounds; `table` is where
    /// the key sits as problems name it (`server`, `sources[0] ("github").deliver`).
    pub fn check(&self, table: &str, value: Duration, problems: &mut Vec<String>) {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        let at = format!("{table}.{}", field(self.key));
        if value > self.max {
            problems.push(format!(
                "{at}: {} is over the maximum of {}",
                show(value),
                show(self.max)
            ));
        } else if value < self.min {
            problems.push(format!(
                "{at}: {} is under the minimum of {}",
                show(value),
                show(self.min)
            ));
        }
    }
}

impl CountLimit {
    /// As [`DurationLimit::check`].
    pub fn check(&self, table: &str, value: impl TryInto<u64>, problems: &mut Vec<String>) {
        // Only a usize wider than 64 bits could fail, and it is too big.
        let value: u64 = value.try_into().unwrap_or(u64::MAX);
        let at = format!("{table}.{}", field(self.key));
        if value > self.max {
            problems.push(format!("{at}: {value} is over the maximum of {}", self.max));
        } else if value < self.min {
            problems.push(format!(
                "{at}: {value} is under the minimum of {}",
                self.min
            ));
        }
    }
}

const fn duration(key: &'static str, min: Duration, max: Duration) -> DurationLimit {
    DurationLimit { key, min, max }
}

const fn count(key: &'static str, min: u64, max: u64) -> CountLimit {
    CountLimit { key, min, max }
}

// Floors of 1 ms: tokio's timers tick in milliseconds, so anything shorter
// is a timeout or interval of 0, which makes no sense for any of these.

/// Headers are a few KiB: a client slower than 10 minutes is broken or
/// hostile, and holds a connection slot all that time.
pub const HEADER_TIMEOUT: DurationLimit =
    duration("server.header_timeout", MS, Duration::from_secs(600));
/// An hour moves 25 MiB at under 60 kbit/s; slower senders give up first.
pub const BODY_TIMEOUT: DurationLimit = duration("server.body_timeout", MS, HOUR);
/// Certificates are renewed days before they expire; a daily look is enough.
pub const TLS_WATCH_INTERVAL: DurationLimit =
    duration("server.tls.watch_interval", Duration::ZERO, DAY);
/// Retention counts in days: running less than daily keeps rows past them.
pub const RETENTION_INTERVAL: DurationLimit = duration("retention.interval", MS, DAY);
/// A snapshot less often than weekly is hardly a backup.
pub const BACKUP_INTERVAL: DurationLimit =
    duration("backup.interval", MS, Duration::from_secs(7 * 24 * 3600));
/// At least a minute: the providers rate-limit these URLs. At most a week:
/// a list older than that may lack ranges the provider has since added.
pub const EDGE_REFRESH: DurationLimit =
    duration("edge.refresh", MINUTE, Duration::from_secs(7 * 24 * 3600));
/// Failures a day apart are not an attack worth counting together.
pub const EDGE_FAILURE_WINDOW: DurationLimit = duration("edge.failure_window", MS, DAY);
/// A day's block outlasts any attack a per-address limit can stop.
pub const EDGE_BLOCK_FOR: DurationLimit = duration("edge.block_for", MS, DAY);
/// Timestamps are compared in whole seconds, so under 1 s is 0; a clock a
/// day off is broken, and a wider window only helps a replay.
pub const TOLERANCE: DurationLimit = duration("sources.tolerance", SECOND, DAY);
/// An attempt holds one of the source's `concurrency` slots that long; a
/// handler that needs more than an hour should answer first and work after.
pub const DELIVER_TIMEOUT: DurationLimit = duration("sources.deliver.timeout", MS, HOUR);
/// Also at most `backoff_cap`, checked with the rest of `deliver`.
pub const DELIVER_BACKOFF_BASE: DurationLimit = duration("sources.deliver.backoff_base", MS, DAY);
/// A retry at least daily: a longer wait looks like a lost event.
pub const DELIVER_BACKOFF_CAP: DurationLimit = duration("sources.deliver.backoff_cap", MS, DAY);
/// Probes double up to five minutes; a first wait longer would be the
/// longest.
pub const DELIVER_BREAKER_PROBE: DurationLimit = duration(
    "sources.deliver.breaker_probe",
    MS,
    Duration::from_secs(300),
);
/// GitHub keeps deliveries for three days: passes further apart miss
/// failures for good.
pub const GITHUB_INTERVAL: DurationLimit = duration(
    "sources.github_redelivery.interval",
    SECOND,
    Duration::from_secs(3 * 24 * 3600),
);
/// A day of looking again covers any clock or ordering doubt.
pub const GITHUB_OVERLAP: DurationLimit =
    duration("sources.github_redelivery.overlap", Duration::ZERO, DAY);
/// GitHub asks for a second between mutating requests; more than a minute
/// only stretches a pass.
pub const GITHUB_PACE: DurationLimit =
    duration("sources.github_redelivery.pace", Duration::ZERO, MINUTE);
/// GitLab lists a hook's events for seven days: passes further apart miss
/// failures for good.
pub const GITLAB_INTERVAL: DurationLimit = duration(
    "sources.gitlab_redelivery.interval",
    SECOND,
    Duration::from_secs(7 * 24 * 3600),
);
/// As [`GITHUB_OVERLAP`].
pub const GITLAB_OVERLAP: DurationLimit =
    duration("sources.gitlab_redelivery.overlap", Duration::ZERO, DAY);
/// GitLab counts resends per minute. A pass may wait a whole window
/// between two resends, and its job lock (10 minutes) must not run out
/// meanwhile.
pub const GITLAB_RESEND_WINDOW: DurationLimit = duration(
    "sources.gitlab_redelivery.resend_window",
    SECOND,
    Duration::from_secs(5 * 60),
);
/// Weekly at least, well inside the 30 days Stripe keeps events.
pub const STRIPE_INTERVAL: DurationLimit = duration(
    "sources.stripe_backfill.interval",
    SECOND,
    Duration::from_secs(7 * 24 * 3600),
);
/// As [`GITHUB_OVERLAP`].
pub const STRIPE_OVERLAP: DurationLimit =
    duration("sources.stripe_backfill.overlap", Duration::ZERO, DAY);
/// Weekly at least: Paddle keeps notifications 90 days, but a week of
/// failures is already long unanswered.
pub const PADDLE_INTERVAL: DurationLimit = duration(
    "sources.paddle_replay.interval",
    SECOND,
    Duration::from_secs(7 * 24 * 3600),
);
/// As [`GITHUB_OVERLAP`].
pub const PADDLE_OVERLAP: DurationLimit =
    duration("sources.paddle_replay.overlap", Duration::ZERO, DAY);
/// Weekly at least, well inside the 28 days Square keeps events.
pub const SQUARE_INTERVAL: DurationLimit = duration(
    "sources.square_backfill.interval",
    SECOND,
    Duration::from_secs(7 * 24 * 3600),
);
/// As [`GITHUB_OVERLAP`].
pub const SQUARE_OVERLAP: DurationLimit =
    duration("sources.square_backfill.overlap", Duration::ZERO, DAY);

/// An alert's repeats are folded for at least a second (tests use that);
/// more than a day apart, a reminder is no longer one.
pub const ALERT_MIN_INTERVAL: DurationLimit = duration("alerts.min_interval", SECOND, DAY);
/// A second is already "anything pending"; past 30 days, the events it
/// waits for are older than Stripe keeps them.
pub const ALERT_BACKLOG_AGE: DurationLimit = duration(
    "alerts.backlog_age",
    SECOND,
    Duration::from_secs(30 * 24 * 3600),
);
/// A search is a person waiting at a page; a minute of one is already
/// more than any index of a self-hosted inbox needs.
pub const SEARCH_TIMEOUT: DurationLimit = duration("search.timeout", MS, MINUTE);

/// Every duration key.
pub const DURATIONS: &[DurationLimit] = &[
    HEADER_TIMEOUT,
    BODY_TIMEOUT,
    TLS_WATCH_INTERVAL,
    RETENTION_INTERVAL,
    BACKUP_INTERVAL,
    SEARCH_TIMEOUT,
    EDGE_REFRESH,
    EDGE_FAILURE_WINDOW,
    EDGE_BLOCK_FOR,
    TOLERANCE,
    DELIVER_TIMEOUT,
    DELIVER_BACKOFF_BASE,
    DELIVER_BACKOFF_CAP,
    DELIVER_BREAKER_PROBE,
    GITHUB_INTERVAL,
    GITHUB_OVERLAP,
    GITHUB_PACE,
    GITLAB_INTERVAL,
    GITLAB_OVERLAP,
    GITLAB_RESEND_WINDOW,
    STRIPE_INTERVAL,
    STRIPE_OVERLAP,
    PADDLE_INTERVAL,
    PADDLE_OVERLAP,
    SQUARE_INTERVAL,
    SQUARE_OVERLAP,
    ALERT_MIN_INTERVAL,
    ALERT_BACKLOG_AGE,
];

/// Ten times GitHub's 25 MiB cap, and all of the memory the bodies being
/// read share (`receive`'s budget): a larger body could not be held.
pub const MAX_BODY_BYTES: CountLimit = count("server.max_body_bytes", 1, 256 * MIB);
/// As [`MAX_BODY_BYTES`].
pub const SOURCE_MAX_BODY_BYTES: CountLimit = count("sources.max_body_bytes", 1, 256 * MIB);
/// A million waiting requests is a long wait for the last of them; past
/// that, 503 and a retry is the better answer.
pub const WRITER_QUEUE: CountLimit = count("server.writer_queue", 1, 1_000_000);
/// Beyond the file descriptors a process is usually allowed (systemd's
/// hard limit is 524288).
pub const MAX_CONNECTIONS: CountLimit = count("server.max_connections", 1, 1_000_000);
/// 100 years: in practice "forever", and the arithmetic in milliseconds
/// stays far from overflow.
pub const BODY_DAYS: CountLimit = count("retention.body_days", 1, 36_500);
/// As [`BODY_DAYS`].
pub const KEY_DAYS: CountLimit = count("retention.key_days", 1, 36_500);
/// Each snapshot is a whole copy of the database.
pub const BACKUP_KEEP: CountLimit = count("backup.keep", 1, 10_000);
/// `0` turns the limit off; a million 401s is no longer a limit.
pub const EDGE_MAX_FAILURES: CountLimit = count("edge.max_failures", 0, 1_000_000);
/// About a hundred bytes each: a million is some 100 MB.
pub const EDGE_MAX_TRACKED: CountLimit = count("edge.max_tracked", 1, 1_000_000);
/// All of the memory the bodies being read share (`receive`'s budget).
pub const EDGE_MAX_CLIENT_BODY_BYTES: CountLimit =
    count("edge.max_client_body_bytes", 1, 256 * MIB);
/// Far more than one provider sends at once; each holds a connection.
pub const EDGE_MAX_CLIENT_BODIES: CountLimit = count("edge.max_client_bodies", 1, 100_000);
/// With `backoff_cap` at its maximum, a thousand attempts span years.
pub const DELIVER_MAX_ATTEMPTS: CountLimit = count("sources.deliver.max_attempts", 1, 1000);
/// A thousand requests or processes at once, per source, is already more
/// than one small host runs well.
pub const DELIVER_CONCURRENCY: CountLimit = count("sources.deliver.concurrency", 1, 1000);

/// Each waiting long-poll holds a connection and a task.
pub const EDGE_MAX_CLIENT_LONG_POLLS: CountLimit = count("edge.max_client_long_polls", 1, 10_000);
/// What one pull answer may carry: the same bound as a body read.
pub const PULL_MAX_BYTES: CountLimit = count("sources.deliver.pull.max_bytes", 1, 256 * MIB);

/// Entries a Redis stream keeps (approximately) when hookbox trims it; a
/// billion small entries is already tens of GB of the server's memory.
pub const REDIS_MAXLEN: CountLimit = count("sources.deliver.redis.maxlen", 1, 1_000_000_000);
/// MQTT's quality of service: 1 (PUBACK) or 2 (PUBCOMP); 0 confirms nothing.
pub const MQTT_QOS: CountLimit = count("sources.deliver.mqtt.qos", 1, 2);

/// `0` turns the breaker off; past ten thousand failures in a row it is
/// off in all but name.
pub const DELIVER_BREAKER_FAILURES: CountLimit =
    count("sources.deliver.breaker_failures", 0, 10_000);

/// One refusal already alerts; a million within 10 min is a flood that the
/// edge's failure limit answers first.
pub const ALERT_REJECTIONS_THRESHOLD: CountLimit =
    count("alerts.rejections_threshold", 1, 1_000_000);

/// GitLab's own default is 5; an administrator may raise it, and past ten
/// thousand a window there is no limit worth pacing for.
pub const GITLAB_RESEND_LIMIT: CountLimit =
    count("sources.gitlab_redelivery.resend_limit", 1, 10_000);

/// Every count key.
pub const COUNTS: &[CountLimit] = &[
    MAX_BODY_BYTES,
    SOURCE_MAX_BODY_BYTES,
    WRITER_QUEUE,
    MAX_CONNECTIONS,
    BODY_DAYS,
    KEY_DAYS,
    BACKUP_KEEP,
    EDGE_MAX_FAILURES,
    EDGE_MAX_TRACKED,
    EDGE_MAX_CLIENT_BODY_BYTES,
    EDGE_MAX_CLIENT_BODIES,
    EDGE_MAX_CLIENT_LONG_POLLS,
    DELIVER_MAX_ATTEMPTS,
    DELIVER_CONCURRENCY,
    DELIVER_BREAKER_FAILURES,
    PULL_MAX_BYTES,
    REDIS_MAXLEN,
    MQTT_QOS,
    ALERT_REJECTIONS_THRESHOLD,
    GITLAB_RESEND_LIMIT,
];

/// Integer keys that are identifiers, not amounts: nothing is counted or
/// timed with them, so they have no limit here.
pub const IDENTIFIERS: &[&str] = &[
    "sources.github_redelivery.hook_id",
    "sources.github_redelivery.app_id",
    "sources.gitlab_redelivery.project",
    "sources.gitlab_redelivery.group",
    "sources.gitlab_redelivery.hook_id",
];
