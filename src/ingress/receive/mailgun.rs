//! Mailgun: the signature is **in the body**. `signature.signature` (or,
//! for form-encoded legacy webhooks and routes, the `signature` field) is
//! the lowercase hex HMAC-SHA256 of `timestamp` + `token`, keyed with the
//! account's HTTP webhook signing key.
//!
//! Spec: <https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks>.
//! Mailgun's own sample compares the hex text with `===`, so uppercase hex
//! is refused. Events of a subaccount also carry `parent-signature`, made
//! with the primary account's key: either signature matching a configured
//! key passes, so one source can take a parent's and its subaccounts'
//! events with the parent key alone.
//!
//! Only `timestamp` and `token` are signed, not the event: that is
//! Mailgun's design, and hookbox cannot add to it. Tolerance: none. Mailgun
//! warns that its delivery can be delayed and retries for 8 hours, and
//! calls the freshness check optional; its replay defence, caching the
//! token, is what deduplication on the token does.
//!
//! Identification: the dedupe key is the token; the event type is
//! `event-data.event` (JSON) or the `event` field (form).

use serde_json::Value;

use crate::config::{
    DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret,
};

use super::payload::{Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned};
use super::verify::{VerifyError, ct_eq, hmac_sha256, utf8_keys};

pub struct Mailgun {
    keys: Vec<Vec<u8>>,
}

/// Nothing of interest is in Mailgun's headers.
pub const KEEP_HEADERS: &[&str] = &["user-agent"];

/// The signature fields, from a JSON or a form-encoded body.
#[derive(Debug, Default, PartialEq, Eq)]
struct Signed {
    timestamp: Option<String>,
    token: Option<String>,
    signature: Option<String>,
    parent_signature: Option<String>,
    event: Option<String>,
}

/// Reads the signature fields. `None`: the body is neither a JSON object
/// with a `signature` object nor a form with a `signature` field. A form
/// field given twice is malformed: which one would the sender mean?
fn read(req: &Inbound) -> Result<Option<Signed>, VerifyError> {
    if let Some(json) = req.json() {
        let Some(sig) = json.get("signature").filter(|s| s.is_object()) else {
            return Ok(None);
        };
        let text = |key: &str| match sig.get(key) {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            None | Some(Value::Null) => Ok(None),
            // Mailgun documents the timestamp as an int and sends a string.
            Some(Value::Number(n)) if key == "timestamp" => Ok(Some(n.to_string())),
            Some(_) => Err(VerifyError::MalformedSignature),
        };
        return Ok(Some(Signed {
            timestamp: text("timestamp")?,
            token: text("token")?,
            signature: text("signature")?,
            parent_signature: text("parent-signature")?,
            event: json
                .pointer("/event-data/event")
                .and_then(Value::as_str)
                .map(str::to_owned),
        }));
    }
    let mut signed = Signed::default();
    for (name, value) in form_urlencoded::parse(req.body) {
        let slot = match &*name {
            "timestamp" => &mut signed.timestamp,
            "token" => &mut signed.token,
            "signature" => &mut signed.signature,
            "parent-signature" => &mut signed.parent_signature,
            "event" => &mut signed.event,
            _ => continue,
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(VerifyError::MalformedSignature);
        }
    }
    Ok(signed.signature.is_some().then_some(signed))
}

impl Mailgun {
    /// The key is the HTTP webhook signing key's UTF-8 bytes.
    pub fn new(secrets: &[Secret]) -> Self {
        Mailgun {
            keys: utf8_keys(secrets),
        }
    }

    pub fn verify(&self, req: &Inbound) -> Result<(), VerifyError> {
        let signed = read(req)?.ok_or(VerifyError::MissingSignature)?;
        let signature = signed.signature.ok_or(VerifyError::MissingSignature)?;
        let timestamp = signed.timestamp.ok_or(VerifyError::MissingTimestamp)?;
        if timestamp.is_empty()
            || timestamp.len() > 12
            || !timestamp.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(VerifyError::MalformedTimestamp);
        }
        let token = signed.token.ok_or(VerifyError::MalformedSignature)?;
        let candidates: Vec<&str> = [Some(&signature), signed.parent_signature.as_ref()]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        for c in &candidates {
            if c.len() != 64 || !c.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(VerifyError::MalformedSignature);
            }
        }
        // Every key and candidate is compared: the time taken does not tell
        // which key matched.
        let mut matched = false;
        for key in &self.keys {
            let expected = hex::encode(hmac_sha256(key, &[timestamp.as_bytes(), token.as_bytes()]));
            for c in &candidates {
                matched |= ct_eq(expected.as_bytes(), c.as_bytes());
            }
        }
        if matched {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        // `verify` has read these fields already; a failure here cannot
        // happen and would only mean no id.
        let signed = read(req)
            .ok()
            .flatten()
            .ok_or(IdentifyError::MissingDeliveryId)?;
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id(signed.token.as_deref())?,
            event_type: signed.event,
        }))
    }
}

const FACTS: KindFacts = KindFacts {
    name: "mailgun",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Mailgun {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Mailgun::new(&cfg.secrets)
    }

    fn verify(&self, req: &Inbound, _now_ms: i64) -> Result<(), VerifyError> {
        Mailgun::verify(self, req)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Mailgun::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    const KEY: &str = "key-hookbox-unit-signing-key";
    const TS: &str = "1767225600";
    const TOKEN: &str = "0f9ad9b4e7a1c3d5f2b8e6a4c0d9f7b1e3a5c7d9f1b3e5a7c9";

    fn sign(key: &str) -> String {
        hex::encode(hmac_sha256(
            key.as_bytes(),
            &[TS.as_bytes(), TOKEN.as_bytes()],
        ))
    }

    fn check(keys: &[&str], body: &[u8]) -> Result<(), VerifyError> {
        let keys: Vec<Secret> = keys.iter().map(|s| Secret::new(*s)).collect();
        Mailgun::new(&keys).verify(&Inbound::new(&HeaderMap::new(), body))
    }

    fn json_body(sig: &str, extra: &str) -> Vec<u8> {
        format!(
            r#"{{"signature":{{"timestamp":"{TS}","token":"{TOKEN}","signature":"{sig}"{extra}}},"event-data":{{"event":"delivered","id":"e1"}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn json_and_form_bodies_verify_with_any_configured_key() {
        let sig = sign(KEY);
        assert_eq!(check(&[KEY], &json_body(&sig, "")), Ok(()));
        assert_eq!(check(&["old", KEY], &json_body(&sig, "")), Ok(()));
        let form = format!("timestamp={TS}&token={TOKEN}&signature={sig}&event=delivered");
        assert_eq!(check(&[KEY], form.as_bytes()), Ok(()));
    }

    #[test]
    fn the_parent_signature_is_accepted_with_the_parent_key() {
        let body = json_body(
            &sign("subaccount"),
            &format!(r#","parent-signature":"{}""#, sign(KEY)),
        );
        assert_eq!(check(&[KEY], &body), Ok(()));
        assert_eq!(check(&["other"], &body), Err(VerifyError::InvalidSignature));
    }

    #[test]
    fn wrong_key_uppercase_truncation_and_missing_fields_fail() {
        let sig = sign(KEY);
        assert_eq!(
            check(&["wrong"], &json_body(&sig, "")),
            Err(VerifyError::InvalidSignature)
        );
        let upper = sig.to_uppercase();
        assert_eq!(
            check(&[KEY], &json_body(&upper, "")),
            Err(VerifyError::InvalidSignature)
        );
        assert_eq!(
            check(&[KEY], &json_body(&sig[..63], "")),
            Err(VerifyError::MalformedSignature)
        );
        assert_eq!(check(&[KEY], b"{}"), Err(VerifyError::MissingSignature));
        assert_eq!(
            check(&[KEY], b"event=delivered"),
            Err(VerifyError::MissingSignature)
        );
        let no_ts = format!("token={TOKEN}&signature={sig}");
        assert_eq!(
            check(&[KEY], no_ts.as_bytes()),
            Err(VerifyError::MissingTimestamp)
        );
        let bad_ts = format!("timestamp=-1&token={TOKEN}&signature={sig}");
        assert_eq!(
            check(&[KEY], bad_ts.as_bytes()),
            Err(VerifyError::MalformedTimestamp)
        );
        let twice = format!("timestamp={TS}&token={TOKEN}&signature={sig}&signature={sig}");
        assert_eq!(
            check(&[KEY], twice.as_bytes()),
            Err(VerifyError::MalformedSignature)
        );
        let numeric = format!(
            r#"{{"signature":{{"timestamp":{TS},"token":"{TOKEN}","signature":"{sig}"}}}}"#
        );
        assert_eq!(check(&[KEY], numeric.as_bytes()), Ok(()));
    }

    #[test]
    fn identity_is_the_token_and_the_event() {
        let m = Mailgun::new(&[Secret::new(KEY)]);
        let id = m.identify(&Inbound::new(&HeaderMap::new(), &json_body(&sign(KEY), "")));
        assert_eq!(
            id,
            Ok(Identified::Event(Identity {
                delivery_id: TOKEN.into(),
                event_type: Some("delivered".into()),
            }))
        );
    }
}
