//! Shopify: `X-Shopify-Hmac-Sha256: <base64>` over the raw body.
//!
//! Spec: <https://shopify.dev/docs/apps/build/webhooks/verify-deliveries>.
//! No timestamp is signed, so there is no tolerance window: replays are
//! absorbed by deduplicating on `X-Shopify-Webhook-Id`, which Shopify keeps
//! across retries. `X-Shopify-Triggered-At` is stored (not signed) so stale
//! retries can be recognised downstream.
//!
//! The value is standard base64 with padding, decoded strictly: hex, or
//! base64 without its padding, is malformed. Shopify's newer "Events"
//! deliveries use the same headers without the `X-` prefix; both spellings
//! are accepted, the prefixed one first. Only one signature is ever sent,
//! so rotation means configuring the old and the new client secret.

use crate::config::{
    DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret,
};

use super::payload::{Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned};
use super::verify::{VerifyError, any_key_matches, decode_base64, header, header_str, utf8_keys};

pub struct Shopify {
    keys: Vec<Vec<u8>>,
}

/// Provider headers stored with the event (never the signature), in both
/// the webhook (`x-shopify-*`) and the Events (`shopify-*`) spelling.
pub const KEEP_HEADERS: &[&str] = &[
    "x-shopify-topic",
    "x-shopify-sub-topic",
    "x-shopify-webhook-id",
    "x-shopify-event-id",
    "x-shopify-triggered-at",
    "x-shopify-shop-domain",
    "x-shopify-api-version",
    "x-shopify-name",
    "shopify-topic",
    "shopify-sub-topic",
    "shopify-webhook-id",
    "shopify-event-id",
    "shopify-triggered-at",
    "shopify-shop-domain",
    "shopify-api-version",
    "shopify-name",
    "user-agent",
];

/// A Shopify header in its webhook spelling, else its Events spelling.
fn either<'a>(req: &Inbound<'a>, name: &str) -> Option<&'a str> {
    header_str(req.headers, &format!("x-{name}")).or_else(|| header_str(req.headers, name))
}

impl Shopify {
    /// The key is the app's client secret as UTF-8 bytes.
    pub fn new(secrets: &[Secret]) -> Self {
        Shopify {
            keys: utf8_keys(secrets),
        }
    }

    pub fn verify(&self, req: &Inbound) -> Result<(), VerifyError> {
        let value = header(req.headers, "x-shopify-hmac-sha256")
            .or_else(|| header(req.headers, "shopify-hmac-sha256"))
            .ok_or(VerifyError::MissingSignature)?;
        let sig = decode_base64(value).ok_or(VerifyError::MalformedSignature)?;
        if any_key_matches(&self.keys, &[req.body], &sig) {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id(either(req, "shopify-webhook-id"))?,
            event_type: either(req, "shopify-topic").map(str::to_owned),
        }))
    }
}

const FACTS: KindFacts = KindFacts {
    name: "shopify",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Shopify {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Shopify::new(&cfg.secrets)
    }

    fn verify(&self, req: &Inbound, _now_ms: i64) -> Result<(), VerifyError> {
        Shopify::verify(self, req)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Shopify::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const SECRET: &str = "shpss_hookbox_test_secret";
    const BODY: &[u8] = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
    // Computed once, outside the code under test:
    // python3 -c 'import hmac,hashlib,base64; h=lambda k: hmac.new(k,BODY,hashlib.sha256);
    //   print(base64.b64encode(h(b"shpss_hookbox_test_secret").digest()).decode());
    //   print(base64.b64encode(h(b"shpss_old_secret").digest()).decode());
    //   print(h(b"shpss_hookbox_test_secret").hexdigest())'
    const SIG: &str = "2UshM3KICvbIb1q4E57qnfo0HR+jH5+e1GWkKaZFXZQ=";
    const OLD_SIG: &str = "Y3tk7FVkJQDwnHpWz66Uc1IDd+X9j96pT60EBgezggs=";
    const HEX_SIG: &str = "d94b213372880af6c86f5ab8139eea9dfa341d1fa31f9f9ed465a429a6455d94";

    const INVALID: Result<(), VerifyError> = Err(VerifyError::InvalidSignature);
    const MALFORMED: Result<(), VerifyError> = Err(VerifyError::MalformedSignature);

    fn shopify(secrets: &[&str]) -> Shopify {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Shopify::new(&secrets)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    fn check(secrets: &[&str], sig: &str, body: &[u8]) -> Result<(), VerifyError> {
        let h = headers(&[("x-shopify-hmac-sha256", sig)]);
        shopify(secrets).verify(&Inbound::new(&h, body))
    }

    #[test]
    fn a_base64_signature_of_the_raw_body_verifies() {
        assert_eq!(check(&[SECRET], SIG, BODY), Ok(()));
    }

    #[test]
    fn the_unprefixed_events_header_is_accepted() {
        let h = headers(&[("shopify-hmac-sha256", SIG)]);
        assert_eq!(shopify(&[SECRET]).verify(&Inbound::new(&h, BODY)), Ok(()));
    }

    #[test]
    fn tampered_body_wrong_secret_and_truncation_fail() {
        assert_eq!(check(&[SECRET], SIG, b"{}"), INVALID);
        assert_eq!(check(&["wrong"], SIG, BODY), INVALID);
        // 40 base64 characters still decode (to 30 bytes) but are too short.
        assert_eq!(check(&[SECRET], &SIG[..40], BODY), INVALID);
    }

    #[test]
    fn rotation_accepts_old_or_new_secret() {
        assert_eq!(check(&[SECRET, "shpss_old_secret"], OLD_SIG, BODY), Ok(()));
        assert_eq!(check(&["shpss_old_secret", SECRET], SIG, BODY), Ok(()));
    }

    #[test]
    fn hex_unpadded_and_missing_signatures_are_rejected() {
        assert_eq!(check(&[SECRET], HEX_SIG, BODY), INVALID);
        let unpadded = SIG.trim_end_matches('=');
        assert_eq!(check(&[SECRET], unpadded, BODY), MALFORMED);
        let url_safe = SIG.replace('+', "-");
        assert_eq!(check(&[SECRET], &url_safe, BODY), MALFORMED);
        assert_eq!(check(&[SECRET], "", BODY), INVALID);
        let none = HeaderMap::new();
        let missing = shopify(&[SECRET]).verify(&Inbound::new(&none, BODY));
        assert_eq!(missing, Err(VerifyError::MissingSignature));
    }

    #[test]
    fn identity_comes_from_webhook_id_and_topic_in_either_spelling() {
        let expected = Ok(Identified::Event(Identity {
            delivery_id: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043".into(),
            event_type: Some("orders/create".into()),
        }));
        let classic = headers(&[
            (
                "x-shopify-webhook-id",
                "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
            ),
            ("x-shopify-topic", "orders/create"),
        ]);
        assert_eq!(
            shopify(&[SECRET]).identify(&Inbound::new(&classic, BODY)),
            expected
        );
        let events = headers(&[
            ("shopify-webhook-id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"),
            ("shopify-topic", "orders/create"),
        ]);
        assert_eq!(
            shopify(&[SECRET]).identify(&Inbound::new(&events, BODY)),
            expected
        );
    }

    #[test]
    fn a_delivery_without_a_webhook_id_cannot_be_identified() {
        let h = headers(&[
            ("x-shopify-event-id", "e-1"),
            ("x-shopify-topic", "orders/create"),
        ]);
        let result = shopify(&[SECRET]).identify(&Inbound::new(&h, BODY));
        assert_eq!(result, Err(IdentifyError::MissingDeliveryId));
    }

    #[test]
    fn kept_headers_include_event_id_but_never_the_signature() {
        assert!(KEEP_HEADERS.contains(&"x-shopify-event-id"));
        assert!(KEEP_HEADERS.contains(&"shopify-webhook-id"));
        assert!(!KEEP_HEADERS.iter().any(|h| h.contains("hmac")));
    }
}
