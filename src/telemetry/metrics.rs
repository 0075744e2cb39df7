//! The process's Prometheus metrics: the handles the hot paths update, and
//! the registry `/metrics` encodes.
//!
//! Only what happens in memory lives here: requests received, their
//! latency, writer groups, dispatch attempts. Figures the database already
//! knows (pending and dead counts, the oldest pending event, catch-up runs,
//! the file's size) are read at scrape time by `crate::service::admin::metrics`, so
//! they are right after a restart and cost nothing between scrapes.
//!
//! Hot paths never format a label: each source's handles ([`SourceMetrics`],
//! [`LaneMetrics`]) are created once at start-up and are plain atomic
//! counters and histograms; the only label built per request is a
//! rejection's, from an `Arc<str>` and a `&'static str`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The `source` label value for requests to a route no source answers:
/// one series, however many names a scanner tries.
pub const UNKNOWN_SOURCE: &str = "(unknown)";

/// Latency buckets for answers and attempts, in seconds: 0.5 ms to ~65 s.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0005, 2.0, 18)
}

fn latency_histogram() -> Histogram {
    Histogram::new(latency_buckets())
}

/// `hookbox_received_total` labels: `reason` only on rejections.
/// Outcomes: `accepted`, `duplicate`, `challenge` (a provider's handshake:
/// Slack, Discord, Meta, Zoom, Twitch) and `rejected`.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ReceivedLabels {
    source: Arc<str>,
    outcome: &'static str,
    reason: Option<&'static str>,
}

impl EncodeLabelSet for ReceivedLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("source", &*self.source).encode(encoder.encode_label())?;
        ("outcome", self.outcome).encode(encoder.encode_label())?;
        if let Some(reason) = self.reason {
            ("reason", reason).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct SourceLabel {
    source: Arc<str>,
}

impl EncodeLabelSet for SourceLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("source", &*self.source).encode(encoder.encode_label())
    }
}

/// A dispatch lane: one destination of one source.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct LaneLabels {
    source: Arc<str>,
    destination: Arc<str>,
}

impl EncodeLabelSet for LaneLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("source", &*self.source).encode(encoder.encode_label())?;
        ("destination", &*self.destination).encode(encoder.encode_label())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct AttemptLabels {
    lane: LaneLabels,
    outcome: &'static str,
}

impl EncodeLabelSet for AttemptLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        self.lane.encode(encoder)?;
        ("outcome", self.outcome).encode(encoder.encode_label())
    }
}

/// `hookbox_edge_refused_total` labels: which source, and why
/// (`not_allowed`, `set_unavailable`, `too_many_failures`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct EdgeLabels {
    source: Arc<str>,
    reason: &'static str,
}

impl EncodeLabelSet for EdgeLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("source", &*self.source).encode(encoder.encode_label())?;
        ("reason", self.reason).encode(encoder.encode_label())
    }
}

/// A label with one static value (`reason`, `set`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct StaticLabel {
    name: &'static str,
    value: &'static str,
}

impl EncodeLabelSet for StaticLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        (self.name, self.value).encode(encoder.encode_label())
    }
}

/// `hookbox_alert_messages_total` labels: which alert (its index in
/// `[[alerts]]`: the URL is a secret), its format, and how sending ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct AlertLabels {
    alert: String,
    format: &'static str,
    outcome: &'static str,
}

impl EncodeLabelSet for AlertLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("alert", self.alert.as_str()).encode(encoder.encode_label())?;
        ("format", self.format).encode(encoder.encode_label())?;
        ("outcome", self.outcome).encode(encoder.encode_label())
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// What the writer thread observes per group. Created by the store (which
/// owns the thread) and registered by [`Metrics::new`].
#[derive(Clone, Debug)]
pub struct WriterMetrics {
    /// Commands per group transaction.
    pub batch_size: Histogram,
    /// Time to run and commit a group's transaction.
    pub commit_seconds: Histogram,
    /// Time of each `fdatasync` of the WAL that answers wait for
    /// (`durability = "full"`): the disk's part of a request's time.
    pub sync_seconds: Histogram,
    /// Refused requests not recorded: their buffer was full, or the
    /// flush failed (`crate::store::rejections`).
    pub rejections_dropped: Counter,
}

impl Default for WriterMetrics {
    fn default() -> Self {
        WriterMetrics {
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
            commit_seconds: latency_histogram(),
            sync_seconds: latency_histogram(),
            rejections_dropped: Counter::default(),
        }
    }
}

/// Every in-memory metric, and the registry that encodes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    received: Family<ReceivedLabels, Counter>,
    request_seconds: HistogramFamily<SourceLabel>,
    attempts: Family<AttemptLabels, Counter>,
    dispatch_seconds: HistogramFamily<LaneLabels>,
    paused: Family<LaneLabels, Gauge>,
    edge: EdgeMetrics,
    tls_expiry: Gauge,
    alerts: AlertMetrics,
}

impl Metrics {
    pub fn new(writer: &WriterMetrics) -> Self {
        let mut registry = Registry::with_prefix("hookbox");
        let received = Family::<ReceivedLabels, Counter>::default();
        registry.register(
            "received",
            "Requests to /hooks/{source} by outcome (accepted, duplicate, rejected with a reason)",
            received.clone(),
        );
        let request_seconds: HistogramFamily<SourceLabel> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "request_duration_seconds",
            "Time from a /hooks request's arrival to its answer",
            request_seconds.clone(),
        );
        registry.register(
            "writer_batch_size",
            "Commands committed together in one writer transaction",
            writer.batch_size.clone(),
        );
        registry.register(
            "writer_commit_duration_seconds",
            "Time to run and commit one writer transaction (the WAL fsync follows on the syncer thread)",
            writer.commit_seconds.clone(),
        );
        registry.register(
            "wal_sync_duration_seconds",
            "Time of one fsync of the WAL, which the answers of the groups it covers wait for (durability = \"full\")",
            writer.sync_seconds.clone(),
        );
        registry.register(
            "rejections_dropped",
            "Refused /hooks requests not recorded in the rejections table (buffer full or flush failed)",
            writer.rejections_dropped.clone(),
        );
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "dispatch_attempts",
            "Delivery attempts by how they left the event (delivered, retry, dead; skipped: a transform gave nothing to send)",
            attempts.clone(),
        );
        let dispatch_seconds: HistogramFamily<LaneLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "dispatch_duration_seconds",
            "Time one delivery attempt took",
            dispatch_seconds.clone(),
        );
        let paused = Family::<LaneLabels, Gauge>::default();
        registry.register(
            "destination_paused",
            "1 while a destination is paused by its circuit breaker or a Retry-After, else 0",
            paused.clone(),
        );
        let edge = EdgeMetrics::default();
        registry.register(
            "edge_refused",
            "Requests the edge refused, by source and reason: before the body (malformed_forwarding_header, unknown_client, not_allowed, set_unavailable, too_many_failures) or while reading it (body_memory, client_body_bytes, client_bodies)",
            edge.refused.clone(),
        );
        registry.register(
            "edge_body_bytes",
            "Bytes of request bodies held now (read, not yet stored or refused), of a 256 MiB budget",
            edge.body_bytes.clone(),
        );
        registry.register(
            "edge_bodies_reading",
            "Request bodies being read now",
            edge.bodies_reading.clone(),
        );
        registry.register(
            "edge_blocked",
            "Times a client address was blocked for failing verification too often",
            edge.blocked.clone(),
        );
        registry.register(
            "edge_ip_set_ranges",
            "Ranges known of each named IP set (0: none yet, its sources refuse everyone)",
            edge.set_ranges.clone(),
        );
        let tls_expiry = Gauge::default();
        registry.register(
            "tls_certificate_expiry_timestamp_seconds",
            "Unix time the public listener's TLS certificate expires (0: none served, or plain HTTP)",
            tls_expiry.clone(),
        );
        let alerts = AlertMetrics::default();
        registry.register(
            "alert_messages",
            "Alert messages by alert (its index in [[alerts]]), format and outcome (sent, or failed after every retry)",
            alerts.messages.clone(),
        );
        registry.register(
            "alert_notices_dropped",
            "Alert notices dropped because the alert queue was full (ingest and dispatch never wait for it)",
            alerts.dropped.clone(),
        );
        Metrics {
            registry,
            received,
            request_seconds,
            attempts,
            dispatch_seconds,
            paused,
            edge,
            tls_expiry,
            alerts,
        }
    }

    /// The alert task's handles.
    pub fn alerts(&self) -> AlertMetrics {
        self.alerts.clone()
    }

    /// The handles of one source's receive route, created now so a request
    /// only touches atomics. Call once per source at start-up.
    pub fn source(&self, name: &str) -> SourceMetrics {
        let source: Arc<str> = Arc::from(name);
        let labels = |outcome| ReceivedLabels {
            source: source.clone(),
            outcome,
            reason: None,
        };
        SourceMetrics {
            accepted: self.received.get_or_create_owned(&labels("accepted")),
            duplicate: self.received.get_or_create_owned(&labels("duplicate")),
            challenge: self.received.get_or_create_owned(&labels("challenge")),
            latency: self.request_seconds.get_or_create_owned(&SourceLabel {
                source: source.clone(),
            }),
            received: self.received.clone(),
            source,
        }
    }

    /// The handles for requests to a name no source answers: only their
    /// rejections are exported, under `source="(unknown)"`.
    pub fn unknown_source(&self) -> SourceMetrics {
        SourceMetrics {
            source: Arc::from(UNKNOWN_SOURCE),
            received: self.received.clone(),
            accepted: Counter::default(),
            duplicate: Counter::default(),
            challenge: Counter::default(),
            latency: latency_histogram(),
        }
    }

    /// The handles of one dispatch lane: `destination` of `source`.
    pub fn lane(&self, source: &str, destination: &str) -> LaneMetrics {
        let lane = LaneLabels {
            source: Arc::from(source),
            destination: Arc::from(destination),
        };
        let attempts = |outcome| {
            self.attempts.get_or_create_owned(&AttemptLabels {
                lane: lane.clone(),
                outcome,
            })
        };
        LaneMetrics {
            delivered: attempts("delivered"),
            retry: attempts("retry"),
            dead: attempts("dead"),
            skipped: attempts("skipped"),
            latency: self.dispatch_seconds.get_or_create_owned(&lane),
            paused: self.paused.get_or_create_owned(&lane),
        }
    }

    /// The edge's handles (allowlists, failure limit, proxies).
    pub fn edge(&self) -> EdgeMetrics {
        self.edge.clone()
    }

    /// Set to the served certificate's expiry by `crate::ingress::tls::CertStore`.
    pub fn tls_expiry(&self) -> Gauge {
        self.tls_expiry.clone()
    }

    /// Appends the in-memory metrics in the Prometheus text format.
    pub fn encode(&self, out: &mut String) -> std::fmt::Result {
        prometheus_client::encoding::prometheus_text::encode(out, &self.registry)
    }
}

/// One source's receive metrics; cheap to clone.
#[derive(Clone, Debug)]
pub struct SourceMetrics {
    source: Arc<str>,
    received: Family<ReceivedLabels, Counter>,
    accepted: Counter,
    duplicate: Counter,
    challenge: Counter,
    latency: Histogram,
}

impl SourceMetrics {
    pub fn accepted(&self, took: Duration) {
        self.accepted.inc();
        self.latency.observe(took.as_secs_f64());
    }

    pub fn duplicate(&self, took: Duration) {
        self.duplicate.inc();
        self.latency.observe(took.as_secs_f64());
    }

    /// A handshake answered (Slack, Discord, Meta, Zoom, Twitch); nothing stored.
    pub fn challenge(&self, took: Duration) {
        self.challenge.inc();
        self.latency.observe(took.as_secs_f64());
    }

    /// A refusal; `reason` is the `{"error": ...}` of the answer.
    pub fn rejected(&self, reason: &'static str, took: Duration) {
        self.received
            .get_or_create(&ReceivedLabels {
                source: self.source.clone(),
                outcome: "rejected",
                reason: Some(reason),
            })
            .inc();
        self.latency.observe(took.as_secs_f64());
    }
}

/// What the edge counts; cheap to clone. Refusals are rare enough that
/// their label is built per request.
#[derive(Clone, Debug, Default)]
pub struct EdgeMetrics {
    refused: Family<EdgeLabels, Counter>,
    body_bytes: Gauge,
    bodies_reading: Gauge,
    blocked: Counter,
    set_ranges: Family<StaticLabel, Gauge>,
}

impl EdgeMetrics {
    pub fn refused(&self, source: &str, reason: &'static str) {
        self.refused
            .get_or_create(&EdgeLabels {
                source: Arc::from(source),
                reason,
            })
            .inc();
    }

    /// Bytes of request bodies charged (positive) or given back.
    pub fn body_bytes(&self, delta: i64) {
        self.body_bytes.inc_by(delta);
    }

    /// A body started (1) or finished (-1) being read.
    pub fn bodies_reading(&self, delta: i64) {
        self.bodies_reading.inc_by(delta);
    }

    pub fn blocked(&self) {
        self.blocked.inc();
    }

    pub fn set_ranges(&self, set: &'static str, ranges: usize) {
        self.set_ranges
            .get_or_create(&StaticLabel {
                name: "set",
                value: set,
            })
            .set(i64::try_from(ranges).unwrap_or(i64::MAX));
    }
}

/// What the alerts count; cheap to clone. Messages are few: their label
/// is built per message.
#[derive(Clone, Debug, Default)]
pub struct AlertMetrics {
    messages: Family<AlertLabels, Counter>,
    dropped: Counter,
}

impl AlertMetrics {
    fn message(&self, alert: usize, format: crate::config::Format, outcome: &'static str) {
        self.messages
            .get_or_create(&AlertLabels {
                alert: alert.to_string(),
                format: format.as_str(),
                outcome,
            })
            .inc();
    }

    pub fn sent(&self, alert: usize, format: crate::config::Format) {
        self.message(alert, format, "sent");
    }

    pub fn failed(&self, alert: usize, format: crate::config::Format) {
        self.message(alert, format, "failed");
    }

    pub fn dropped(&self) {
        self.dropped.inc();
    }
}

/// One dispatch lane's metrics; cheap to clone.
#[derive(Clone, Debug)]
pub struct LaneMetrics {
    delivered: Counter,
    retry: Counter,
    dead: Counter,
    skipped: Counter,
    latency: Histogram,
    paused: Gauge,
}

/// How an attempt left its event, for [`LaneMetrics::attempt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Delivered,
    Retry,
    Dead,
    /// A transform gave nothing to send.
    Skipped,
}

impl LaneMetrics {
    pub fn attempt(&self, outcome: AttemptOutcome, took: Duration) {
        match outcome {
            AttemptOutcome::Delivered => self.delivered.inc(),
            AttemptOutcome::Retry => self.retry.inc(),
            AttemptOutcome::Dead => self.dead.inc(),
            AttemptOutcome::Skipped => self.skipped.inc(),
        };
        self.latency.observe(took.as_secs_f64());
    }

    pub fn paused(&self, paused: bool) {
        self.paused.set(i64::from(paused));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_created_at_start_up_move_the_shared_families() {
        let metrics = Metrics::new(&WriterMetrics::default());
        let github = metrics.source("github");
        github.accepted(Duration::from_millis(2));
        github.accepted(Duration::from_millis(2));
        github.duplicate(Duration::from_millis(1));
        github.rejected("invalid_signature", Duration::from_millis(1));
        metrics
            .lane("github", "default")
            .attempt(AttemptOutcome::Retry, Duration::from_millis(30));
        let mut text = String::new();
        metrics.encode(&mut text).unwrap();
        for line in [
            r#"hookbox_received_total{source="github",outcome="accepted"} 2"#,
            r#"hookbox_received_total{source="github",outcome="duplicate"} 1"#,
            r#"hookbox_received_total{source="github",outcome="rejected",reason="invalid_signature"} 1"#,
            r#"hookbox_dispatch_attempts_total{source="github",destination="default",outcome="retry"} 1"#,
            r#"hookbox_dispatch_attempts_total{source="github",destination="default",outcome="delivered"} 0"#,
            r#"hookbox_request_duration_seconds_count{source="github"} 4"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
    }
}
