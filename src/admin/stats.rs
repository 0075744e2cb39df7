//! `/api/stats`, `/api/catch-up` (recent runs) and
//! `POST /api/sources/{name}/catch-up`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AdminState, parse_limit};
use crate::clock;
use crate::error::ApiError;
use crate::store::queries::{self, CatchupRun, SourceStats};

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    source: Option<String>,
    limit: Option<String>,
}

/// `GET /api/catch-up?source=&limit=`: recent runs, newest first.
pub async fn catch_up_runs(
    State(st): State<AdminState>,
    params: Result<Query<RunParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::bad_request("invalid_filter", e.body_text()))?;
    let limit = parse_limit(params.limit.as_deref())?;
    let source = params.source;
    let runs: Vec<CatchupRun> = st
        .store
        .read(move |c| queries::catchup_runs(c, source.as_deref(), limit))
        .await?;
    Ok(Json(json!({ "runs": runs })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatchUpParams {
    dry_run: Option<String>,
}

/// `POST /api/sources/{name}/catch-up[?dry_run=true]`: runs one pass of the
/// source's catch-up job now and answers with its report when it ends.
/// 404 for an unknown source, 409 when the source has no catch-up job or
/// a pass is already running (the scheduler's, or `hookbox catch-up`).
/// A pass that failed against the provider is still a 200: the report's
/// `error` says why, as the run's row in `catchup_runs` does.
pub async fn start_catch_up(
    State(st): State<AdminState>,
    Path(name): Path<String>,
    params: Result<Query<CatchUpParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let dry_run = match params.dry_run.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_query",
                "dry_run: true or false",
            ));
        }
    };
    if st.config.source(&name).is_none() {
        return Err(ApiError::NotFound("unknown_source"));
    }
    let Some(report) = st.catchup.run_now(&name, dry_run).await else {
        return Err(ApiError::conflict(
            "no_catch_up",
            format!(
                "source {name:?} has no catch-up job (github_redelivery, gitlab_redelivery or stripe_backfill)"
            ),
        ));
    };
    if report.busy {
        return Err(ApiError::conflict(
            "busy",
            format!("a catch-up pass of {name:?} is already running; try again when it ends"),
        ));
    }
    Ok(Json(
        serde_json::to_value(report).map_err(anyhow::Error::from)?,
    ))
}
