//! The table of provider kinds: one line per kind, naming the type in its
//! file that implements [`Provider`]. Config validation looks kinds up
//! here (handed in as [`PROVIDERS`], a `config::Kinds`), and a source is
//! built from its kind's line.

use crate::config::{Kind, KindFacts, Kinds, SourceConfig};

use super::provider::Provider;
use super::{
    discord, github, gitlab, hmac, linear, mailgun, meta, paddle, sendgrid, shopify, slack, square,
    standard, stripe, twilio, twitch, zoom,
};

/// One kind: its facts and how to build its verifier.
pub struct Entry {
    facts: fn() -> &'static KindFacts,
    build: fn(&SourceConfig) -> Box<dyn Provider>,
}

const fn entry<P: Provider>() -> Entry {
    Entry {
        facts: P::facts,
        build: build::<P>,
    }
}

fn build<P: Provider>(cfg: &SourceConfig) -> Box<dyn Provider> {
    Box::new(P::from_config(cfg))
}

/// Every provider kind hookbox verifies. A new provider is its file and
/// one line here.
pub static PROVIDERS: Providers = Providers(&[
    entry::<github::GitHub>(),
    entry::<stripe::Stripe>(),
    entry::<shopify::Shopify>(),
    entry::<standard::Standard>(),
    entry::<gitlab::Gitlab>(),
    entry::<slack::Slack>(),
    entry::<hmac::Hmac>(),
    entry::<linear::Linear>(),
    entry::<discord::Discord>(),
    entry::<sendgrid::Sendgrid>(),
    entry::<mailgun::Mailgun>(),
    entry::<meta::Meta>(),
    entry::<paddle::Paddle>(),
    entry::<twilio::Twilio>(),
    entry::<square::Square>(),
    entry::<zoom::Zoom>(),
    entry::<twitch::Twitch>(),
]);

/// The table, as config validation reads it.
pub struct Providers(&'static [Entry]);

impl Providers {
    /// The verifier for a validated source; its kind came from this table.
    pub fn build(&self, cfg: &SourceConfig) -> Box<dyn Provider> {
        let entry = self
            .0
            .iter()
            .find(|e| (e.facts)().name == cfg.kind.as_str())
            .expect("a validated source's kind was found in this table");
        (entry.build)(cfg)
    }
}

impl Kinds for Providers {
    fn find(&self, name: &str) -> Option<Kind> {
        self.0
            .iter()
            .map(|e| (e.facts)())
            .find(|f| f.name == name)
            .map(Kind::new)
    }

    fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|e| (e.facts)().name).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_name() {
        let names = PROVIDERS.names();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for name in names {
            assert_eq!(PROVIDERS.find(name).map(Kind::as_str), Some(name));
        }
        assert!(PROVIDERS.find("nope").is_none());
    }
}
