//! The providers hookbox verifies, and what differs between them that
//! validation and the receiver both need: the name, the default tolerance,
//! whether the signature covers the URL.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Github,
    Stripe,
    Shopify,
    Standard,
    Gitlab,
    Slack,
    Hmac,
    Linear,
    Discord,
    Sendgrid,
    Mailgun,
    Meta,
    Paddle,
    Twilio,
    Square,
    Zoom,
    Twitch,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Github => "github",
            Kind::Stripe => "stripe",
            Kind::Shopify => "shopify",
            Kind::Standard => "standard",
            Kind::Gitlab => "gitlab",
            Kind::Slack => "slack",
            Kind::Hmac => "hmac",
            Kind::Linear => "linear",
            Kind::Discord => "discord",
            Kind::Sendgrid => "sendgrid",
            Kind::Mailgun => "mailgun",
            Kind::Meta => "meta",
            Kind::Paddle => "paddle",
            Kind::Twilio => "twilio",
            Kind::Square => "square",
            Kind::Zoom => "zoom",
            Kind::Twitch => "twitch",
        }
    }

    /// The window a timestamped kind allows when `tolerance` is not set:
    /// the provider's own where it documents one (Paddle's SDKs allow 5 s,
    /// Linear's 60 s, Twitch says to refuse messages older than 10
    /// minutes), else 5 min.
    pub fn default_tolerance(self) -> Duration {
        match self {
            Kind::Paddle => Duration::from_secs(5),
            Kind::Linear => Duration::from_secs(60),
            Kind::Twitch => Duration::from_secs(600),
            _ => Duration::from_secs(300),
        }
    }

    /// Kinds whose signature covers the URL the provider called, which
    /// hookbox cannot see behind a proxy: they need `public_url`.
    pub fn signs_url(self) -> bool {
        matches!(self, Kind::Twilio | Kind::Square)
    }
}
