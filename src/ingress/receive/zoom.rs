//! Zoom: `x-zm-signature: v0=<hex>` over
//! `"v0:" + x-zm-request-timestamp + ":" + body`, keyed with the app's
//! webhook Secret Token.
//!
//! Spec: <https://developers.zoom.us/docs/api/webhooks/#verify-webhook-events>
//! and "Validate your webhook endpoint" on the same page; the worked
//! algorithm there (and in Zoom's `zoom/webhook-sample` app) is what the
//! committed vectors follow, as Zoom publishes no SDK verifier.
//!
//! **No tolerance window.** Zoom's documented check has none, and Zoom
//! retries a failed delivery minutes to hours later (5, 30 and 90 min);
//! refusing old timestamps would refuse those retries. The timestamp is
//! still signed and must be plain digits. Replays are absorbed by the dedupe
//! key instead: `event` + `event_ts` from the body, and the object's `uuid`
//! (else `id`) when the payload has one, as `meeting.started:1626230691572:<uuid>`.
//!
//! `endpoint.url_validation` is a handshake, answered only once its
//! signature verifies and never stored: the answer is
//! `{"plainToken": p, "encryptedToken": hex(HMAC-SHA256(secret, p))}`,
//! made with the secret that verified the request, so a rotation does not
//! answer with the other one. Zoom repeats the check every 72 hours.

use serde_json::{Value, json};

use crate::config::{
    DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret,
};

use super::payload::{
    Handshake, Identified, IdentifyError, Identity, Inbound, MAX_DELIVERY_ID_LEN, delivery_id,
};
use super::provider::{Provider, owned};
use super::verify::{VerifyError, ct_eq, decode_hex, header, hmac_sha256, utf8_keys};

pub struct Zoom {
    keys: Vec<Vec<u8>>,
}

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &["x-zm-request-timestamp", "x-zm-trackingid", "user-agent"];

/// The event that is a handshake rather than an event.
const URL_VALIDATION: &str = "endpoint.url_validation";

impl Zoom {
    /// The key is the Secret Token as UTF-8 bytes.
    pub fn new(secrets: &[Secret]) -> Self {
        Zoom {
            keys: utf8_keys(secrets),
        }
    }

    /// The signature and the signed timestamp, decoded.
    fn signature<'a>(req: &Inbound<'a>) -> Result<(Vec<u8>, &'a [u8]), VerifyError> {
        let value = header(req.headers, "x-zm-signature").ok_or(VerifyError::MissingSignature)?;
        let ts =
            header(req.headers, "x-zm-request-timestamp").ok_or(VerifyError::MissingTimestamp)?;
        if ts.is_empty() || ts.len() > 13 || !ts.iter().all(u8::is_ascii_digit) {
            return Err(VerifyError::MalformedTimestamp);
        }
        let sig = value
            .strip_prefix(b"v0=")
            .and_then(decode_hex)
            .filter(|sig| sig.len() == 32)
            .ok_or(VerifyError::MalformedSignature)?;
        Ok((sig, ts))
    }

    /// The key that signed `req`, if any. Every key is tried, so the time
    /// taken does not tell which one matched.
    fn signing_key(&self, req: &Inbound) -> Result<&[u8], VerifyError> {
        let (sig, ts) = Self::signature(req)?;
        let mut found = None;
        for key in &self.keys {
            let mac = hmac_sha256(key, &[b"v0:", ts, b":", req.body]);
            if ct_eq(&mac, &sig) && found.is_none() {
                found = Some(key.as_slice());
            }
        }
        found.ok_or(VerifyError::InvalidSignature)
    }

    pub fn verify(&self, req: &Inbound) -> Result<(), VerifyError> {
        self.signing_key(req).map(|_| ())
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        let json = req.json().ok_or(IdentifyError::InvalidJson)?;
        let event = json.get("event").and_then(Value::as_str);
        if event == Some(URL_VALIDATION) {
            return self.answer(req, json).map(Identified::Handshake);
        }
        let event = event
            .filter(|e| !e.is_empty())
            .ok_or(IdentifyError::MissingDeliveryId)?;
        let event_ts = match json.get("event_ts") {
            Some(Value::Number(n)) => n.to_string(),
            _ => return Err(IdentifyError::MissingDeliveryId),
        };
        let object = json.pointer("/payload/object");
        let object_id = ["uuid", "id"]
            .iter()
            .find_map(|key| match object?.get(*key)? {
                Value::String(s) if !s.is_empty() => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            });
        let id = match object_id {
            Some(object_id) => format!("{event}:{event_ts}:{object_id}"),
            None => format!("{event}:{event_ts}"),
        };
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id(Some(&id))?,
            event_type: Some(event.to_owned()),
        }))
    }

    /// The answer to `endpoint.url_validation`. Called only after
    /// [`Zoom::verify`] passed, so a signing key exists.
    fn answer(&self, req: &Inbound, json: &Value) -> Result<Handshake, IdentifyError> {
        let token = json
            .pointer("/payload/plainToken")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty() && t.len() <= MAX_DELIVERY_ID_LEN)
            .ok_or(IdentifyError::MissingDeliveryId)?;
        let key = self
            .signing_key(req)
            .map_err(|_| IdentifyError::MissingDeliveryId)?;
        let encrypted = hex::encode(hmac_sha256(key, &[token.as_bytes()]));
        Ok(Handshake::Json(
            json!({ "plainToken": token, "encryptedToken": encrypted }),
        ))
    }
}

const FACTS: KindFacts = KindFacts {
    name: "zoom",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Zoom {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Zoom::new(&cfg.secrets)
    }

    fn verify(&self, req: &Inbound, _now_ms: i64) -> Result<(), VerifyError> {
        Zoom::verify(self, req)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Zoom::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const SECRET: &str = "zoom-hookbox-secret-token";
    const TS: &str = "1700000000";
    const BODY: &[u8] = br#"{"event":"meeting.started","event_ts":1700000000123,"payload":{"account_id":"A1","object":{"uuid":"4444AAAiAAAAAiAiAiiAii==","id":6962400003}}}"#;
    const VALIDATION: &[u8] = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
    // Computed once, outside the code under test:
    // python3 -c 'import hmac,hashlib; h=lambda m: hmac.new(b"zoom-hookbox-secret-token",m,hashlib.sha256).hexdigest();
    //   print(h(b"v0:1700000000:"+BODY)); print(h(b"v0:1700000000:"+VALIDATION)); print(h(b"qgg8vlvZRS6UYooatFL8Aw"))'
    const SIG: &str = "v0=9d2abbfe87ed471e92b8b0532e46751d2b8c69e1f72eac96f35a7f299c669424";
    const SIG_VALIDATION: &str =
        "v0=0c0c6b5f9f163ba6f671a574e389951580e530b53914bee99e8f6bdab4eace7e";
    const ENCRYPTED: &str = "53d27a77070603dbcab001861bfcd61d4f037966cf1d9a879786eeb32aa9d188";

    fn zoom(secrets: &[&str]) -> Zoom {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Zoom::new(&secrets)
    }

    fn headers(sig: Option<&str>, ts: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [("x-zm-signature", sig), ("x-zm-request-timestamp", ts)] {
            if let Some(value) = value {
                h.insert(name, HeaderValue::from_str(value).unwrap());
            }
        }
        h
    }

    fn verify(
        secrets: &[&str],
        sig: Option<&str>,
        ts: Option<&str>,
        body: &[u8],
    ) -> Result<(), VerifyError> {
        zoom(secrets).verify(&Inbound::new(&headers(sig, ts), body))
    }

    #[test]
    fn a_signature_over_v0_ts_body_verifies_whatever_the_clock() {
        assert_eq!(verify(&[SECRET], Some(SIG), Some(TS), BODY), Ok(()));
        assert_eq!(verify(&["old", SECRET], Some(SIG), Some(TS), BODY), Ok(()));
    }

    #[test]
    fn tampered_body_wrong_secret_changed_ts_and_truncation_fail() {
        let invalid = Err(VerifyError::InvalidSignature);
        assert_eq!(verify(&[SECRET], Some(SIG), Some(TS), b"{}"), invalid);
        assert_eq!(verify(&["wrong"], Some(SIG), Some(TS), BODY), invalid);
        assert_eq!(
            verify(&[SECRET], Some(SIG), Some("1700000001"), BODY),
            invalid
        );
        let malformed = Err(VerifyError::MalformedSignature);
        assert_eq!(
            verify(&[SECRET], Some(&SIG[..SIG.len() - 2]), Some(TS), BODY),
            malformed
        );
        assert_eq!(
            verify(&[SECRET], Some(&SIG[3..]), Some(TS), BODY),
            malformed
        );
        assert_eq!(
            verify(&[SECRET], Some(&SIG.replace("v0=", "v1=")), Some(TS), BODY),
            malformed
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_rejected() {
        assert_eq!(
            verify(&[SECRET], None, Some(TS), BODY),
            Err(VerifyError::MissingSignature)
        );
        assert_eq!(
            verify(&[SECRET], Some(SIG), None, BODY),
            Err(VerifyError::MissingTimestamp)
        );
        for ts in ["", "17e8", " 1700000000", "1700000000abc"] {
            let result = verify(&[SECRET], Some(SIG), Some(ts), BODY);
            assert_eq!(result, Err(VerifyError::MalformedTimestamp), "{ts:?}");
        }
    }

    fn identify(secrets: &[&str], sig: &str, body: &[u8]) -> Result<Identified, IdentifyError> {
        zoom(secrets).identify(&Inbound::new(&headers(Some(sig), Some(TS)), body))
    }

    #[test]
    fn url_validation_is_answered_with_the_token_hmac_of_the_verifying_secret() {
        let expected = Ok(Identified::Handshake(Handshake::Json(json!({
            "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
            "encryptedToken": ENCRYPTED,
        }))));
        assert_eq!(identify(&[SECRET], SIG_VALIDATION, VALIDATION), expected);
        // Rotation: the other secret listed first does not change the answer.
        assert_eq!(
            identify(&["old-token", SECRET], SIG_VALIDATION, VALIDATION),
            expected
        );
        let no_token = br#"{"event":"endpoint.url_validation","payload":{}}"#;
        assert_eq!(
            identify(&[SECRET], SIG, no_token),
            Err(IdentifyError::MissingDeliveryId)
        );
    }

    #[test]
    fn events_are_keyed_by_event_time_and_object() {
        let event = |id: &str| {
            Ok(Identified::Event(Identity {
                delivery_id: id.into(),
                event_type: Some("meeting.started".into()),
            }))
        };
        assert_eq!(
            identify(&[SECRET], SIG, BODY),
            event("meeting.started:1700000000123:4444AAAiAAAAAiAiAiiAii==")
        );
        let by_id = br#"{"event":"meeting.started","event_ts":5,"payload":{"object":{"id":69}}}"#;
        assert_eq!(
            identify(&[SECRET], SIG, by_id),
            event("meeting.started:5:69")
        );
        let bare = br#"{"event":"meeting.started","event_ts":5}"#;
        assert_eq!(identify(&[SECRET], SIG, bare), event("meeting.started:5"));
        let no_ts = br#"{"event":"meeting.started"}"#;
        assert_eq!(
            identify(&[SECRET], SIG, no_ts),
            Err(IdentifyError::MissingDeliveryId)
        );
        assert_eq!(
            identify(&[SECRET], SIG, b"x"),
            Err(IdentifyError::InvalidJson)
        );
    }
}
