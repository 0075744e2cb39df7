//! GitHub: `X-Hub-Signature-256: sha256=<hex>` over the raw body.
//!
//! Spec: <https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries>.
//! No timestamp is signed, so there is no tolerance window: replays are
//! absorbed by deduplicating on `X-GitHub-Delivery`, which GitHub keeps
//! unchanged when a delivery is redelivered. The legacy SHA-1 header is
//! never accepted.

use crate::config::{
    DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret,
};

use super::payload::{Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned};
use super::verify::{VerifyError, any_key_matches, decode_hex, header, header_str, utf8_keys};

pub struct GitHub {
    keys: Vec<Vec<u8>>,
}

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &[
    "x-github-event",
    "x-github-delivery",
    "x-github-hook-id",
    "x-github-hook-installation-target-type",
    "x-github-hook-installation-target-id",
    "x-github-enterprise-version",
    "x-github-enterprise-host",
    "user-agent",
];

impl GitHub {
    /// The key is the secret's UTF-8 bytes, used as-is.
    pub fn new(secrets: &[Secret]) -> Self {
        GitHub {
            keys: utf8_keys(secrets),
        }
    }

    pub fn verify(&self, req: &Inbound) -> Result<(), VerifyError> {
        let value =
            header(req.headers, "x-hub-signature-256").ok_or(VerifyError::MissingSignature)?;
        let hex = value
            .strip_prefix(b"sha256=")
            .ok_or(VerifyError::MalformedSignature)?;
        let sig = decode_hex(hex).ok_or(VerifyError::MalformedSignature)?;
        if any_key_matches(&self.keys, &[req.body], &sig) {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id(header_str(req.headers, "x-github-delivery"))?,
            event_type: header_str(req.headers, "x-github-event").map(str::to_owned),
        }))
    }
}

const FACTS: KindFacts = KindFacts {
    name: "github",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for GitHub {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        GitHub::new(&cfg.secrets)
    }

    fn verify(&self, req: &Inbound, _now_ms: i64) -> Result<(), VerifyError> {
        GitHub::verify(self, req)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        GitHub::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    fn github(secrets: &[&str]) -> GitHub {
        GitHub::new(&secrets.iter().map(|s| Secret::new(*s)).collect::<Vec<_>>())
    }

    fn headers(sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-hub-signature-256", HeaderValue::from_str(sig).unwrap());
        h.insert(
            "x-github-delivery",
            HeaderValue::from_static("72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        );
        h.insert("x-github-event", HeaderValue::from_static("push"));
        h
    }

    const DOC_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    #[test]
    fn documented_vector_verifies() {
        let h = headers(DOC_SIG);
        let req = Inbound::new(&h, b"Hello, World!");
        assert_eq!(github(&["It's a Secret to Everybody"]).verify(&req), Ok(()));
    }

    #[test]
    fn tampered_body_wrong_secret_and_truncation_fail() {
        let h = headers(DOC_SIG);
        let g = github(&["It's a Secret to Everybody"]);
        assert_eq!(
            g.verify(&Inbound::new(&h, b"Hello, World?")),
            Err(VerifyError::InvalidSignature)
        );
        assert_eq!(
            github(&["wrong"]).verify(&Inbound::new(&h, b"Hello, World!")),
            Err(VerifyError::InvalidSignature)
        );
        let truncated = headers(&DOC_SIG[..DOC_SIG.len() - 2]);
        assert_eq!(
            g.verify(&Inbound::new(&truncated, b"Hello, World!")),
            Err(VerifyError::InvalidSignature)
        );
    }

    #[test]
    fn rotation_accepts_old_or_new_secret() {
        let h = headers(DOC_SIG);
        let g = github(&["new secret", "It's a Secret to Everybody"]);
        assert_eq!(g.verify(&Inbound::new(&h, b"Hello, World!")), Ok(()));
    }

    #[test]
    fn malformed_and_missing_headers_are_rejected() {
        let g = github(&["It's a Secret to Everybody"]);
        let bare = headers(&DOC_SIG[7..]);
        assert_eq!(
            g.verify(&Inbound::new(&bare, b"Hello, World!")),
            Err(VerifyError::MalformedSignature)
        );
        let not_hex = headers("sha256=zz");
        assert_eq!(
            g.verify(&Inbound::new(&not_hex, b"x")),
            Err(VerifyError::MalformedSignature)
        );
        let mut sha1_only = HeaderMap::new();
        sha1_only.insert("x-hub-signature", HeaderValue::from_static("sha1=abc"));
        assert_eq!(
            g.verify(&Inbound::new(&sha1_only, b"x")),
            Err(VerifyError::MissingSignature)
        );
    }

    #[test]
    fn identity_comes_from_delivery_and_event_headers() {
        let h = headers(DOC_SIG);
        let id = github(&["s"]).identify(&Inbound::new(&h, b"{}")).unwrap();
        assert_eq!(
            id,
            Identified::Event(Identity {
                delivery_id: "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
                event_type: Some("push".into()),
            })
        );
    }
}
