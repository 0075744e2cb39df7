//! What a refused request leaves behind: its record for the rejections
//! table (`crate::store::rejections`), pushed without waiting.
//!
//! Built only on a refusal, so valid requests pay nothing for it. What is
//! kept is what an operator needs to see why, and nothing a client sent
//! that could be a secret: header names but no values, the body's size and
//! content type but no byte of it, counts and limits but no signature.

use std::net::IpAddr;

use axum::http::{HeaderMap, header};

use super::Source;
use super::verify::VerifyError;
use crate::store::WriterHandle;
use crate::store::rejections::{Detail, MAX_HEADER_NAMES, MAX_TEXT, Rejection};
use crate::support::clock;
use crate::support::error::ApiError;

/// A refusal on its way out: the answer, and what the record needs that
/// the answer does not say.
#[derive(Debug)]
pub(super) struct Refusal {
    pub error: ApiError,
    /// Bytes read, or declared when the body was not read.
    pub body_bytes: Option<u64>,
    /// The finer cause behind a reason that covers several (a 503).
    pub cause: Option<&'static str>,
}

impl Refusal {
    pub fn new(error: ApiError, body_bytes: Option<u64>) -> Self {
        Refusal {
            error,
            body_bytes,
            cause: None,
        }
    }

    pub fn because(mut self, cause: &'static str) -> Self {
        self.cause = Some(cause);
        self
    }
}

impl From<ApiError> for Refusal {
    fn from(error: ApiError) -> Self {
        Refusal::new(error, None)
    }
}

/// What a request showed before it was refused, and where to record it.
pub(super) struct Recorder<'a> {
    pub writer: &'a WriterHandle,
    /// The source as named in the URL.
    pub name: &'a str,
    pub source: Option<&'a Source>,
    pub client: Option<IpAddr>,
    pub headers: &'a HeaderMap,
    /// `server.body_timeout`, for a 408's explanation.
    pub body_timeout_secs: u64,
}

impl Recorder<'_> {
    /// Records `refusal` with the facts behind its reason.
    pub fn refused(&self, refusal: &Refusal) {
        let e = &refusal.error;
        let mut detail = Detail {
            cause: refusal.cause.map(str::to_owned),
            ..Detail::default()
        };
        match e {
            ApiError::Unverified { reason, .. }
                if *reason == VerifyError::InvalidSignature.reason() =>
            {
                detail.secrets = self.source.map(|s| s.secrets);
            }
            ApiError::Unverified {
                age_secs: Some(age_secs),
                ..
            } => {
                detail.age_secs = Some(*age_secs);
                detail.tolerance_secs = self.source.map(|s| s.tolerance_secs);
            }
            ApiError::BodyTooLarge => detail.max_body_bytes = self.source.map(|s| s.max_body_bytes),
            ApiError::BodyTimeout => detail.body_timeout_secs = Some(self.body_timeout_secs),
            ApiError::TooManyFailures { retry_after_secs } => {
                detail.retry_after_secs = Some(*retry_after_secs);
            }
            _ => {}
        }
        self.record(e.status().as_u16(), e.reason(), refusal.body_bytes, detail);
    }

    /// Records a refusal that is not an [`ApiError`] (the handshake's).
    pub fn record(
        &self,
        status: u16,
        reason: &'static str,
        body_bytes: Option<u64>,
        detail: Detail,
    ) {
        self.writer.reject(Rejection {
            at: clock::now_ms(),
            source: cut(self.name),
            client: self.client,
            status,
            reason,
            header_names: header_names(self.headers),
            body_bytes,
            content_type: self
                .headers
                .get(header::CONTENT_TYPE)
                .map(|v| cut(&String::from_utf8_lossy(v.as_bytes()))),
            detail,
        });
    }
}

/// The names of the headers sent, lowercase, each once, at most
/// [`MAX_HEADER_NAMES`] of them.
fn header_names(headers: &HeaderMap) -> Vec<String> {
    headers
        .keys()
        .take(MAX_HEADER_NAMES)
        .map(|name| cut(name.as_str()))
        .collect()
}

/// `text` cut to [`MAX_TEXT`] bytes, at a character boundary.
fn cut(text: &str) -> String {
    if text.len() <= MAX_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn names_are_kept_once_and_values_never() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-hub-signature-256",
            HeaderValue::from_static("sha256=abc"),
        );
        h.append("x-dup", HeaderValue::from_static("1"));
        h.append("x-dup", HeaderValue::from_static("2"));
        let names = header_names(&h);
        assert_eq!(names.len(), 2);
        assert!(names.contains(&"x-hub-signature-256".to_owned()));
        assert!(!names.iter().any(|n| n.contains("abc")));
    }

    #[test]
    fn long_text_is_cut_at_a_character_boundary() {
        assert_eq!(cut("short"), "short");
        let long = "é".repeat(MAX_TEXT);
        let cut = cut(&long);
        assert!(cut.len() <= MAX_TEXT && cut.chars().all(|c| c == 'é'));
    }
}
