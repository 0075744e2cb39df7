//! The admin listener: the JSON API under `/api`, `/metrics`, the
//! bearer-token check in front of both, and the HTML dashboard.
//!
//! Every `/api` route and `/metrics` is behind [`require_token`]; the
//! dashboard's pages (see [`dashboard`]) take a session cookie instead, got
//! by logging in with the same token, and a cookie never opens `/api`.
//! `/healthz` and `/readyz`,
//! which `crate::service::app` merges in afterwards, are not, so probes need no
//! secret. A path that matches no route is a JSON 404 with or without a
//! token: the routes are documented, so hiding them would protect nothing.
//!
//! Handlers read through [`crate::store::queries`] on the read pool and
//! write only through the writer ([`WriterHandle::write`]); none holds SQL.
//! Errors are [`ApiError`]s: `{"error": reason, "detail": ...}`.

pub mod catchup;
pub mod completeness;
pub mod dashboard;
pub mod destinations;
pub mod events;
pub mod metrics;
pub mod rejections;
pub mod stats;
pub mod token;
pub mod trial;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::Notify;

use crate::catchup::CatchupHandle;
use crate::config::{Config, Secret};
use crate::store::models;
use crate::store::queries::{self, EventFilter, EventPage};
use crate::store::search::{SearchError, SearchQuery};
use crate::store::{Store, WriterHandle};
use crate::support::error::ApiError;
use crate::telemetry::metrics::Metrics;

/// Largest page `GET /api/events` and `GET /api/catch-up` return.
pub const MAX_LIMIT: usize = 500;

/// Page size when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;

/// What the admin handlers share.
#[derive(Clone)]
pub struct AdminState {
    pub config: Arc<Config>,
    pub store: Store,
    pub writer: WriterHandle,
    /// Wakes the dispatcher after a replay, so it starts within
    /// milliseconds rather than at its idle recheck.
    pub dispatch: Arc<Notify>,
    /// Wakes pull long-polls after a replay.
    pub pull: Arc<crate::delivery::pull::PullHub>,
    /// Each destination's circuit breaker, as the dispatcher last set it.
    pub board: Arc<crate::delivery::board::Board>,
    pub metrics: Arc<Metrics>,
    /// Runs a source's catch-up pass on demand.
    pub catchup: CatchupHandle,
}

/// `q=` as the listings take it: refused with its reason when it is no
/// query (see [`SearchQuery::parse`]) or search is off.
pub(crate) fn search_query(enabled: bool, q: &str) -> Result<SearchQuery, ApiError> {
    if !enabled {
        return Err(ApiError::bad_request(
            "search_disabled",
            "q: search is off in this server's config ([search] enabled = false)",
        ));
    }
    SearchQuery::parse(q).map_err(|e| ApiError::bad_request("invalid_filter", e.to_string()))
}

/// One page of events for the listings: a search on the search pool,
/// within its deadline, anything else on the read pool.
pub(crate) async fn list_events(store: &Store, filter: EventFilter) -> Result<EventPage, ApiError> {
    if filter.q.is_none() {
        return Ok(store
            .read(move |c| queries::list_events(c, &filter))
            .await?);
    }
    store
        .search(move |c| queries::list_events(c, &filter))
        .await
        .map_err(|e| match e {
            SearchError::TimedOut(_) => ApiError::GaveUp {
                reason: "search_timeout",
                detail: e.to_string(),
            },
            SearchError::Busy(_) => ApiError::GaveUp {
                reason: "search_busy",
                detail: e.to_string(),
            },
            SearchError::Failed(e) => ApiError::Internal(e),
        })
}

/// `state=` as the listings take it, parsed once here so that nothing
/// past the edge compares strings. With a destination the state is its
/// delivery's, which is never `stored` (an event without any is).
pub(crate) fn parse_state(
    value: Option<&str>,
    with_destination: bool,
) -> Result<Option<models::State>, ApiError> {
    let Some(text) = value else {
        return Ok(None);
    };
    let states: &[models::State] = if with_destination {
        &models::State::DELIVERY
    } else {
        &models::State::ALL
    };
    match models::State::parse(text) {
        Some(state) if states.contains(&state) => Ok(Some(state)),
        _ => {
            let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
            let with = if with_destination {
                " with destination"
            } else {
                ""
            };
            Err(ApiError::bad_request(
                "invalid_filter",
                format!("state: must be one of {}{with}", names.join(", ")),
            ))
        }
    }
}

impl AdminState {
    /// `q=` as the listings take it (see [`search_query`]).
    pub(crate) fn search_query(&self, q: &str) -> Result<SearchQuery, ApiError> {
        search_query(self.config.search.enabled, q)
    }

    /// The names of `source`'s configured destinations, in config order.
    fn destinations(&self, source: &str) -> Vec<String> {
        self.config
            .source(source)
            .map(|s| s.destinations.iter().map(|d| d.name.clone()).collect())
            .unwrap_or_default()
    }

    /// Every configured source with its destinations' names, for the counts.
    fn known(&self) -> Vec<(String, Vec<String>)> {
        self.config
            .sources
            .iter()
            .map(|s| (s.name.clone(), self.destinations(&s.name)))
            .collect()
    }
}

/// The SHA-256 of the token: requests are compared against it, so the
/// comparison takes the same time whatever the length of what was sent.
#[derive(Clone)]
struct TokenDigest([u8; 32]);

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The admin routes, each behind the token.
pub fn router(state: AdminState, token: &Secret) -> Router {
    let expected = TokenDigest(digest(token.expose().as_bytes()));
    let pages = dashboard::router(state.clone(), expected.clone());
    Router::new()
        .route("/api/events", get(events::list))
        .route("/api/events/{id}", get(events::show))
        .route("/api/events/{id}/replay", post(events::replay_one))
        .route("/api/replay", post(events::replay_many))
        .route("/api/try", post(trial::try_destination))
        .route("/api/stats", get(stats::stats))
        .route(
            "/api/destinations/{source}/{name}/pause",
            post(destinations::pause),
        )
        .route(
            "/api/destinations/{source}/{name}/resume",
            post(destinations::resume),
        )
        .route("/api/catch-up", get(catchup::catch_up_runs))
        .route("/api/rejections", get(rejections::list))
        .route(
            "/api/sources/{name}/catch-up",
            post(catchup::start_catch_up),
        )
        .route(
            "/api/sources/{name}/completeness",
            get(completeness::completeness),
        )
        .route("/metrics", get(metrics::metrics))
        .route_layer(middleware::from_fn_with_state(expected, require_token))
        .fallback(not_found)
        .with_state(state)
        .merge(pages)
}

/// `router`'s routes behind the admin token (the pull API's admin routes).
pub fn behind_token(router: Router, token: &Secret) -> Router {
    let expected = TokenDigest(digest(token.expose().as_bytes()));
    router.route_layer(middleware::from_fn_with_state(expected, require_token))
}

/// Lets a request through only with `Authorization: Bearer <token>`.
async fn require_token(
    State(expected): State<TokenDigest>,
    request: Request,
    next: Next,
) -> Response {
    if authorized(request.headers(), &expected) {
        next.run(request).await
    } else {
        ApiError::Unauthorized.into_response()
    }
}

fn authorized(headers: &axum::http::HeaderMap, expected: &TokenDigest) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let Some((scheme, token)) = value.as_bytes().split_first_chunk::<7>() else {
        return false;
    };
    // RFC 9110: the scheme is case-insensitive; one space follows it.
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return false;
    }
    token_matches(token.trim_ascii(), expected)
}

/// Whether `sent` is the admin token, compared in constant time (on
/// digests, so its length does not show either). The dashboard's login
/// uses this too.
fn token_matches(sent: &[u8], expected: &TokenDigest) -> bool {
    digest(sent).ct_eq(&expected.0).into()
}

async fn not_found() -> ApiError {
    ApiError::NotFound("not_found")
}

/// Parses `limit`: [`DEFAULT_LIMIT`] when absent, 1..=[`MAX_LIMIT`] otherwise.
fn parse_limit(value: Option<&str>) -> Result<usize, ApiError> {
    let Some(v) = value else {
        return Ok(DEFAULT_LIMIT);
    };
    match v.parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Ok(_) => Err(ApiError::bad_request(
            "invalid_filter",
            format!("limit: must be between 1 and {MAX_LIMIT}"),
        )),
        Err(_) => Err(ApiError::bad_request(
            "invalid_filter",
            "limit: must be a whole number",
        )),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::*;

    fn with_auth(value: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_bytes(value).unwrap(),
        );
        h
    }

    #[test]
    fn only_the_bearer_scheme_with_the_exact_token_passes() {
        let expected = TokenDigest(digest(b"s3cret-token-value"));
        assert!(authorized(
            &with_auth(b"Bearer s3cret-token-value"),
            &expected
        ));
        assert!(authorized(
            &with_auth(b"bearer s3cret-token-value"),
            &expected
        ));
        for bad in [
            &b"Bearer s3cret-token-valuE"[..],
            b"Bearer s3cret-token-value-and-more",
            b"Bearer ",
            b"Basic czNjcmV0LXRva2VuLXZhbHVl",
            b"s3cret-token-value",
            b"Bearers3cret-token-value",
        ] {
            assert!(
                !authorized(&with_auth(bad), &expected),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(!authorized(&HeaderMap::new(), &expected));
    }

    #[test]
    fn limits_default_and_stay_in_range() {
        assert_eq!(parse_limit(None).unwrap(), DEFAULT_LIMIT);
        assert_eq!(parse_limit(Some("500")).unwrap(), 500);
        for bad in ["0", "501", "ten", "-1"] {
            assert!(parse_limit(Some(bad)).is_err(), "{bad}");
        }
    }
}
