//! Request bodies that look like a GitHub `push` delivery, signed the way
//! GitHub signs them (`X-Hub-Signature-256: sha256=<hex hmac-sha256>` over the
//! raw body).
//!
//! Every body is a fixed ~2 KiB prefix followed by a short tail that carries
//! the delivery id. The HMAC state after the prefix is computed once, so
//! making a new signed delivery costs a clone plus hashing ~100 bytes: the
//! load generator spends its CPU sending, not hashing. A delivery is a pure
//! function of `(connection, seq)`, so a duplicate is rebuilt byte for byte
//! (same body, same signature) instead of being kept in memory.
//!
//! A signer made [`Signer::with_parity`] also writes `"parity":"even"` or
//! `"odd"` into the tail ([`PARITY_POINTER`]), alternating with each
//! connection's requests: something for a destination's `when` filter to
//! take half the events by. A signer made [`Signer::with_keys`] writes
//! `"key":"kN"` ([`KEY_POINTER`]), `N` being `seq` modulo the number of keys:
//! something for the source's `order_key` to order by (the outage
//! scenario). Without either the bodies are as they always were.

use anyhow::{Context, Result};
use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fmt::Write as _;

/// Everything of a push payload but the closing brace; the tail adds the
/// delivery id and closes the object.
const PUSH_PREFIX: &str = r#"{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","after":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","repository":{"id":186853002,"name":"shop","full_name":"acme/shop","private":true,"owner":{"name":"acme","email":"ops@acme.example","login":"acme","id":21031067,"type":"Organization","site_admin":false},"html_url":"https://github.com/acme/shop","description":"The shop front end and its checkout service","fork":false,"url":"https://github.com/acme/shop","created_at":1557833520,"updated_at":"2026-11-20T09:12:44Z","pushed_at":1764400000,"clone_url":"https://github.com/acme/shop.git","open_issues_count":17,"default_branch":"main"},"pusher":{"name":"octocat","email":"octocat@users.noreply.github.com"},"sender":{"login":"octocat","id":583231,"type":"User","site_admin":false},"created":false,"deleted":false,"forced":false,"base_ref":null,"compare":"https://github.com/acme/shop/compare/6113728f27ae...59b20b8d5c6f","commits":[{"id":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","distinct":true,"message":"checkout: retry the payment intent lookup once before failing the order","timestamp":"2026-11-29T21:40:12+01:00","url":"https://github.com/acme/shop/commit/59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","author":{"name":"Mona Octocat","email":"octocat@users.noreply.github.com","username":"octocat"},"committer":{"name":"GitHub","email":"noreply@github.com","username":"web-flow"},"added":[],"removed":[],"modified":["checkout/src/payment.rs","checkout/src/order.rs"]}],"head_commit":{"id":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","distinct":true,"message":"checkout: retry the payment intent lookup once before failing the order","timestamp":"2026-11-29T21:40:12+01:00","url":"https://github.com/acme/shop/commit/59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","author":{"name":"Mona Octocat","email":"octocat@users.noreply.github.com","username":"octocat"},"added":[],"removed":[],"modified":["checkout/src/payment.rs","checkout/src/order.rs"]}"#;

/// Where a [`Signer::with_parity`] body says which half it is in.
pub const PARITY_POINTER: &str = "/hookbox_bench/parity";

/// Where a [`Signer::with_keys`] body carries its order key.
pub const KEY_POINTER: &str = "/hookbox_bench/key";

/// Which half of the events a delivery is in: `seq` even or odd, so each
/// connection's new requests alternate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parity {
    Even,
    Odd,
}

impl Parity {
    pub fn of(seq: u64) -> Parity {
        if seq.is_multiple_of(2) {
            Parity::Even
        } else {
            Parity::Odd
        }
    }

    /// The value at [`PARITY_POINTER`].
    pub fn as_str(self) -> &'static str {
        match self {
            Parity::Even => "even",
            Parity::Odd => "odd",
        }
    }
}

/// One signed request, ready to send.
pub struct Delivery {
    /// `X-GitHub-Delivery`, also embedded in the body.
    pub id: String,
    pub body: Bytes,
    /// The full `X-Hub-Signature-256` value, `sha256=<hex>`.
    pub signature: String,
    /// In the body only from a [`Signer::with_parity`]; always known.
    pub parity: Parity,
}

/// Builds signed deliveries; shared read-only by every connection.
pub struct Signer {
    /// Distinguishes this run's ids from any other run's.
    nonce: u64,
    /// HMAC state after absorbing `PUSH_PREFIX`.
    after_prefix: Hmac<Sha256>,
    /// Whether the tail carries `"parity"`.
    parity: bool,
    /// With `Some(n)`, the tail carries `"key"`, one of `n`.
    keys: Option<u64>,
}

impl Signer {
    pub fn new(secret: &[u8], nonce: u64) -> Result<Self> {
        let mut after_prefix =
            Hmac::<Sha256>::new_from_slice(secret).context("creating the HMAC-SHA256 key")?;
        after_prefix.update(PUSH_PREFIX.as_bytes());
        Ok(Signer {
            nonce,
            after_prefix,
            parity: false,
            keys: None,
        })
    }

    /// The same signer, writing each delivery's [`Parity`] into its body.
    pub fn with_parity(self) -> Self {
        Signer {
            parity: true,
            ..self
        }
    }

    /// The same signer, writing an order key into each body: `k0` to
    /// `k{n-1}`, by `seq` modulo `n` (at least 1).
    pub fn with_keys(self, n: u64) -> Self {
        Signer {
            keys: Some(n.max(1)),
            ..self
        }
    }

    /// The delivery number `seq` of connection `conn`. Calling it twice with
    /// the same arguments yields the same bytes and signature.
    pub fn delivery(&self, conn: u32, seq: u64) -> Delivery {
        let id = delivery_id(self.nonce, conn, seq);
        let parity = Parity::of(seq);
        let mut tail =
            format!(r#","hookbox_bench":{{"delivery":"{id}","connection":{conn},"seq":{seq}"#);
        // Writing into a String cannot fail.
        if self.parity {
            let _ = write!(tail, r#","parity":"{}""#, parity.as_str());
        }
        if let Some(n) = self.keys {
            let _ = write!(tail, r#","key":"k{}""#, seq % n);
        }
        tail.push_str("}}");
        let mut mac = self.after_prefix.clone();
        mac.update(tail.as_bytes());
        let digest = mac.finalize().into_bytes();
        let mut signature = String::with_capacity(7 + 64);
        signature.push_str("sha256=");
        signature.push_str(&hex::encode(digest));
        let mut body = Vec::with_capacity(PUSH_PREFIX.len() + tail.len());
        body.extend_from_slice(PUSH_PREFIX.as_bytes());
        body.extend_from_slice(tail.as_bytes());
        Delivery {
            id,
            body: Bytes::from(body),
            signature,
            parity,
        }
    }

    /// Whether `body` is, byte for byte, the delivery `id` this signer
    /// built: what arrives through a consumer that forwards bodies without
    /// the provider's signature (`hookbox listen`). The connection and seq
    /// are read back from the body's tail and the delivery rebuilt.
    pub fn built(&self, id: &str, body: &[u8]) -> bool {
        let tail = &body[body.len().saturating_sub(TAIL_MAX)..];
        let (Some(conn), Some(seq)) = (
            number_after(tail, b"\"connection\":"),
            number_after(tail, b"\"seq\":"),
        ) else {
            return false;
        };
        let Ok(conn) = u32::try_from(conn) else {
            return false;
        };
        let d = self.delivery(conn, seq);
        d.id == id && d.body == body
    }
}

/// Longer than any tail [`Signer::delivery`] writes.
const TAIL_MAX: usize = 200;

/// The decimal number right after the first `key` in `text`.
fn number_after(text: &[u8], key: &[u8]) -> Option<u64> {
    let at = text.windows(key.len()).position(|w| w == key)? + key.len();
    let digits = &text[at..];
    let end = digits
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// A UUID-shaped id (version nibble 4, variant nibble a) unique per
/// `(nonce, conn, seq)` for any `seq` below 2^60.
fn delivery_id(nonce: u64, conn: u32, seq: u64) -> String {
    let mut id = String::with_capacity(36);
    // Writing into a String cannot fail.
    let _ = write!(
        id,
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        nonce & 0xffff_ffff,
        conn & 0xffff,
        (seq >> 48) & 0xfff,
        (nonce >> 32) & 0xfff,
        seq & 0xffff_ffff_ffff,
    );
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_two_kib_of_json_carrying_the_delivery_id() {
        let signer = Signer::new(b"bench-secret", 0x1234_5678_9abc_def0).unwrap();
        let d = signer.delivery(7, 42);
        assert!((1900..=2300).contains(&d.body.len()), "{}", d.body.len());
        let v: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
        assert_eq!(v["hookbox_bench"]["delivery"], d.id.as_str());
        assert_eq!(v["ref"], "refs/heads/main");
        assert_eq!(d.id.len(), 36);
    }

    #[test]
    fn signature_matches_a_plain_hmac_over_the_whole_body() {
        let signer = Signer::new(b"bench-secret", 1).unwrap();
        let d = signer.delivery(3, 9);
        let mut mac = Hmac::<Sha256>::new_from_slice(b"bench-secret").unwrap();
        mac.update(&d.body);
        let want = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert_eq!(d.signature, want);
    }

    #[test]
    fn the_same_seq_rebuilds_the_same_delivery_and_ids_differ_otherwise() {
        let signer = Signer::new(b"bench-secret", 1).unwrap();
        let (a, b) = (signer.delivery(1, 5), signer.delivery(1, 5));
        assert_eq!(
            (a.id.as_str(), &a.body, a.signature.as_str()),
            (b.id.as_str(), &b.body, b.signature.as_str())
        );
        assert_ne!(signer.delivery(1, 6).id, a.id);
        assert_ne!(signer.delivery(2, 5).id, a.id);
    }

    #[test]
    fn a_forwarded_body_is_recognised_only_when_unchanged() {
        let signer = Signer::new(b"bench-secret", 1).unwrap();
        for signer in [
            signer,
            Signer::new(b"bench-secret", 1).unwrap().with_parity(),
        ] {
            let d = signer.delivery(12, 345_678);
            assert!(signer.built(&d.id, &d.body));
            assert!(!signer.built(&signer.delivery(12, 345_679).id, &d.body));
            let mut changed = d.body.to_vec();
            changed[10] ^= 1;
            assert!(!signer.built(&d.id, &changed));
            assert!(!signer.built(&d.id, &d.body[..d.body.len() - 1]));
            assert!(!signer.built(&d.id, b"{}"));
        }
        let other = Signer::new(b"bench-secret", 2).unwrap();
        let d = other.delivery(0, 1);
        assert!(
            !Signer::new(b"bench-secret", 1)
                .unwrap()
                .built(&d.id, &d.body)
        );
    }

    #[test]
    fn keys_go_round_by_seq_and_the_plain_body_is_unchanged() {
        let plain = Signer::new(b"bench-secret", 1).unwrap();
        let keyed = Signer::new(b"bench-secret", 1).unwrap().with_keys(3);
        for (seq, want) in [(1, "k1"), (2, "k2"), (3, "k0"), (4, "k1")] {
            let d = keyed.delivery(0, seq);
            let v: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
            assert_eq!(v.pointer(KEY_POINTER).unwrap(), want);
            assert!(keyed.built(&d.id, &d.body));
            let mut mac = Hmac::<Sha256>::new_from_slice(b"bench-secret").unwrap();
            mac.update(&d.body);
            assert_eq!(
                d.signature,
                format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
            );
        }
        // The tail every other scenario has always sent, byte for byte.
        let p = plain.delivery(2, 7);
        assert!(
            p.body.ends_with(
                format!(
                    r#","hookbox_bench":{{"delivery":"{}","connection":2,"seq":7}}}}"#,
                    p.id
                )
                .as_bytes()
            )
        );
    }

    #[test]
    fn parity_alternates_per_request_and_is_in_the_body_only_when_asked() {
        let plain = Signer::new(b"bench-secret", 1).unwrap();
        let with = Signer::new(b"bench-secret", 1).unwrap().with_parity();
        for (seq, want) in [(1, "odd"), (2, "even"), (3, "odd"), (4, "even")] {
            let d = with.delivery(0, seq);
            assert_eq!(d.parity.as_str(), want);
            let v: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
            assert_eq!(v.pointer(PARITY_POINTER).unwrap(), want);
            assert_eq!(v["hookbox_bench"]["delivery"], d.id.as_str());
            let mut mac = Hmac::<Sha256>::new_from_slice(b"bench-secret").unwrap();
            mac.update(&d.body);
            let signed = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
            assert_eq!(d.signature, signed);

            let p = plain.delivery(0, seq);
            assert_eq!(p.id, d.id);
            assert!(!String::from_utf8_lossy(&p.body).contains("parity"));
        }
    }
}
