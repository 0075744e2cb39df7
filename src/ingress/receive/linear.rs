//! Linear: `Linear-Signature: <hex>`, HMAC-SHA256 of the raw body, with
//! freshness from `webhookTimestamp` (unix **milliseconds**) inside the
//! signed body.
//!
//! Spec: <https://linear.app/developers/webhooks#securing-webhooks>, and
//! `LinearWebhookClient.verify` in `@linear/sdk` (98.0.0), which this
//! follows: the key is the signing secret's UTF-8 bytes; the header is the
//! bare lowercase hex digest, compared as text (so uppercase hex, which the
//! SDK refuses, is refused here too); then `webhookTimestamp` must be
//! present, a number, and within the window of now. The legacy
//! `Linear-Timestamp` header is ignored, as by the SDK: it is not signed.
//!
//! Tolerance: the source's window, by default 60 s, the SDK's own, in
//! both directions, compared in milliseconds. The timestamp must be a
//! whole number (the SDK also takes fractions; Linear sends integers).
//!
//! Identification: the dedupe key is `sha256:` + the hex SHA-256 of the
//! signed body without its `webhookTimestamp` ([`payload_id`]); the event
//! type is the body's `type` and `action` (`Issue.create`), else
//! `Linear-Event`. The `Linear-Delivery` header is not signed: keyed on
//! it, a captured request re-posted within the window with a new value
//! was a new event. The body holds no signed id of the delivery
//! (`webhookId` names the webhook, the same for all it sends), and keying
//! on the whole body would make each of Linear's retries a new event: a
//! retry comes a minute or more later, so with a new `webhookTimestamp`
//! (the old one would fail the window) and a new signature, but the same
//! payload. `Linear-Delivery` is kept with the event's headers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};

use crate::config::{KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret};

use super::payload::{Identified, IdentifyError, Identity, Inbound};
use super::provider::{Provider, owned, tolerance_secs};
use super::verify::{VerifyError, ct_eq, header, header_str, hmac_sha256, utf8_keys};

pub struct Linear {
    keys: Vec<Vec<u8>>,
    tolerance_ms: i64,
}

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &[
    "linear-delivery",
    "linear-event",
    "linear-timestamp",
    "user-agent",
];

impl Linear {
    /// The key is the signing secret's UTF-8 bytes.
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Linear {
            keys: utf8_keys(secrets),
            tolerance_ms: tolerance_secs.saturating_mul(1000),
        }
    }

    pub fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        let sig = header(req.headers, "linear-signature").ok_or(VerifyError::MissingSignature)?;
        if sig.len() != 64 || !sig.iter().all(u8::is_ascii_hexdigit) {
            return Err(VerifyError::MalformedSignature);
        }
        // Every key is tried even after a match: the time taken does not
        // tell which secret (old or new) signed.
        let mut matched = false;
        for key in &self.keys {
            let expected = hex::encode(hmac_sha256(key, &[req.body]));
            matched |= ct_eq(expected.as_bytes(), sig);
        }
        if !matched {
            return Err(VerifyError::InvalidSignature);
        }
        let ts = match req.json().map(|json| json.get("webhookTimestamp")) {
            None | Some(None | Some(Value::Null)) => return Err(VerifyError::MissingTimestamp),
            Some(Some(Value::Number(n))) => n.as_i64().ok_or(VerifyError::MalformedTimestamp)?,
            Some(Some(_)) => return Err(VerifyError::MalformedTimestamp),
        };
        if now_ms.saturating_sub(ts).saturating_abs() > self.tolerance_ms {
            let age_secs = now_ms.saturating_sub(ts) / 1000;
            return Err(VerifyError::TimestampOutOfTolerance { age_secs });
        }
        Ok(())
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        let text = |key: &str| req.json().and_then(|j| j.get(key)).and_then(Value::as_str);
        let event_type = match (text("type"), text("action")) {
            (Some(kind), Some(action)) => Some(format!("{kind}.{action}")),
            _ => header_str(req.headers, "linear-event")
                .or(text("type"))
                .map(str::to_owned),
        };
        Ok(Identified::Event(Identity {
            delivery_id: payload_id(req.body)?,
            event_type,
        }))
    }
}

/// The dedupe key of a verified body: `sha256:` + the hex SHA-256 of the
/// body re-written as a JSON object of its top-level members but
/// `webhookTimestamp`, sorted by name, each value exactly as sent
/// (`{"action":"create","data":{..},..}`). The timestamp is the one part a
/// retry of Linear's changes.
fn payload_id(body: &[u8]) -> Result<String, IdentifyError> {
    let members: BTreeMap<String, &RawValue> =
        serde_json::from_slice(body).map_err(|_| IdentifyError::InvalidJson)?;
    let mut digest = Sha256::new();
    let mut first = true;
    digest.update(b"{");
    for (name, value) in members.iter().filter(|(n, _)| *n != "webhookTimestamp") {
        if !first {
            digest.update(b",");
        }
        first = false;
        let name = serde_json::to_string(name).map_err(|_| IdentifyError::InvalidJson)?;
        digest.update(name.as_bytes());
        digest.update(b":");
        digest.update(value.get().as_bytes());
    }
    digest.update(b"}");
    Ok(format!("sha256:{}", hex::encode(digest.finalize())))
}

const FACTS: KindFacts = KindFacts {
    name: "linear",
    default_tolerance: Duration::from_secs(60),
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Linear {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Linear::new(&cfg.secrets, tolerance_secs(cfg))
    }

    /// Linear's timestamp is in milliseconds.
    fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        Linear::verify(self, req, now_ms)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Linear::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const SECRET: &str = "lin_wh_hookbox_unit_secret";
    const TS: i64 = 1_767_225_600_000;
    const BODY: &[u8] = br#"{"action":"create","type":"Issue","data":{"id":"i-1"},"webhookTimestamp":1767225600000}"#;

    fn sign(secret: &str, body: &[u8]) -> String {
        hex::encode(hmac_sha256(secret.as_bytes(), &[body]))
    }

    fn linear(secrets: &[&str]) -> Linear {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Linear::new(&secrets, 60)
    }

    fn check(
        secrets: &[&str],
        sig: Option<&str>,
        body: &[u8],
        now: i64,
    ) -> Result<(), VerifyError> {
        let mut h = HeaderMap::new();
        if let Some(sig) = sig {
            h.insert("linear-signature", HeaderValue::from_str(sig).unwrap());
        }
        linear(secrets).verify(&Inbound::new(&h, body), now)
    }

    #[test]
    fn a_fresh_signed_body_verifies_with_any_configured_secret() {
        let sig = sign(SECRET, BODY);
        assert_eq!(check(&[SECRET], Some(&sig), BODY, TS), Ok(()));
        assert_eq!(check(&["old", SECRET], Some(&sig), BODY, TS), Ok(()));
    }

    #[test]
    fn tampering_a_wrong_secret_uppercase_and_truncation_fail() {
        let sig = sign(SECRET, BODY);
        let invalid = Err(VerifyError::InvalidSignature);
        assert_eq!(check(&["wrong"], Some(&sig), BODY, TS), invalid);
        let tampered = [BODY, b" "].concat();
        assert_eq!(check(&[SECRET], Some(&sig), &tampered, TS), invalid);
        let upper = sig.to_uppercase();
        assert_eq!(check(&[SECRET], Some(&upper), BODY, TS), invalid);
        let malformed = Err(VerifyError::MalformedSignature);
        assert_eq!(check(&[SECRET], Some(&sig[..62]), BODY, TS), malformed);
        let prefixed = format!("sha256={}", &sig[7..]);
        assert_eq!(check(&[SECRET], Some(&prefixed), BODY, TS), malformed);
        let missing = Err(VerifyError::MissingSignature);
        assert_eq!(check(&[SECRET], None, BODY, TS), missing);
    }

    #[test]
    fn the_body_timestamp_is_checked_in_milliseconds_both_ways() {
        let sig = sign(SECRET, BODY);
        assert_eq!(check(&[SECRET], Some(&sig), BODY, TS + 60_000), Ok(()));
        assert_eq!(check(&[SECRET], Some(&sig), BODY, TS - 60_000), Ok(()));
        let stale = |age_secs| Err(VerifyError::TimestampOutOfTolerance { age_secs });
        assert_eq!(check(&[SECRET], Some(&sig), BODY, TS + 60_001), stale(60));
        assert_eq!(check(&[SECRET], Some(&sig), BODY, TS - 60_001), stale(-60));
    }

    #[test]
    fn a_missing_or_non_integer_timestamp_is_refused_after_the_signature() {
        for (body, expected) in [
            (&br#"{"type":"Issue"}"#[..], VerifyError::MissingTimestamp),
            (
                br#"{"webhookTimestamp":null}"#,
                VerifyError::MissingTimestamp,
            ),
            (b"not json", VerifyError::MissingTimestamp),
            (
                br#"{"webhookTimestamp":"1767225600000"}"#,
                VerifyError::MalformedTimestamp,
            ),
            (
                br#"{"webhookTimestamp":1767225600000.5}"#,
                VerifyError::MalformedTimestamp,
            ),
        ] {
            let sig = sign(SECRET, body);
            assert_eq!(
                check(&[SECRET], Some(&sig), body, TS),
                Err(expected),
                "{body:?}"
            );
        }
    }

    fn identify(delivery: &'static str, body: &[u8]) -> Result<Identified, IdentifyError> {
        let mut h = HeaderMap::new();
        h.insert("linear-delivery", HeaderValue::from_static(delivery));
        h.insert("linear-event", HeaderValue::from_static("Issue"));
        linear(&[SECRET]).identify(&Inbound::new(&h, body))
    }

    fn key(delivery: &'static str, body: &[u8]) -> String {
        match identify(delivery, body) {
            Ok(Identified::Event(id)) => id.delivery_id,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn identity_is_the_payload_without_its_timestamp_and_type_dot_action() {
        let expected = format!(
            "sha256:{}",
            hex::encode(Sha256::digest(
                br#"{"action":"create","data":{"id":"i-1"},"type":"Issue"}"#
            ))
        );
        assert_eq!(
            identify("d-1", BODY),
            Ok(Identified::Event(Identity {
                delivery_id: expected.clone(),
                event_type: Some("Issue.create".into()),
            }))
        );
        // The unsigned header changes nothing.
        assert_eq!(key("d-2", BODY), expected);
        // Linear's retry: the same payload, a new timestamp (and so a new
        // signature): the same key.
        let retry = br#"{"action":"create","type":"Issue","data":{"id":"i-1"},"webhookTimestamp":1767225660000}"#;
        assert_eq!(key("d-1", retry), expected);
        // Anything else in the payload is another event.
        let other = br#"{"action":"update","type":"Issue","data":{"id":"i-1"},"webhookTimestamp":1767225600000}"#;
        assert_ne!(key("d-1", other), expected);
        let nested = br#"{"action":"create","type":"Issue","data":{"id":"i-2"},"webhookTimestamp":1767225600000}"#;
        assert_ne!(key("d-1", nested), expected);

        let no_action = identify("d-1", br#"{"type":"X"}"#);
        assert!(
            matches!(no_action, Ok(Identified::Event(i)) if i.event_type.as_deref() == Some("Issue"))
        );
        assert_eq!(identify("d-1", b"[1]"), Err(IdentifyError::InvalidJson));
    }
}
