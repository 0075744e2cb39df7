//! `/healthz` (the process answers) and `/readyz` (the writer is alive, the
//! database takes a commit, and its disk is not full), on both listeners.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::store::WriterHandle;

/// A writer that does not answer within this is not ready.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

pub async fn readyz(State(writer): State<WriterHandle>) -> Response {
    match tokio::time::timeout(READY_TIMEOUT, writer.ready()).await {
        Ok(Ok(())) => Json(json!({ "status": "ready" })).into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "status": "unavailable" })),
            )
                .into_response()
        }
        Err(_) => {
            tracing::warn!("not ready: the writer did not answer in time");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "status": "unavailable" })),
            )
                .into_response()
        }
    }
}
