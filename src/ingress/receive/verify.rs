//! Building blocks every provider verifier shares: strict timestamp
//! parsing, header and key decoding, and the error a failed verification
//! reports. The cryptography (the HMAC, the length-checked constant-time
//! comparison) is `crate::signature`'s, re-exported here for the provider
//! files.
//!
//! Provider files (`github.rs`, `stripe.rs`, ...) own their header names and
//! signed-string layout.

use axum::http::HeaderMap;
use sha2::Sha256;

use crate::config::Secret;
pub use crate::signature::{
    MAX_CANDIDATES, any_key_matches, any_signature_matches, ct_eq, hmac_sha256,
};
use crate::support::error::ApiError;

/// Why a request failed verification. The reason string goes into the 401
/// body: it tells an operator which part is wrong (clock skew versus a wrong
/// secret) without revealing anything about the expected signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing_signature")]
    MissingSignature,
    #[error("malformed_signature")]
    MalformedSignature,
    #[error("invalid_signature")]
    InvalidSignature,
    #[error("missing_timestamp")]
    MissingTimestamp,
    #[error("malformed_timestamp")]
    MalformedTimestamp,
    /// `age_secs`: how old the timestamp was (negative: ahead of our
    /// clock), for the operator's explanation; never in the answer.
    #[error("timestamp_out_of_tolerance")]
    TimestampOutOfTolerance { age_secs: i64 },
}

impl VerifyError {
    /// The short machine-readable reason used in response bodies and metrics.
    pub fn reason(self) -> &'static str {
        match self {
            VerifyError::MissingSignature => "missing_signature",
            VerifyError::MalformedSignature => "malformed_signature",
            VerifyError::InvalidSignature => "invalid_signature",
            VerifyError::MissingTimestamp => "missing_timestamp",
            VerifyError::MalformedTimestamp => "malformed_timestamp",
            VerifyError::TimestampOutOfTolerance { .. } => "timestamp_out_of_tolerance",
        }
    }
}

impl From<VerifyError> for ApiError {
    fn from(e: VerifyError) -> Self {
        let age_secs = match e {
            VerifyError::TimestampOutOfTolerance { age_secs } => Some(age_secs),
            _ => None,
        };
        ApiError::Unverified {
            reason: e.reason(),
            age_secs,
        }
    }
}

/// The keys of schemes that use each secret's UTF-8 bytes as-is.
pub fn utf8_keys(secrets: &[Secret]) -> Vec<Vec<u8>> {
    secrets
        .iter()
        .map(|s| s.expose().as_bytes().to_vec())
        .collect()
}

/// Decodes lowercase or uppercase hex; `None` for anything else.
pub fn decode_hex(s: &[u8]) -> Option<Vec<u8>> {
    hex::decode(s).ok()
}

/// Decodes standard base64 with padding, strictly; `None` for anything else.
pub fn decode_base64(s: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// The delivery id of a request that carries none: `sha256:` + lowercase hex
/// SHA-256 of the body. It dedupes exact re-sends only, since any change in
/// the body (or a provider that re-renders it) yields a new id.
pub fn body_hash_id(body: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(Sha256::digest(body)))
}

/// Parses a unix-seconds timestamp made of ASCII digits only (no sign, no
/// spaces, no `123abc`) and checks it lies within `tolerance_secs` of `now`
/// in either direction. Exactly `tolerance_secs` away still passes, as in
/// the providers' SDKs.
pub fn check_timestamp(raw: &[u8], now: i64, tolerance_secs: i64) -> Result<i64, VerifyError> {
    if raw.is_empty() || raw.len() > 12 || !raw.iter().all(u8::is_ascii_digit) {
        return Err(VerifyError::MalformedTimestamp);
    }
    let ts: i64 = std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(VerifyError::MalformedTimestamp)?;
    if (now - ts).abs() > tolerance_secs {
        return Err(VerifyError::TimestampOutOfTolerance { age_secs: now - ts });
    }
    Ok(ts)
}

/// The raw bytes of a header, or `None` when absent. Header names are
/// case-insensitive (the `HeaderMap` lowercases them); values are not trimmed.
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a [u8]> {
    headers.get(name).map(|v| v.as_bytes())
}

/// A header as UTF-8 text, or `None` when absent or not valid UTF-8.
pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    header(headers, name).and_then(|v| std::str::from_utf8(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_hash_id_is_prefixed_lowercase_hex_sha256() {
        // python3 -c 'import hashlib; print(hashlib.sha256(b"abc").hexdigest())'
        assert_eq!(
            body_hash_id(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn timestamps_must_be_plain_digits_within_tolerance() {
        assert_eq!(check_timestamp(b"1000", 1000, 300), Ok(1000));
        assert_eq!(check_timestamp(b"700", 1000, 300), Ok(700));
        assert_eq!(check_timestamp(b"1300", 1000, 300), Ok(1300));
        assert_eq!(
            check_timestamp(b"699", 1000, 300),
            Err(VerifyError::TimestampOutOfTolerance { age_secs: 301 })
        );
        assert_eq!(
            check_timestamp(b"1301", 1000, 300),
            Err(VerifyError::TimestampOutOfTolerance { age_secs: -301 })
        );
        for bad in [
            &b""[..],
            b"12a",
            b"-5",
            b" 1000",
            b"1000 ",
            b"1e3",
            b"99999999999999",
        ] {
            assert_eq!(
                check_timestamp(bad, 1000, 300),
                Err(VerifyError::MalformedTimestamp),
                "{bad:?}"
            );
        }
    }
}
