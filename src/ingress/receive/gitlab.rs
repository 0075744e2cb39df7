//! GitLab: `X-Gitlab-Token: <secret token>`, sent verbatim; nothing is signed.
//!
//! Spec: <https://docs.gitlab.com/user/project/integrations/webhooks/>
//! (secret token and delivery headers).
//! No timestamp is sent, so there is no tolerance window: replays are
//! absorbed by deduplicating on `Idempotency-Key` (GitLab 17.4 and later),
//! which stays the same when a webhook is re-sent. Older instances only send
//! `X-Gitlab-Webhook-UUID`, which is new on every attempt, so there a re-send
//! is stored twice.
//!
//! The token is compared with every configured secret, exact bytes, in
//! constant time: both sides are hashed with SHA-256 first and the digests
//! compared, so neither the time taken nor an early exit on a length
//! mismatch tells anything about the secret's length. The body is not authenticated, so the
//! endpoint must only be reachable over TLS. GitLab's optional signing token
//! (Standard Webhooks headers) is not handled here.

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{
    DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret,
};

use super::payload::{Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned};
use super::verify::{VerifyError, header, header_str, utf8_keys};

pub struct Gitlab {
    /// SHA-256 of each accepted token.
    tokens: Vec<[u8; 32]>,
}

/// Provider headers stored with the event (never the token).
pub const KEEP_HEADERS: &[&str] = &[
    "x-gitlab-event",
    "idempotency-key",
    "x-gitlab-webhook-uuid",
    "x-gitlab-event-uuid",
    "x-gitlab-instance",
    "user-agent",
];

impl Gitlab {
    /// The expected token is the secret's UTF-8 bytes, used as-is.
    pub fn new(secrets: &[Secret]) -> Self {
        Gitlab {
            tokens: utf8_keys(secrets).iter().map(|t| digest(t)).collect(),
        }
    }

    pub fn verify(&self, req: &Inbound) -> Result<(), VerifyError> {
        let token = header(req.headers, "x-gitlab-token").ok_or(VerifyError::MissingSignature)?;
        // Every secret is compared, without an early exit, so the time taken
        // does not tell which one (old or new) matched.
        let sent = digest(token);
        let mut matched = false;
        for expected in &self.tokens {
            matched |= bool::from(expected.ct_eq(&sent));
        }
        if matched {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id(delivery_key(req.headers))?,
            event_type: header_str(req.headers, "x-gitlab-event").map(str::to_owned),
        }))
    }
}

/// The header a GitLab delivery is keyed on: `Idempotency-Key`, else
/// `X-Gitlab-Webhook-UUID`. Catch-up reads the same rule from the request
/// headers GitLab lists for a hook event, so both agree on what the inbox
/// holds.
pub fn delivery_key(headers: &HeaderMap) -> Option<&str> {
    header_str(headers, "idempotency-key")
        .filter(|id| !id.is_empty())
        .or_else(|| header_str(headers, "x-gitlab-webhook-uuid"))
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

const FACTS: KindFacts = KindFacts {
    name: "gitlab",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Gitlab {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Gitlab::new(&cfg.secrets)
    }

    fn verify(&self, req: &Inbound, _now_ms: i64) -> Result<(), VerifyError> {
        Gitlab::verify(self, req)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Gitlab::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const TOKEN: &str = "glpat-style token, spaces included";

    fn gitlab(secrets: &[&str]) -> Gitlab {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Gitlab::new(&secrets)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    fn check(secrets: &[&str], token: &str) -> Result<(), VerifyError> {
        let h = headers(&[("x-gitlab-token", token)]);
        gitlab(secrets).verify(&Inbound::new(&h, b"{}"))
    }

    #[test]
    fn the_exact_token_verifies_whatever_the_body() {
        assert_eq!(check(&[TOKEN], TOKEN), Ok(()));
    }

    #[test]
    fn wrong_truncated_extended_and_recased_tokens_fail() {
        for bad in [
            "wrong",
            &TOKEN[..TOKEN.len() - 1],
            format!("{TOKEN}x").as_str(),
            format!(" {TOKEN}").as_str(),
            TOKEN.to_uppercase().as_str(),
            "",
        ] {
            let result = check(&[TOKEN], bad);
            assert_eq!(result, Err(VerifyError::InvalidSignature), "{bad:?}");
        }
    }

    #[test]
    fn rotation_accepts_old_or_new_token() {
        assert_eq!(check(&["new token", TOKEN], TOKEN), Ok(()));
        assert_eq!(check(&[TOKEN, "new token"], "new token"), Ok(()));
    }

    #[test]
    fn a_missing_token_is_rejected() {
        let h = headers(&[("x-gitlab-event", "Push Hook")]);
        let result = gitlab(&[TOKEN]).verify(&Inbound::new(&h, b"{}"));
        assert_eq!(result, Err(VerifyError::MissingSignature));
    }

    #[test]
    fn identity_prefers_the_idempotency_key() {
        let h = headers(&[
            ("idempotency-key", "f1f0f0b5-0b0e-4f4d-9a63-3c5b3f0e7e01"),
            (
                "x-gitlab-webhook-uuid",
                "0b8c8e2c-5f5d-4b7e-8c55-2a1f3f3f9d11",
            ),
            ("x-gitlab-event", "Merge Request Hook"),
        ]);
        assert_eq!(
            gitlab(&[TOKEN]).identify(&Inbound::new(&h, b"{}")),
            Ok(Identified::Event(Identity {
                delivery_id: "f1f0f0b5-0b0e-4f4d-9a63-3c5b3f0e7e01".into(),
                event_type: Some("Merge Request Hook".into()),
            }))
        );
    }

    #[test]
    fn identity_falls_back_to_the_webhook_uuid_on_older_instances() {
        let h = headers(&[(
            "x-gitlab-webhook-uuid",
            "0b8c8e2c-5f5d-4b7e-8c55-2a1f3f3f9d11",
        )]);
        let Ok(Identified::Event(id)) = gitlab(&[TOKEN]).identify(&Inbound::new(&h, b"{}")) else {
            panic!("expected an event");
        };
        assert_eq!(id.delivery_id, "0b8c8e2c-5f5d-4b7e-8c55-2a1f3f3f9d11");
        assert_eq!(id.event_type, None);
        let none = HeaderMap::new();
        let missing = gitlab(&[TOKEN]).identify(&Inbound::new(&none, b"{}"));
        assert_eq!(missing, Err(IdentifyError::MissingDeliveryId));
    }

    #[test]
    fn kept_headers_never_include_the_token() {
        assert!(!KEEP_HEADERS.contains(&"x-gitlab-token"));
        assert!(KEEP_HEADERS.contains(&"idempotency-key"));
    }
}
