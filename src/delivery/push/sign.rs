//! hookbox's outbound signature: Standard Webhooks, so the user's app can
//! verify hookbox with any Standard Webhooks (or Svix) library.
//!
//! Spec: <https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md>.
//! `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `webhook-id + "." + webhook-timestamp + "." + body`, keyed with the
//! base64-decoded part of `deliver.signing_secret` after `whsec_` (config
//! validation decodes it). The scheme itself, signing and verifying, is
//! `crate::signature::standard`; this file adds the id hookbox gives an
//! event.

use sha2::{Digest as _, Sha256};

pub use crate::signature::standard::signature;

/// The `webhook-id` of an event: `msg_` + 32 hex digits, the first 128 bits
/// of SHA-256(`source` NUL `delivery_id`).
///
/// It is the same on every attempt and every replay of an event, since
/// `(source, delivery_id)` is the row's unique key, and differs between
/// events, so the user's code can dedupe on it. It is not built from
/// `events.id`: SQLite hands out a deleted maximum rowid again (the table
/// has no AUTOINCREMENT), so once retention empties the table a new event
/// could reuse an old id and be dropped downstream as a duplicate; the same
/// holds for a database restored from an older backup. It contains no `.`,
/// as the signed string requires.
pub fn message_id(source: &str, delivery_id: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(source.as_bytes());
    hash.update([0]);
    hash.update(delivery_id.as_bytes());
    format!("msg_{}", hex::encode(&hash.finalize()[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
    use crate::ingress::receive::payload::Inbound;
    use crate::ingress::receive::standard::Standard;
    use axum::http::{HeaderMap, HeaderValue};

    // The Go, JavaScript and Python reference libraries' secret; their
    // vectors are reproduced in `crate::signature::standard`.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const TS: i64 = 1_614_265_330;

    fn key(secret: &str) -> Vec<u8> {
        Secret::new(secret).standard_key().unwrap()
    }

    #[test]
    fn the_receive_side_verifier_accepts_hookbox_output() {
        let k = key(SECRET);
        let id = message_id("github", "72d3162e-cc78-11e3-81ab-4c9367dc0958");
        let body = b"any bytes \x00\xff at all";
        let mut h = HeaderMap::new();
        h.insert("webhook-id", HeaderValue::from_str(&id).unwrap());
        h.insert("webhook-timestamp", HeaderValue::from(TS));
        let sig = signature(&k, &id, TS, body);
        h.insert("webhook-signature", HeaderValue::from_str(&sig).unwrap());
        let verifier = Standard::new(&[Secret::new(SECRET)], 300);
        assert_eq!(verifier.verify(&Inbound::new(&h, body), TS + 5), Ok(()));
        // And a different body does not verify.
        assert!(verifier.verify(&Inbound::new(&h, b"other"), TS).is_err());
    }

    #[test]
    fn message_ids_are_stable_per_event_and_distinct_across_events() {
        let a = message_id("github", "guid-1");
        assert_eq!(a, message_id("github", "guid-1"));
        assert_ne!(a, message_id("github", "guid-2"));
        assert_ne!(a, message_id("stripe", "guid-1"));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(message_id("ab", "c"), message_id("a", "bc"));
        assert!(a.starts_with("msg_") && a.len() == 4 + 32, "{a}");
        assert!(!a.contains('.'));
    }
}
