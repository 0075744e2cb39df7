//! `amqp = { url, exchange, routing_key }`: RabbitMQ (AMQP 0-9-1).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::template::plain;
use super::{BrokerUrl, NameRules, NameTemplate};
use crate::config::secret;

/// The table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAmqp {
    /// Secret reference: `amqp://user:password@host:port/vhost`, or
    /// `amqps://` for TLS.
    pub url: String,
    /// The exchange published to; `""` is the default exchange, which
    /// routes to the queue named by the routing key.
    pub exchange: String,
    /// With placeholders.
    pub routing_key: String,
}

impl fmt::Debug for RawAmqp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawAmqp")
            .field("url", &secret::describe(&self.url))
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .finish()
    }
}

/// A validated `amqp` destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpConfig {
    pub url: BrokerUrl,
    pub exchange: String,
    pub routing_key: NameTemplate,
}

/// A routing key is at most 255 bytes; `.` separates the words a topic
/// exchange matches, so a value never adds one.
pub static ROUTING_KEY: NameRules = NameRules {
    what: "routing key",
    keep: plain,
    check: |name| {
        if name.len() > 255 {
            return Err(format!("{} bytes, over AMQP's 255", name.len()));
        }
        if name.chars().any(char::is_control) {
            return Err("no control characters".into());
        }
        Ok(())
    },
};

impl RawAmqp {
    /// Checks the table at `at` (`...deliver.amqp`).
    pub fn validate(&self, at: &str, problems: &mut Vec<String>) -> Option<AmqpConfig> {
        let url = BrokerUrl::resolve(
            &self.url,
            &["amqp", "amqps"],
            &format!("{at}.url"),
            problems,
        );
        let routing_key = super::template(
            &self.routing_key,
            &ROUTING_KEY,
            &format!("{at}.routing_key"),
            problems,
        );
        let exchange_ok = self.exchange.len() <= 255
            && self
                .exchange
                .chars()
                .all(|c| plain(c) || c == '.' || c == ':');
        if !exchange_ok {
            problems.push(format!(
                "{at}.exchange: {:?} is not an exchange name (at most 255 of a-z, A-Z, 0-9, '-', '_', '.', ':')",
                self.exchange
            ));
            return None;
        }
        Some(AmqpConfig {
            url: url?,
            exchange: self.exchange.clone(),
            routing_key: routing_key?,
        })
    }

    pub fn secrets_mut(&mut self) -> impl Iterator<Item = &mut String> {
        std::iter::once(&mut self.url)
    }
}
