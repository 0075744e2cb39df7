//! `nats = { url, subject, credentials? }`: NATS JetStream.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::template::plain;
use super::{BrokerUrl, NameRules, NameTemplate};
use crate::config::secret::{self, Secret};

/// The table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawNats {
    /// Secret reference: `nats://[user:password@]host:port`, or
    /// `tls://`/`nats+tls://` for TLS.
    pub url: String,
    /// Where each event is published, with placeholders; a JetStream
    /// stream must capture it.
    pub subject: String,
    /// Secret reference: a NATS credentials file's contents (JWT and
    /// NKey seed), for servers that use decentralized auth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
}

impl fmt::Debug for RawNats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawNats")
            .field("url", &secret::describe(&self.url))
            .field("subject", &self.subject)
            .field(
                "credentials",
                &self.credentials.as_deref().map(secret::describe),
            )
            .finish()
    }
}

/// A validated `nats` destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsConfig {
    pub url: BrokerUrl,
    pub subject: NameTemplate,
    pub credentials: Option<Secret>,
}

/// NATS subjects: `.`-separated tokens, none empty; `*` and `>` are
/// wildcards, never published to.
pub static SUBJECT: NameRules = NameRules {
    what: "subject",
    keep: plain,
    check: |name| {
        if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("no spaces or control characters".into());
        }
        if name.split('.').any(str::is_empty) {
            return Err("no empty token (leading, trailing or doubled '.')".into());
        }
        if name.contains(['*', '>']) {
            return Err("no wildcard ('*', '>'): one publishes to a subject".into());
        }
        Ok(())
    },
};

impl RawNats {
    /// Checks the table at `at` (`...deliver.nats`).
    pub fn validate(&self, at: &str, problems: &mut Vec<String>) -> Option<NatsConfig> {
        let url = BrokerUrl::resolve(
            &self.url,
            &["nats", "tls", "nats+tls"],
            &format!("{at}.url"),
            problems,
        );
        let subject = super::template(&self.subject, &SUBJECT, &format!("{at}.subject"), problems);
        let credentials = match &self.credentials {
            None => None,
            Some(reference) => match secret::resolve(reference) {
                Ok(secret) => Some(secret),
                Err(why) => {
                    problems.push(format!(
                        "{at}.credentials ({}): {why}",
                        secret::describe(reference)
                    ));
                    return None;
                }
            },
        };
        Some(NatsConfig {
            url: url?,
            subject: subject?,
            credentials,
        })
    }

    pub fn secrets_mut(&mut self) -> impl Iterator<Item = &mut String> {
        std::iter::once(&mut self.url).chain(self.credentials.as_mut())
    }
}
