//! Signatures, at the bottom of the crate: HMAC-SHA256, the length-checked
//! constant-time comparison, and the Standard Webhooks scheme
//! ([`standard`]) hookbox both verifies and signs with.
//!
//! It imports nothing of hookbox, so everything may use it: the provider
//! verifiers in `crate::ingress::receive` (which add their header layouts, the
//! timestamp windows and the reasons a refusal reports), url destinations
//! in `crate::delivery::push` and JSON alerts in `crate::alerts` (which sign).
//! Keeping the cryptography here means there is exactly one place where
//! bytes are compared.

pub mod standard;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// HMAC-SHA256 over the concatenation of `parts`, without building the
/// concatenated buffer (bodies can be 25 MiB).
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Constant-time equality that also requires equal lengths, so a truncated
/// signature never matches a prefix of the real one.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// True when any key's MAC over `parts` equals `candidate`.
///
/// Every key is tried even after a match so the time taken does not tell
/// which key (old or new, during rotation) was used.
pub fn any_key_matches(keys: &[Vec<u8>], parts: &[&[u8]], candidate: &[u8]) -> bool {
    let mut matched = false;
    for key in keys {
        matched |= ct_eq(&hmac_sha256(key, parts), candidate);
    }
    matched
}

/// Most signatures one header may carry. Senders put one per active
/// secret (two during a rotation); a header with more is refused as
/// malformed before any hashing, so a forged header with thousands of
/// entries cannot buy thousands of HMACs over a large body.
pub const MAX_CANDIDATES: usize = 8;

/// True when any key's MAC over `parts` equals any of `candidates`, for
/// headers that carry several signatures (one per active secret while a
/// sender rotates). Each key's MAC is computed once; every pair is
/// compared, as in [`any_key_matches`]. Callers refuse more than
/// [`MAX_CANDIDATES`] candidates.
pub fn any_signature_matches(keys: &[Vec<u8>], parts: &[&[u8]], candidates: &[Vec<u8>]) -> bool {
    let mut matched = false;
    for key in keys {
        let mac = hmac_sha256(key, parts);
        for candidate in candidates {
            matched |= ct_eq(&mac, candidate);
        }
    }
    matched
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ct_eq_requires_equal_length() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"ab"));
        assert!(!ct_eq(b"", b"a"));
    }
}
