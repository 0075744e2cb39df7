//! `mqtt = { url, topic, qos = 1 }`: MQTT 5.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::template::plain;
use super::{BrokerUrl, NameRules, NameTemplate};
use crate::config::{limits, secret};

/// The table as written.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawMqtt {
    /// Secret reference: `mqtt://[user:password@]host:port`, or
    /// `mqtts://` for TLS.
    pub url: String,
    /// With placeholders; `/` separates levels, so a value never adds one.
    pub topic: String,
    /// 1: delivered on PUBACK; 2: on PUBCOMP (exactly once to the broker).
    #[serde(default = "default_qos")]
    pub qos: u32,
}

fn default_qos() -> u32 {
    1
}

impl fmt::Debug for RawMqtt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawMqtt")
            .field("url", &secret::describe(&self.url))
            .field("topic", &self.topic)
            .field("qos", &self.qos)
            .finish()
    }
}

/// A validated `mqtt` destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MqttConfig {
    pub url: BrokerUrl,
    pub topic: NameTemplate,
    /// 1 or 2.
    pub qos: u8,
}

/// MQTT topic names: no wildcards (`+`, `#`) nor NUL, not empty, and not
/// under `$` (the broker's own topics).
pub static TOPIC: NameRules = NameRules {
    what: "topic",
    keep: |c| plain(c) || c == '.',
    check: |name| {
        if name.is_empty() {
            return Err("it is empty".into());
        }
        if name.contains(['+', '#', '\0']) {
            return Err("no wildcard ('+', '#'): one publishes to a topic".into());
        }
        if name.starts_with('$') {
            return Err("topics starting with '$' are the broker's".into());
        }
        if name.len() > 65_535 {
            return Err("over MQTT's 65535 bytes".into());
        }
        Ok(())
    },
};

impl RawMqtt {
    /// Checks the table at `at` (`...deliver.mqtt`).
    pub fn validate(&self, at: &str, problems: &mut Vec<String>) -> Option<MqttConfig> {
        let url = BrokerUrl::resolve(
            &self.url,
            &["mqtt", "mqtts"],
            &format!("{at}.url"),
            problems,
        );
        let topic = super::template(&self.topic, &TOPIC, &format!("{at}.topic"), problems);
        let before = problems.len();
        limits::MQTT_QOS.check(at, self.qos, problems);
        if problems.len() > before {
            return None;
        }
        Some(MqttConfig {
            url: url?,
            topic: topic?,
            qos: if self.qos == 2 { 2 } else { 1 },
        })
    }

    pub fn secrets_mut(&mut self) -> impl Iterator<Item = &mut String> {
        std::iter::once(&mut self.url)
    }
}
