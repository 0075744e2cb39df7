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

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::receive::payload::IdentifyError;
use crate::receive::verify::VerifyError;

/// Seconds a client is asked to wait after a 503.
pub const RETRY_AFTER_SECS: u32 = 5;

#[derive(Debug)]
pub enum ApiError {
    /// 401: the signature or its timestamp did not check out.
    Unverified(VerifyError),
    /// 400: signed correctly but not storable (no id, bad JSON).
    Unidentified(IdentifyError),
    /// 404: no enabled source by that name.
    UnknownSource,
    /// 413: the body is over the source's limit.
    BodyTooLarge,
    /// 408: the client did not send its body in time.
    BodyTimeout,
    /// 400: the connection broke while the body was read.
    BodyUnreadable,
    /// 503: nothing was stored; try again.
    Unavailable,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unverified(_) => StatusCode::UNAUTHORIZED,
            ApiError::Unidentified(_) | ApiError::BodyUnreadable => StatusCode::BAD_REQUEST,
            ApiError::UnknownSource => StatusCode::NOT_FOUND,
            ApiError::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::Unverified(e) => e.reason(),
            ApiError::Unidentified(e) => e.reason(),
            ApiError::UnknownSource => "unknown_source",
            ApiError::BodyTooLarge => "body_too_large",
            ApiError::BodyTimeout => "body_timeout",
            ApiError::BodyUnreadable => "body_unreadable",
            ApiError::Unavailable => "unavailable",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(json!({ "error": self.reason() }))).into_response();
        match self {
            ApiError::Unavailable => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            }
            // The rest of the body may still be on the wire; close rather
            // than read it to find the next request.
            ApiError::BodyTooLarge | ApiError::BodyTimeout | ApiError::BodyUnreadable => {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}
