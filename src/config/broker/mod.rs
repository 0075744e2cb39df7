//! The broker destinations' tables (`nats`, `redis`, `amqp`, `mqtt`), one
//! file each, and what they share: the broker URL, a secret reference
//! checked for its scheme ([`BrokerUrl`]), and the name of where a message
//! goes (subject, stream, routing key, topic), a [`NameTemplate`] whose
//! placeholders are made safe for the broker's naming rules.
//!
//! Like the rest of config, this parses and checks; the brokers are
//! spoken to by `crate::delivery::push::broker`.

pub mod amqp;
pub mod mqtt;
pub mod nats;
pub mod redis;
mod template;

use std::fmt;

pub use template::{NameRules, NameTemplate, Names};

use super::secret::Secret;
use super::target_url;

/// A broker destination's `concurrency` when its table names none: the
/// publishes awaiting the broker's confirmation at once. Redis and
/// RabbitMQ confirm a message only once it is on their disk, one fsync
/// at a time, and each fsync covers whatever arrived meanwhile on the
/// one connection; NATS and MQTT pay a round trip. So a broker delivers
/// about this many per fsync or round trip, where url's 4 would leave it
/// waiting: concurrency, not the broker, set the rate. Each attempt in
/// flight holds its body in memory (at most this many bodies).
pub const CONCURRENCY: usize = 64;

/// A broker's URL, resolved from its secret reference (it carries the
/// credentials): its `Debug` shows only the scheme, host and port.
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    url: Secret,
    /// `scheme://host:port`, without user, password, path or query: what
    /// the dashboard and `Debug` may show.
    shown: String,
}

impl BrokerUrl {
    /// Resolves `reference` (at `at`, e.g. `...deliver.nats.url`) and
    /// checks it is a URL with a host and one of `schemes`. Messages never
    /// hold the URL, only the reference's kind.
    pub(super) fn resolve(
        reference: &str,
        schemes: &[&str],
        at: &str,
        problems: &mut Vec<String>,
    ) -> Option<BrokerUrl> {
        let (url, parsed) = target_url::resolve_url(reference, schemes, at, problems)?;
        Some(BrokerUrl {
            url,
            shown: target_url::origin(&parsed),
        })
    }

    /// The whole URL, credentials included: for the broker client only.
    pub fn expose(&self) -> &str {
        self.url.expose()
    }

    /// `scheme://host:port`, safe to show.
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

/// A URL taken as valid, for tests of the brokers' clients.
#[cfg(test)]
pub fn test_url(url: &str) -> BrokerUrl {
    let mut problems = Vec::new();
    let schemes = [
        "nats",
        "redis",
        "amqp",
        "mqtt",
        url.split(':').next().unwrap_or(""),
    ];
    let url = BrokerUrl::resolve(url, &schemes, "test", &mut problems);
    url.unwrap_or_else(|| panic!("{problems:?}"))
}

impl fmt::Debug for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [credentials redacted]", self.shown)
    }
}

/// Parses `text` (at `at`) as a name template under `rules`, pushing the
/// problem if it is not one.
fn template(
    text: &str,
    rules: &'static NameRules,
    at: &str,
    problems: &mut Vec<String>,
) -> Option<NameTemplate> {
    NameTemplate::parse(text, rules)
        .map_err(|why| problems.push(format!("{at}: {text:?} {why}")))
        .ok()
}

#[cfg(test)]
mod tests;
