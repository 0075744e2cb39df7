//! `/api/events` (list, show), `/api/events/{id}/replay` and `/api/replay`.
//!
//! Times in and out are unix milliseconds; `since` and `until` also take
//! RFC 3339 (`2026-01-31T12:00:00Z`). Replay never creates an event row: it
//! puts `dead` or `delivered` deliveries back to `pending` through the
//! writer, with attempts reset, and wakes the dispatcher. Named with a
//! destination, it also creates the delivery there for an event that never
//! had one: how a destination added to the config gets old events. Only
//! destinations in the config are replayed; one removed keeps its rows,
//! which nothing would dispatch.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{AdminState, parse_limit};
use crate::delivery::replay::{self as plan, BulkError, ReplayError};
use crate::store::StoreError;
use crate::store::models;
use crate::store::queries::{self, AttemptRow, DeliveryRow, EventFilter, EventSummary};
use crate::store::{Replay, ReplayFilter};
use crate::support::clock;
use crate::support::error::ApiError;

pub(super) use plan::Bulk;

/// `GET /api/events` parameters, as sent: parsed by [`ListParams::filter`]
/// so each problem gets its own message.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    source: Option<String>,
    /// Only events with a delivery there; `state` is then that delivery's.
    destination: Option<String>,
    state: Option<String>,
    event_type: Option<String>,
    since: Option<String>,
    until: Option<String>,
    limit: Option<String>,
    before: Option<String>,
    /// Words (and `prefix*`) the body must have.
    q: Option<String>,
}

impl ListParams {
    fn filter(self, search_enabled: bool) -> Result<EventFilter, ApiError> {
        let state = super::parse_state(self.state.as_deref(), self.destination.is_some())?;
        let before = match self.before.as_deref() {
            None => None,
            Some(v) => Some(
                v.parse::<i64>()
                    .ok()
                    .filter(|id| *id > 0)
                    .ok_or_else(|| invalid("before: must be an event id (a positive integer)"))?,
            ),
        };
        // An empty `q=` (a form sent with an empty box) searches nothing.
        let q = match self.q.as_deref().filter(|q| !q.trim().is_empty()) {
            None => None,
            Some(q) => Some(super::search_query(search_enabled, q)?),
        };
        Ok(EventFilter {
            q,
            since: self
                .since
                .as_deref()
                .map(|v| parse_time("since", v))
                .transpose()?,
            until: self
                .until
                .as_deref()
                .map(|v| parse_time("until", v))
                .transpose()?,
            limit: parse_limit(self.limit.as_deref())?,
            before,
            source: self.source,
            destination: self.destination,
            state,
            event_type: self.event_type,
        })
    }
}

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("invalid_filter", detail)
}

/// Unix milliseconds, an RFC 3339 time, or a date (midnight UTC).
fn parse_time(key: &str, value: &str) -> Result<i64, ApiError> {
    clock::parse_time(value).ok_or_else(|| {
        invalid(format!(
            "{key}: must be unix milliseconds, an RFC 3339 time (2026-01-31T12:00:00Z) \
             or a date (2026-01-31, UTC)"
        ))
    })
}

/// `GET /api/events`: newest first; pass `next_before` back as `before`
/// for the next page.
pub async fn list(
    State(st): State<AdminState>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<queries::EventPage>, ApiError> {
    let Query(params) = params.map_err(|e| invalid(e.body_text()))?;
    let filter = params.filter(st.config.search.enabled)?;
    Ok(Json(super::list_events(&st.store, filter).await?))
}

/// An event as `GET /api/events/{id}` shows it.
#[derive(Serialize)]
struct Detail {
    #[serde(flatten)]
    summary: EventSummary,
    order_key: Option<String>,
    content_type: Option<String>,
    lease_until: Option<i64>,
    headers: Value,
    /// `null` once retention has dropped it.
    body: Option<Body>,
    /// By destination name.
    deliveries: Vec<ShownDelivery>,
    attempt_log: Vec<AttemptRow>,
}

/// A delivery as `GET /api/events/{id}` shows it.
#[derive(Serialize)]
struct ShownDelivery {
    #[serde(flatten)]
    row: DeliveryRow,
    /// Whether the source's config still has the destination; one removed
    /// keeps its rows but is not dispatched.
    configured: bool,
}

#[derive(Serialize)]
#[serde(tag = "encoding", rename_all = "lowercase")]
enum Body {
    Utf8 { text: String },
    Base64 { data: String },
}

impl Body {
    fn new(bytes: Vec<u8>) -> Self {
        match String::from_utf8(bytes) {
            Ok(text) => Body::Utf8 { text },
            Err(e) => Body::Base64 {
                data: base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            },
        }
    }
}

/// `GET /api/events/{id}`
pub async fn show(
    State(st): State<AdminState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let detail = st
        .store
        .read(move |c| queries::event_detail(c, id))
        .await?
        .ok_or(ApiError::NotFound("unknown_event"))?;
    let configured = st.destinations(&detail.summary.source);
    let deliveries = detail
        .deliveries
        .into_iter()
        .map(|row| ShownDelivery {
            configured: configured.contains(&row.destination),
            row,
        })
        .collect();
    let shown = Detail {
        summary: detail.summary,
        order_key: detail.order_key,
        content_type: detail.content_type,
        lease_until: detail.lease_until,
        headers: detail.headers,
        body: detail.body.map(Body::new),
        deliveries,
        attempt_log: detail.attempts,
    };
    Ok(Json(
        serde_json::to_value(shown).map_err(anyhow::Error::from)?,
    ))
}

/// An id in a path: anything but a positive integer names no event.
fn parse_id(id: &str) -> Result<i64, ApiError> {
    id.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or(ApiError::NotFound("unknown_event"))
}

/// `POST /api/events/{id}/replay` body, all optional (an empty body is
/// fine).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayOneBody {
    /// Only the delivery there, created if the event never had one.
    destination: Option<String>,
}

/// `POST /api/events/{id}/replay` with an optional `{"destination": ..}`:
/// see [`replay_event`].
pub async fn replay_one(
    State(st): State<AdminState>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    // Read by hand, not with `Json`: no body (and no content type) at all
    // is the plain replay, as it always was.
    let body: ReplayOneBody = if body.iter().all(u8::is_ascii_whitespace) {
        ReplayOneBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))?
    };
    let n = replay_event(&st, id, body.destination.as_deref()).await?;
    Ok(Json(json!({ "replayed": n })))
}

/// Replays event `id` (the API's and the dashboard's replay buttons), as
/// [`plan::event`] says: 404 when the event or the destination is unknown;
/// 409 when nothing can move (already pending, no destination, body
/// dropped).
pub(super) async fn replay_event(
    st: &AdminState,
    id: i64,
    destination: Option<&str>,
) -> Result<usize, ApiError> {
    let event = st
        .store
        .read(move |c| queries::event_state(c, id))
        .await?
        .ok_or(ApiError::NotFound("unknown_event"))?;
    let filters = plan::event(&st.config, &event, id, destination).map_err(refused)?;
    let n = replay(st, filters).await?;
    if n == 0 {
        // It changed since we looked: another replay, retention, a purge.
        let now = st
            .store
            .read(move |c| queries::event_state(c, id))
            .await?
            .ok_or(ApiError::NotFound("unknown_event"))?;
        plan::event(&st.config, &now, id, destination).map_err(refused)?;
        return Err(ApiError::conflict(
            "already_pending",
            format!("event {id} changed while it was being replayed; try again"),
        ));
    }
    Ok(n)
}

/// A refused replay as the API answers it.
fn refused(e: ReplayError) -> ApiError {
    match e {
        ReplayError::UnknownSource(_) => ApiError::NotFound("unknown_source"),
        ReplayError::UnknownDestination { .. } => ApiError::NotFound("unknown_destination"),
        e @ ReplayError::NoDestination(_) => ApiError::conflict("no_destination", e.to_string()),
        ReplayError::Refused(reason, message) => ApiError::conflict(reason, message),
    }
}

/// `POST /api/replay` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    /// `dead`, `delivered` or `skipped`. Required without a destination, so an empty
    /// body cannot re-deliver the whole inbox; with one, leaving it out
    /// replays both and creates what the destination never had.
    state: Option<String>,
    source: Option<String>,
    /// Needs `source`.
    destination: Option<String>,
    since: Option<TimeArg>,
    until: Option<TimeArg>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum TimeArg {
    Millis(i64),
    Text(String),
}

impl TimeArg {
    pub(super) fn millis(&self, key: &str) -> Result<i64, ApiError> {
        match self {
            TimeArg::Millis(ms) => Ok(*ms),
            TimeArg::Text(text) => parse_time(key, text),
        }
    }
}

/// `POST /api/replay`: answered with how many deliveries moved or were
/// created.
pub async fn replay_many(
    State(st): State<AdminState>,
    body: Result<Json<ReplayBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_request("invalid_body", e.body_text()))?;
    const STATE: &str = "state: \"dead\", \"delivered\" or \"skipped\"";
    let state = match body.state.as_deref() {
        None => None,
        Some(text) => Some(models::State::parse(text).ok_or_else(|| invalid(STATE))?),
    };
    // The API's own rule (the CLI replays a destination at every source
    // that has it); the rest are every caller's (`Bulk::new`).
    if body.destination.is_some() && body.source.is_none() {
        return Err(invalid("destination: needs source"));
    }
    let bulk = Bulk::new(
        state,
        body.source,
        body.destination,
        body.since.map(|t| t.millis("since")).transpose()?,
        body.until.map(|t| t.millis("until")).transpose()?,
    )
    .map_err(|e| match e {
        BulkError::NotReplayable(_) => invalid(STATE),
        BulkError::NoLane => invalid("state: required, \"dead\", \"delivered\" or \"skipped\""),
    })?;
    let replayed = replay_matching(&st, bulk).await?;
    Ok(Json(json!({ "replayed": replayed })))
}

/// Replays what `bulk` picks (`POST /api/replay` and the dashboard's
/// "replay all dead"), as [`plan::bulk`] says: 404 for an unknown source
/// or destination, 409 for a source without a destination.
pub(super) async fn replay_matching(st: &AdminState, bulk: Bulk) -> Result<usize, ApiError> {
    let filters = plan::bulk(&st.config, &bulk).map_err(refused)?;
    if filters.is_empty() {
        return Ok(0);
    }
    replay(st, filters).await
}

/// Replays through the writer, in one transaction, and wakes the
/// dispatcher when anything moved.
async fn replay(st: &AdminState, filters: Vec<ReplayFilter>) -> Result<usize, ApiError> {
    let n = st
        .writer
        .write(Replay {
            filters,
            now: clock::now_ms(),
        })
        .await
        .map_err(|e| {
            match &e {
                StoreError::Overloaded => {}
                other => tracing::warn!(error = %other, "replay failed"),
            }
            ApiError::Unavailable
        })?;
    if n > 0 {
        tracing::info!(deliveries = n, "replayed through the admin API");
        st.dispatch.notify_one();
        st.pull.wake_all();
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_text_when_utf8_and_base64_otherwise() {
        let text = serde_json::to_value(Body::new(b"{\"a\":1}".to_vec())).unwrap();
        assert_eq!(text, json!({"encoding": "utf8", "text": "{\"a\":1}"}));
        let binary = serde_json::to_value(Body::new(vec![0xff, 0x00, 0x01])).unwrap();
        assert_eq!(binary, json!({"encoding": "base64", "data": "/wAB"}));
    }

    #[test]
    fn times_are_milliseconds_or_rfc3339() {
        assert_eq!(
            parse_time("since", "1700000000000").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_time("since", "2023-11-14T22:13:20Z").unwrap(),
            1_700_000_000_000
        );
        assert!(parse_time("since", "yesterday").is_err());
    }

    #[test]
    fn each_bad_filter_is_named() {
        let bad = |p: ListParams| match p.filter(true) {
            Err(ApiError::BadRequest { detail, .. }) => detail,
            other => panic!("{other:?}"),
        };
        let state = bad(ListParams {
            state: Some("gone".into()),
            ..ListParams::default()
        });
        assert!(state.starts_with("state:"), "{state}");
        // A delivery is never stored.
        let stored = bad(ListParams {
            destination: Some("ci".into()),
            state: Some("stored".into()),
            ..ListParams::default()
        });
        assert!(stored.contains("with destination"), "{stored}");
        let before = bad(ListParams {
            before: Some("abc".into()),
            ..ListParams::default()
        });
        assert!(before.starts_with("before:"), "{before}");
        let until = bad(ListParams {
            until: Some("soon".into()),
            ..ListParams::default()
        });
        assert!(until.starts_with("until:"), "{until}");
        let q = bad(ListParams {
            q: Some("* ()".into()),
            ..ListParams::default()
        });
        assert!(q.starts_with("q:"), "{q}");
    }
}
