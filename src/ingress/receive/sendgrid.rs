//! SendGrid Event Webhook: ECDSA P-256 / SHA-256
//! `X-Twilio-Email-Event-Webhook-Signature` (base64 of the DER signature)
//! over `X-Twilio-Email-Event-Webhook-Timestamp` + raw body, checked with
//! the account's verification key.
//!
//! Spec: <https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features>;
//! `EventWebhook.verifySignature` in `@sendgrid/eventwebhook` (8.0.0) is
//! the reference: the signed message is the timestamp text followed by the
//! body, hashed with SHA-256. The `secrets` of a `sendgrid` source are
//! public keys as SendGrid shows them (base64 of the DER
//! SubjectPublicKeyInfo; a PEM block is accepted too), several allowed,
//! decoded by [`public_key`], which config validation runs too (through
//! this kind's facts), so `hookbox check` names a bad one.
//! Verification is done by aws-lc-rs, never by code here.
//!
//! Tolerance: none, like the SDK. The timestamp is signed and must be
//! plain digits, but SendGrid retries a failed batch for up to 24 hours and
//! does not document re-signing, so a window could refuse its retries;
//! replays are absorbed by deduplication instead.
//!
//! Identification: the body is a JSON array of events. One event: its
//! `sg_event_id`. A batch of several (or an event without the id): the
//! SHA-256 of the body, so only exact re-sends of a batch are duplicates.
//! The event type is the first item's `event`.

use aws_lc_rs::digest;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_ASN1, ParsedPublicKey};
use serde_json::Value;

use crate::config::{DEFAULT_TOLERANCE, KindFacts, Secret, SourceConfig};

use super::payload::{Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned};
use super::verify::{VerifyError, body_hash_id, decode_base64, header};

pub struct Sendgrid {
    keys: Vec<ParsedPublicKey>,
}

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &["x-twilio-email-event-webhook-timestamp", "user-agent"];

/// A valid P-256 public key (made for this purpose; its private half was
/// discarded), standing in for keys not read by commands that do not verify.
pub const PLACEHOLDER_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEtMBmvDJNwyZB2ldgvrIWK14DpckWJm3qVkOS4cVJ6f62VhfhHrUP77BksoIj7O2AlPlsy2Q0fR2+Y4PTsq/rAg==";

/// A SendGrid verification key: base64 of a DER SubjectPublicKeyInfo
/// for a P-256 key, bare or inside `-----BEGIN PUBLIC KEY-----` lines.
pub fn public_key(secret: &Secret) -> Result<ParsedPublicKey, String> {
    let text = secret.expose().trim();
    let base64: String = match text.strip_prefix("-----BEGIN PUBLIC KEY-----") {
        Some(rest) => rest
            .trim_end()
            .strip_suffix("-----END PUBLIC KEY-----")
            .ok_or("a PEM public key ends with -----END PUBLIC KEY-----")?
            .split_whitespace()
            .collect(),
        None => text.to_owned(),
    };
    let der = decode_base64(base64.as_bytes()).ok_or(
        "a SendGrid verification key is base64 (Settings → Mail Settings → Event Webhook → Signature Verification)",
    )?;
    // aws-lc-rs also takes a bare curve point; SendGrid gives, and its SDK
    // reads, only the DER SubjectPublicKeyInfo, which is a SEQUENCE.
    if der.first() != Some(&0x30) {
        return Err("a SendGrid verification key is a DER SubjectPublicKeyInfo".to_owned());
    }
    ParsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, der)
        .map_err(|_| "this SendGrid verification key is not a P-256 public key".to_owned())
}

fn check_key(secret: &Secret) -> Result<(), String> {
    public_key(secret).map(drop)
}

impl Sendgrid {
    /// Config validation has parsed every key already; one that does not
    /// parse here cannot happen and would only never match.
    pub fn new(secrets: &[Secret]) -> Self {
        Sendgrid {
            keys: secrets.iter().filter_map(|s| public_key(s).ok()).collect(),
        }
    }

    pub fn verify(&self, req: &Inbound) -> Result<(), VerifyError> {
        let sig = header(req.headers, "x-twilio-email-event-webhook-signature")
            .ok_or(VerifyError::MissingSignature)?;
        let ts = header(req.headers, "x-twilio-email-event-webhook-timestamp")
            .ok_or(VerifyError::MissingTimestamp)?;
        if ts.is_empty() || ts.len() > 12 || !ts.iter().all(u8::is_ascii_digit) {
            return Err(VerifyError::MalformedTimestamp);
        }
        let sig = decode_base64(sig).ok_or(VerifyError::MalformedSignature)?;
        // Hashed in pieces: the body may be 25 MiB and need not be copied.
        let mut hash = digest::Context::new(&digest::SHA256);
        hash.update(ts);
        hash.update(req.body);
        let hash = hash.finish();
        let mut matched = false;
        for key in &self.keys {
            matched |= key.verify_digest_sig(&hash, &sig).is_ok();
        }
        if matched {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        let events = req
            .json()
            .and_then(Value::as_array)
            .ok_or(IdentifyError::InvalidJson)?;
        let single_id = match events.as_slice() {
            [one] => one.get("sg_event_id").and_then(Value::as_str),
            _ => None,
        };
        let delivery_id = match single_id {
            Some(id) => delivery_id(Some(id))?,
            None => body_hash_id(req.body),
        };
        let event_type = events
            .first()
            .and_then(|e| e.get("event"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Identified::Event(Identity {
            delivery_id,
            event_type,
        }))
    }
}

const FACTS: KindFacts = KindFacts {
    name: "sendgrid",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: check_key,
    placeholder_secret: PLACEHOLDER_KEY,
};

impl Provider for Sendgrid {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Sendgrid::new(&cfg.secrets)
    }

    fn verify(&self, req: &Inbound, _now_ms: i64) -> Result<(), VerifyError> {
        Sendgrid::verify(self, req)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Sendgrid::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    fn sendgrid() -> Sendgrid {
        Sendgrid::new(&[Secret::new(PLACEHOLDER_KEY)])
    }

    #[test]
    fn headers_are_checked_strictly_before_the_curve() {
        let s = sendgrid();
        let check = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            s.verify(&Inbound::new(&h, b"[]"))
        };
        let sig = ("x-twilio-email-event-webhook-signature", "MEUCIQ==");
        let ts = ("x-twilio-email-event-webhook-timestamp", "1600000000");
        assert_eq!(check(&[ts]), Err(VerifyError::MissingSignature));
        assert_eq!(check(&[sig]), Err(VerifyError::MissingTimestamp));
        let bad_ts = ("x-twilio-email-event-webhook-timestamp", "16e8");
        assert_eq!(check(&[sig, bad_ts]), Err(VerifyError::MalformedTimestamp));
        let bad_sig = ("x-twilio-email-event-webhook-signature", "MEUCIQ");
        assert_eq!(check(&[bad_sig, ts]), Err(VerifyError::MalformedSignature));
        assert_eq!(check(&[sig, ts]), Err(VerifyError::InvalidSignature));
    }

    fn identify(body: &[u8]) -> Result<Identified, IdentifyError> {
        sendgrid().identify(&Inbound::new(&HeaderMap::new(), body))
    }

    #[test]
    fn one_event_is_keyed_by_its_id_and_a_batch_by_the_body() {
        let one = br#"[{"email":"a@example.com","event":"delivered","sg_event_id":"ev-1"}]"#;
        assert_eq!(
            identify(one),
            Ok(Identified::Event(Identity {
                delivery_id: "ev-1".into(),
                event_type: Some("delivered".into()),
            }))
        );
        let two = br#"[{"event":"open","sg_event_id":"a"},{"event":"click","sg_event_id":"b"}]"#;
        assert_eq!(
            identify(two),
            Ok(Identified::Event(Identity {
                delivery_id: body_hash_id(two),
                event_type: Some("open".into()),
            }))
        );
        assert_eq!(
            identify(br#"{"event":"x"}"#),
            Err(IdentifyError::InvalidJson)
        );
        assert_eq!(identify(b"nope"), Err(IdentifyError::InvalidJson));
    }

    #[test]
    fn sendgrid_keys_decode_bare_or_as_pem_and_nothing_else() {
        use base64::Engine as _;
        const KEY: &str = PLACEHOLDER_KEY;
        let parse = |text: &str| public_key(&Secret::new(text));
        assert!(parse(KEY).is_ok());
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n{}\n-----END PUBLIC KEY-----\n",
            &KEY[..64],
            &KEY[64..]
        );
        assert!(parse(&pem).is_ok());
        let unpadded = KEY.trim_end_matches('=');
        let point = {
            let der = decode_base64(KEY.as_bytes()).unwrap();
            base64::engine::general_purpose::STANDARD.encode(&der[der.len() - 65..])
        };
        for bad in ["", "not base64!", unpadded, &KEY[4..], &point] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        // A key for another algorithm (Ed25519, in SPKI form) is refused.
        let ed25519 = "MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=";
        assert!(parse(ed25519).is_err());
    }
}
