//! The one trait every provider file implements: its facts for config
//! validation ([`KindFacts`]: name, secret format, default tolerance,
//! whether it signs the URL), the headers it keeps, its verification,
//! its identification (with the handshakes answered in place of storing)
//! and, for the one provider that has it, a `GET` handshake.
//!
//! [`super::registry`] lists the implementations; [`super::source`] builds
//! one per configured source and asks it about each request.

use crate::config::{KindFacts, SourceConfig};

use super::payload::{Identified, IdentifyError, Inbound};
use super::verify::VerifyError;

/// A provider kind: what it tells validation and how it checks requests.
pub trait Provider: Send + Sync + 'static {
    /// What config validation needs to know about this kind.
    fn facts() -> &'static KindFacts
    where
        Self: Sized;

    /// The verifier for one validated source of this kind.
    fn from_config(cfg: &SourceConfig) -> Self
    where
        Self: Sized;

    /// Checks the signature (and timestamp) on the raw bytes. `now_ms`:
    /// the clock, in milliseconds (most kinds sign seconds).
    fn verify(&self, req: &Inbound, now_ms: i64) -> Result<(), VerifyError>;

    /// The delivery id and event type of a verified request, or the
    /// handshake to answer instead of storing it.
    fn identify(&self, req: &Inbound) -> Result<Identified, IdentifyError>;

    /// The provider headers stored with each event (never the signature).
    fn keep_headers(&self) -> Vec<String>;

    /// Answers a `GET` on the source's URL (a subscription handshake) with
    /// the challenge to echo; `None`: this kind has none (405).
    fn subscribe(&self, _query: &str) -> Option<Result<String, Refused>> {
        None
    }
}

/// Why a `GET` handshake was not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The token the handshake must present is missing or wrong: 403.
    WrongToken,
    /// Not a well-formed handshake: 404.
    NotAHandshake,
}

impl Refused {
    pub fn reason(self) -> &'static str {
        match self {
            Refused::WrongToken => "invalid_verify_token",
            Refused::NotAHandshake => "not_a_handshake",
        }
    }
}

/// `names` as owned strings, for [`Provider::keep_headers`].
pub fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|h| (*h).to_owned()).collect()
}

/// `tolerance` as the signed seconds the timestamp checks compare with;
/// saturating, since a wrapped (negative) tolerance would refuse every
/// timestamp, valid deliveries included.
pub fn tolerance_secs(cfg: &SourceConfig) -> i64 {
    i64::try_from(cfg.tolerance.as_secs()).unwrap_or(i64::MAX)
}
