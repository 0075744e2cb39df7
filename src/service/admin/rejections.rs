//! `GET /api/rejections`: requests `/hooks/*` refused, newest first, with
//! cursor paging like `/api/events` (`limit`, `before` = the previous
//! page's `next_before`) and an exact `source` filter (a name no source
//! answers works too: that is how a mistyped URL shows). What a row holds
//! is in `crate::store::rejections`.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::Deserialize;

use super::{AdminState, parse_limit};
use crate::store::rejections::{self, RejectionFilter, RejectionPage};
use crate::support::error::ApiError;

/// `GET /api/rejections` parameters, as sent.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    source: Option<String>,
    limit: Option<String>,
    before: Option<String>,
}

impl ListParams {
    pub(super) fn filter(self) -> Result<RejectionFilter, ApiError> {
        let before = match self.before.as_deref().filter(|v| !v.is_empty()) {
            None => None,
            Some(v) => Some(v.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_filter",
                    "before: must be a rejection id (a positive integer)",
                )
            })?),
        };
        Ok(RejectionFilter {
            source: self.source.filter(|s| !s.is_empty()),
            limit: parse_limit(self.limit.as_deref())?,
            before,
        })
    }
}

/// `GET /api/rejections`
pub async fn list(
    State(st): State<AdminState>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<RejectionPage>, ApiError> {
    let Query(params) =
        params.map_err(|e| ApiError::bad_request("invalid_filter", e.body_text()))?;
    let filter = params.filter()?;
    let page = st.store.read(move |c| rejections::list(c, &filter)).await?;
    Ok(Json(page))
}
