//! Generic HMAC-SHA256 (`kind = "hmac"`), laid out by the source's
//! `[sources.hmac]` table, for signers no other kind covers.
//!
//! There is no single spec: the operator describes the signer's scheme
//! (header, prefix, hex or base64, signed-string template, optional
//! timestamp header) from that signer's own documentation.
//! Tolerance: when a `timestamp_header` is configured, its unix-seconds
//! value must lie within the source's window (default 300 s) of now, in
//! both directions; without one there is no window and replays are only
//! absorbed by deduplication.
//!
//! The key is each secret's UTF-8 bytes. The delivery id comes from a
//! header or a JSON pointer, or, with neither configured, is the SHA-256 of
//! the body, which dedupes exact re-sends only.

use crate::config::{DEFAULT_TOLERANCE, KindFacts, PLACEHOLDER_SECRET, SourceConfig, any_secret};
use crate::config::{Encoding, Field, HmacConfig, IdFrom, PayloadPart, Secret};

use super::payload::{Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, tolerance_secs};
use super::verify::{
    VerifyError, any_key_matches, body_hash_id, check_timestamp, decode_base64, decode_hex, header,
    header_str, utf8_keys,
};

pub struct Hmac {
    keys: Vec<Vec<u8>>,
    tolerance_secs: i64,
    config: HmacConfig,
}

/// Headers stored with every event of this kind (never the signature). The
/// headers a source's config names are specific to that source.
pub const KEEP_HEADERS: &[&str] = &["user-agent"];

impl Hmac {
    /// The key is the secret's UTF-8 bytes, used as-is.
    pub fn new(secrets: &[Secret], tolerance_secs: i64, config: &HmacConfig) -> Self {
        Hmac {
            keys: utf8_keys(secrets),
            tolerance_secs,
            config: config.clone(),
        }
    }

    /// [`KEEP_HEADERS`] plus the timestamp, id and event-type headers this
    /// source's config names.
    pub fn keep_headers(&self) -> Vec<String> {
        let field_header = |f: &Field| match f {
            Field::Header(name) => Some(name.clone()),
            Field::Pointer(_) => None,
        };
        let id = match &self.config.id {
            IdFrom::Field(f) => field_header(f),
            IdFrom::BodyHash => None,
        };
        KEEP_HEADERS
            .iter()
            .map(|h| (*h).to_owned())
            .chain(self.config.timestamp_header.clone())
            .chain(id)
            .chain(self.config.event_type.as_ref().and_then(field_header))
            .collect()
    }

    pub fn verify(&self, req: &Inbound, now: i64) -> Result<(), VerifyError> {
        let value =
            header(req.headers, &self.config.header).ok_or(VerifyError::MissingSignature)?;
        let encoded = value
            .strip_prefix(self.config.prefix.as_bytes())
            .ok_or(VerifyError::MalformedSignature)?;
        let sig = match self.config.encoding {
            Encoding::Hex => decode_hex(encoded),
            Encoding::Base64 => decode_base64(encoded),
        }
        .filter(|sig| !sig.is_empty())
        .ok_or(VerifyError::MalformedSignature)?;
        let timestamp: &[u8] = match &self.config.timestamp_header {
            Some(name) => {
                let raw = header(req.headers, name).ok_or(VerifyError::MissingTimestamp)?;
                check_timestamp(raw, now, self.tolerance_secs)?;
                raw
            }
            None => b"",
        };
        let parts: Vec<&[u8]> = self
            .config
            .signed_payload
            .iter()
            .map(|part| match part {
                PayloadPart::Literal(bytes) => bytes.as_slice(),
                PayloadPart::Timestamp => timestamp,
                PayloadPart::Body => req.body,
            })
            .collect();
        if any_key_matches(&self.keys, &parts, &sig) {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        let delivery_id = match &self.config.id {
            IdFrom::BodyHash => body_hash_id(req.body),
            IdFrom::Field(field) => delivery_id(read(req, field)?.as_deref())?,
        };
        let event_type = match &self.config.event_type {
            Some(field) => read(req, field)?,
            None => None,
        };
        Ok(Identified::Event(Identity {
            delivery_id,
            event_type,
        }))
    }
}

/// A field's value: a header as text, or a string or number at a JSON
/// pointer. A pointer into a body that is not JSON is an error, because the
/// config promised JSON.
fn read(req: &Inbound, field: &Field) -> Result<Option<String>, IdentifyError> {
    match field {
        Field::Header(name) => Ok(header_str(req.headers, name).map(str::to_owned)),
        Field::Pointer(pointer) => {
            req.json().ok_or(IdentifyError::InvalidJson)?;
            Ok(req.json_str(pointer))
        }
    }
}

const FACTS: KindFacts = KindFacts {
    name: "hmac",
    default_tolerance: DEFAULT_TOLERANCE,
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Hmac {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Hmac::new(
            &cfg.secrets,
            tolerance_secs(cfg),
            cfg.hmac
                .as_ref()
                .expect("config validation requires [sources.hmac] for kind hmac"),
        )
    }

    fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        Hmac::verify(self, req, now_ms / 1000)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Hmac::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        Hmac::keep_headers(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const SECRET: &str = "generic-secret";
    const TS: i64 = 1_700_000_000;
    const BODY: &[u8] = br#"{"event":"thing.created","id":"d_1"}"#;
    // Computed once, outside the code under test:
    // python3 -c 'import hmac,hashlib,base64; h=lambda m: hmac.new(b"generic-secret",m,hashlib.sha256);
    //   print(h(b"1700000000."+BODY).hexdigest()); print(base64.b64encode(h(BODY).digest()).decode());
    //   print(hashlib.sha256(BODY).hexdigest())'
    const TS_SIG: &str = "sha256=8fbf797a0e479c393a89c4e39252ad0446790ac30ad8961a554ab542fa8aa047";
    const BODY_B64: &str = "3q2uBsqr3NB5jJcns7/l/GamcriS+rtAadN9rhRoM+I=";
    const BODY_SHA256: &str = "4b3193f2c5109243ce752c96019e860aa06093158b109b7ce34f52db4b04390d";

    /// `x-signature: sha256=<hex>` over `{timestamp}.{body}`, id from a
    /// header, type from the body.
    fn timestamped() -> HmacConfig {
        HmacConfig {
            header: "x-signature".into(),
            prefix: "sha256=".into(),
            encoding: Encoding::Hex,
            timestamp_header: Some("x-timestamp".into()),
            signed_payload: vec![
                PayloadPart::Timestamp,
                PayloadPart::Literal(b".".to_vec()),
                PayloadPart::Body,
            ],
            id: IdFrom::Field(Field::Header("x-delivery".into())),
            event_type: Some(Field::Pointer("/event".into())),
        }
    }

    /// `x-signature: <base64>` over the body, id = body hash.
    fn bare() -> HmacConfig {
        HmacConfig {
            header: "x-signature".into(),
            prefix: String::new(),
            encoding: Encoding::Base64,
            timestamp_header: None,
            signed_payload: vec![PayloadPart::Body],
            id: IdFrom::BodyHash,
            event_type: None,
        }
    }

    fn hmac(secrets: &[&str], config: &HmacConfig) -> Hmac {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Hmac::new(&secrets, 300, config)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    fn check_ts(sig: &str, ts: &str, body: &[u8], now: i64) -> Result<(), VerifyError> {
        let h = headers(&[("x-signature", sig), ("x-timestamp", ts)]);
        hmac(&[SECRET], &timestamped()).verify(&Inbound::new(&h, body), now)
    }

    fn check_bare(secrets: &[&str], sig: &str, body: &[u8]) -> Result<(), VerifyError> {
        let h = headers(&[("x-signature", sig)]);
        hmac(secrets, &bare()).verify(&Inbound::new(&h, body), 0)
    }

    fn event(delivery_id: &str, event_type: Option<&str>) -> Result<Identified, IdentifyError> {
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id.into(),
            event_type: event_type.map(str::to_owned),
        }))
    }

    #[test]
    fn a_timestamped_hex_signature_and_a_bare_base64_one_verify() {
        assert_eq!(check_ts(TS_SIG, "1700000000", BODY, TS), Ok(()));
        assert_eq!(check_bare(&[SECRET], BODY_B64, BODY), Ok(()));
    }

    #[test]
    fn rotation_accepts_old_or_new_secret() {
        assert_eq!(check_bare(&["old", SECRET], BODY_B64, BODY), Ok(()));
        assert_eq!(check_bare(&[SECRET, "new"], BODY_B64, BODY), Ok(()));
    }

    #[test]
    fn a_slack_shaped_config_reproduces_slacks_documented_vector() {
        let config = HmacConfig {
            header: "x-slack-signature".into(),
            prefix: "v0=".into(),
            timestamp_header: Some("x-slack-request-timestamp".into()),
            signed_payload: vec![
                PayloadPart::Literal(b"v0:".to_vec()),
                PayloadPart::Timestamp,
                PayloadPart::Literal(b":".to_vec()),
                PayloadPart::Body,
            ],
            ..timestamped()
        };
        let sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        let h = headers(&[
            ("x-slack-signature", sig),
            ("x-slack-request-timestamp", "1531420618"),
        ]);
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let g = hmac(&["8f742231b10e8888abcd99yyyzzz85a5"], &config);
        assert_eq!(g.verify(&Inbound::new(&h, body), 1_531_420_618), Ok(()));
    }

    #[test]
    fn tampered_body_wrong_secret_changed_timestamp_and_truncation_fail() {
        let invalid = Err(VerifyError::InvalidSignature);
        assert_eq!(check_ts(TS_SIG, "1700000000", b"{}", TS), invalid);
        assert_eq!(check_ts(TS_SIG, "1700000001", BODY, TS), invalid);
        let truncated = &TS_SIG[..TS_SIG.len() - 2];
        assert_eq!(check_ts(truncated, "1700000000", BODY, TS), invalid);
        assert_eq!(check_bare(&["wrong"], BODY_B64, BODY), invalid);
        assert_eq!(check_bare(&[SECRET], &BODY_B64[..40], BODY), invalid);
    }

    #[test]
    fn timestamps_pass_exactly_at_tolerance_and_fail_one_second_past_it() {
        let at = |now| check_ts(TS_SIG, "1700000000", BODY, now);
        assert_eq!(at(TS + 300), Ok(()));
        assert_eq!(at(TS - 300), Ok(()));
        let stale = |age_secs| Err(VerifyError::TimestampOutOfTolerance { age_secs });
        assert_eq!(at(TS + 301), stale(301));
        assert_eq!(at(TS - 301), stale(-301));
    }

    #[test]
    fn malformed_and_missing_headers_are_rejected() {
        let malformed = Err(VerifyError::MalformedSignature);
        for sig in [&TS_SIG[7..], "sha256=zz", "sha256="] {
            assert_eq!(check_ts(sig, "1700000000", BODY, TS), malformed, "{sig}");
        }
        let suffixed = check_ts(TS_SIG, "1700000000abc", BODY, TS);
        assert_eq!(suffixed, Err(VerifyError::MalformedTimestamp));
        let hex_as_base64 = format!("{}=", &TS_SIG[7..]);
        assert_eq!(check_bare(&[SECRET], &hex_as_base64, BODY), malformed);
        let g = hmac(&[SECRET], &timestamped());
        let only_sig = headers(&[("x-signature", TS_SIG)]);
        let missing_ts = g.verify(&Inbound::new(&only_sig, BODY), TS);
        assert_eq!(missing_ts, Err(VerifyError::MissingTimestamp));
        let missing = g.verify(&Inbound::new(&HeaderMap::new(), BODY), TS);
        assert_eq!(missing, Err(VerifyError::MissingSignature));
    }

    #[test]
    fn identity_comes_from_the_configured_header_and_pointer() {
        let h = headers(&[("x-delivery", "d-42")]);
        let g = hmac(&[SECRET], &timestamped());
        let found = g.identify(&Inbound::new(&h, BODY));
        assert_eq!(found, event("d-42", Some("thing.created")));
        let no_id = g.identify(&Inbound::new(&HeaderMap::new(), BODY));
        assert_eq!(no_id, Err(IdentifyError::MissingDeliveryId));
        let not_json = g.identify(&Inbound::new(&h, b"a=b"));
        assert_eq!(not_json, Err(IdentifyError::InvalidJson));
    }

    #[test]
    fn identity_can_come_from_a_body_pointer_or_the_body_hash() {
        let by_pointer = HmacConfig {
            id: IdFrom::Field(Field::Pointer("/id".into())),
            event_type: Some(Field::Header("x-event".into())),
            ..bare()
        };
        let g = hmac(&[SECRET], &by_pointer);
        let h = headers(&[("x-event", "ping")]);
        let found = g.identify(&Inbound::new(&h, BODY));
        assert_eq!(found, event("d_1", Some("ping")));
        let not_json = g.identify(&Inbound::new(&h, b"a=b"));
        assert_eq!(not_json, Err(IdentifyError::InvalidJson));
        let by_hash = hmac(&[SECRET], &bare()).identify(&Inbound::new(&h, BODY));
        assert_eq!(by_hash, event(&format!("sha256:{BODY_SHA256}"), None));
    }
}
