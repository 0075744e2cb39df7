//! `POST /api/try`: a destination's filter and transform over stored
//! events, nothing sent (`crate::delivery::push::trial`, as `hookbox try`).
//!
//! Body: `{"source", "destination", and one of "event": ID, "last": N,
//! "since": T}` (T as `/api/replay` takes it). Answer: `{"trials": [...]}`,
//! per event its id, whether it matches, and what would be sent. Each call
//! starts a transform process of its own for the destination, so a
//! program being tried never competes with the dispatcher's.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AdminState;
use super::events::TimeArg;
use crate::delivery::push::trial::{self, Trial};
use crate::delivery::transform;
use crate::store::queries::{self, Which};
use crate::support::error::ApiError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TryBody {
    source: String,
    destination: String,
    event: Option<i64>,
    last: Option<usize>,
    since: Option<TimeArg>,
}

pub async fn try_destination(
    State(st): State<AdminState>,
    body: Result<Json<TryBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_request("invalid_body", e.body_text()))?;
    let which = match (body.event, body.last, &body.since) {
        (Some(id), None, None) => Which::Event(id),
        (None, Some(n), None) if n > 0 => Which::Last(n),
        (None, None, Some(t)) => Which::Since(t.millis("since")?),
        _ => {
            return Err(ApiError::bad_request(
                "invalid_body",
                "give exactly one of event (an id), last (a count from 1) and since (a time)",
            ));
        }
    };
    let trials = trials(&st, &body.source, &body.destination, which).await?;
    Ok(Json(json!({ "trials": trials })))
}

/// Tries `destination` of `source` on the events `which` picks: the API's
/// and the dashboard's Try form's work. 404 for an unknown source or
/// destination.
pub(crate) async fn trials(
    st: &AdminState,
    source: &str,
    destination: &str,
    which: Which,
) -> Result<Vec<Trial>, ApiError> {
    let source = st
        .config
        .source(source)
        .ok_or(ApiError::NotFound("unknown_source"))?;
    let destination = source
        .destinations
        .iter()
        .find(|d| d.name == destination)
        .ok_or(ApiError::NotFound("unknown_destination"))?;
    let name = source.name.clone();
    let events = st
        .store
        .read(move |c| queries::events_to_try(c, &name, which))
        .await?;
    let transforms = transform::for_destinations([destination]).map_err(ApiError::Internal)?;
    Ok(trial::run(
        &source.name,
        destination,
        transforms.first().and_then(Option::as_ref),
        events,
    )
    .await)
}
