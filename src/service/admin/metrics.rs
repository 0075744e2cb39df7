//! `GET /metrics`: the in-memory metrics of [`crate::telemetry::metrics`] followed by
//! what the database knows, read at scrape time.
//!
//! The database figures are built into a fresh registry on every scrape,
//! so a source that disappears from the table also disappears from the
//! output, and they are right from the first scrape after a restart.
//! Every configured source gets its pending, dead and oldest-age series
//! even at zero, and every configured destination its `_deliveries`
//! series, so alert rules always have something to compare.
//!
//! Two levels, so the rules written before routes keep their meaning:
//! `hookbox_pending_events`, `hookbox_dead_events` and
//! `hookbox_oldest_pending_age_seconds` count events by `source` (an event
//! is pending while any of its deliveries is, dead when one is dead and
//! none pending); `hookbox_pending_deliveries`, `hookbox_dead_deliveries`
//! and `hookbox_oldest_pending_delivery_age_seconds` count deliveries by
//! `source` and `destination`, the level at which a destination fails.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::AdminState;
use crate::store::queries::{self, Known, MetricsSnapshot};
use crate::support::clock;
use crate::support::error::ApiError;

type Labels = Vec<(&'static str, String)>;
type GaugeF = Gauge<f64, AtomicU64>;

/// `GET /metrics` in the Prometheus text format (0.0.4).
pub async fn metrics(State(st): State<AdminState>) -> Result<Response, ApiError> {
    let snapshot = st.store.read(queries::metrics_snapshot).await?;
    let missing = st.store.read(crate::store::ledger::latest_missing).await?;
    let known = st.known();
    let sizes = database_sizes(st.store.path());
    let mut out = String::new();
    st.metrics.encode(&mut out).map_err(anyhow::Error::from)?;
    let mut scraped = scraped_registry(&snapshot, &known, sizes, clock::now_ms());
    register_missing(&mut scraped, st.catchup.sources(), &missing);
    prometheus_text::encode(&mut out, &scraped).map_err(anyhow::Error::from)?;
    Ok(([(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)], out).into_response())
}

/// Bytes of the database file and of its WAL (0 when absent).
fn database_sizes(db: &Path) -> (u64, u64) {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    (size(db), size(Path::new(&wal)))
}

fn source(name: &str) -> Labels {
    vec![("source", name.to_owned())]
}

fn pair(source: &str, key: &'static str, value: &str) -> Labels {
    vec![("source", source.to_owned()), (key, value.to_owned())]
}

fn age_seconds(now: i64, then: i64) -> f64 {
    (now - then).max(0) as f64 / 1000.0
}

fn scraped_registry(
    snap: &MetricsSnapshot,
    known: &Known,
    (db_bytes, wal_bytes): (u64, u64),
    now: i64,
) -> Registry {
    let mut registry = Registry::with_prefix("hookbox");

    // source -> (pending, oldest age s, dead), every configured one at 0.
    let mut per_source: BTreeMap<&str, (i64, f64, i64)> = known
        .iter()
        .map(|(s, _)| (s.as_str(), (0, 0.0, 0)))
        .collect();
    for (s, n, oldest) in &snap.pending {
        let e = per_source.entry(s).or_default();
        e.0 = *n;
        e.1 = age_seconds(now, *oldest);
    }
    for (s, n) in &snap.dead {
        per_source.entry(s).or_default().2 = *n;
    }
    let pending = Family::<Labels, Gauge>::default();
    let oldest = Family::<Labels, GaugeF>::default();
    let dead = Family::<Labels, Gauge>::default();
    for (s, (p, age, d)) in &per_source {
        pending.get_or_create(&source(s)).set(*p);
        oldest.get_or_create(&source(s)).set(*age);
        dead.get_or_create(&source(s)).set(*d);
    }
    registry.register(
        "pending_events",
        "Events waiting for delivery (including those being retried)",
        pending,
    );
    registry.register(
        "oldest_pending_age_seconds",
        "Age of the oldest pending event (0 when none is pending)",
        oldest,
    );
    registry.register(
        "dead_events",
        "Events parked after a permanent failure or too many attempts, until replayed",
        dead,
    );
    register_lanes(&mut registry, snap, known, now);

    let runs = Family::<Labels, Counter>::default();
    for (s, job, n) in &snap.catchup_runs {
        runs.get_or_create(&pair(s, "job", job)).inc_by(*n as u64);
    }
    registry.register(
        "catchup_runs",
        "Catch-up runs recorded in the database",
        runs,
    );
    let last_success = Family::<Labels, GaugeF>::default();
    for (s, job, at) in &snap.catchup_last_success {
        last_success
            .get_or_create(&pair(s, "job", job))
            .set(*at as f64 / 1000.0);
    }
    registry.register(
        "catchup_last_success_timestamp_seconds",
        "When each catch-up job's last complete run started (unix seconds)",
        last_success,
    );
    let redeliveries = Family::<Labels, Counter>::default();
    for (s, outcome, n) in &snap.redeliveries {
        redeliveries
            .get_or_create(&pair(s, "outcome", outcome))
            .inc_by(*n as u64);
    }
    registry.register(
        "redelivery_requests",
        "Redeliveries hookbox asked a provider for, by outcome (asked, permanent, failed)",
        redeliveries,
    );

    let db = Gauge::<i64>::default();
    db.set(i64::try_from(db_bytes + wal_bytes).unwrap_or(i64::MAX));
    registry.register(
        "database_size_bytes",
        "Size of the database file plus its WAL",
        db,
    );
    let wal = Gauge::<i64>::default();
    wal.set(i64::try_from(wal_bytes).unwrap_or(i64::MAX));
    registry.register("database_wal_size_bytes", "Size of the WAL alone", wal);
    registry
}

/// `hookbox_catchup_missing{source}`: what the newest catch-up pass of each
/// source could not recover (0 for a source with a job and no pass yet).
fn register_missing<'a>(
    registry: &mut Registry,
    with_jobs: impl Iterator<Item = &'a str>,
    missing: &[(String, i64)],
) {
    let mut per_source: BTreeMap<&str, i64> = with_jobs.map(|s| (s, 0)).collect();
    for (s, n) in missing {
        per_source.insert(s, *n);
    }
    let gauge = Family::<Labels, Gauge>::default();
    for (s, n) in per_source {
        gauge.get_or_create(&source(s)).set(n);
    }
    registry.register(
        "catchup_missing",
        "Events the newest catch-up pass of the source could not recover (a stretch older than the provider keeps counts as one)",
        gauge,
    );
}

/// The `_deliveries` gauges, by source and destination: every configured
/// destination at 0 first, then what the database holds (a destination
/// removed from the config shows while it keeps rows).
fn register_lanes(registry: &mut Registry, snap: &MetricsSnapshot, known: &Known, now: i64) {
    // (source, destination) -> (pending, oldest age s, dead).
    let mut per_lane: BTreeMap<(&str, &str), (i64, f64, i64)> = known
        .iter()
        .flat_map(|(s, ds)| {
            ds.iter()
                .map(move |d| ((s.as_str(), d.as_str()), (0, 0.0, 0)))
        })
        .collect();
    for (s, d, n, oldest) in &snap.lane_pending {
        let e = per_lane.entry((s, d)).or_default();
        e.0 = *n;
        e.1 = age_seconds(now, *oldest);
    }
    for (s, d, n) in &snap.lane_dead {
        per_lane.entry((s, d)).or_default().2 = *n;
    }
    let pending = Family::<Labels, Gauge>::default();
    let oldest = Family::<Labels, GaugeF>::default();
    let dead = Family::<Labels, Gauge>::default();
    for ((s, d), (p, age, n)) in &per_lane {
        let labels = pair(s, "destination", d);
        pending.get_or_create(&labels).set(*p);
        oldest.get_or_create(&labels).set(*age);
        dead.get_or_create(&labels).set(*n);
    }
    registry.register(
        "pending_deliveries",
        "Deliveries waiting to reach their destination (including those being retried)",
        pending,
    );
    registry.register(
        "oldest_pending_delivery_age_seconds",
        "Age of the event of the destination's oldest pending delivery (0 when none)",
        oldest,
    );
    registry.register(
        "dead_deliveries",
        "Deliveries parked after a permanent failure or too many attempts, until replayed",
        dead,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_sources_get_zero_series_and_ages_come_from_now() {
        let snap = MetricsSnapshot {
            pending: vec![("a".into(), 3, 1_000)],
            dead: vec![("gone".into(), 2)],
            lane_pending: vec![("a".into(), "ci".into(), 4, 1_000)],
            lane_dead: vec![("gone".into(), "old".into(), 2)],
            catchup_runs: vec![("a".into(), "github_redelivery".into(), 4)],
            ..MetricsSnapshot::default()
        };
        let known = [
            ("a".to_owned(), vec!["ci".to_owned(), "chat".to_owned()]),
            ("b".to_owned(), vec![]),
        ];
        let registry = scraped_registry(&snap, &known, (4096, 100), 61_000);
        let mut text = String::new();
        prometheus_text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"hookbox_pending_events{source="a"} 3"#,
            r#"hookbox_pending_events{source="b"} 0"#,
            r#"hookbox_oldest_pending_age_seconds{source="a"} 60.0"#,
            r#"hookbox_dead_events{source="gone"} 2"#,
            r#"hookbox_dead_events{source="b"} 0"#,
            r#"hookbox_pending_deliveries{source="a",destination="ci"} 4"#,
            r#"hookbox_pending_deliveries{source="a",destination="chat"} 0"#,
            r#"hookbox_oldest_pending_delivery_age_seconds{source="a",destination="ci"} 60.0"#,
            r#"hookbox_dead_deliveries{source="a",destination="chat"} 0"#,
            r#"hookbox_dead_deliveries{source="gone",destination="old"} 2"#,
            r#"hookbox_catchup_runs_total{source="a",job="github_redelivery"} 4"#,
            "hookbox_database_size_bytes 4196",
            "hookbox_database_wal_size_bytes 100",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
    }
}
