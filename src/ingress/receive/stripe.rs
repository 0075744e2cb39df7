//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]` over
//! `t + "." + body`.
//!
//! Spec: <https://docs.stripe.com/webhooks/signature> and
//! <https://docs.stripe.com/webhooks> ("Verify webhook signatures manually").
//! Tolerance: `t` must lie within the source's window (default 300 s) of
//! now, in **both** directions; stripe-node only rejects old timestamps.
//!
//! The key is the endpoint secret exactly as shown, `whsec_` included, as
//! UTF-8 bytes: it is *not* base64-decoded (the opposite of Standard
//! Webhooks). Every `v1` entry is tried, since Stripe sends one per active
//! secret while a secret is rolled; `v0` and unknown schemes are ignored, so
//! a header without `v1` is rejected. The dedupe key is the event id in the
//! body, qualified by the connected account for Connect events.

use serde_json::Value;

use crate::config::{
    DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret,
};

use super::payload::{Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned, tolerance_secs};
use super::verify::{
    MAX_CANDIDATES, VerifyError, any_signature_matches, check_timestamp, decode_hex, header,
    utf8_keys,
};

pub struct Stripe {
    keys: Vec<Vec<u8>>,
    tolerance_secs: i64,
}

/// Provider headers stored with the event (never the signature). Stripe
/// puts everything else in the body.
pub const KEEP_HEADERS: &[&str] = &["user-agent"];

impl Stripe {
    /// The key is the secret's UTF-8 bytes, `whsec_` prefix and all.
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Stripe {
            keys: utf8_keys(secrets),
            tolerance_secs,
        }
    }

    pub fn verify(&self, req: &Inbound, now: i64) -> Result<(), VerifyError> {
        let value = header(req.headers, "stripe-signature").ok_or(VerifyError::MissingSignature)?;
        let mut timestamp = None;
        let mut candidates = Vec::new();
        for item in value.split(|&b| b == b',') {
            let Some(eq) = item.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (scheme, field) = (&item[..eq], &item[eq + 1..]);
            match scheme {
                b"t" if timestamp.is_some() => return Err(VerifyError::MalformedSignature),
                b"t" => timestamp = Some(field),
                b"v1" => candidates.extend(decode_hex(field).filter(|sig| !sig.is_empty())),
                _ => {}
            }
        }
        let t = timestamp.ok_or(VerifyError::MissingTimestamp)?;
        if candidates.is_empty() || candidates.len() > MAX_CANDIDATES {
            return Err(VerifyError::MalformedSignature);
        }
        check_timestamp(t, now, self.tolerance_secs)?;
        if any_signature_matches(&self.keys, &[t, b".", req.body], &candidates) {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        identify(req)
    }
}

/// The dedupe key and type of a Stripe event body: its `id`, qualified as
/// `account/id` for Connect events. Also used for events the catch-up job
/// fetches, so a pushed and a fetched copy share one key.
pub fn identify(req: &Inbound) -> Result<Identified, IdentifyError> {
    let json = req.json().ok_or(IdentifyError::InvalidJson)?;
    let text = |key: &str| {
        json.get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let id = match (text("account"), text("id")) {
        (Some(account), Some(id)) => Some(format!("{account}/{id}")),
        (None, id) => id.map(str::to_owned),
        (Some(_), None) => None,
    };
    Ok(Identified::Event(Identity {
        delivery_id: delivery_id(id.as_deref())?,
        event_type: text("type").map(str::to_owned),
    }))
}

const FACTS: KindFacts = KindFacts {
    name: "stripe",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Stripe {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Stripe::new(&cfg.secrets, tolerance_secs(cfg))
    }

    fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        Stripe::verify(self, req, now_ms / 1000)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Stripe::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const SECRET: &str = "whsec_c3RyaXBlLXRlc3Qtc2VjcmV0";
    const T: i64 = 1_700_000_000;
    const BODY: &[u8] = br#"{"id":"evt_1","object":"event","type":"payment_intent.succeeded"}"#;
    // Computed once, outside the code under test:
    // python3 -c 'import hmac,hashlib,base64; b=b"1700000000."+BODY;
    //   print(hmac.new(b"whsec_c3RyaXBlLXRlc3Qtc2VjcmV0",b,hashlib.sha256).hexdigest());
    //   print(hmac.new(b"whsec_old_secret",b,hashlib.sha256).hexdigest());
    //   print(hmac.new(base64.b64decode("c3RyaXBlLXRlc3Qtc2VjcmV0"),b,hashlib.sha256).hexdigest())'
    const SIG: &str = "dc15d8c3568eb2849cc2f008db70c0bf0e7c74c5468f35072c123d37b6bd6f48";
    const OLD_SIG: &str = "d68538c3431c25a11001054141750cd00f5ee519ed890f2d2816b9aa0f9c0586";
    const DECODED_KEY_SIG: &str =
        "c15d9e982d4fa46e82dee83861ee8fc4447e12e755d2c411a22ceb52d999a2a6";

    const INVALID: Result<(), VerifyError> = Err(VerifyError::InvalidSignature);
    const MALFORMED: Result<(), VerifyError> = Err(VerifyError::MalformedSignature);

    fn stripe(secrets: &[&str]) -> Stripe {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Stripe::new(&secrets, 300)
    }

    fn verify(secrets: &[&str], sig: &str, body: &[u8], now: i64) -> Result<(), VerifyError> {
        let mut h = HeaderMap::new();
        h.insert("stripe-signature", HeaderValue::from_str(sig).unwrap());
        stripe(secrets).verify(&Inbound::new(&h, body), now)
    }

    /// `sig` as the header, [`SECRET`], [`BODY`], now = [`T`].
    fn check(sig: &str) -> Result<(), VerifyError> {
        verify(&[SECRET], sig, BODY, T)
    }

    #[test]
    fn a_signature_made_with_the_whole_whsec_string_verifies() {
        assert_eq!(check(&format!("t={T},v1={SIG}")), Ok(()));
    }

    #[test]
    fn a_signature_made_with_the_base64_decoded_key_fails() {
        assert_eq!(check(&format!("t={T},v1={DECODED_KEY_SIG}")), INVALID);
    }

    #[test]
    fn tampered_body_wrong_secret_changed_timestamp_and_truncation_fail() {
        let sig = format!("t={T},v1={SIG}");
        assert_eq!(verify(&[SECRET], &sig, b"{}", T), INVALID);
        assert_eq!(verify(&["whsec_wrong"], &sig, BODY, T), INVALID);
        assert_eq!(check(&format!("t={},v1={SIG}", T + 1)), INVALID);
        assert_eq!(
            check(&format!("t={T},v1={}", &SIG[..SIG.len() - 2])),
            INVALID
        );
    }

    #[test]
    fn timestamps_pass_exactly_at_tolerance_and_fail_one_second_past_it() {
        let sig = format!("t={T},v1={SIG}");
        assert_eq!(verify(&[SECRET], &sig, BODY, T + 300), Ok(()));
        assert_eq!(verify(&[SECRET], &sig, BODY, T - 300), Ok(()));
        let stale = |age_secs| Err(VerifyError::TimestampOutOfTolerance { age_secs });
        assert_eq!(verify(&[SECRET], &sig, BODY, T + 301), stale(301));
        assert_eq!(verify(&[SECRET], &sig, BODY, T - 301), stale(-301));
    }

    #[test]
    fn rotation_tries_every_v1_entry_and_every_secret() {
        assert_eq!(check(&format!("t={T},v1={OLD_SIG},v1={SIG}")), Ok(()));
        let old_only = format!("t={T},v1={OLD_SIG}");
        assert_eq!(
            verify(&[SECRET, "whsec_old_secret"], &old_only, BODY, T),
            Ok(())
        );
    }

    #[test]
    fn a_v0_only_header_fails_even_with_the_right_hmac() {
        assert_eq!(check(&format!("t={T},v0={SIG}")), MALFORMED);
        assert_eq!(check(&format!("t={T},v1={SIG},v0={SIG},v9=zz")), Ok(()));
    }

    #[test]
    fn malformed_and_missing_headers_are_rejected() {
        assert_eq!(
            check(&format!("v1={SIG}")),
            Err(VerifyError::MissingTimestamp)
        );
        for bad in ["", "v1=zz", "v1=", "t=1700000000,v1="] {
            assert_eq!(check(&format!("t={T},{bad}")), MALFORMED, "{bad:?}");
        }
        for t in [format!("{T}abc"), format!("{T}000"), String::new()] {
            let result = check(&format!("t={t},v1={SIG}"));
            assert_eq!(result, Err(VerifyError::MalformedTimestamp), "{t:?}");
        }
        let none = HeaderMap::new();
        let missing = stripe(&[SECRET]).verify(&Inbound::new(&none, BODY), T);
        assert_eq!(missing, Err(VerifyError::MissingSignature));
    }

    fn identify(body: &[u8]) -> Result<Identified, IdentifyError> {
        stripe(&[SECRET]).identify(&Inbound::new(&HeaderMap::new(), body))
    }

    fn event(delivery_id: &str, event_type: &str) -> Result<Identified, IdentifyError> {
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id.into(),
            event_type: Some(event_type.into()),
        }))
    }

    #[test]
    fn identity_is_the_event_id_and_type_from_the_body() {
        assert_eq!(identify(BODY), event("evt_1", "payment_intent.succeeded"));
    }

    #[test]
    fn connect_events_are_keyed_by_account_and_event_id() {
        let body = br#"{"id":"evt_2","account":"acct_9","type":"account.updated"}"#;
        assert_eq!(identify(body), event("acct_9/evt_2", "account.updated"));
    }

    #[test]
    fn bodies_without_json_or_an_id_cannot_be_identified() {
        assert_eq!(identify(b"not json"), Err(IdentifyError::InvalidJson));
        for body in [r#"{"type":"x"}"#, r#"{"id":42}"#, r#"{"account":"acct_9"}"#] {
            let result = identify(body.as_bytes());
            assert_eq!(result, Err(IdentifyError::MissingDeliveryId), "{body}");
        }
    }

    #[test]
    fn a_header_with_too_many_signatures_is_malformed_before_any_hashing() {
        let many: Vec<String> = (0..=MAX_CANDIDATES)
            .map(|_| format!("v1={}", "00".repeat(32)))
            .collect();
        let value = format!("t=1000,{}", many.join(","));
        let mut h = HeaderMap::new();
        h.insert("stripe-signature", HeaderValue::from_str(&value).unwrap());
        let stripe = Stripe::new(&[Secret::new("whsec_x")], 300);
        assert_eq!(
            stripe.verify(&Inbound::new(&h, b"{}"), 1000),
            Err(VerifyError::MalformedSignature)
        );
    }
}
