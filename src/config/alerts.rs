//! `[[alerts]]`: where hookbox says that something needs a person.
//!
//! Each table names a receiver (`url`, a secret reference: a Slack,
//! Discord or ntfy webhook URL is a credential), the `format` it speaks,
//! which conditions it wants (`on`, default all) and the thresholds of the
//! conditions that have one. [`validate`] resolves the URL and, for
//! `format = "json"`, the Standard Webhooks `signing_secret`, and reports
//! each problem under `alerts[i].key` without ever quoting a URL or a
//! secret. `crate::alerts` is what sends.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::secret::{self, Secret};
use super::{duration, limits};

/// What an alert is about. The names are those `on` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// A delivery went dead (push or pull).
    Dead,
    /// A catch-up run (GitHub redelivery, Stripe backfill) failed.
    CatchupFailed,
    /// A source refused `rejections_threshold` requests within 10 min.
    Rejections,
    /// The oldest pending delivery is older than `backlog_age`.
    Backlog,
    /// The writer refused to store, or the database's file system is over
    /// 90 % full.
    Storage,
    /// The served TLS certificate expires within 14 days.
    Certificate,
    /// A destination was paused, by its circuit breaker or by hand.
    Paused,
    /// A catch-up pass ended with events it could not recover.
    Gap,
}

impl Condition {
    pub const ALL: [Condition; 8] = [
        Condition::Dead,
        Condition::CatchupFailed,
        Condition::Rejections,
        Condition::Backlog,
        Condition::Storage,
        Condition::Certificate,
        Condition::Paused,
        Condition::Gap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Dead => "dead",
            Condition::CatchupFailed => "catchup_failed",
            Condition::Rejections => "rejections",
            Condition::Backlog => "backlog",
            Condition::Storage => "storage",
            Condition::Certificate => "certificate",
            Condition::Paused => "paused",
            Condition::Gap => "gap",
        }
    }
}

/// The payload an alert receiver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// A Slack incoming webhook: `{"text": ...}`.
    Slack,
    /// A Discord channel webhook: `{"content": ...}`.
    Discord,
    /// An ntfy topic URL: the text as the body, `Title`, `Priority`, `Tags`.
    Ntfy,
    /// hookbox's own JSON, signed the Standard Webhooks way.
    Json,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Slack => "slack",
            Format::Discord => "discord",
            Format::Ntfy => "ntfy",
            Format::Json => "json",
        }
    }
}

/// One `[[alerts]]` table as written. `Debug` is written by hand: `url`
/// and `signing_secret` may be literals.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlert {
    /// Where to POST: a secret reference or a literal URL.
    pub url: String,
    pub format: Format,
    /// Only for `format = "json"`: a `whsec_` secret the receiver verifies with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    /// Conditions to send; empty or left out: all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on: Vec<Condition>,
    /// Refusals of one source within 10 min that make a `rejections` alert.
    #[serde(default = "default_rejections_threshold")]
    pub rejections_threshold: u32,
    /// Age of the oldest pending delivery that makes a `backlog` alert.
    #[serde(default = "default_backlog_age", with = "duration")]
    pub backlog_age: Duration,
    /// At most one message per condition in this time; what comes meanwhile
    /// is counted into the next one.
    #[serde(default = "default_min_interval", with = "duration")]
    pub min_interval: Duration,
}

impl fmt::Debug for RawAlert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawAlert")
            .field("url", &secret::describe(&self.url))
            .field("format", &self.format)
            .field(
                "signing_secret",
                &self.signing_secret.as_deref().map(secret::describe),
            )
            .field("on", &self.on)
            .field("rejections_threshold", &self.rejections_threshold)
            .field("backlog_age", &self.backlog_age)
            .field("min_interval", &self.min_interval)
            .finish()
    }
}

fn default_rejections_threshold() -> u32 {
    20
}

fn default_backlog_age() -> Duration {
    Duration::from_secs(15 * 60)
}

fn default_min_interval() -> Duration {
    Duration::from_secs(10 * 60)
}

/// A validated alert. `Debug` shows neither the URL nor the key.
#[derive(Debug, Clone)]
pub struct AlertConfig {
    /// Its place in the config (`alerts[i]`): how logs, metrics and
    /// `hookbox alerts test` name it without showing its URL.
    pub index: usize,
    pub url: Secret,
    pub format: Format,
    /// The HMAC key decoded from `signing_secret` (format `json` only).
    pub signing_key: Option<SigningKey>,
    /// The conditions it wants, never empty.
    pub on: Vec<Condition>,
    pub rejections_threshold: u32,
    pub backlog_age: Duration,
    pub min_interval: Duration,
}

impl AlertConfig {
    /// `alerts[i] (format)`: how an alert is named where its URL must not be.
    pub fn label(&self) -> String {
        format!("alerts[{}] ({})", self.index, self.format.as_str())
    }

    pub fn wants(&self, condition: Condition) -> bool {
        self.on.contains(&condition)
    }
}

/// A decoded signing key, kept out of `Debug`.
#[derive(Clone)]
pub struct SigningKey(pub Vec<u8>);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Checks every `[[alerts]]` table, pushing one line per problem.
pub fn validate(raw: &[RawAlert], problems: &mut Vec<String>) -> Vec<AlertConfig> {
    raw.iter()
        .enumerate()
        .filter_map(|(i, a)| validate_one(i, a, problems))
        .collect()
}

fn validate_one(index: usize, raw: &RawAlert, problems: &mut Vec<String>) -> Option<AlertConfig> {
    let at = format!("alerts[{index}]");
    let before = problems.len();
    let shown = secret::describe(&raw.url);
    let url = match secret::resolve(&raw.url) {
        Ok(url) => {
            // The parse error is left out: it may quote the URL.
            match reqwest::Url::parse(url.expose()) {
                Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
                _ => problems.push(format!(
                    "{at}.url ({shown}): not an http:// or https:// URL (the receiver's webhook URL)"
                )),
            }
            Some(url)
        }
        Err(why) => {
            problems.push(format!("{at}.url ({shown}): {why}"));
            None
        }
    };
    let signing_key = match (raw.format, &raw.signing_secret) {
        (Format::Json, Some(reference)) => {
            let shown = secret::describe(reference);
            match secret::resolve(reference) {
                Ok(s) => match s.standard_key() {
                    Some(key) => Some(SigningKey(key)),
                    None => {
                        problems.push(format!(
                            "{at}.signing_secret ({shown}): a Standard Webhooks secret is `whsec_` followed by base64"
                        ));
                        None
                    }
                },
                Err(why) => {
                    problems.push(format!("{at}.signing_secret ({shown}): {why}"));
                    None
                }
            }
        }
        (Format::Json, None) => {
            problems.push(format!(
                "{at}.signing_secret: format \"json\" needs one (a Standard Webhooks `whsec_` secret) so the receiver can verify hookbox"
            ));
            None
        }
        (_, Some(_)) => {
            problems.push(format!(
                "{at}.signing_secret: only for format \"json\" (Slack, Discord and ntfy do not verify signatures)"
            ));
            None
        }
        (_, None) => None,
    };
    limits::ALERT_REJECTIONS_THRESHOLD.check(&at, raw.rejections_threshold, problems);
    limits::ALERT_BACKLOG_AGE.check(&at, raw.backlog_age, problems);
    limits::ALERT_MIN_INTERVAL.check(&at, raw.min_interval, problems);
    let mut on = if raw.on.is_empty() {
        Condition::ALL.to_vec()
    } else {
        raw.on.clone()
    };
    on.sort_unstable();
    on.dedup();
    (problems.len() == before).then(|| AlertConfig {
        index,
        url: url.expect("no problems means the URL resolved"),
        format: raw.format,
        signing_key,
        on,
        rejections_threshold: raw.rejections_threshold,
        backlog_age: raw.backlog_age,
        min_interval: raw.min_interval,
    })
}

/// Replaces literal URLs and secrets with `[redacted]` for `hookbox check`.
#[cfg(test)]
mod tests {
    use super::*;

    const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn raw(url: &str, format: Format, signing_secret: Option<&str>) -> RawAlert {
        RawAlert {
            url: url.to_owned(),
            format,
            signing_secret: signing_secret.map(str::to_owned),
            on: Vec::new(),
            rejections_threshold: default_rejections_threshold(),
            backlog_age: default_backlog_age(),
            min_interval: default_min_interval(),
        }
    }

    #[test]
    fn a_slack_alert_defaults_to_every_condition() {
        let mut problems = Vec::new();
        let a = validate(
            &[raw(
                "https://hooks.slack.com/services/T/B/x",
                Format::Slack,
                None,
            )],
            &mut problems,
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(a[0].on, Condition::ALL.to_vec());
        assert_eq!(a[0].label(), "alerts[0] (slack)");
    }

    #[test]
    fn problems_name_the_key_and_never_the_url_or_secret() {
        let mut problems = Vec::new();
        let url = "ftp://secret-token@example.com/x";
        validate(
            &[
                raw(url, Format::Slack, Some(WHSEC)),
                raw("https://example.com/hook", Format::Json, None),
                raw(
                    "env:HOOKBOX_TEST_SURELY_UNSET_ALERT_URL",
                    Format::Json,
                    Some("not-a-whsec"),
                ),
            ],
            &mut problems,
        );
        let text = problems.join("\n");
        assert!(
            text.contains("alerts[0].url ([redacted]): not an http"),
            "{text}"
        );
        assert!(
            text.contains("alerts[0].signing_secret: only for format \"json\""),
            "{text}"
        );
        assert!(
            text.contains("alerts[1].signing_secret: format \"json\" needs one"),
            "{text}"
        );
        assert!(
            text.contains("alerts[2].url (env:HOOKBOX_TEST_SURELY_UNSET_ALERT_URL)"),
            "{text}"
        );
        assert!(
            text.contains("alerts[2].signing_secret ([redacted])"),
            "{text}"
        );
        assert!(
            !text.contains("secret-token") && !text.contains("not-a-whsec"),
            "{text}"
        );
    }

    #[test]
    fn debug_hides_literals() {
        let a = raw(
            "https://hooks.slack.com/services/T/B/x",
            Format::Json,
            Some(WHSEC),
        );
        assert!(!format!("{a:?}").contains("hooks.slack.com"));
        assert!(!format!("{a:?}").contains(WHSEC));
        let mut problems = Vec::new();
        let a = validate(
            &[raw("https://example.com/x", Format::Json, Some(WHSEC))],
            &mut problems,
        );
        let shown = format!("{a:?}");
        assert!(!shown.contains("example.com"), "{shown}");
    }
}
