//! `GET /api/sources/{name}/completeness?window=72h&limit=`: the source's
//! completeness ledger, the proof after an outage that nothing was missed
//! (or exactly what was, and why): a summary of its catch-up passes over
//! `window` and the newest passes themselves.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AdminState, parse_limit};
use crate::catchup::completeness_line;
use crate::store::ledger;
use crate::support::clock;
use crate::support::error::ApiError;

/// The summary's window when none is given: three days, the longest any
/// provider's own retries run.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(72 * 3600);

/// Longer than any provider keeps events (Paddle: 90 days).
const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    window: Option<String>,
    limit: Option<String>,
}

/// `window` as a duration (`72h`, `7d`), within bounds.
pub fn parse_window(value: Option<&str>) -> Result<Duration, ApiError> {
    let Some(v) = value else {
        return Ok(DEFAULT_WINDOW);
    };
    match humantime::parse_duration(v) {
        Ok(d) if !d.is_zero() && d <= MAX_WINDOW => Ok(d),
        _ => Err(ApiError::bad_request(
            "invalid_query",
            "window: a duration like 72h or 7d, up to a year",
        )),
    }
}

pub async fn completeness(
    State(st): State<AdminState>,
    Path(name): Path<String>,
    params: Result<Query<Params>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let window = parse_window(params.window.as_deref())?;
    let limit = parse_limit(params.limit.as_deref())?;
    if st.config.source(&name).is_none() {
        return Err(ApiError::NotFound("unknown_source"));
    }
    let Some(job) = st.catchup.job_of(&name) else {
        return Err(ApiError::conflict(
            "no_catch_up",
            format!("source {name:?} has no catch-up job, so no ledger"),
        ));
    };
    let since = clock::now_ms() - window.as_millis() as i64;
    let source = name.clone();
    let (summary, passes) = st
        .store
        .read(move |c| {
            Ok((
                ledger::summary(c, &source, since)?,
                ledger::recent(c, &source, limit)?,
            ))
        })
        .await?;
    Ok(Json(json!({
        "source": name,
        "job": job,
        "window": humantime::format_duration(window).to_string(),
        "line": completeness_line(&summary, window),
        "summary": summary,
        "passes": passes,
    })))
}
