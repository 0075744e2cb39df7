//! Standard Webhooks (and Svix): `webhook-signature: v1,<base64> [v1,<base64> ...]`
//! over `webhook-id + "." + webhook-timestamp + "." + body`.
//!
//! Spec: <https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md>;
//! Svix: <https://docs.svix.com/receiving/verifying-payloads/how-manual>.
//! Tolerance: `webhook-timestamp` must lie within the source's window
//! (default 300 s, as in every reference library) of now, in both directions.
//!
//! The key is the base64-decoded part of the secret after `whsec_` (a
//! secret without the prefix means the same key); this is the opposite of
//! Stripe, which uses its `whsec_` string as-is. `Secret::standard_key`
//! (in config) decodes it, for this verifier and for the keys hookbox signs
//! its own deliveries and alerts with. The signature itself is checked by
//! `crate::signature::standard`, the same code hookbox signs with: every
//! `v1` entry is tried, since senders sign with old and new keys during
//! rotation; `v1a`, `v2` and other labels are skipped, so a header without
//! a usable `v1` is rejected.
//! Svix senders use `svix-id`, `svix-timestamp` and `svix-signature`; when a
//! `svix-signature` is present all three `svix-*` headers are used,
//! otherwise all three `webhook-*` ones, never a mix.

use serde_json::Value;

use crate::config::{DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig};
use crate::signature::standard::{self, Mismatch};

use super::payload::{Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned, tolerance_secs};
use super::verify::{VerifyError, check_timestamp, header, header_str};

/// A secret is base64 after an optional `whsec_` ([`Secret::standard_key`]).
fn check_key(secret: &Secret) -> Result<(), String> {
    secret
        .standard_key()
        .map(drop)
        .ok_or_else(|| "a Standard Webhooks secret is `whsec_` followed by base64".to_owned())
}

pub struct Standard {
    keys: Vec<Vec<u8>>,
    tolerance_secs: i64,
}

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &[
    "webhook-id",
    "webhook-timestamp",
    "svix-id",
    "svix-timestamp",
    "user-agent",
];

/// The id, timestamp and signature header names, as one consistent set:
/// `svix-*` when a Svix signature is present (the Svix libraries prefer
/// them), else `webhook-*`.
fn names(req: &Inbound) -> [&'static str; 3] {
    if header(req.headers, "svix-signature").is_some() {
        ["svix-id", "svix-timestamp", "svix-signature"]
    } else {
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
    }
}

impl Standard {
    /// A secret that is not a key ([`Secret::standard_key`]) is skipped:
    /// config validation has refused it already.
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Standard {
            keys: secrets.iter().filter_map(Secret::standard_key).collect(),
            tolerance_secs,
        }
    }

    pub fn verify(&self, req: &Inbound, now: i64) -> Result<(), VerifyError> {
        let [id_name, ts_name, sig_name] = names(req);
        let value = header(req.headers, sig_name).ok_or(VerifyError::MissingSignature)?;
        let id = header(req.headers, id_name)
            .filter(|id| !id.is_empty() && !id.contains(&b'.'))
            .ok_or(VerifyError::MalformedSignature)?;
        let ts = header(req.headers, ts_name).ok_or(VerifyError::MissingTimestamp)?;
        check_timestamp(ts, now, self.tolerance_secs)?;
        standard::verify(&self.keys, id, ts, value, req.body).map_err(|m| match m {
            Mismatch::Malformed => VerifyError::MalformedSignature,
            Mismatch::Invalid => VerifyError::InvalidSignature,
        })
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        let event_type = req
            .json()
            .and_then(|json| json.get("type"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id(header_str(req.headers, names(req)[0]))?,
            event_type,
        }))
    }
}

const FACTS: KindFacts = KindFacts {
    name: "standard",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: check_key,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Standard {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Standard::new(&cfg.secrets, tolerance_secs(cfg))
    }

    fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        Standard::verify(self, req, now_ms / 1000)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Standard::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    // The Go, JavaScript and Python reference libraries' test vector.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    // The same signed string with the raw `whsec_...` text as the key:
    // python3 -c 'import hmac,hashlib,base64; print(base64.b64encode(hmac.new(
    //   b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    //   b"msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{\"test\": 2432232314}",
    //   hashlib.sha256).digest()).decode())'
    const RAW_KEY_SIG: &str = "v1,TcxlhK9b6UD6iVI1ZU2tTqp8PEVfYRseNNfa6b+LcUg=";
    // The Rust reference library's test vector.
    const RUST_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const RUST_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const RUST_TS: &str = "1649367553";
    const RUST_BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const RUST_SIG: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    const INVALID: Result<(), VerifyError> = Err(VerifyError::InvalidSignature);
    const MALFORMED: Result<(), VerifyError> = Err(VerifyError::MalformedSignature);

    fn standard(secrets: &[&str]) -> Standard {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Standard::new(&secrets, 300)
    }

    /// `{prefix}-id`, `{prefix}-timestamp` and `{prefix}-signature`.
    fn headers(prefix: &str, id: &str, ts: &str, sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [("id", id), ("timestamp", ts), ("signature", sig)] {
            let name: axum::http::HeaderName = format!("{prefix}-{name}").parse().unwrap();
            h.insert(name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    fn verify(secret: &str, h: &HeaderMap, body: &[u8], now: i64) -> Result<(), VerifyError> {
        standard(&[secret]).verify(&Inbound::new(h, body), now)
    }

    /// The first vector's id and timestamp with `sig`, verified with [`SECRET`].
    fn check(sig: &str, body: &[u8], now: i64) -> Result<(), VerifyError> {
        verify(
            SECRET,
            &headers("webhook", ID, &TS.to_string(), sig),
            body,
            now,
        )
    }

    #[test]
    fn the_go_js_and_python_library_vector_verifies() {
        assert_eq!(check(SIG, BODY, TS + 10), Ok(()));
    }

    #[test]
    fn the_rust_library_vector_verifies() {
        let h = headers("webhook", RUST_ID, RUST_TS, RUST_SIG);
        assert_eq!(verify(RUST_SECRET, &h, RUST_BODY, 1_649_367_543), Ok(()));
    }

    #[test]
    fn the_secret_is_base64_decoded_and_the_prefix_is_optional() {
        assert_eq!(check(RAW_KEY_SIG, BODY, TS), INVALID);
        let h = headers("webhook", ID, &TS.to_string(), SIG);
        assert_eq!(verify(&SECRET[6..], &h, BODY, TS), Ok(()));
    }

    #[test]
    fn tampered_body_wrong_secret_and_truncation_fail() {
        assert_eq!(check(SIG, b"{}", TS), INVALID);
        let h = headers("webhook", ID, &TS.to_string(), SIG);
        assert_eq!(verify(RUST_SECRET, &h, BODY, TS), INVALID);
        // Four fewer base64 characters still decode, to a 30-byte prefix.
        assert_eq!(check(&SIG[..SIG.len() - 4], BODY, TS), INVALID);
    }

    #[test]
    fn a_changed_id_or_timestamp_breaks_the_signature() {
        let other_id = headers("webhook", "msg_other", &TS.to_string(), SIG);
        assert_eq!(verify(SECRET, &other_id, BODY, TS), INVALID);
        let other_ts = headers("webhook", ID, &(TS + 1).to_string(), SIG);
        assert_eq!(verify(SECRET, &other_ts, BODY, TS), INVALID);
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
    fn rotation_tries_every_v1_entry_and_every_secret() {
        assert_eq!(check(&format!("{RAW_KEY_SIG} {SIG}"), BODY, TS), Ok(()));
        let h = headers("webhook", ID, &TS.to_string(), SIG);
        let both = standard(&[RUST_SECRET, SECRET]);
        assert_eq!(both.verify(&Inbound::new(&h, BODY), TS), Ok(()));
    }

    #[test]
    fn unknown_versions_alone_are_rejected_even_with_the_right_mac() {
        let mac = &SIG[3..];
        assert_eq!(check(&format!("v1a,{mac} v2,{mac}"), BODY, TS), MALFORMED);
        assert_eq!(
            check(&format!("v1a,{mac} v2,{mac} {SIG}"), BODY, TS),
            Ok(())
        );
    }

    #[test]
    fn malformed_headers_are_rejected() {
        for bad in ["v1,", &SIG[3..], "v1", "", "v1,!!!!"] {
            assert_eq!(check(bad, BODY, TS), MALFORMED, "{bad:?}");
        }
        let dotted = headers("webhook", "msg.1", &TS.to_string(), SIG);
        assert_eq!(verify(SECRET, &dotted, BODY, TS), MALFORMED);
        for ts in [format!("{TS}.5"), format!("{TS}abc"), format!("{TS}000")] {
            let h = headers("webhook", ID, &ts, SIG);
            let result = verify(SECRET, &h, BODY, TS);
            assert_eq!(result, Err(VerifyError::MalformedTimestamp), "{ts}");
        }
        let missing = verify(SECRET, &HeaderMap::new(), BODY, TS);
        assert_eq!(missing, Err(VerifyError::MissingSignature));
    }

    #[test]
    fn svix_headers_are_preferred_as_one_consistent_set() {
        let mut h = headers("svix", ID, &TS.to_string(), SIG);
        h.extend(headers("webhook", "msg_other", "1", "v1,AAAA"));
        assert_eq!(verify(SECRET, &h, BODY, TS), Ok(()));
        let Ok(Identified::Event(id)) = standard(&[SECRET]).identify(&Inbound::new(&h, BODY))
        else {
            panic!("expected an event");
        };
        assert_eq!(id.delivery_id, ID);
    }

    #[test]
    fn identity_is_the_message_id_and_an_optional_body_type() {
        let h = headers("webhook", ID, &TS.to_string(), SIG);
        let s = standard(&[SECRET]);
        let typed = Identity {
            delivery_id: ID.into(),
            event_type: Some("invoice.paid".into()),
        };
        let body = br#"{"type":"invoice.paid"}"#;
        assert_eq!(
            s.identify(&Inbound::new(&h, body)),
            Ok(Identified::Event(typed))
        );
        for body in [BODY, b"plain text", br#"{"type":7}"#] {
            let Ok(Identified::Event(id)) = s.identify(&Inbound::new(&h, body)) else {
                panic!("expected an event for {body:?}");
            };
            assert_eq!(id.event_type, None);
        }
        let missing = s.identify(&Inbound::new(&HeaderMap::new(), BODY));
        assert_eq!(missing, Err(IdentifyError::MissingDeliveryId));
    }
}
