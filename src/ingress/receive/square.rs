//! Square: `x-square-hmacsha256-signature: <base64>` over the notification
//! URL followed by the body.
//!
//! Spec: <https://developer.squareup.com/docs/webhooks/step3validate>,
//! checked against the `square` npm SDK 46.0.0
//! (`WebhooksHelper.verifySignature`: HMAC-SHA256 of `notificationUrl +
//! requestBody` with the subscription's signature key, base64, compared
//! with the header as a string).
//!
//! The URL is the one entered in the subscription, exactly: Square does not
//! normalise it, and neither do we. hookbox cannot see it behind a proxy,
//! so it is the source's `public_url`, followed by `?` and the request's
//! query string when the request has one. Nothing is timestamped, so there
//! is no tolerance window: replays are absorbed by the dedupe key, the
//! body's `event_id`, which Square keeps across retries. Only one
//! signature is sent; rotation means configuring the old and new keys.
//! The legacy `x-square-signature` (HMAC-SHA1) header is not accepted.

use serde_json::Value;

use crate::config::{
    DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret,
};

use super::payload::{Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned};
use super::source::public_url;
use super::verify::{VerifyError, any_key_matches, decode_base64, header, utf8_keys};

pub struct Square {
    keys: Vec<Vec<u8>>,
    public_url: String,
}

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &["square-version", "square-environment", "user-agent"];

impl Square {
    /// The key is the subscription's signature key as UTF-8 bytes.
    pub fn new(secrets: &[Secret], public_url: &str) -> Self {
        Square {
            keys: utf8_keys(secrets),
            public_url: public_url.to_owned(),
        }
    }

    pub fn verify(&self, req: &Inbound) -> Result<(), VerifyError> {
        let value = header(req.headers, "x-square-hmacsha256-signature")
            .ok_or(VerifyError::MissingSignature)?;
        let sig = decode_base64(value).ok_or(VerifyError::MalformedSignature)?;
        let (mark, query): (&[u8], &[u8]) = match req.query {
            Some(q) => (b"?", q.as_bytes()),
            None => (b"", b""),
        };
        let parts = [self.public_url.as_bytes(), mark, query, req.body];
        if any_key_matches(&self.keys, &parts, &sig) {
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
            event_type: text("type").filter(|t| !t.is_empty()).map(str::to_owned),
        }))
    }
}

const FACTS: KindFacts = KindFacts {
    name: "square",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: true,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Square {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Square::new(&cfg.secrets, public_url(cfg))
    }

    fn verify(&self, req: &Inbound, _now_ms: i64) -> Result<(), VerifyError> {
        Square::verify(self, req)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Square::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const KEY: &str = "sq0wsk-hookbox-test-key";
    const URL: &str = "https://hooks.example.com/hooks/square";
    const BODY: &[u8] = br#"{"merchant_id":"M1","type":"payment.updated","event_id":"6a8f5f28-54a1-4eb0-a98a-3111513fd4fc"}"#;
    // Computed once, outside the code under test:
    // python3 -c 'import hmac,hashlib,base64; h=lambda m: base64.b64encode(hmac.new(
    //   b"sq0wsk-hookbox-test-key",m,hashlib.sha256).digest()).decode();
    //   print(h(URL.encode()+BODY)); print(h(URL.encode()+b"?a=1&b=2"+BODY))'
    const SIG: &str = "bFCgXKD+iNHTquqdrUbuVmXhgzPdu7ejAXmG1Cmdtd0=";
    const SIG_QUERY: &str = "xID2DXEKElAOd/GPH/bxB6QtqE7dSsuewEN4Ko8++gc=";

    fn square(keys: &[&str], url: &str) -> Square {
        let secrets: Vec<Secret> = keys.iter().map(|s| Secret::new(*s)).collect();
        Square::new(&secrets, url)
    }

    fn check(
        keys: &[&str],
        url: &str,
        query: Option<&str>,
        sig: &str,
        body: &[u8],
    ) -> Result<(), VerifyError> {
        let mut h = HeaderMap::new();
        h.insert(
            "x-square-hmacsha256-signature",
            HeaderValue::from_str(sig).unwrap(),
        );
        square(keys, url).verify(&Inbound::new(&h, body).with_query(query))
    }

    #[test]
    fn a_signature_over_url_and_body_verifies_with_and_without_a_query() {
        assert_eq!(check(&[KEY], URL, None, SIG, BODY), Ok(()));
        assert_eq!(check(&[KEY], URL, Some("a=1&b=2"), SIG_QUERY, BODY), Ok(()));
    }

    #[test]
    fn another_url_query_body_or_key_fails() {
        let invalid = Err(VerifyError::InvalidSignature);
        let http = "http://hooks.example.com/hooks/square";
        assert_eq!(check(&[KEY], http, None, SIG, BODY), invalid);
        assert_eq!(check(&[KEY], &format!("{URL}/"), None, SIG, BODY), invalid);
        assert_eq!(check(&[KEY], URL, Some("a=1"), SIG, BODY), invalid);
        assert_eq!(check(&[KEY], URL, None, SIG_QUERY, BODY), invalid);
        assert_eq!(check(&[KEY], URL, None, SIG, b"{}"), invalid);
        assert_eq!(check(&["wrong"], URL, None, SIG, BODY), invalid);
        assert_eq!(check(&["wrong", KEY], URL, None, SIG, BODY), Ok(()));
    }

    #[test]
    fn malformed_and_missing_signatures_are_rejected() {
        let malformed = Err(VerifyError::MalformedSignature);
        assert_eq!(
            check(&[KEY], URL, None, SIG.trim_end_matches('='), BODY),
            malformed
        );
        assert_eq!(
            check(&[KEY], URL, None, &SIG.replace('+', "-"), BODY),
            malformed
        );
        assert_eq!(
            check(&[KEY], URL, None, &SIG[..40], BODY),
            Err(VerifyError::InvalidSignature)
        );
        let none = HeaderMap::new();
        let missing = square(&[KEY], URL).verify(&Inbound::new(&none, BODY));
        assert_eq!(missing, Err(VerifyError::MissingSignature));
    }

    #[test]
    fn identity_is_the_event_id_and_type_from_the_body() {
        let identify =
            |body: &[u8]| square(&[KEY], URL).identify(&Inbound::new(&HeaderMap::new(), body));
        assert_eq!(
            identify(BODY),
            Ok(Identified::Event(Identity {
                delivery_id: "6a8f5f28-54a1-4eb0-a98a-3111513fd4fc".into(),
                event_type: Some("payment.updated".into()),
            }))
        );
        assert_eq!(identify(b"nope"), Err(IdentifyError::InvalidJson));
        assert_eq!(
            identify(br#"{"type":"x"}"#),
            Err(IdentifyError::MissingDeliveryId)
        );
    }
}
