//! `POST /api/destinations/{source}/{name}/pause` and `/resume`: holding a
//! destination by hand, for planned maintenance. A paused destination
//! keeps receiving into its queue; nothing is attempted (no probe either)
//! and nothing counts toward `dead` until it is resumed, when its backlog
//! is due at once. The pause is committed before the answer, so it
//! survives a restart.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::AdminState;
use crate::store::pauses::{Cause, Pause, PauseOp};
use crate::support::clock;
use crate::support::error::ApiError;

/// `POST /api/destinations/{source}/{name}/pause`: idempotent; pausing a
/// paused destination keeps its first `paused_since`.
pub async fn pause(
    State(st): State<AdminState>,
    Path((source, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    set_manual(&st, &source, &name, true).await.map(Json)
}

/// `POST /api/destinations/{source}/{name}/resume`: idempotent.
pub async fn resume(
    State(st): State<AdminState>,
    Path((source, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    set_manual(&st, &source, &name, false).await.map(Json)
}

/// Pauses or resumes `source`'s destination `name` by hand (the API's and
/// the dashboard's buttons): commits it, then tells the dispatcher and the
/// pull takes. Answers the destination's state; 404 when unknown.
pub(super) async fn set_manual(
    st: &AdminState,
    source: &str,
    name: &str,
    pause: bool,
) -> Result<Value, ApiError> {
    let Some(s) = st.config.source(source) else {
        return Err(ApiError::NotFound("unknown_source"));
    };
    if !s.destinations.iter().any(|d| d.name == name) {
        return Err(ApiError::NotFound("unknown_destination"));
    }
    let (source, destination) = (source.to_owned(), name.to_owned());
    let since = pause.then(|| {
        st.board
            .manual_since(&source, &destination)
            .unwrap_or_else(clock::now_ms)
    });
    let op = match since {
        Some(since) => PauseOp::Set(Pause {
            source: source.clone(),
            destination: destination.clone(),
            cause: Cause::Manual,
            since,
            next_probe_at: None,
        }),
        None => PauseOp::Lift {
            source: source.clone(),
            destination: destination.clone(),
            cause: Cause::Manual,
        },
    };
    st.writer.write(op).await.map_err(|e| {
        tracing::warn!(error = %e, "cannot store a destination's pause");
        ApiError::Unavailable
    })?;
    if st.board.set_manual(&source, &destination, since) {
        let did = if pause { "paused" } else { "resumed" };
        tracing::info!(%source, %destination, "{did} by hand (admin API or dashboard)");
        st.dispatch.notify_one();
        st.pull.wake_all();
    }
    let state = st.board.get(&source, &destination).to_json(clock::now_ms());
    Ok(json!({
        "source": source,
        "destination": destination,
        "state": state,
    }))
}
