//! The answers hookbox gives when it does not store an event.
//!
//! Policy: every refusal has a status and a short machine-readable reason in
//! `{"error": "<reason>"}`. Client errors (bad signature, unknown source,
//! oversize body) are expected traffic on a public endpoint and are not
//! logged as errors. A reason never contains a secret, an expected
//! signature or the body. `503` always carries `Retry-After`: it means
//! "nothing was stored, send it again", which every provider's retry
//! machinery understands. There is no 500 for bad input: an unexpected
//! internal failure is answered 503 too, because the event was not stored
//! and a retry is the right response to it.
//!
//! The admin listener's answers use the same shape, with an optional
//! `"detail"` naming the parameter at fault (`{"error": "invalid_filter",
//! "detail": "state: ..."}`). There an internal failure (a read that
//! failed) is a 500: nothing is lost by it and nobody should retry blindly.
//! It is logged once, with its cause chain, and answered opaquely.
//!
//! This module imports nothing of hookbox: a variant carries its reason
//! (and the facts an explanation needs), and the module that knows the
//! cause converts into it (`crate::ingress::receive` turns its `VerifyError` and
//! `IdentifyError` into [`ApiError::Unverified`] and
//! [`ApiError::Unidentified`]).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Seconds a client is asked to wait after a 503.
pub const RETRY_AFTER_SECS: u32 = 5;

#[derive(Debug)]
pub enum ApiError {
    /// 401: the signature or its timestamp did not check out; `reason`
    /// says which part (never what was expected). `age_secs`: how old a
    /// timestamp out of tolerance was (negative: ahead of our clock), for
    /// the operator's explanation, never for the answer.
    Unverified {
        reason: &'static str,
        age_secs: Option<i64>,
    },
    /// 400: signed correctly but not storable (no id, bad JSON).
    Unidentified(&'static str),
    /// 404: no enabled source by that name.
    UnknownSource,
    /// 413: the body is over the source's limit.
    BodyTooLarge,
    /// 408: the client did not send its body in time.
    BodyTimeout,
    /// 400: the connection broke while the body was read.
    BodyUnreadable,
    /// 403: the client address is not in the source's `allow_ips`.
    ForbiddenAddress,
    /// 400: a trusted proxy's forwarding header names no client; the
    /// reason says why (`crate::edge::client_addr::Unreadable`).
    UnknownClient(&'static str),
    /// 429: the client address keeps failing verification and is blocked.
    TooManyFailures { retry_after_secs: u64 },
    /// 429: the client holds as many pull long-polls as it may.
    TooManyLongPolls,
    /// 503: nothing was stored; try again.
    Unavailable,
    /// 503 on the admin listener: the request was given up on (a search
    /// past its deadline); `detail` says why and what to change.
    GaveUp {
        reason: &'static str,
        detail: String,
    },
    /// 401 on the admin listener: no bearer token, or the wrong one.
    Unauthorized,
    /// 400: bad admin input; `detail` names the parameter and what is wrong.
    BadRequest {
        reason: &'static str,
        detail: String,
    },
    /// 404 on the admin listener (unknown event, source or route).
    NotFound(&'static str),
    /// 409: the request is valid but the target's state refuses it.
    Conflict {
        reason: &'static str,
        detail: String,
    },
    /// 500 on the admin listener: logged once, answered opaquely.
    Internal(anyhow::Error),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unverified { .. } => StatusCode::UNAUTHORIZED,
            ApiError::Unidentified(_) | ApiError::BodyUnreadable | ApiError::UnknownClient(_) => {
                StatusCode::BAD_REQUEST
            }
            ApiError::UnknownSource => StatusCode::NOT_FOUND,
            ApiError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::ForbiddenAddress => StatusCode::FORBIDDEN,
            ApiError::TooManyFailures { .. } | ApiError::TooManyLongPolls => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::Unavailable | ApiError::GaveUp { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::Unverified { reason, .. } => reason,
            ApiError::UnknownSource => "unknown_source",
            ApiError::BodyTooLarge => "body_too_large",
            ApiError::BodyTimeout => "body_timeout",
            ApiError::BodyUnreadable => "body_unreadable",
            ApiError::ForbiddenAddress => "forbidden_address",
            ApiError::TooManyFailures { .. } => "too_many_failures",
            ApiError::TooManyLongPolls => "too_many_long_polls",
            ApiError::Unavailable => "unavailable",
            ApiError::Unauthorized => "unauthorized",
            ApiError::BadRequest { reason, .. }
            | ApiError::Conflict { reason, .. }
            | ApiError::GaveUp { reason, .. } => reason,
            ApiError::NotFound(reason)
            | ApiError::UnknownClient(reason)
            | ApiError::Unidentified(reason) => reason,
            ApiError::Internal(_) => "internal",
        }
    }

    /// A 400 for the admin API: `reason` is the machine-readable kind,
    /// `detail` what a person needs to fix the request.
    pub fn bad_request(reason: &'static str, detail: impl Into<String>) -> Self {
        ApiError::BadRequest {
            reason,
            detail: detail.into(),
        }
    }

    pub fn conflict(reason: &'static str, detail: impl Into<String>) -> Self {
        ApiError::Conflict {
            reason,
            detail: detail.into(),
        }
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        ApiError::Internal(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match &self {
            ApiError::BadRequest { detail, .. }
            | ApiError::Conflict { detail, .. }
            | ApiError::GaveUp { detail, .. } => {
                json!({ "error": self.reason(), "detail": detail })
            }
            _ => json!({ "error": self.reason() }),
        };
        let mut response = (self.status(), Json(body)).into_response();
        match self {
            ApiError::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "an admin request failed");
            }
            ApiError::Unauthorized => {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::Unavailable | ApiError::GaveUp { .. } | ApiError::TooManyLongPolls => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            }
            ApiError::TooManyFailures { retry_after_secs } => {
                let headers = response.headers_mut();
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            // The rest of the body may still be on the wire (or, for a
            // refused or unknown address, was never read); close rather
            // than read it to find the next request.
            ApiError::BodyTooLarge
            | ApiError::BodyTimeout
            | ApiError::BodyUnreadable
            | ApiError::ForbiddenAddress
            | ApiError::UnknownClient(_) => {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}
