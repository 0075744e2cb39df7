//! `redis = { url, stream, maxlen? }`: Redis Streams.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{BrokerUrl, NameRules, NameTemplate};
use crate::config::{limits, secret};

/// The table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    /// Secret reference: `redis://[user:password@]host:port[/db]`, or
    /// `rediss://` for TLS.
    pub url: String,
    /// The stream's key, with placeholders.
    pub stream: String,
    /// Trim the stream to about this many entries on each add
    /// (`MAXLEN ~`); none: never trimmed by hookbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxlen: Option<u64>,
}

impl fmt::Debug for RawRedis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawRedis")
            .field("url", &secret::describe(&self.url))
            .field("stream", &self.stream)
            .field("maxlen", &self.maxlen)
            .finish()
    }
}

/// A validated `redis` destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    pub url: BrokerUrl,
    pub stream: NameTemplate,
    pub maxlen: Option<u64>,
}

/// Redis keys are binary-safe; values keep to what reads well in
/// `redis-cli` and key patterns (`:` and `.` as separators).
pub static STREAM: NameRules = NameRules {
    what: "stream key",
    keep: |c| super::template::plain(c) || c == ':' || c == '.',
    check: |name| {
        if name.is_empty() {
            return Err("it is empty".into());
        }
        if name.chars().any(char::is_control) {
            return Err("no control characters".into());
        }
        Ok(())
    },
};

impl RawRedis {
    /// Checks the table at `at` (`...deliver.redis`).
    pub fn validate(&self, at: &str, problems: &mut Vec<String>) -> Option<RedisConfig> {
        let url = BrokerUrl::resolve(
            &self.url,
            &["redis", "rediss"],
            &format!("{at}.url"),
            problems,
        );
        let stream = super::template(&self.stream, &STREAM, &format!("{at}.stream"), problems);
        if let Some(maxlen) = self.maxlen {
            limits::REDIS_MAXLEN.check(at, maxlen, problems);
        }
        Some(RedisConfig {
            url: url?,
            stream: stream?,
            maxlen: self.maxlen,
        })
    }

    pub fn secrets_mut(&mut self) -> impl Iterator<Item = &mut String> {
        std::iter::once(&mut self.url)
    }
}
