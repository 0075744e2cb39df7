//! Slack: `X-Slack-Signature: v0=<hex>` over `"v0:" + ts + ":" + body`,
//! with `ts` from `X-Slack-Request-Timestamp`.
//!
//! Spec: <https://api.slack.com/authentication/verifying-requests-from-slack>.
//! Tolerance: the timestamp must lie within the source's window (default
//! 300 s, Slack's own five minutes) of now, in both directions.
//!
//! Identification depends on what Slack sent:
//! * Events API `url_verification` is a handshake: its `challenge` is echoed
//!   and nothing is stored.
//! * Events API callbacks carry `event_id`, which Slack keeps when it
//!   retries (each retry is re-signed with a new timestamp): that is the
//!   dedupe key, and `event.type` (else `type`) is the event type.
//! * Slash commands and interactivity payloads are form-encoded and carry no
//!   id at all, nor do JSON bodies without `event_id`. Their id is the
//!   SHA-256 of the body, so such requests **dedupe only exact re-sends**:
//!   two identical commands are one event, and any byte of difference makes
//!   a new one.

use serde_json::{Value, json};

use crate::config::{
    DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret,
};

use super::payload::{Handshake, Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned, tolerance_secs};
use super::verify::{
    VerifyError, any_key_matches, body_hash_id, check_timestamp, decode_hex, header, utf8_keys,
};

pub struct Slack {
    keys: Vec<Vec<u8>>,
    tolerance_secs: i64,
}

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &[
    "x-slack-request-timestamp",
    "x-slack-retry-num",
    "x-slack-retry-reason",
    "user-agent",
];

impl Slack {
    /// The key is the signing secret's UTF-8 bytes.
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Slack {
            keys: utf8_keys(secrets),
            tolerance_secs,
        }
    }

    pub fn verify(&self, req: &Inbound, now: i64) -> Result<(), VerifyError> {
        let value =
            header(req.headers, "x-slack-signature").ok_or(VerifyError::MissingSignature)?;
        let ts = header(req.headers, "x-slack-request-timestamp")
            .ok_or(VerifyError::MissingTimestamp)?;
        check_timestamp(ts, now, self.tolerance_secs)?;
        let hex = value
            .strip_prefix(b"v0=")
            .ok_or(VerifyError::MalformedSignature)?;
        let sig = decode_hex(hex).ok_or(VerifyError::MalformedSignature)?;
        if any_key_matches(&self.keys, &[b"v0:", ts, b":", req.body], &sig) {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        let Some(json) = req.json() else {
            return Ok(Identified::Event(Identity {
                delivery_id: body_hash_id(req.body),
                event_type: None,
            }));
        };
        let text = |pointer: &str| json.pointer(pointer).and_then(Value::as_str);
        if text("/type") == Some("url_verification") {
            let challenge = text("/challenge").filter(|c| !c.is_empty());
            return challenge
                .map(|c| Identified::Handshake(Handshake::Json(json!({ "challenge": c }))))
                .ok_or(IdentifyError::MissingDeliveryId);
        }
        let delivery_id = match text("/event_id") {
            Some(id) => delivery_id(Some(id))?,
            None => body_hash_id(req.body),
        };
        Ok(Identified::Event(Identity {
            delivery_id,
            event_type: text("/event/type")
                .or_else(|| text("/type"))
                .map(str::to_owned),
        }))
    }
}

const FACTS: KindFacts = KindFacts {
    name: "slack",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Slack {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Slack::new(&cfg.secrets, tolerance_secs(cfg))
    }

    fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        Slack::verify(self, req, now_ms / 1000)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Slack::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    // Slack's documented example. The body's token is `xyzz0WbapA4vBCDEFasx0q6G`
    // as on Slack's page and in slack_sdk's tests; with any other token the
    // documented signature does not reproduce.
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TS: i64 = 1_531_420_618;
    const BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    const INVALID: Result<(), VerifyError> = Err(VerifyError::InvalidSignature);
    const MALFORMED: Result<(), VerifyError> = Err(VerifyError::MalformedSignature);

    fn slack(secrets: &[&str]) -> Slack {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Slack::new(&secrets, 300)
    }

    /// The request's headers: signature and timestamp, each when given.
    fn headers(sig: Option<&str>, ts: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [
            ("x-slack-signature", sig),
            ("x-slack-request-timestamp", ts),
        ] {
            if let Some(value) = value {
                h.insert(name, HeaderValue::from_str(value).unwrap());
            }
        }
        h
    }

    fn verify(secret: &str, h: &HeaderMap, body: &[u8], now: i64) -> Result<(), VerifyError> {
        slack(&[secret]).verify(&Inbound::new(h, body), now)
    }

    /// `sig` with the documented secret and timestamp, checked at `now`.
    fn check(sig: &str, body: &[u8], now: i64) -> Result<(), VerifyError> {
        verify(SECRET, &headers(Some(sig), Some("1531420618")), body, now)
    }

    #[test]
    fn slacks_documented_vector_verifies() {
        assert_eq!(check(SIG, BODY, TS), Ok(()));
    }

    #[test]
    fn the_documented_body_with_another_token_does_not_reproduce_the_signature() {
        let body = String::from_utf8(BODY.to_vec()).unwrap();
        let other = body.replace("xyzz0WbapA4vBCDEFasx0q6G", "xyzz0WbapA4vBCDEbOTd1tK7");
        assert_eq!(check(SIG, other.as_bytes(), TS), INVALID);
    }

    #[test]
    fn tampered_body_wrong_secret_changed_timestamp_and_truncation_fail() {
        assert_eq!(check(SIG, &[BODY, b"------"].concat(), TS), INVALID);
        let h = headers(Some(SIG), Some("1531420618"));
        assert_eq!(verify("wrong", &h, BODY, TS), INVALID);
        let later = headers(Some(SIG), Some("1531420619"));
        assert_eq!(verify(SECRET, &later, BODY, TS), INVALID);
        assert_eq!(check(&SIG[..SIG.len() - 2], BODY, TS), INVALID);
    }

    #[test]
    fn timestamps_pass_exactly_at_tolerance_and_fail_one_second_past_it() {
        assert_eq!(check(SIG, BODY, TS + 300), Ok(()));
        assert_eq!(check(SIG, BODY, TS - 300), Ok(()));
        let stale = |age_secs| Err(VerifyError::TimestampOutOfTolerance { age_secs });
        assert_eq!(check(SIG, BODY, TS + 301), stale(301));
        assert_eq!(check(SIG, BODY, TS - 301), stale(-301));
    }

    #[test]
    fn rotation_accepts_old_or_new_secret() {
        let h = headers(Some(SIG), Some("1531420618"));
        let both = slack(&["new secret", SECRET]);
        assert_eq!(both.verify(&Inbound::new(&h, BODY), TS), Ok(()));
    }

    #[test]
    fn malformed_and_missing_headers_are_rejected() {
        let suffixed = verify(SECRET, &headers(Some(SIG), Some("1531420618abc")), BODY, TS);
        assert_eq!(suffixed, Err(VerifyError::MalformedTimestamp));
        for bad in [&SIG[3..], "v1=abcd", "v0=zz", "V0=abcd"] {
            assert_eq!(check(bad, BODY, TS), MALFORMED, "{bad}");
        }
        let no_ts = verify(SECRET, &headers(Some(SIG), None), BODY, TS);
        assert_eq!(no_ts, Err(VerifyError::MissingTimestamp));
        let no_sig = verify(SECRET, &headers(None, Some("1531420618")), BODY, TS);
        assert_eq!(no_sig, Err(VerifyError::MissingSignature));
    }

    fn identify(body: &[u8]) -> Result<Identified, IdentifyError> {
        slack(&[SECRET]).identify(&Inbound::new(&HeaderMap::new(), body))
    }

    fn event(delivery_id: &str, event_type: Option<&str>) -> Result<Identified, IdentifyError> {
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id.into(),
            event_type: event_type.map(str::to_owned),
        }))
    }

    #[test]
    fn url_verification_returns_the_challenge() {
        let body = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        let challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P";
        let answer = Handshake::Json(json!({ "challenge": challenge }));
        assert_eq!(identify(body), Ok(Identified::Handshake(answer)));
        let no_challenge = identify(br#"{"type":"url_verification"}"#);
        assert_eq!(no_challenge, Err(IdentifyError::MissingDeliveryId));
    }

    #[test]
    fn event_callbacks_are_keyed_by_event_id_with_the_inner_event_type() {
        let body =
            br#"{"type":"event_callback","event_id":"Ev08MFMKH6","event":{"type":"message"}}"#;
        assert_eq!(identify(body), event("Ev08MFMKH6", Some("message")));
        let outer = br#"{"type":"event_callback","event_id":"Ev1"}"#;
        assert_eq!(identify(outer), event("Ev1", Some("event_callback")));
    }

    #[test]
    fn form_bodies_and_json_without_event_id_are_keyed_by_body_hash() {
        // python3 -c 'import hashlib; print(hashlib.sha256(BODY).hexdigest())'
        let form = "sha256:390eeeff8d0cb7c9f6ecf8a88c3df6452fea0914eb02f64844369f3758d8d330";
        assert_eq!(identify(BODY), event(form, None));
        // python3 -c 'import hashlib; print(hashlib.sha256(b"{\"type\":\"app_rate_limited\"}").hexdigest())'
        let json = "sha256:fd537bf82a32dd204cb7788eccb6a028326f9e5e208f889eea642eda0a480c7e";
        let body = br#"{"type":"app_rate_limited"}"#;
        assert_eq!(identify(body), event(json, Some("app_rate_limited")));
    }
}
