//! Discord: Ed25519 `X-Signature-Ed25519` (hex) over
//! `X-Signature-Timestamp` + raw body, checked with the application's
//! public key.
//!
//! Spec: <https://discord.com/developers/docs/interactions/overview#setting-up-an-endpoint-validating-security-request-headers>
//! and <https://discord.com/developers/docs/events/webhook-events#validating-security-request-headers>;
//! `verifyKey` in `discord-interactions` (4.4.0) is the reference: the
//! message is the timestamp text followed by the body bytes, the key and
//! signature are hex. The `secrets` of a `discord` source are public keys
//! (the app's *Public Key*, 64 hex characters); several may be listed, as
//! for any kind, decoded by [`public_key`], which config validation runs
//! too (through this kind's facts), so `hookbox check` names a bad one. Verification is done by aws-lc-rs, never
//! by code here.
//!
//! Tolerance: the SDK checks no freshness; hookbox also refuses a timestamp
//! outside the source's window (default 300 s, both directions), since it
//! is signed and nothing else stops a captured interaction from being
//! replayed with its signature.
//!
//! Discord uses one scheme for two endpoints, told apart by the body:
//! * Interactions carry `id` and `token`. `type` 1 is PING, answered
//!   `{"type":1}`; others are stored under `id`, typed by their name
//!   (`APPLICATION_COMMAND`, ...).
//! * Webhook events carry `version`, `type` (0 PING, answered 204; 1 an
//!   event) and `event.type`. They have no id: the dedupe key is the
//!   SHA-256 of the body, so only exact re-sends are duplicates.

use aws_lc_rs::signature::{ED25519, ParsedPublicKey};
use serde_json::{Value, json};

use crate::config::{DEFAULT_TOLERANCE, KindFacts, Secret, SourceConfig};

use super::payload::{Handshake, Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned, tolerance_secs};
use super::verify::{VerifyError, body_hash_id, check_timestamp, decode_hex, header};

pub struct Discord {
    keys: Vec<ParsedPublicKey>,
    tolerance_secs: i64,
}

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &["x-signature-timestamp", "user-agent"];

/// A valid Ed25519 public key (RFC 8032 section 7.1, test 1), standing in
/// for keys not read by commands that do not verify.
pub const PLACEHOLDER_KEY: &str =
    "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

/// A Discord application public key: exactly 32 bytes as hex.
pub fn public_key(secret: &Secret) -> Result<ParsedPublicKey, String> {
    let bytes = hex::decode(secret.expose())
        .ok()
        .filter(|b| b.len() == 32)
        .ok_or("a Discord public key is 64 hex characters (the application's Public Key, on its General Information page)")?;
    ParsedPublicKey::new(&ED25519, bytes)
        .map_err(|_| "this Discord public key is not a valid Ed25519 key".to_owned())
}

fn check_key(secret: &Secret) -> Result<(), String> {
    public_key(secret).map(drop)
}

impl Discord {
    /// Config validation has parsed every key already; one that does not
    /// parse here cannot happen and would only never match.
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Discord {
            keys: secrets.iter().filter_map(|s| public_key(s).ok()).collect(),
            tolerance_secs,
        }
    }

    pub fn verify(&self, req: &Inbound, now: i64) -> Result<(), VerifyError> {
        let sig =
            header(req.headers, "x-signature-ed25519").ok_or(VerifyError::MissingSignature)?;
        let ts =
            header(req.headers, "x-signature-timestamp").ok_or(VerifyError::MissingTimestamp)?;
        check_timestamp(ts, now, self.tolerance_secs)?;
        let sig = decode_hex(sig)
            .filter(|s| s.len() == 64)
            .ok_or(VerifyError::MalformedSignature)?;
        // Ed25519 needs the whole message at once.
        let message = [ts, req.body].concat();
        let mut matched = false;
        for key in &self.keys {
            matched |= key.verify_sig(&message, &sig).is_ok();
        }
        if matched {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        let json = req.json().ok_or(IdentifyError::InvalidJson)?;
        let kind = json.get("type").and_then(Value::as_u64);
        let is_interaction = json.get("token").is_some_and(Value::is_string);
        if is_interaction {
            if kind == Some(1) {
                return Ok(Identified::Handshake(Handshake::Json(json!({ "type": 1 }))));
            }
            let id = json.get("id").and_then(Value::as_str);
            return Ok(Identified::Event(Identity {
                delivery_id: delivery_id(id)?,
                event_type: kind.map(interaction_type),
            }));
        }
        if kind == Some(0) {
            return Ok(Identified::Handshake(Handshake::NoContent));
        }
        let delivery_id = match json.get("id").and_then(Value::as_str) {
            Some(id) => delivery_id(Some(id))?,
            None => body_hash_id(req.body),
        };
        let event_type = json
            .pointer("/event/type")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Identified::Event(Identity {
            delivery_id,
            event_type,
        }))
    }
}

/// An interaction's type by its name in Discord's docs, so destination
/// filters can say `APPLICATION_COMMAND` rather than `2`.
fn interaction_type(kind: u64) -> String {
    match kind {
        2 => "APPLICATION_COMMAND".to_owned(),
        3 => "MESSAGE_COMPONENT".to_owned(),
        4 => "APPLICATION_COMMAND_AUTOCOMPLETE".to_owned(),
        5 => "MODAL_SUBMIT".to_owned(),
        other => other.to_string(),
    }
}

const FACTS: KindFacts = KindFacts {
    name: "discord",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: check_key,
    placeholder_secret: PLACEHOLDER_KEY,
};

impl Provider for Discord {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Discord::new(&cfg.secrets, tolerance_secs(cfg))
    }

    fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        Discord::verify(self, req, now_ms / 1000)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Discord::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    // RFC 8032 section 7.1, test 2 (the one-byte message "r"). It pins the
    // key parsing and the algorithm; the request-shaped cases are the
    // SDK-made ones in tests/vectors/discord.json.
    const RFC_KEY: &str = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
    const RFC_SIG: &str = "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00";

    fn discord(keys: &[&str]) -> Discord {
        let keys: Vec<Secret> = keys.iter().map(|s| Secret::new(*s)).collect();
        Discord::new(&keys, 300)
    }

    fn headers(sig: Option<&str>, ts: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [("x-signature-ed25519", sig), ("x-signature-timestamp", ts)] {
            if let Some(value) = value {
                h.insert(name, HeaderValue::from_str(value).unwrap());
            }
        }
        h
    }

    #[test]
    fn the_rfc_8032_vector_verifies_through_the_parsed_key() {
        let key = public_key(&Secret::new(RFC_KEY)).unwrap();
        let sig = hex::decode(RFC_SIG).unwrap();
        assert!(key.verify_sig(b"r", &sig).is_ok());
        assert!(key.verify_sig(b"s", &sig).is_err());
    }

    #[test]
    fn missing_malformed_and_stale_headers_are_refused_before_the_curve() {
        let d = discord(&[RFC_KEY]);
        let check = |h: &HeaderMap, now| d.verify(&Inbound::new(h, b"{}"), now);
        assert_eq!(
            check(&headers(None, Some("100")), 100),
            Err(VerifyError::MissingSignature)
        );
        assert_eq!(
            check(&headers(Some(RFC_SIG), None), 100),
            Err(VerifyError::MissingTimestamp)
        );
        assert_eq!(
            check(&headers(Some(RFC_SIG), Some("1e3")), 100),
            Err(VerifyError::MalformedTimestamp)
        );
        assert_eq!(
            check(&headers(Some(RFC_SIG), Some("100")), 401),
            Err(VerifyError::TimestampOutOfTolerance { age_secs: 301 })
        );
        assert_eq!(
            check(&headers(Some(&RFC_SIG[..126]), Some("100")), 100),
            Err(VerifyError::MalformedSignature)
        );
        assert_eq!(
            check(&headers(Some(RFC_SIG), Some("100")), 100),
            Err(VerifyError::InvalidSignature)
        );
    }

    fn identify(body: &[u8]) -> Result<Identified, IdentifyError> {
        discord(&[RFC_KEY]).identify(&Inbound::new(&HeaderMap::new(), body))
    }

    #[test]
    fn pings_are_answered_per_endpoint_and_events_identified() {
        let ping = br#"{"id":"1","token":"t","type":1,"version":1,"application_id":"a"}"#;
        let pong = Handshake::Json(json!({ "type": 1 }));
        assert_eq!(identify(ping), Ok(Identified::Handshake(pong)));
        let event_ping = br#"{"version":1,"application_id":"a","type":0}"#;
        assert_eq!(
            identify(event_ping),
            Ok(Identified::Handshake(Handshake::NoContent))
        );
        let command = br#"{"id":"1234","token":"t","type":2,"data":{}}"#;
        assert_eq!(
            identify(command),
            Ok(Identified::Event(Identity {
                delivery_id: "1234".into(),
                event_type: Some("APPLICATION_COMMAND".into()),
            }))
        );
        let event = br#"{"version":1,"application_id":"a","type":1,"event":{"type":"APPLICATION_AUTHORIZED"}}"#;
        assert_eq!(
            identify(event),
            Ok(Identified::Event(Identity {
                delivery_id: body_hash_id(event),
                event_type: Some("APPLICATION_AUTHORIZED".into()),
            }))
        );
        assert_eq!(identify(b"nope"), Err(IdentifyError::InvalidJson));
        let no_id = br#"{"token":"t","type":2}"#;
        assert_eq!(identify(no_id), Err(IdentifyError::MissingDeliveryId));
    }

    #[test]
    fn discord_public_keys_must_be_32_bytes_of_hex() {
        const RFC_KEY: &str = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
        assert!(public_key(&Secret::new(PLACEHOLDER_KEY)).is_ok());
        for bad in [&RFC_KEY[..62], "zz", "", &format!("{RFC_KEY}00")] {
            assert!(public_key(&Secret::new(bad)).is_err(), "{bad}");
        }
    }
}
