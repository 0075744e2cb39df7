//! The conditions the alert task looks at itself, rather than being told:
//! * every [`SAMPLE_EVERY`], the counters the hot paths bump — signature
//!   refusals per source, summed over a sliding [`REJECTIONS_WINDOW`]
//!   (`rejections`), and writes the store refused (`storage`);
//! * every [`check_every`], through the read pool and the file system: the
//!   oldest pending delivery (`backlog`), how full the database's file
//!   system is (`storage`), and the served certificate's expiry
//!   (`certificate`, from the gauge `crate::ingress::tls` keeps).
//!
//! A condition that is a state alerts when it starts (per alert, since
//! thresholds are per alert) and is armed again once it has ended.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use serde_json::json;
use tokio::time::Instant;

use super::{Notice, Shared};
use crate::config::{AlertConfig, Condition, Config};
use crate::store::Store;
use crate::support::clock;

/// How often the hot paths' counters are read.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The window refusals are counted in (DESIGN.md: "within 10 min").
pub const REJECTIONS_WINDOW: Duration = Duration::from_secs(600);

/// The file system is "full" past this share of its blocks (as `df`
/// counts: used / (used + available to unprivileged users)).
pub const DISK_FULL: f64 = 0.90;

/// A certificate this close to its end alerts (DESIGN.md: 14 days).
pub const CERTIFICATE_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// The slow checks run this often, or often enough to see the shortest
/// `backlog_age` within half of it.
pub fn check_every(alerts: &[AlertConfig]) -> Duration {
    let finest = alerts
        .iter()
        .filter(|a| a.wants(Condition::Backlog))
        .map(|a| a.backlog_age / 2)
        .min()
        .unwrap_or(Duration::MAX);
    finest.clamp(Duration::from_millis(200), Duration::from_secs(30))
}

/// What the watchers remember between looks.
pub struct Watch {
    store: Store,
    database: PathBuf,
    tls_expiry: Gauge,
    /// Per source: the counter's last reading, and the increments seen
    /// within the window.
    rejections: HashMap<String, (u64, VecDeque<(Instant, u64)>)>,
    refused_writes: u64,
    /// States that alerted and have not ended: (alert, condition, subject).
    raised: HashSet<(usize, Condition, String)>,
}

impl Watch {
    pub fn new(config: &Config, store: Store, tls_expiry: Gauge) -> Watch {
        Watch {
            store,
            database: config.server.database.clone(),
            tls_expiry,
            rejections: HashMap::new(),
            refused_writes: 0,
            raised: HashSet::new(),
        }
    }

    /// Whether `(alert, condition, subject)` starts now (`true` once per
    /// start) given whether it holds.
    fn edge(&mut self, alert: usize, condition: Condition, subject: &str, holds: bool) -> bool {
        let key = (alert, condition, subject.to_owned());
        if holds {
            self.raised.insert(key)
        } else {
            self.raised.remove(&key);
            false
        }
    }

    /// Reads the hot paths' counters; returns what each alert should hear.
    pub(super) fn sample(
        &mut self,
        shared: &Shared,
        alerts: &[AlertConfig],
    ) -> Vec<(usize, Notice)> {
        let now = Instant::now();
        let mut out = Vec::new();
        let mut totals = Vec::new();
        for (source, counter) in &shared.rejections {
            let reading = counter.load(Ordering::Relaxed);
            let (last, window) = self.rejections.entry(source.clone()).or_default();
            if reading > *last {
                window.push_back((now, reading - *last));
                *last = reading;
            }
            while window
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > REJECTIONS_WINDOW)
            {
                window.pop_front();
            }
            totals.push((source.clone(), window.iter().map(|(_, n)| n).sum::<u64>()));
        }
        for (i, alert) in alerts.iter().enumerate() {
            for (source, total) in &totals {
                let holds = *total >= u64::from(alert.rejections_threshold);
                if self.edge(i, Condition::Rejections, source, holds) {
                    out.push((i, rejections(source, *total)));
                }
            }
        }
        let refused = shared.refused_writes.load(Ordering::Relaxed);
        if refused > self.refused_writes {
            let n = refused - self.refused_writes;
            self.refused_writes = refused;
            let notice = Notice {
                condition: Condition::Storage,
                title: "The database refused events (503)".to_owned(),
                text: format!(
                    "{n} requests were answered 503 because the store could not take them \
                     (writer queue full, or the database cannot be written). Providers retry, \
                     but check the disk and GET /readyz on the admin listener."
                ),
                details: json!({ "refused": n }),
            };
            out.extend((0..alerts.len()).map(|i| (i, notice.clone())));
        }
        out
    }

    /// The slow checks; returns what each alert should hear.
    pub(super) async fn check(&mut self, alerts: &[AlertConfig]) -> Vec<(usize, Notice)> {
        let mut out = Vec::new();
        let wanted = |c| alerts.iter().any(|a| a.wants(c));
        if wanted(Condition::Backlog) {
            self.check_backlog(alerts, &mut out).await;
        }
        if wanted(Condition::Storage) {
            self.check_disk(alerts, &mut out);
        }
        if wanted(Condition::Certificate) {
            self.check_certificate(alerts, &mut out);
        }
        out
    }

    async fn check_backlog(&mut self, alerts: &[AlertConfig], out: &mut Vec<(usize, Notice)>) {
        let read = self.store.read(crate::store::queries::oldest_pending).await;
        let oldest = match read {
            Ok(oldest) => oldest,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "alerts: cannot read the oldest pending delivery");
                return;
            }
        };
        let now = clock::now_ms();
        let age = oldest.as_ref().map_or(Duration::ZERO, |(_, _, at)| {
            Duration::from_millis(u64::try_from(now.saturating_sub(*at)).unwrap_or(0))
        });
        for (i, alert) in alerts.iter().enumerate() {
            let holds = oldest.is_some() && age >= alert.backlog_age;
            if !self.edge(i, Condition::Backlog, "", holds) {
                continue;
            }
            let Some((source, destination, _)) = &oldest else {
                continue;
            };
            let age_text = humantime::format_duration(Duration::from_secs(age.as_secs()));
            out.push((
                i,
                Notice {
                    condition: Condition::Backlog,
                    title: format!("Deliveries are backing up: the oldest waits {age_text}"),
                    text: format!(
                        "The oldest pending delivery ({source} → {destination}) arrived {age_text} ago \
                         (backlog_age is {}). Is the destination down or paused? See GET /api/stats.",
                        humantime::format_duration(alert.backlog_age)
                    ),
                    details: json!({
                        "source": source, "destination": destination,
                        "age_seconds": age.as_secs(),
                    }),
                },
            ));
        }
    }

    fn check_disk(&mut self, alerts: &[AlertConfig], out: &mut Vec<(usize, Notice)>) {
        let dir = match self.database.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let stat = match nix::sys::statvfs::statvfs(&dir) {
            Ok(stat) => stat,
            Err(e) => {
                tracing::debug!(error = %e, "alerts: cannot statvfs the database's directory");
                return;
            }
        };
        let (blocks, free, avail) = (
            stat.blocks() as f64,
            stat.blocks_free() as f64,
            stat.blocks_available() as f64,
        );
        let used = blocks - free;
        let share = if used + avail > 0.0 {
            used / (used + avail)
        } else {
            0.0
        };
        for i in 0..alerts.len() {
            if !self.edge(i, Condition::Storage, "disk", share > DISK_FULL) {
                continue;
            }
            let percent = (share * 100.0).round();
            out.push((
                i,
                Notice {
                    condition: Condition::Storage,
                    title: format!("The database's disk is {percent}% full"),
                    text: format!(
                        "The file system holding {} is {percent}% full. When it fills, hookbox answers 503 \
                         and providers' deliveries wait; free space or lower retention.body_days.",
                        self.database.display()
                    ),
                    details: json!({ "used_percent": percent }),
                },
            ));
        }
    }

    fn check_certificate(&mut self, alerts: &[AlertConfig], out: &mut Vec<(usize, Notice)>) {
        let expiry = self.tls_expiry.get();
        let left = expiry.saturating_sub(clock::now_secs());
        let holds = expiry > 0 && left < CERTIFICATE_WARNING.as_secs() as i64;
        for i in 0..alerts.len() {
            if !self.edge(i, Condition::Certificate, "", holds) {
                continue;
            }
            let days = left.max(0) / 86_400;
            out.push((
                i,
                Notice {
                    condition: Condition::Certificate,
                    title: format!("The TLS certificate expires in {days} days"),
                    text: format!(
                        "The certificate the public listener serves expires in {days} days. \
                         With ACME, check the log for renewal errors; with files, replace them \
                         (hookbox reloads on change or SIGHUP)."
                    ),
                    details: json!({ "expires_at": expiry, "days_left": days }),
                },
            ));
        }
    }
}

fn rejections(source: &str, total: u64) -> Notice {
    Notice {
        condition: Condition::Rejections,
        title: format!("Source {source} is refusing requests"),
        text: format!(
            "{total} requests to /hooks/{source} failed signature verification in the last 10 minutes. \
             The usual cause is a rotated secret: put the new one first in secrets (keep the old one \
             until the provider has switched). See the manual's \"Troubleshooting signature failures\" (docs/src/troubleshooting.md)."
        ),
        details: json!({ "source": source, "refusals": total, "window_seconds": 600 }),
    }
}
