//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>` over
//! `ts + ":" + body`.
//!
//! Spec: <https://developer.paddle.com/webhooks/signature-verification>,
//! checked against `@paddle/paddle-node-sdk` 3.10.0
//! (`notifications/helpers/webhooks-validator`). The key is the
//! notification destination's secret (`pdl_ntfset_…`) as UTF-8 bytes.
//!
//! Tolerance: the source's window, by default 5 s, the SDKs' own
//! `MAX_VALID_TIME_DIFFERENCE`, but in both directions (the Node SDK only
//! refuses old timestamps). Where the SDK is lenient we are strict: `ts`
//! must be plain digits (the SDK's `parseInt` takes `123abc`), a second
//! `ts` is malformed, and every `h1` is tried rather than only the last
//! (Paddle signs once per active secret while one is rotated), up to
//! [`MAX_CANDIDATES`].
//!
//! The dedupe key is the body's `event_id` (`evt_…`), which Paddle keeps
//! across its retries; the event type is `event_type`.

use std::time::Duration;

use serde_json::Value;

use crate::config::{KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret};

use super::payload::{Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned, tolerance_secs};
use super::verify::{
    MAX_CANDIDATES, VerifyError, any_signature_matches, check_timestamp, decode_hex, header,
    utf8_keys,
};

pub struct Paddle {
    keys: Vec<Vec<u8>>,
    tolerance_secs: i64,
}

/// Provider headers stored with the event (never the signature). Paddle
/// puts everything else in the body.
pub const KEEP_HEADERS: &[&str] = &["user-agent"];

impl Paddle {
    /// The key is the destination's secret key as UTF-8 bytes.
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Paddle {
            keys: utf8_keys(secrets),
            tolerance_secs,
        }
    }

    pub fn verify(&self, req: &Inbound, now: i64) -> Result<(), VerifyError> {
        let value = header(req.headers, "paddle-signature").ok_or(VerifyError::MissingSignature)?;
        let mut timestamp = None;
        let mut candidates = Vec::new();
        for item in value.split(|&b| b == b';') {
            let Some(eq) = item.iter().position(|&b| b == b'=') else {
                continue;
            };
            match (&item[..eq], &item[eq + 1..]) {
                (b"ts", _) if timestamp.is_some() => return Err(VerifyError::MalformedSignature),
                (b"ts", ts) => timestamp = Some(ts),
                (b"h1", hex) => {
                    let sig = decode_hex(hex).filter(|sig| sig.len() == 32);
                    candidates.push(sig.ok_or(VerifyError::MalformedSignature)?);
                }
                _ => {}
            }
        }
        let ts = timestamp.ok_or(VerifyError::MissingTimestamp)?;
        if candidates.is_empty() || candidates.len() > MAX_CANDIDATES {
            return Err(VerifyError::MalformedSignature);
        }
        check_timestamp(ts, now, self.tolerance_secs)?;
        if any_signature_matches(&self.keys, &[ts, b":", req.body], &candidates) {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        let json = req.json().ok_or(IdentifyError::InvalidJson)?;
        let text = |key: &str| json.get(key).and_then(Value::as_str);
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id(text("event_id"))?,
            event_type: text("event_type")
                .filter(|t| !t.is_empty())
                .map(str::to_owned),
        }))
    }
}

const FACTS: KindFacts = KindFacts {
    name: "paddle",
    default_tolerance: Duration::from_secs(5),
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Paddle {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Paddle::new(&cfg.secrets, tolerance_secs(cfg))
    }

    fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        Paddle::verify(self, req, now_ms / 1000)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Paddle::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const SECRET: &str = "pdl_ntfset_01hookboxtest_secret";
    const TS: i64 = 1_700_000_000;
    const BODY: &[u8] = br#"{"event_id":"evt_01h","event_type":"transaction.completed","data":{}}"#;
    // Computed once, outside the code under test:
    // python3 -c 'import hmac,hashlib; b=b"1700000000:"+BODY;
    //   print(hmac.new(b"pdl_ntfset_01hookboxtest_secret",b,hashlib.sha256).hexdigest())'
    const SIG: &str = "cbdc6068d38828b47ff9f6d18d09118af471748f9e97632f7080cf1874abd727";

    const INVALID: Result<(), VerifyError> = Err(VerifyError::InvalidSignature);
    const MALFORMED: Result<(), VerifyError> = Err(VerifyError::MalformedSignature);

    fn paddle(secrets: &[&str]) -> Paddle {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Paddle::new(&secrets, 5)
    }

    fn sign(secret: &str, ts: &str, body: &[u8]) -> String {
        hex::encode(super::super::verify::hmac_sha256(
            secret.as_bytes(),
            &[ts.as_bytes(), b":", body],
        ))
    }

    fn verify(secrets: &[&str], value: &str, body: &[u8], now: i64) -> Result<(), VerifyError> {
        let mut h = HeaderMap::new();
        h.insert("paddle-signature", HeaderValue::from_str(value).unwrap());
        paddle(secrets).verify(&Inbound::new(&h, body), now)
    }

    fn check(value: &str) -> Result<(), VerifyError> {
        verify(&[SECRET], value, BODY, TS)
    }

    #[test]
    fn the_signing_helper_matches_an_independent_hmac() {
        assert_eq!(sign(SECRET, "1700000000", BODY), SIG);
    }

    #[test]
    fn a_signature_over_ts_colon_body_verifies() {
        let sig = sign(SECRET, "1700000000", BODY);
        assert_eq!(check(&format!("ts={TS};h1={sig}")), Ok(()));
        // Order does not matter and unknown elements are skipped.
        assert_eq!(check(&format!("h1={sig};x=1;ts={TS}")), Ok(()));
    }

    #[test]
    fn tampered_body_wrong_secret_changed_ts_and_dot_separator_fail() {
        let sig = sign(SECRET, "1700000000", BODY);
        let value = format!("ts={TS};h1={sig}");
        assert_eq!(verify(&[SECRET], &value, b"{}", TS), INVALID);
        assert_eq!(verify(&["pdl_ntfset_wrong"], &value, BODY, TS), INVALID);
        assert_eq!(check(&format!("ts={};h1={sig}", TS + 1)), INVALID);
        let dot = hex::encode(super::super::verify::hmac_sha256(
            SECRET.as_bytes(),
            &[b"1700000000.", BODY],
        ));
        assert_eq!(check(&format!("ts={TS};h1={dot}")), INVALID);
        assert_eq!(check(&format!("ts={TS};h1={SIG}")), Ok(()));
    }

    #[test]
    fn timestamps_pass_at_five_seconds_and_fail_past_them_either_way() {
        let sig = sign(SECRET, "1700000000", BODY);
        let value = format!("ts={TS};h1={sig}");
        assert_eq!(verify(&[SECRET], &value, BODY, TS + 5), Ok(()));
        assert_eq!(verify(&[SECRET], &value, BODY, TS - 5), Ok(()));
        let stale = |age_secs| Err(VerifyError::TimestampOutOfTolerance { age_secs });
        assert_eq!(verify(&[SECRET], &value, BODY, TS + 6), stale(6));
        assert_eq!(verify(&[SECRET], &value, BODY, TS - 6), stale(-6));
    }

    #[test]
    fn rotation_tries_every_h1_and_every_secret() {
        let new = sign(SECRET, "1700000000", BODY);
        let old = sign("pdl_ntfset_old", "1700000000", BODY);
        assert_eq!(check(&format!("ts={TS};h1={old};h1={new}")), Ok(()));
        let value = format!("ts={TS};h1={old}");
        assert_eq!(
            verify(&[SECRET, "pdl_ntfset_old"], &value, BODY, TS),
            Ok(())
        );
    }

    #[test]
    fn malformed_and_missing_parts_are_rejected() {
        let sig = sign(SECRET, "1700000000", BODY);
        assert_eq!(
            check(&format!("h1={sig}")),
            Err(VerifyError::MissingTimestamp)
        );
        assert_eq!(check(&format!("ts={TS}")), MALFORMED);
        assert_eq!(check(&format!("ts={TS};h1={}", &sig[..62])), MALFORMED);
        assert_eq!(check(&format!("ts={TS};h1=zz{}", &sig[2..])), MALFORMED);
        assert_eq!(check(&format!("ts={TS};ts={TS};h1={sig}")), MALFORMED);
        assert_eq!(check(&format!("ts={TS},h1={sig}")), MALFORMED);
        for ts in [format!("{TS}abc"), String::new(), format!("-{TS}")] {
            let result = check(&format!("ts={ts};h1={sig}"));
            assert_eq!(result, Err(VerifyError::MalformedTimestamp), "{ts:?}");
        }
        let none = HeaderMap::new();
        let missing = paddle(&[SECRET]).verify(&Inbound::new(&none, BODY), TS);
        assert_eq!(missing, Err(VerifyError::MissingSignature));
    }

    #[test]
    fn identity_is_the_event_id_and_type_from_the_body() {
        let identify =
            |body: &[u8]| paddle(&[SECRET]).identify(&Inbound::new(&HeaderMap::new(), body));
        assert_eq!(
            identify(BODY),
            Ok(Identified::Event(Identity {
                delivery_id: "evt_01h".into(),
                event_type: Some("transaction.completed".into()),
            }))
        );
        assert_eq!(identify(b"ts=1"), Err(IdentifyError::InvalidJson));
        assert_eq!(
            identify(br#"{"notification_id":"ntf_1"}"#),
            Err(IdentifyError::MissingDeliveryId)
        );
    }
}
