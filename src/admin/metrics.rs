//! `GET /metrics`: the in-memory metrics of [`crate::metrics`] followed by
//! what the database knows, read at scrape time.
//!
//! The database figures are built into a fresh registry on every scrape,
//! so a source that disappears from the table also disappears from the
//! output, and they are right from the first scrape after a restart.
//! Every configured source gets its pending, dead and oldest-age series
//! even at zero, so alert rules always have something to compare.

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
use crate::clock;
use crate::error::ApiError;
use crate::store::queries::{self, MetricsSnapshot};

type Labels = Vec<(&'static str, String)>;
type GaugeF = Gauge<f64, AtomicU64>;

/// `GET /metrics` in the Prometheus text format (0.0.4).
pub async fn metrics(State(st): State<AdminState>) -> Result<Response, ApiError> {
    let snapshot = st.store.read(queries::metrics_snapshot).await?;
    let known: Vec<String> = st.config.sources.iter().map(|s| s.name.clone()).collect();
    let sizes = database_sizes(st.store.path());
    let mut out = String::new();
    st.metrics.encode(&mut out).map_err(anyhow::Error::from)?;
    let scraped = scraped_registry(&snapshot, &known, sizes, clock::now_ms());
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

fn scraped_registry(
    snap: &MetricsSnapshot,
    known: &[String],
    (db_bytes, wal_bytes): (u64, u64),
    now: i64,
) -> Registry {
    let mut registry = Registry::with_prefix("hookbox");

    // source -> (pending, oldest age s, dead), every configured one at 0.
    let mut per_source: BTreeMap<&str, (i64, f64, i64)> =
        known.iter().map(|s| (s.as_str(), (0, 0.0, 0))).collect();
    for (s, n, oldest) in &snap.pending {
        let e = per_source.entry(s).or_default();
        e.0 = *n;
        e.1 = (now - oldest).max(0) as f64 / 1000.0;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_sources_get_zero_series_and_ages_come_from_now() {
        let snap = MetricsSnapshot {
            pending: vec![("a".into(), 3, 1_000)],
            dead: vec![("gone".into(), 2)],
            catchup_runs: vec![("a".into(), "github_redelivery".into(), 4)],
            ..MetricsSnapshot::default()
        };
        let registry = scraped_registry(&snap, &["a".into(), "b".into()], (4096, 100), 61_000);
        let mut text = String::new();
        prometheus_text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"hookbox_pending_events{source="a"} 3"#,
            r#"hookbox_pending_events{source="b"} 0"#,
            r#"hookbox_oldest_pending_age_seconds{source="a"} 60.0"#,
            r#"hookbox_dead_events{source="gone"} 2"#,
            r#"hookbox_dead_events{source="b"} 0"#,
            r#"hookbox_catchup_runs_total{source="a",job="github_redelivery"} 4"#,
            "hookbox_database_size_bytes 4196",
            "hookbox_database_wal_size_bytes 100",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
    }
}
