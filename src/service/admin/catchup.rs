//! `/api/catch-up` (recent runs) and `POST /api/sources/{name}/catch-up`
//! (a pass now, as `hookbox catch-up` runs one).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AdminState, parse_limit};
use crate::store::queries::{self, CatchupRun};
use crate::support::error::ApiError;

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
                "source {name:?} has no catch-up job (github_redelivery, gitlab_redelivery, stripe_backfill, paddle_replay or square_backfill)"
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
