//! `/api/stats`: counts per source, destination and state, the oldest
//! pending delivery, and the last catch-up runs.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::AdminState;
use crate::store::queries::{self, CatchupRun, SourceStats};
use crate::support::clock;
use crate::support::error::ApiError;

/// What `/api/stats` and the dashboard's overview show.
pub struct Overview {
    pub sources: Vec<SourceStats>,
    /// Counts per state over every source.
    pub totals: BTreeMap<String, i64>,
    /// The oldest pending event's age over every source.
    pub oldest_pending_age_seconds: Option<f64>,
    pub last_runs: Vec<CatchupRun>,
}

/// Reads the counts per source and state, per destination and state, and
/// each job's last run.
pub async fn overview(st: &AdminState) -> Result<Overview, ApiError> {
    let known = st.known();
    let now = clock::now_ms();
    let (sources, last_runs) = st
        .store
        .read(move |c| {
            Ok((
                queries::source_stats(c, &known, now)?,
                queries::last_catchup_runs(c)?,
            ))
        })
        .await?;
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    for s in &sources {
        for (state, n) in &s.counts {
            *totals.entry(state.clone()).or_default() += n;
        }
    }
    let oldest_pending_age_seconds = sources
        .iter()
        .filter_map(|s| s.oldest_pending_age_seconds)
        .max_by(f64::total_cmp);
    Ok(Overview {
        sources,
        totals,
        oldest_pending_age_seconds,
        last_runs,
    })
}

/// `GET /api/stats`: counts per source and state, each source's
/// destinations with their deliveries per state, the oldest pending
/// event's age (per source and overall), and each catch-up job's last run.
pub async fn stats(State(st): State<AdminState>) -> Result<Json<Value>, ApiError> {
    let o = overview(&st).await?;
    let mut sources = serde_json::to_value(&o.sources).map_err(anyhow::Error::from)?;
    // Each destination's breaker, from the dispatcher's board: not rows.
    let now = clock::now_ms();
    for source in sources.as_array_mut().into_iter().flatten() {
        let name = source["source"].as_str().unwrap_or_default().to_owned();
        if let Some(destinations) = source["destinations"].as_object_mut() {
            for (destination, d) in destinations.iter_mut() {
                d["status"] = st.board.get(&name, destination).to_json(now);
                // What it is and where it goes, credentials left out.
                let configured = st
                    .config
                    .source(&name)
                    .and_then(|s| s.destinations.iter().find(|c| c.name == *destination));
                if let Some(c) = configured {
                    d["kind"] = c.destination.kind().into();
                    d["target"] = c.destination.target().into();
                }
            }
        }
    }
    Ok(Json(json!({
        "sources": sources,
        "totals": o.totals,
        "oldest_pending_age_seconds": o.oldest_pending_age_seconds,
        "last_catch_up": o.last_runs,
    })))
}
