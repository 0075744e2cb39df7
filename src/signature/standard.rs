//! Standard Webhooks: `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `webhook-id + "." + webhook-timestamp + "." + body`.
//!
//! Spec: <https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md>.
//! hookbox signs its url deliveries and JSON alerts this way ([`signature`]),
//! so the user's app can verify hookbox with any Standard Webhooks (or
//! Svix) library, and `crate::ingress::receive::standard` verifies senders with
//! [`verify`]. The key is the base64-decoded part of a `whsec_` secret;
//! decoding it is config's (`Secret::standard_key`), since validation names
//! a bad one. Which headers hold the id and timestamp, and the timestamp
//! window, are the receiver's to decide.

use base64::Engine as _;

use super::{MAX_CANDIDATES, any_signature_matches, hmac_sha256};

/// The `webhook-signature` value for one request: `v1,<base64>`.
///
/// The result is sensitive enough to keep out of logs and error excerpts
/// (it is a valid signature for this body); callers only put it in the
/// header.
pub fn signature(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let mac = hmac_sha256(key, &[msg_id.as_bytes(), b".", ts.as_bytes(), b".", body]);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac)
    )
}

/// Why a `webhook-signature` value did not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// No usable `v1` entry, or more than [`MAX_CANDIDATES`].
    Malformed,
    /// Well-formed, but no key signed this id, timestamp and body.
    Invalid,
}

/// Checks a `webhook-signature` value against `keys`. Every `v1` entry is
/// tried, since senders sign with old and new keys during rotation; `v1a`,
/// `v2` and other labels are skipped, so a value without a usable `v1` is
/// [`Mismatch::Malformed`].
pub fn verify(
    keys: &[Vec<u8>],
    id: &[u8],
    timestamp: &[u8],
    value: &[u8],
    body: &[u8],
) -> Result<(), Mismatch> {
    let candidates: Vec<Vec<u8>> = value
        .split(|&b| b == b' ')
        .filter_map(|entry| entry.strip_prefix(b"v1,"))
        .filter_map(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .filter(|sig| !sig.is_empty())
        .collect();
    if candidates.is_empty() || candidates.len() > MAX_CANDIDATES {
        return Err(Mismatch::Malformed);
    }
    let parts: [&[u8]; 5] = [id, b".", timestamp, b".", body];
    if any_signature_matches(keys, &parts, &candidates) {
        Ok(())
    } else {
        Err(Mismatch::Invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Go, JavaScript and Python reference libraries' test vector: the
    // key is the base64 after `whsec_` in `whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw`.
    const KEY_B64: &str = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    // The Rust reference library's test vector (`whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD`).
    const RUST_KEY_B64: &str = "C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const RUST_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const RUST_TS: i64 = 1_649_367_553;
    const RUST_BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const RUST_SIG: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    fn key() -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(KEY_B64)
            .unwrap()
    }

    fn check(value: &str, body: &[u8]) -> Result<(), Mismatch> {
        verify(
            &[key()],
            ID.as_bytes(),
            b"1614265330",
            value.as_bytes(),
            body,
        )
    }

    #[test]
    fn signing_reproduces_the_reference_vector_and_verifying_accepts_it() {
        assert_eq!(signature(&key(), ID, TS, BODY), SIG);
        assert_eq!(check(SIG, BODY), Ok(()));
        assert_eq!(check(&format!("v2,AAAA {SIG}"), BODY), Ok(()));
        let rust_key = base64::engine::general_purpose::STANDARD
            .decode(RUST_KEY_B64)
            .unwrap();
        assert_eq!(signature(&rust_key, RUST_ID, RUST_TS, RUST_BODY), RUST_SIG);
    }

    #[test]
    fn a_changed_body_or_an_unusable_value_is_refused() {
        assert_eq!(check(SIG, b"{}"), Err(Mismatch::Invalid));
        for bad in ["", "v1,", "v1a,AAAA", &SIG[3..]] {
            assert_eq!(check(bad, BODY), Err(Mismatch::Malformed), "{bad:?}");
        }
        let many = [SIG; MAX_CANDIDATES + 1].join(" ");
        assert_eq!(check(&many, BODY), Err(Mismatch::Malformed));
    }
}
