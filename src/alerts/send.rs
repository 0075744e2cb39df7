//! Sending one alert message: the request its format builds, the HTTP
//! client's settings, and the retries.
//!
//! The client is `crate::support::outbound`'s (no redirects followed: a webhook URL
//! is a credential, and a `Location` must not carry a message elsewhere),
//! with [`TIMEOUT`] per attempt. An error names the alert, the HTTP status
//! or the kind of failure, never the URL (reqwest's errors carry it; it is
//! stripped).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use reqwest::{Client, RequestBuilder, Url};

use super::{Message, discord, json, ntfy, slack};
use crate::config::{AlertConfig, Format};
use crate::telemetry::metrics::AlertMetrics;

/// Attempts per message before it is given up (logged and counted).
pub const ATTEMPTS: usize = 3;

/// Pauses between attempts: a receiver that blinked gets a second chance
/// soon, one that restarts a little later.
const RETRY_WAITS: [Duration; ATTEMPTS - 1] = [Duration::from_secs(2), Duration::from_secs(10)];

/// What one attempt may take: Slack, Discord and ntfy answer in well
/// under a second; a receiver slower than this is treated as down.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The client every alert shares.
pub fn client() -> anyhow::Result<Client> {
    crate::support::outbound::build(|| crate::support::outbound::builder().timeout(TIMEOUT))
        .context("building the HTTP client for alerts")
}

/// One alert, ready to send to.
pub struct Target {
    pub config: AlertConfig,
    url: Url,
    client: Client,
    metrics: AlertMetrics,
}

impl Target {
    pub fn new(
        config: &AlertConfig,
        client: Client,
        metrics: AlertMetrics,
    ) -> anyhow::Result<Self> {
        // Validation parsed it already; the error says which alert, not what.
        let url = Url::parse(config.url.expose())
            .map_err(|_| anyhow::anyhow!("{}.url is not a URL", config.label()))?;
        Ok(Target {
            config: config.clone(),
            url,
            client,
            metrics,
        })
    }

    fn request(&self, message: &Message, msg_id: &str) -> anyhow::Result<RequestBuilder> {
        let post = self.client.post(self.url.clone());
        Ok(match self.config.format {
            Format::Slack => slack::request(post, message),
            Format::Discord => discord::request(post, message),
            Format::Ntfy => ntfy::request(post, message),
            Format::Json => {
                let key = self
                    .config
                    .signing_key
                    .as_ref()
                    .context("a json alert has a signing key")?;
                json::request(post, message, &key.0, msg_id)?
            }
        })
    }

    /// One attempt; the error is fit for a log line and the CLI.
    pub async fn send_once(&self, message: &Message) -> Result<(), String> {
        self.attempt(message, &json::message_id()).await
    }

    async fn attempt(&self, message: &Message, msg_id: &str) -> Result<(), String> {
        let request = self
            .request(message, msg_id)
            .map_err(|e| format!("{e:#}"))?;
        match request.send().await {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(format!("the receiver answered HTTP {}", response.status())),
            Err(e) => Err(describe(e)),
        }
    }
}

/// A reqwest error without its URL, with its causes.
fn describe(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        format!("no answer within {}s", TIMEOUT.as_secs())
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let e = e.without_url();
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    if causes.is_empty() {
        kind
    } else {
        format!("{kind}: {}", causes.join(": "))
    }
}

/// Sends `message` with retries; logs and counts the outcome. The same
/// `webhook-id` on every attempt, so a JSON receiver can dedupe.
pub async fn deliver(target: Arc<Target>, message: Message) {
    let label = target.config.label();
    let msg_id = json::message_id();
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(RETRY_WAITS[attempt - 1]).await;
        }
        match target.attempt(&message, &msg_id).await {
            Ok(()) => {
                tracing::info!(alert = %label, condition = message.kind(), count = message.count, "alert sent");
                target
                    .metrics
                    .sent(target.config.index, target.config.format);
                return;
            }
            Err(e) => {
                tracing::debug!(alert = %label, attempt = attempt + 1, error = %e, "alert attempt failed");
                last = e;
            }
        }
    }
    tracing::warn!(alert = %label, condition = message.kind(), attempts = ATTEMPTS, error = %last,
        "cannot send an alert; giving it up");
    target
        .metrics
        .failed(target.config.index, target.config.format);
}
