//! Twitch EventSub (webhook transport):
//! `Twitch-Eventsub-Message-Signature: sha256=<hex>` over
//! message id + timestamp + body, keyed with the subscription's secret.
//!
//! Spec: <https://dev.twitch.tv/docs/eventsub/handling-webhook-events/>
//! ("Verifying the event message", "Guarding against replay attacks",
//! "Responding to a challenge request"); Twitch publishes no SDK verifier,
//! so the committed vectors follow the worked example on that page.
//!
//! Tolerance: `Twitch-Eventsub-Message-Timestamp` is RFC 3339 with
//! nanoseconds; Twitch says to refuse messages older than 10 minutes, which
//! is this kind's default window, applied in both directions. Only a UTC
//! `Z` timestamp is accepted, as Twitch sends.
//!
//! The dedupe key is `Twitch-Eventsub-Message-Id` ("if Twitch resends the
//! message, the message ID will be the same"); the event type is
//! `Twitch-Eventsub-Subscription-Type`, for notifications and revocations
//! alike (`Twitch-Eventsub-Message-Type` is kept to tell them apart). A
//! `webhook_callback_verification` message is a handshake: once verified,
//! its `challenge` is answered as `text/plain`, and it is not stored.

use std::time::Duration;
use std::time::UNIX_EPOCH;

use serde_json::Value;

use crate::config::{KindFacts, PLACEHOLDER_SECRET, Secret, SourceConfig, any_secret};

use super::payload::{Handshake, Identified, IdentifyError, Identity, Inbound, delivery_id};
use super::provider::{Provider, owned, tolerance_secs};
use super::verify::{VerifyError, any_key_matches, decode_hex, header, header_str, utf8_keys};

pub struct Twitch {
    keys: Vec<Vec<u8>>,
    tolerance_secs: i64,
}

/// Provider headers stored with the event (never the signature).
pub const KEEP_HEADERS: &[&str] = &[
    "twitch-eventsub-message-id",
    "twitch-eventsub-message-type",
    "twitch-eventsub-message-timestamp",
    "twitch-eventsub-message-retry",
    "twitch-eventsub-subscription-type",
    "twitch-eventsub-subscription-version",
    "user-agent",
];

/// The message type that is a handshake rather than an event.
const VERIFICATION: &str = "webhook_callback_verification";

impl Twitch {
    /// The key is the subscription's `transport.secret` as UTF-8 bytes.
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Twitch {
            keys: utf8_keys(secrets),
            tolerance_secs,
        }
    }

    pub fn verify(&self, req: &Inbound, now: i64) -> Result<(), VerifyError> {
        let value = header(req.headers, "twitch-eventsub-message-signature")
            .ok_or(VerifyError::MissingSignature)?;
        let ts = header(req.headers, "twitch-eventsub-message-timestamp")
            .ok_or(VerifyError::MissingTimestamp)?;
        // Signed, so a message without an id cannot be verified at all.
        let id = header(req.headers, "twitch-eventsub-message-id")
            .ok_or(VerifyError::MalformedSignature)?;
        let sig = value
            .strip_prefix(b"sha256=")
            .and_then(decode_hex)
            .filter(|sig| sig.len() == 32)
            .ok_or(VerifyError::MalformedSignature)?;
        let sent = parse_timestamp(ts).ok_or(VerifyError::MalformedTimestamp)?;
        if now.abs_diff(sent) > self.tolerance_secs.unsigned_abs() {
            return Err(VerifyError::TimestampOutOfTolerance {
                age_secs: now.saturating_sub(sent),
            });
        }
        if any_key_matches(&self.keys, &[id, ts, req.body], &sig) {
            Ok(())
        } else {
            Err(VerifyError::InvalidSignature)
        }
    }

    pub fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        if header_str(req.headers, "twitch-eventsub-message-type") == Some(VERIFICATION) {
            let json = req.json().ok_or(IdentifyError::InvalidJson)?;
            let challenge = json
                .get("challenge")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .ok_or(IdentifyError::MissingDeliveryId)?;
            return Ok(Identified::Handshake(Handshake::Text(challenge.to_owned())));
        }
        Ok(Identified::Event(Identity {
            delivery_id: delivery_id(header_str(req.headers, "twitch-eventsub-message-id"))?,
            event_type: header_str(req.headers, "twitch-eventsub-subscription-type")
                .filter(|t| !t.is_empty())
                .map(str::to_owned),
        }))
    }
}

/// Unix seconds of an RFC 3339 UTC timestamp (`2019-11-16T10:11:12.634234626Z`),
/// or `None` for anything else (offsets, spaces, dates before 1970).
fn parse_timestamp(raw: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(raw).ok()?;
    if !text.ends_with('Z') || text.len() > 40 {
        return None;
    }
    let at = humantime::parse_rfc3339(text).ok()?;
    let secs = at.duration_since(UNIX_EPOCH).ok()?.as_secs();
    i64::try_from(secs).ok()
}

const FACTS: KindFacts = KindFacts {
    name: "twitch",
    default_tolerance: Duration::from_secs(600),
    signs_url: false,
    check_secret: any_secret,
    placeholder_secret: PLACEHOLDER_SECRET,
};

impl Provider for Twitch {
    fn facts() -> &'static KindFacts {
        &FACTS
    }

    fn from_config(cfg: &SourceConfig) -> Self {
        Twitch::new(&cfg.secrets, tolerance_secs(cfg))
    }

    fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError> {
        Twitch::verify(self, req, now_ms / 1000)
    }

    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError> {
        Twitch::identify(self, req)
    }

    fn keep_headers(&self) -> Vec<String> {
        owned(KEEP_HEADERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    const SECRET: &str = "twitch-hookbox-secret";
    const ID: &str = "befa7b53-d79d-478f-86b9-120f112b044e";
    const TS: &str = "2019-11-16T10:11:12.634234626Z";
    /// `TS` in unix seconds: `date -ud 2019-11-16T10:11:12Z +%s`.
    const NOW: i64 = 1_573_899_072;
    const BODY: &[u8] = br#"{"subscription":{"id":"f1c2a387-161a-49f9-a165-0f21d7a4e1c4","type":"channel.follow","version":"2"},"event":{"user_id":"1234"}}"#;
    // Computed once, outside the code under test:
    // python3 -c 'import hmac,hashlib; print(hmac.new(b"twitch-hookbox-secret",
    //   (ID+TS).encode()+BODY,hashlib.sha256).hexdigest())'
    const SIG: &str = "sha256=5751ebd4915c28774ace6755a5a016d9422e594fad55b6e0b5fd8112ef53918b";

    fn twitch(secrets: &[&str]) -> Twitch {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Twitch::new(&secrets, 600)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    fn signed(sig: &str, ts: &str, id: &str) -> HeaderMap {
        headers(&[
            ("twitch-eventsub-message-signature", sig),
            ("twitch-eventsub-message-timestamp", ts),
            ("twitch-eventsub-message-id", id),
            ("twitch-eventsub-message-type", "notification"),
            ("twitch-eventsub-subscription-type", "channel.follow"),
        ])
    }

    fn check(secrets: &[&str], h: &HeaderMap, body: &[u8], now: i64) -> Result<(), VerifyError> {
        twitch(secrets).verify(&Inbound::new(h, body), now)
    }

    #[test]
    fn a_signature_over_id_timestamp_body_verifies() {
        assert_eq!(check(&[SECRET], &signed(SIG, TS, ID), BODY, NOW), Ok(()));
        assert_eq!(
            check(&["old", SECRET], &signed(SIG, TS, ID), BODY, NOW),
            Ok(())
        );
    }

    #[test]
    fn tampered_body_id_timestamp_wrong_secret_and_truncation_fail() {
        let invalid = Err(VerifyError::InvalidSignature);
        assert_eq!(check(&[SECRET], &signed(SIG, TS, ID), b"{}", NOW), invalid);
        assert_eq!(check(&["wrong"], &signed(SIG, TS, ID), BODY, NOW), invalid);
        let other_id = signed(SIG, TS, "befa7b53-d79d-478f-86b9-120f112b044f");
        assert_eq!(check(&[SECRET], &other_id, BODY, NOW), invalid);
        let other_ts = signed(SIG, "2019-11-16T10:11:12.634234627Z", ID);
        assert_eq!(check(&[SECRET], &other_ts, BODY, NOW), invalid);
        let short = signed(&SIG[..SIG.len() - 2], TS, ID);
        assert_eq!(
            check(&[SECRET], &short, BODY, NOW),
            Err(VerifyError::MalformedSignature)
        );
    }

    #[test]
    fn timestamps_pass_at_ten_minutes_and_fail_past_them_either_way() {
        let h = signed(SIG, TS, ID);
        assert_eq!(check(&[SECRET], &h, BODY, NOW + 600), Ok(()));
        assert_eq!(check(&[SECRET], &h, BODY, NOW - 600), Ok(()));
        let stale = |age_secs| Err(VerifyError::TimestampOutOfTolerance { age_secs });
        assert_eq!(check(&[SECRET], &h, BODY, NOW + 601), stale(601));
        assert_eq!(check(&[SECRET], &h, BODY, NOW - 601), stale(-601));
    }

    #[test]
    fn malformed_and_missing_headers_are_rejected() {
        for ts in [
            "1573899072",
            "2019-11-16T10:11:12+00:00",
            "2019-11-16 10:11:12Z",
            "",
        ] {
            let result = check(&[SECRET], &signed(SIG, ts, ID), BODY, NOW);
            assert_eq!(result, Err(VerifyError::MalformedTimestamp), "{ts:?}");
        }
        for sig in [&SIG[7..], "sha1=00", "SHA256=00"] {
            let result = check(&[SECRET], &signed(sig, TS, ID), BODY, NOW);
            assert_eq!(result, Err(VerifyError::MalformedSignature), "{sig:?}");
        }
        let no_sig = headers(&[("twitch-eventsub-message-timestamp", TS)]);
        assert_eq!(
            check(&[SECRET], &no_sig, BODY, NOW),
            Err(VerifyError::MissingSignature)
        );
        let no_ts = headers(&[("twitch-eventsub-message-signature", SIG)]);
        assert_eq!(
            check(&[SECRET], &no_ts, BODY, NOW),
            Err(VerifyError::MissingTimestamp)
        );
    }

    #[test]
    fn the_verification_challenge_is_answered_as_text() {
        let mut h = signed(SIG, TS, ID);
        h.insert(
            "twitch-eventsub-message-type",
            HeaderValue::from_static(VERIFICATION),
        );
        let body = br#"{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{}}"#;
        let answer = twitch(&[SECRET]).identify(&Inbound::new(&h, body));
        let text = Handshake::Text("pogchamp-kappa-360noscope-vohiyo".into());
        assert_eq!(answer, Ok(Identified::Handshake(text)));
        let none = twitch(&[SECRET]).identify(&Inbound::new(&h, b"{}"));
        assert_eq!(none, Err(IdentifyError::MissingDeliveryId));
    }

    #[test]
    fn notifications_are_keyed_by_message_id_with_the_subscription_type() {
        let h = signed(SIG, TS, ID);
        assert_eq!(
            twitch(&[SECRET]).identify(&Inbound::new(&h, BODY)),
            Ok(Identified::Event(Identity {
                delivery_id: ID.into(),
                event_type: Some("channel.follow".into()),
            }))
        );
    }
}
