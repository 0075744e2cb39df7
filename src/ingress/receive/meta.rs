//! Meta (WhatsApp Business, Messenger, Instagram, and other Graph API
//! webhooks): `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the raw
//! body keyed with the **app secret**, as GitHub signs; and a `GET`
//! subscription handshake.
//!
//! Spec: <https://developers.facebook.com/docs/graph-api/webhooks/getting-started>
//! ("Verification Requests" and "Validating Payloads"). No timestamp is
//! signed, so there is no tolerance window; the legacy SHA-1
//! `X-Hub-Signature` is never accepted alone.
//!
//! Handshake: when a callback URL is saved, Meta sends
//! `GET ?hub.mode=subscribe&hub.challenge=<n>&hub.verify_token=<token>`.
//! hookbox echoes the challenge as text only when the mode is `subscribe`
//! and the token equals the source's `verify_token` (constant time);
//! a wrong token is 403, anything else 404. Nothing is stored.
//!
//! Identification: a body is `{"object": ..., "entry": [...]}` and may
//! batch several entries. The dedupe key is every entry's `id` and `time`
//! (`meta:<id>@<time>,...`, hashed when long); when an entry lacks either
//! (WhatsApp's do not carry `time`), the SHA-256 of the body. The event type
//! is `object` (`page`, `instagram`, `whatsapp_business_account`).

use serde_json::Value;

use crate::config::{
    DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret,
};

use super::github::GitHub;
use super::payload::{Identified, IdentifyError, Identity, Inbound, MAX_DELIVERY_ID_LEN};
use super::provider::{Provider, Refused, owned};
use super::verify::{VerifyError, body_hash_id, ct_eq};

pub struct Meta {
    /// Meta signs exactly as GitHub does: `X-Hub-Signature-256` over the
    /// body, keyed with the app secret.
    signature: GitHub,
    /// Config validation requires it for kind `meta`; `None` refuses every
    /// handshake.
    verify_token: Option<Secret>,
}

/// Longest `hub.challenge` echoed; Meta's are short integers.
const MAX_CHALLENGE_LEN: usize = 256;

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &["user-agent"];

impl Meta {
    /// The key is the app secret's UTF-8 bytes.
    pub fn new(secrets: &[Secret], verify_token: Option<Secret>) -> Self {
        Meta {
            signature: GitHub::new(secrets),
            verify_token,
        }
    }

    pub fn verify(&self, req: &Inbound) -> Result<(), VerifyError> {
        self.signature.verify(req)
    }

    /// Answers `GET ?hub.mode=subscribe&...` with the challenge to echo.
    pub fn subscribe(&self, query: &str) -> Result<String, Refused> {
        let (mut mode, mut challenge, mut token) = (None, None, None);
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let slot = match &*name {
                "hub.mode" => &mut mode,
                "hub.challenge" => &mut challenge,
                "hub.verify_token" => &mut token,
                _ => continue,
            };
            // A parameter given twice: which one would Meta mean?
            if slot.replace(value.into_owned()).is_some() {
                return Err(Refused::NotAHandshake);
            }
        }
        if mode.as_deref() != Some("subscribe") {
            return Err(Refused::NotAHandshake);
        }
        let (Some(token), Some(expected)) = (token, &self.verify_token) else {
            return Err(Refused::WrongToken);
        };
        if !ct_eq(token.as_bytes(), expected.expose().as_bytes()) {
            return Err(Refused::WrongToken);
        }
        challenge
            .filter(|c| !c.is_empty() && c.len() <= MAX_CHALLENGE_LEN)
            .ok_or(Refused::NotAHandshake)
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        let json = req.json().ok_or(IdentifyError::InvalidJson)?;
        Ok(Identified::Event(Identity {
            delivery_id: entries_key(json).unwrap_or_else(|| body_hash_id(req.body)),
            event_type: json
                .get("object")
                .and_then(Value::as_str)
                .map(str::to_owned),
        }))
    }
}

/// `meta:<id>@<time>,...` over the entries, or `None` when there are none
/// or one lacks an id or a time. Hashed when longer than an id may be.
fn entries_key(json: &Value) -> Option<String> {
    let entries = json.get("entry")?.as_array()?;
    if entries.is_empty() {
        return None;
    }
    let scalar = |v: &Value| match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let parts = entries
        .iter()
        .map(|e| {
            Some(format!(
                "{}@{}",
                scalar(e.get("id")?)?,
                scalar(e.get("time")?)?
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    let key = format!("meta:{}", parts.join(","));
    Some(if key.len() <= MAX_DELIVERY_ID_LEN {
        key
    } else {
        format!("meta:{}", &body_hash_id(key.as_bytes())["sha256:".len()..])
    })
}

const FACTS: KindFacts = KindFacts {
    name: "meta",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Meta {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Meta::new(&cfg.secrets, cfg.verify_token.clone())
    }

    fn verify(&self, req: &Inbound, _now_ms: i64) -> Result<(), VerifyError> {
        Meta::verify(self, req)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Meta::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }

    fn subscribe(&self, query: &str) -> Option<Result<String, Refused>> {
        Some(Meta::subscribe(self, query))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const SECRET: &str = "meta-app-secret";
    const TOKEN: &str = "meta-verify-token";

    fn meta() -> Meta {
        Meta::new(&[Secret::new(SECRET)], Some(Secret::new(TOKEN)))
    }

    #[test]
    fn the_handshake_echoes_the_challenge_only_for_the_right_token() {
        let m = meta();
        let ok = format!("hub.mode=subscribe&hub.challenge=1158201444&hub.verify_token={TOKEN}");
        assert_eq!(m.subscribe(&ok), Ok("1158201444".into()));
        let wrong = "hub.mode=subscribe&hub.challenge=1&hub.verify_token=meta-verify-tokeN";
        assert_eq!(m.subscribe(wrong), Err(Refused::WrongToken));
        let prefix = "hub.mode=subscribe&hub.challenge=1&hub.verify_token=meta-verify";
        assert_eq!(m.subscribe(prefix), Err(Refused::WrongToken));
        assert_eq!(
            m.subscribe("hub.mode=subscribe&hub.challenge=1"),
            Err(Refused::WrongToken)
        );
        let other_mode = format!("hub.mode=unsubscribe&hub.challenge=1&hub.verify_token={TOKEN}");
        assert_eq!(m.subscribe(&other_mode), Err(Refused::NotAHandshake));
        assert_eq!(m.subscribe(""), Err(Refused::NotAHandshake));
        let no_challenge = format!("hub.mode=subscribe&hub.verify_token={TOKEN}");
        assert_eq!(m.subscribe(&no_challenge), Err(Refused::NotAHandshake));
        let twice = format!(
            "hub.mode=subscribe&hub.challenge=1&hub.verify_token={TOKEN}&hub.verify_token=x"
        );
        assert_eq!(m.subscribe(&twice), Err(Refused::NotAHandshake));
        let encoded =
            "hub.mode=subscribe&hub.challenge=a%20b&hub.verify_token=meta%2Dverify%2Dtoken";
        assert_eq!(m.subscribe(encoded), Ok("a b".into()));
        let none = Meta::new(&[Secret::new(SECRET)], None);
        assert_eq!(none.subscribe(&ok), Err(Refused::WrongToken));
    }

    #[test]
    fn the_signature_is_githubs_scheme_with_the_app_secret() {
        let body = br#"{"object":"page","entry":[]}"#;
        let sig = format!(
            "sha256={}",
            hex::encode(super::super::verify::hmac_sha256(
                SECRET.as_bytes(),
                &[body]
            ))
        );
        let mut h = HeaderMap::new();
        h.insert("x-hub-signature-256", HeaderValue::from_str(&sig).unwrap());
        assert_eq!(meta().verify(&Inbound::new(&h, body)), Ok(()));
        assert_eq!(
            meta().verify(&Inbound::new(&h, b"{}")),
            Err(VerifyError::InvalidSignature)
        );
        let mut sha1 = HeaderMap::new();
        sha1.insert("x-hub-signature", HeaderValue::from_static("sha1=00"));
        assert_eq!(
            meta().verify(&Inbound::new(&sha1, body)),
            Err(VerifyError::MissingSignature)
        );
    }

    fn identify(body: &[u8]) -> Result<Identified, IdentifyError> {
        meta().identify(&Inbound::new(&HeaderMap::new(), body))
    }

    fn event(id: &str, object: &str) -> Result<Identified, IdentifyError> {
        Ok(Identified::Event(Identity {
            delivery_id: id.into(),
            event_type: Some(object.into()),
        }))
    }

    #[test]
    fn entries_with_id_and_time_make_the_key_else_the_body_hash() {
        let page = br#"{"object":"page","entry":[{"id":"123","time":1458692752478},{"id":"456","time":1458692752479}]}"#;
        assert_eq!(
            identify(page),
            event("meta:123@1458692752478,456@1458692752479", "page")
        );
        let whatsapp =
            br#"{"object":"whatsapp_business_account","entry":[{"id":"WABA","changes":[]}]}"#;
        assert_eq!(
            identify(whatsapp),
            event(&body_hash_id(whatsapp), "whatsapp_business_account")
        );
        let many: Vec<String> = (0..20)
            .map(|i| format!(r#"{{"id":"{i:020}","time":1}}"#))
            .collect();
        let long = format!(r#"{{"object":"page","entry":[{}]}}"#, many.join(","));
        let Ok(Identified::Event(id)) = identify(long.as_bytes()) else {
            panic!()
        };
        assert!(id.delivery_id.starts_with("meta:") && id.delivery_id.len() == 5 + 64);
        assert_eq!(identify(b"nope"), Err(IdentifyError::InvalidJson));
    }
}
